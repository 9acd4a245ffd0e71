"""Section 2: what if the interconnect were slower or faster? Ladder's speedup over standard
against the intra-node AllReduce bandwidth, for Llama-3.1 8B / 70B (TP 8, one node) and 405B
(TP 16, two nodes), at batch 1 and 16, run through ``laddersim.sweeps``."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from laddersim.plots import plot_bandwidth
from laddersim.reporting.markdown import Section, code, figure_link, table
from laddersim.sweeps import run_sweep
from laddersim.sweeps.grid import SweepGrid

HARDWARE = "h100-sxm-nvswitch"
# (model, TP): the TP each model is served at; 405B needs two nodes.
MODELS_TP = (("llama-3.1-8b", 8), ("llama-3.1-70b", 8), ("llama-3.1-405b", 16))
SCALES = (0.125, 0.25, 0.5, 1.0, 2.0)
QUICK_SCALES = (0.25, 1.0)
BATCHES = (1, 16)


def grids(scales: tuple[float, ...]) -> list[SweepGrid]:
    return [SweepGrid(models=[model], hardware=[HARDWARE], tp=[tp], batch=list(BATCHES),
                      schedules=["standard", "ladder"], overrides={"intra_bandwidth_scale": list(scales)})
            for model, tp in MODELS_TP]


def sweep_commands(scales: tuple[float, ...]) -> list[str]:
    lines = []
    for model, tp in MODELS_TP:
        short = model.removeprefix("llama-3.1-")
        lines.append(f"laddersim sweep --out sweeps/bw-{short} --model {model} --hardware {HARDWARE} --tp {tp} "
                     f"--batch {' '.join(map(str, BATCHES))} --intra-bandwidth-scale {' '.join(f'{s:g}' for s in scales)}")
    return lines


def run_bandwidth_sweep(scales: tuple[float, ...], workers: int, progress: bool) -> pd.DataFrame:
    """The sweeps' results tables, concatenated (the sweep store lives in a temporary directory)."""
    frames = []
    with tempfile.TemporaryDirectory(prefix="laddersim-report-") as tmp:
        for i, grid in enumerate(grids(scales)):
            frames.append(run_sweep(grid, Path(tmp) / str(i), workers=workers, progress=progress).frame)
    return pd.concat(frames, ignore_index=True)


def speedup_pivot(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows (model, TP, batch), one column of ladder speedup per bandwidth scale."""
    ladder = frame[(frame["schedule"] == "ladder") & (frame["status"] == "ok")]
    pivot = ladder.pivot_table(index=["model", "tp", "batch"], columns="intra_bandwidth_scale",
                               values="speedup_vs_standard", aggfunc="first")
    pivot.columns = [f"{c:g}x bw" for c in pivot.columns]
    return pivot.reset_index()


def bandwidth_section(out_dir: Path, figures_dir: Path, quick: bool, workers: int, progress: bool) -> Section:
    scales = QUICK_SCALES if quick else SCALES
    frame = run_bandwidth_sweep(scales, workers, progress)
    figures = plot_bandwidth(frame, figures_dir / "bandwidth_whatif", x="intra_bandwidth_scale",
                             title="Ladder speedup vs intra-node AllReduce bandwidth")
    pivot = speedup_pivot(frame)
    not_ok = frame[frame["status"] != "ok"]
    parts = [
        f"Every AllReduce inside a node scaled from {min(scales):g}x to {max(scales):g}x the "
        f"`{HARDWARE}` profile's bandwidth (1x = the profile as measured; 0.125x is roughly a PCIe-class "
        "link). For 405B the TP-16 group spans two nodes, so its AllReduces also cross InfiniBand, "
        "which this sweep leaves unchanged. Prompt 1024, 512 new tokens, bf16.",
        "",
        figure_link(figures[0], out_dir, "ladder speedup vs intra-node bandwidth"),
        "",
        table(pivot, {c: "{:.3f}x" for c in pivot.columns if c.endswith("x bw")}),
        "",
    ]
    if not not_ok.empty:
        parts += [f"{len(not_ok)} point(s) did not run: "
                  + "; ".join(sorted({f'{r.model} TP {r.tp} batch {r.batch}: {r.error}' for r in not_ok.itertuples()})), ""]
    parts += [
        "**How to read this.** Each line is one model, TP degree and batch size; the y value is ladder's "
        "tokens/s divided by standard's at the same bandwidth (above 1 = ladder faster; the dotted line is "
        "the profile as it is). Moving left, AllReduces take longer: standard waits for each of them, ladder "
        "hides them behind the next module's compute as long as they fit under it, so the gain grows. Once "
        "they outgrow that compute the gain turns down again: ladder then waits for them too, and an "
        "AllReduce beside a GEMM moves its bytes more slowly (the profile's interference), so the slowest "
        "links can show less gain than moderate ones. A flat line means the AllReduces are latency-bound "
        "(small messages, e.g. batch 1), so bandwidth hardly changes them; larger batches send larger "
        "messages and feel the bandwidth more, but also bring more compute to hide them under.",
        "",
        "Reproduce (then plot any of the tables, or all of them concatenated):",
        "",
        code(sweep_commands(scales) + ["laddersim plot sweeps/bw-70b/results.parquet --kind bandwidth"]),
    ]
    return Section("2. What if the interconnect were slower or faster?", "\n".join(parts), figures)
