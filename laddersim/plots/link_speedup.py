"""Speedup of a schedule over standard against interconnect bandwidth or latency (what-if sweeps).

One panel per model (and hardware), one line per TP degree and batch size. The x column is the
override that the sweep varied: a scale of the profile's value or an absolute value.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from laddersim.errors import UserInputError
from laddersim.plots.figure_io import new_figure, save_figure, styled
from laddersim.plots.frames import groups, input_columns, label, ok_rows, titled, varying, with_speedup

BANDWIDTH_COLUMNS = (
    "intra_bandwidth_scale", "intra_bandwidth_gbps", "inter_bandwidth_scale", "inter_bandwidth_gbps",
    "nics_per_node",
)
LATENCY_COLUMNS = ("intra_latency_scale", "intra_latency_us", "inter_latency_scale", "inter_latency_us")

AXIS_LABELS = {
    "intra_bandwidth_scale": "intra-node bandwidth (x the profile's)",
    "intra_bandwidth_gbps": "intra-node AllReduce bus bandwidth (GB/s)",
    "inter_bandwidth_scale": "inter-node bandwidth (x the profile's)",
    "inter_bandwidth_gbps": "inter-node AllReduce bus bandwidth (GB/s)",
    "nics_per_node": "NICs per node",
    "intra_latency_scale": "intra-node latency (x the profile's)",
    "intra_latency_us": "intra-node AllReduce latency (us)",
    "inter_latency_scale": "inter-node latency (x the profile's)",
    "inter_latency_us": "inter-node AllReduce latency (us)",
}

_PANEL_COLUMNS = ["model", "hardware"]
_MARKERS = "osD^vP*X"
_DASHES = ["-", "--", ":", "-."]


def plot_bandwidth(frame: pd.DataFrame, out_base: str | Path, *, x: str | None = None,
                   schedule: str = "ladder", title: str | None = None) -> list[Path]:
    """Speedup (x) of ``schedule`` over standard vs a bandwidth column; writes PNG and SVG."""
    return _plot_link(frame, out_base, x or _pick_x(frame, BANDWIDTH_COLUMNS, "bandwidth"), schedule,
                      title or "Speedup vs interconnect bandwidth")


def plot_latency(frame: pd.DataFrame, out_base: str | Path, *, x: str | None = None,
                 schedule: str = "ladder", title: str | None = None) -> list[Path]:
    """Speedup (x) of ``schedule`` over standard vs a latency column; writes PNG and SVG."""
    return _plot_link(frame, out_base, x or _pick_x(frame, LATENCY_COLUMNS, "latency"), schedule,
                      title or "Speedup vs interconnect latency")


def _pick_x(frame: pd.DataFrame, candidates: tuple[str, ...], what: str) -> str:
    """The first candidate column that varies; else the first present."""
    present = [c for c in candidates if c in frame.columns]
    if not present:
        raise UserInputError(f"results: no {what} column to plot against; allowed: {', '.join(candidates)}")
    moving = varying(frame, present)
    return (moving or present)[0]


def _plot_link(frame: pd.DataFrame, out_base, x: str, schedule: str, title: str) -> list[Path]:
    if x not in frame.columns:
        raise UserInputError(f"x: no column '{x}' in the results; allowed: {', '.join(map(str, frame.columns))}")
    frame = with_speedup(ok_rows(frame, "speedup-vs-link", ["schedule", "tokens_per_s", x]))
    rows = frame[frame["schedule"] == schedule].dropna(subset=["speedup_vs_standard"])
    if rows.empty:
        have = ", ".join(sorted(frame["schedule"].astype(str).unique()))
        raise UserInputError(f"schedule: no '{schedule}' rows with a standard baseline; allowed: {have}")
    others = [c for c in input_columns(rows) if c != x]
    panel_keys = varying(rows, _PANEL_COLUMNS)
    line_keys = varying(rows, [c for c in others if c not in _PANEL_COLUMNS])
    panels = groups(rows, panel_keys)
    scale_axis = x.endswith("_scale")
    with styled():
        fig, axes = new_figure(len(panels), sharey=True)
        for ax, (selector, panel) in zip(axes, panels):
            lines = groups(panel, line_keys)
            for i, (line_selector, line) in enumerate(lines):
                line = line.groupby(x, as_index=False)["speedup_vs_standard"].mean().sort_values(x)
                ax.plot(line[x], line["speedup_vs_standard"], marker=_MARKERS[i % len(_MARKERS)],
                        linestyle=_DASHES[(i // len(_MARKERS)) % len(_DASHES)], markersize=4,
                        label=label(line_selector) or schedule)
            ax.axhline(1.0, color="black", linewidth=0.8)
            if scale_axis:
                ax.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
            if (panel[x] > 0).all():
                ax.set_xscale("log", base=2)
            ax.set_xlabel(AXIS_LABELS.get(x, x))
            ax.set_ylabel(f"{schedule} speedup over standard (x)")
            ax.set_title(label(selector))  # empty with one panel: the figure title says it
            ax.legend(loc="best")
        fig.suptitle(titled(title, rows, panel_keys + line_keys + [x]))
        return save_figure(fig, out_base)
