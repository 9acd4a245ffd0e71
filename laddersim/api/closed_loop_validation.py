"""``validate`` of tables measured at a fixed concurrency (``laddersim.validation.closed_loop``):
each row served as a closed loop under its engine's scheduler, TTFT and TPOT errors per engine x
dtype group, and the rows no model here prices listed with why."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.traffic.engines import LIMITS  # noqa: F401
from laddersim.validation.closed_loop import DEFAULT_LIMITS, is_closed_loop_table, skipped_reasons  # noqa: F401
from laddersim.validation.external_report import write_scores  # noqa: F401  (static tables' too)

if TYPE_CHECKING:
    from laddersim.validation.closed_loop import ClosedLoopScore


def validate_closed_loop(tables: str | Path | Sequence[str | Path], models: str | Path | None = None, *,
                         progress: bool = False, limits: str = DEFAULT_LIMITS) -> list[ClosedLoopScore]:
    """One score per table (columns model, tp, hardware, engine, engine_version, dtype, prompt_len,
    gen_len, concurrency, ttft_ms, tpot_ms, mean milliseconds): ``rows`` (the scored rows with
    predicted_ttft_ms, predicted_tpot_ms, ttft_error, tpot_error), ``skipped`` (with ``reason``),
    ``summary`` (per engine x dtype: median and worst absolute errors, %), ``mappings`` (engine ->
    kernels and scheduler, GPU -> profile). ``models``: a folder of configs the model column names
    (default: models/ beside each table); ``progress``: a bar over the rows on stderr (a terminal);
    ``limits``: the engines' limits, ``aiconfigurator`` (the default: the ones its generator writes
    for a benchmark at the row's concurrency and prompt length, as the rows of its measured sample
    were run) or ``engine-defaults``; a table's own max_running / max_batched_tokens columns, where
    given, override either."""
    from laddersim.support.progress import progress_bar
    from laddersim.validation.closed_loop import read_closed_loop, score_closed_loop

    paths = [tables] if isinstance(tables, (str, Path)) else list(tables)
    scores = []
    for path in paths:
        rows = len(read_closed_loop(path))
        with progress_bar(rows, "validate", "row", enabled=progress) as bar:
            scores.append(score_closed_loop(path, models, progress=lambda: bar.update(1), limits=limits))
    return scores
