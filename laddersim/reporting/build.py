"""``laddersim report``: run the sections and write ``<out>/index.md`` plus ``<out>/figures/``.

Everything comes from built-in defaults (presets, the shipped profile, the built-in copy of the
paper's table), so the command needs no arguments and no network. The Markdown holds no dates or
timings: the same code and data give the same bytes. Progress and timings go to stderr.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from laddersim.errors import UserInputError
from laddersim.hardware.profile import list_profiles
from laddersim.hardware.provenance_line import provenance_line
from laddersim.reporting.bandwidth_section import bandwidth_section
from laddersim.reporting.custom_allreduce_section import custom_allreduce_section
from laddersim.reporting.markdown import Section
from laddersim.reporting.moe_section import moe_section
from laddersim.reporting.multinode_section import multinode_section
from laddersim.reporting.paper_section import paper_section
from laddersim.reporting.pipeline_section import pipeline_section
from laddersim.reporting.planning_section import planning_section
from laddersim.reporting.sections import SECTIONS
from laddersim.reporting.serving_section import serving_section
from laddersim.reporting.timeline_section import timeline_section


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_report(out_dir: str | Path = "reports", quick: bool = False, workers: int = 1,
                 progress: bool = True) -> Path:
    """Write the report; returns the path of ``index.md``. ``quick``: fewer bandwidth points."""
    out_dir = Path(out_dir)
    figures_dir = out_dir / "figures"
    try:
        figures_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"out: cannot create {figures_dir}: {exc.strerror}") from None
    makers = [
        lambda: paper_section(out_dir, figures_dir),
        lambda: bandwidth_section(out_dir, figures_dir, quick, workers, progress),
        lambda: timeline_section(out_dir, figures_dir),
        lambda: planning_section(out_dir, figures_dir),
        lambda: multinode_section(out_dir, figures_dir),
        lambda: serving_section(out_dir, figures_dir),
        lambda: pipeline_section(out_dir, figures_dir),
        lambda: custom_allreduce_section(out_dir, figures_dir),
        lambda: moe_section(out_dir, figures_dir),
    ]
    steps = list(zip(SECTIONS, makers, strict=True))
    sections: list[Section] = []
    started = time.perf_counter()
    for i, (name, make) in enumerate(steps, 1):
        _log(f"report: [{i}/{len(steps)}] {name} ...")
        t0 = time.perf_counter()
        sections.append(make())
        _log(f"report: [{i}/{len(steps)}] done in {time.perf_counter() - t0:.1f} s")
    index = out_dir / "index.md"
    index.write_text(render(sections, out_dir, quick))
    _log(f"report: wrote {index} and {sum(len(s.figures) for s in sections)} figure files "
         f"in {time.perf_counter() - started:.1f} s")
    return index


def render(sections: list[Section], out_dir: Path, quick: bool) -> str:
    command = "laddersim report" + (" --quick" if quick else "") + (f" --out {out_dir}" if str(out_dir) != "reports" else "")
    lines = [
        "# laddersim report: Ladder Residual vs standard tensor parallelism",
        "",
        "What laddersim predicts for the standard Transformer schedule and the Ladder Residual schedule "
        "(each module's AllReduce overlapped with the next module's compute; Zhang et al., arXiv 2501.06589) "
        "on H100 nodes: first against the paper's measurements, then beyond them.",
        "",
        f"Regenerate everything on this page (under a minute on a 2-core CPU, no GPU): `{command}`",
        "",
        provenance_line(list_profiles()),  # the report runs on the shipped profiles only
        "",
    ]
    if quick:
        lines += ["*Quick mode: the bandwidth sweep has fewer points; run `laddersim report` for the full page.*", ""]
    lines += ["Contents:", ""]
    lines += [f"- [{s.title}](#{_anchor(s.title)})" for s in sections]
    lines.append("")
    for section in sections:
        lines += [f"## {section.title}", "", section.body.rstrip(), ""]
    return "\n".join(lines)


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, spaces to dashes, punctuation dropped."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -")
    return kept.replace(" ", "-")
