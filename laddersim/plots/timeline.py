"""Per-rank timeline of one decode step: a compute lane and a communication lane per rank.

Input: timeline spans (``SimResult.timeline``) with a ``schedule`` column, one row of panels per
schedule. Time runs from the start of the step in milliseconds. The left panel shows the whole
step; the right one zooms on the first layers so each AllReduce is visible: under standard it
sits in a gap of the compute lane, under ladder it runs beneath the next module's compute.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from laddersim.errors import UserInputError
from laddersim.plots.figure_io import save_figure, styled
from laddersim.plots.throughput import schedule_order

import matplotlib.pyplot as plt

GEMM_KINDS = frozenset({"qkv", "o_proj", "gate_up", "qkv_gate_up", "down", "lm_head"})
OVERHEAD_KINDS = frozenset({"step_overhead", "sampling"})
# (category, legend label, colour)
CATEGORIES = (
    ("gemm", "GEMM", "#4c72b0"),
    ("attention", "attention", "#55a868"),
    ("elementwise", "norm / elementwise", "#a6cee3"),
    ("overhead", "fixed overhead", "#8c8c8c"),
    ("comm", "AllReduce / collective", "#d62728"),
)
NEEDED = ("schedule", "rank", "stream", "layer", "kind", "start_s", "end_s")


def category(stream: str, kind: str) -> str:
    if stream == "comm":
        return "comm"
    if kind in GEMM_KINDS:
        return "gemm"
    if kind == "attention":
        return "attention"
    if kind in OVERHEAD_KINDS:
        return "overhead"
    return "elementwise"


def plot_timeline(spans: pd.DataFrame, out_base: str | Path, *, zoom_layers: int = 2,
                  title: str | None = None, comm_label: str = "") -> list[Path]:
    """Timeline lanes per schedule and rank; ``zoom_layers`` > 0 adds a zoom on layers 0..n-1;
    ``comm_label`` (e.g. the NCCL algorithm/protocol of the AllReduce) tags the comm lanes."""
    missing = [c for c in NEEDED if c not in spans.columns]
    if missing:
        raise UserInputError(f"timeline: spans need column(s) {', '.join(missing)}")
    if spans.empty:
        raise UserInputError("timeline: no spans to plot")
    schedules = schedule_order(spans["schedule"].unique())
    ranks = sorted(spans["rank"].unique())
    cols = 2 if zoom_layers > 0 else 1
    lane_h_in = 0.32
    with styled():
        fig, axes = plt.subplots(len(schedules), cols, squeeze=False,
                                 figsize=(6.5 * cols, 0.9 + lane_h_in * 2 * len(ranks) * len(schedules) + 0.5 * len(schedules)),
                                 gridspec_kw={"width_ratios": [3, 2][:cols]}, layout="constrained")
        longest_ms = 0.0
        for row, schedule in enumerate(schedules):
            mine = spans[spans["schedule"] == schedule]
            t0 = float(mine["start_s"].min())
            step_ms = (float(mine["end_s"].max()) - t0) * 1e3
            longest_ms = max(longest_ms, step_ms)
            exposed_ms = exposed_comm_s(mine[mine["rank"] == ranks[0]]) * 1e3
            _draw_lanes(axes[row][0], mine, ranks, t0, comm_label)
            axes[row][0].set_title(f"{schedule}: step {step_ms:.2f} ms, exposed communication "
                                   f"{exposed_ms:.2f} ms (rank {ranks[0]})", loc="left")
            if cols == 2:
                zoom = mine[mine["layer"].between(0, zoom_layers - 1)]
                if not zoom.empty:
                    lo_s, hi_s = float(zoom["start_s"].min()), float(zoom["end_s"].max())
                    # Only spans inside the window: hidden ones would still be written to the SVG.
                    window = mine[(mine["end_s"] > lo_s) & (mine["start_s"] < hi_s)]
                    _draw_lanes(axes[row][1], window, ranks, t0, comm_label)
                    axes[row][1].set_xlim((lo_s - t0) * 1e3, (hi_s - t0) * 1e3)
                axes[row][1].set_title(f"zoom: {_layers_label(zoom_layers, mine)}", loc="left")
        for row in range(len(schedules)):
            axes[row][0].set_xlim(0, longest_ms * 1.01)  # same time scale for every schedule
            for ax in axes[row]:
                ax.set_xlabel("time since step start (ms)")
        handles = [Patch(color=color, label=name) for _, name, color in CATEGORIES]
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles))
        fig.suptitle(title or "Decode-step timeline")
        return save_figure(fig, out_base)


def _layers_label(zoom_layers: int, spans: pd.DataFrame) -> str:
    """'layers 0-N' of the zoom, N clamped to the model's last layer (layer -1: outside any layer)."""
    last = min(zoom_layers, int(spans["layer"].max()) + 1) - 1
    return "layer 0" if last <= 0 else f"layers 0-{last}"


def _draw_lanes(ax, spans: pd.DataFrame, ranks: list, t0: float, comm_label: str = "") -> None:
    """Two lanes per rank (compute above comm), spans coloured by category."""
    labels = []
    for i, rank in enumerate(ranks):
        for j, stream in enumerate(("compute", "comm")):
            lane = 2 * i + j
            tag = f" ({comm_label})" if stream == "comm" and comm_label else ""
            labels.append(f"rank {rank} {stream}{tag}")
            mine = spans[(spans["rank"] == rank) & (spans["stream"] == stream)]
            cats = np.array([category(s, k) for s, k in zip(mine["stream"], mine["kind"])])
            start_ms = (mine["start_s"].to_numpy() - t0) * 1e3
            dur_ms = (mine["end_s"].to_numpy() - mine["start_s"].to_numpy()) * 1e3
            for cat, _, color in CATEGORIES:
                sel = cats == cat
                if sel.any():
                    ax.broken_barh(list(zip(start_ms[sel], dur_ms[sel])), (lane - 0.4, 0.8),
                                   facecolors=color, edgecolors="none")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # rank 0 compute on top
    ax.grid(axis="y", visible=False)


def exposed_comm_s(spans: pd.DataFrame) -> float:
    """Seconds of communication with the compute lane idle (one rank's spans)."""
    comm = spans[spans["stream"] == "comm"].sort_values("start_s")
    busy = spans[spans["stream"] == "compute"].sort_values("start_s")
    covered = 0.0
    starts, ends = busy["start_s"].to_numpy(), busy["end_s"].to_numpy()
    for lo, hi in zip(comm["start_s"], comm["end_s"]):
        first = np.searchsorted(ends, lo, side="right")
        for s, e in zip(starts[first:], ends[first:]):
            if s >= hi:
                break
            covered += max(0.0, min(e, hi) - max(s, lo))
    return float((comm["end_s"] - comm["start_s"]).sum() - covered)
