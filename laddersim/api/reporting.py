"""``report``: the main report (index.md and its figures) from built-in defaults (laddersim.reporting)."""

from __future__ import annotations

from pathlib import Path

from laddersim.reporting.sections import SECTIONS  # noqa: F401  (the report's sections, named in its help)


def report(out: str | Path = "reports", quick: bool = False, workers: int = 1, progress: bool = False) -> Path:
    """``laddersim report``: write ``out``/index.md (default reports/index.md) and its figures in
    ``out``/figures/ from built-in defaults, and return the index's path: the paper's 70B figure
    measured vs predicted, the bandwidth what-if, a decode-step timeline, a planning example,
    multi-node, serving under load, pipeline x tensor parallel (``SECTIONS``). Deterministic: the same code gives the same bytes. ``quick``:
    fewer bandwidth what-if points; ``workers``: processes for the bandwidth sweep (default 1);
    ``progress``: bars on stderr (each section's progress is printed either way)."""
    from laddersim.api.params import MAX_COUNT, checked, count
    from laddersim.support.io_write import check_output
    from laddersim.reporting import build_report

    workers = checked("workers", count(1, MAX_COUNT), workers)
    check_output(out, "out", "dir")
    check_output(Path(out) / "index.md", "out", "file")
    return build_report(out, quick=quick, workers=workers, progress=progress)
