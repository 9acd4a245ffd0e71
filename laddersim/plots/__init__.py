"""Figures from results tables (and from timeline spans): PNG and SVG, deterministic bytes.

Every plot function is ``plot_<kind>(frame, out_base, **options) -> [png_path, svg_path]``.
``PLOT_KINDS`` maps the kind names the command line accepts to them; ``input`` says whether the
frame is a results table (``laddersim sweep`` output) or timeline spans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from laddersim.plots.breakdown import plot_breakdown
from laddersim.plots.heatmap import plot_heatmap
from laddersim.plots.link_speedup import plot_bandwidth, plot_latency
from laddersim.plots.throughput import plot_throughput
from laddersim.plots.timeline import plot_timeline


@dataclass(frozen=True)
class PlotKind:
    function: Callable
    input: Literal["results", "timeline"]
    description: str


PLOT_KINDS: dict[str, PlotKind] = {
    "bandwidth": PlotKind(plot_bandwidth, "results", "speedup over standard vs interconnect bandwidth, per model and TP"),
    "latency": PlotKind(plot_latency, "results", "speedup over standard vs interconnect latency, per model and TP"),
    "heatmap": PlotKind(plot_heatmap, "results", "speedup over standard across TP x batch"),
    "throughput": PlotKind(plot_throughput, "results", "tokens/s vs TP, a bar per schedule"),
    "breakdown": PlotKind(plot_breakdown, "results", "stacked compute / exposed communication / overhead seconds"),
    "timeline": PlotKind(plot_timeline, "timeline", "per-rank compute and communication lanes of one decode step"),
}

__all__ = ["PLOT_KINDS", "PlotKind", "plot_bandwidth", "plot_breakdown", "plot_heatmap", "plot_latency",
           "plot_throughput", "plot_timeline"]
