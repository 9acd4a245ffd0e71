"""Write ``reports/collectives.md`` and ``reports/collectives/*.png``: for every profile and every
AllReduce table it lists, measured vs modelled time over message size (one panel per group
shape), the error table (parametric model and table interpolation), and the GEMM error table.

Run by ``laddersim profiles report`` (or ``python -m laddersim.profiles_check.report``).
Deterministic: same profiles and data -> byte-identical markdown and PNG files.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from laddersim.costs.allreduce import allreduce_time_s  # noqa: E402
from laddersim.plots.figure_io import write_figure_file  # noqa: E402
from laddersim.hardware.profile import list_profiles, load_profile  # noqa: E402
from laddersim.profiles_check.compare import (  # noqa: E402
    LLAMA_MIN_DIM, MEDIAN_LIMIT, WORST_LIMIT, check_allreduce, check_gemm, summary_frame,
)
from laddersim.profiles_check.sources import CHECK_MAX_BYTES, CHECK_MIN_BYTES, reference_data_root  # noqa: E402
from laddersim.errors import UserInputError  # noqa: E402
from laddersim.support.provenance import profile_sha256, laddersim_version  # noqa: E402

# The phrase that marks a report compared with the original rows (more data than the compact
# tables): a run without them (LADDERSIM_SHARED unset) never overwrites such a report.
ORIGINAL_ROWS_MARK = "the **original source rows**"


def default_report_path() -> Path:
    """``reports/collectives.md`` under the current folder, like every command's output (an editable
    install run from another folder does not write into its checkout)."""
    return Path("reports") / "collectives.md"


def report_target(out: str | Path | None) -> Path:
    """Where this run writes. Without the original rows (LADDERSIM_SHARED unset) the comparison uses
    the compact tables only; it never replaces a report made from the original rows: by default it
    goes to ``runs/collectives/collectives.md`` beside that report's repository (git-ignored)
    instead, and an explicit ``--out`` holding such a report is refused."""
    path = Path(out) if out else default_report_path()
    if reference_data_root() is not None or not _from_original_rows(path):
        return path
    if out:
        raise UserInputError(f"out: {path} was compared with the original measurement files, which "
                             "LADDERSIM_SHARED does not name here; a comparison with the compact tables would "
                             "replace it with less data; allowed: another report path")
    target = path.parent.parent / "runs" / "collectives" / "collectives.md"
    print(f"profiles report: {path} holds the comparison with the original rows and is kept; "
          f"this one (compact tables) goes to {target}", file=sys.stderr)
    return target


def _from_original_rows(path: Path) -> bool:
    try:
        return ORIGINAL_ROWS_MARK in path.read_text()
    except OSError:
        return False


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.1f}%"


def _plot(profile, table_name: str, checks, path: Path) -> None:
    n = len(checks)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.8 * rows), squeeze=False)
    for ax, c in zip(axes.flat, checks):
        r = c.rows
        ax.loglog(r["size_bytes"], r["measured_us"], ".", ms=3 if len(r) > 50 else 6, color="black", label="measured")
        grid = np.geomspace(max(min(r["size_bytes"].min(), CHECK_MIN_BYTES), 512), max(r["size_bytes"].max(), 1 << 20), 200)
        launch = profile.collectives.eager_launch_us.value if c.table.timing == "single" else 0.0
        model = allreduce_time_s(profile, c.gpus, grid, nodes=c.nodes, measured=False) * 1e6 + launch
        ax.loglog(grid, model, "-", color="tab:blue", label="model (fit)")
        if np.isfinite(r["table_us"]).any():
            ax.loglog(r["size_bytes"], r["table_us"], "--", color="tab:orange", lw=1, label="table interp.")
        ax.axvspan(CHECK_MIN_BYTES, CHECK_MAX_BYTES, color="0.93", zorder=-1)
        ax.set_title(f"{c.gpus} GPUs x {c.nodes} node{'s' if c.nodes > 1 else ''}: "
                     f"med {_pct(c.model_median)}, worst {_pct(c.model_worst)}", fontsize=8)
        ax.set_xlabel("message size (bytes)", fontsize=7)
        ax.set_ylabel("time (us)", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle(f"{profile.name}: {table_name}", fontsize=9)
    fig.tight_layout()
    write_figure_file(fig, path, dpi=72)
    plt.close(fig)


def write_report(out: str | Path | None = None) -> Path:
    path = report_target(out)
    img_dir = path.parent / path.stem
    img_dir.mkdir(parents=True, exist_ok=True)
    md = [
        "# Collectives and GEMM: modelled vs measured, table by table",
        "",
        f"Generated by `laddersim profiles report` (laddersim/profiles_check/report.py, laddersim "
        f"{laddersim_version()}); do not edit.",
        "",
        *(["For every profile, every AllReduce table it lists is compared over **4 KiB-256 MiB** with",
           f"{ORIGINAL_ROWS_MARK} (the original public measurement files, reference_data/, via the registry in",
           "laddersim/profiles_check/sources.py; the shipped tables in hardware_profiles/tables are",
           "medians of these rows at power-of-two sizes, rebuilt by `python tools/fits/resample_reference.py`)."]
          if reference_data_root() is not None else
          ["For every profile, every AllReduce table it lists is compared over **4 KiB-256 MiB** with",
           "the **shipped compact rows** (hardware_profiles/tables): the original public measurement files",
           "(reference_data/) are not on this machine, so row counts are smaller and a table whose",
           "original rows scatter may pass here and miss against them."]),
        "",
        "* **model** = the parametric model the simulator falls back on for unmeasured GPU counts and",
        "  uses for every multi-node group: per-GPU-count protocol fits (min over latency + bytes/busbw",
        "  lines), alpha-beta tiers, and the hierarchical/flat-ring multi-node model",
        "  (laddersim/costs/collectives.py). This is the real test of the mechanism.",
        "* **table** = log-log interpolation of the shipped compact table where the profile ships a",
        "  `use: model` table for that group (what the simulator uses by default, `prefer: table`).",
        "* Acceptance: median |rel. error| <= "
        f"{MEDIAN_LIMIT:.0%} and worst <= {WORST_LIMIT:.0%} (model). `use: check` tables are",
        "  comparisons only; a check expected to miss says why.",
        "* Timing: `loop` = back-to-back loop average (host launch hidden, close to CUDA-graph",
        "  replay, compared as is); `single` = one CUDA-event-timed eager call (the model adds the",
        "  profile's `eager_launch_us`); `kernel` = profiler kernel time (compared as is).",
        "* data scatter = worst deviation of a measured row from the median of rows within 10% of",
        "  its size (dense sweeps only): a floor under the worst error any smooth model can reach.",
        f"* GEMM: all rows, and the **llama** subset (n, k >= {LLAMA_MIN_DIM}: every projection of",
        "  Llama 3.1 8B/70B/405B at TP <= 8); acceptance is median <= 10% on the llama subset.",
        "",
    ]
    gated_rows = []
    for name in list_profiles():
        profile = load_profile(name)
        checks = check_allreduce(profile)
        summary = summary_frame(checks)
        md += [f"## {name}", "", f"{profile.description}. measured: {'yes' if profile.measured else 'no (what-if)'}.",
               f"Profile sha256 (values and tables): `{profile_sha256(profile)}`.", ""]
        if not summary.empty:
            md += ["| table | use | library | mode/timing | gpus x nodes | rows | model median | model worst "
                   "| table median | table worst | data scatter | verdict | reason |",
                   "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in summary.to_dict("records"):
                md.append(f"| {r['table']} | {r['use']} | {r['library']} | {r['mode']} | {r['gpus']}x{r['nodes']} | "
                          f"{r['rows']} | {_pct(r['model_median'])} | {_pct(r['model_worst'])} | "
                          f"{_pct(r['table_median'])} | {_pct(r['table_worst'])} | {_pct(r['scatter'])} | "
                          f"{r['verdict']} | {r['reason']} |")
                if r["verdict"] in ("pass", "miss") and not (r["verdict"] == "miss" and r["reason"]):
                    gated_rows.append((name, r))
            md.append("")
            by_table: dict[str, list] = {}
            for c in checks:
                if len(c.rows):
                    by_table.setdefault(Path(c.table.file).stem, []).append(c)
            for table_name, group in by_table.items():
                png = img_dir / f"{name}__{table_name}.png"
                _plot(profile, table_name, group, png)
                md.append(f"![{name} {table_name}]({img_dir.name}/{png.name})")
            md.append("")
        gemm = check_gemm(profile)
        if gemm:
            md += ["| GEMM table | rows | all median | all p90 | llama median | llama p90 | verdict | reason |",
                   "|---|---|---|---|---|---|---|---|"]
            for c in gemm:
                md.append(f"| {Path(c.table.file).stem} | {len(c.rows)} | {_pct(c.median('all'))} | "
                          f"{_pct(c.p90('all'))} | {_pct(c.median('llama'))} | {_pct(c.p90('llama'))} | "
                          f"{'pass' if c.passes else 'miss'} | {'' if c.passes else c.table.expect_miss} |")
            md.append("")
    unexplained = [(n, r) for n, r in gated_rows if r["verdict"] == "miss"]
    md += ["## Misses without a stated reason", ""]
    md += ([f"* {n}: {r['table']} {r['gpus']}x{r['nodes']}: model median {_pct(r['model_median'])}, "
            f"worst {_pct(r['model_worst'])}" for n, r in unexplained] or ["None."])
    md.append("")
    path.write_text("\n".join(md))
    return path


if __name__ == "__main__":
    print(write_report(sys.argv[1] if len(sys.argv) > 1 else None))
