"""Serving figures: latency CDFs per schedule, and goodput and SLO attainment against the
request rate, with the SLOs marked. A panel row per hardware profile when the frame has several.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.plots.figure_io import new_figure, save_figure, schedule_color, styled
from laddersim.plots.throughput import schedule_order

LATENCIES = (("ttft_s", "time to first token (ms)", 1e3), ("tpot_s", "time per output token (ms)", 1e3),
             ("e2e_s", "end-to-end latency (s)", 1.0))


def _rows_by(frame: pd.DataFrame, column: str) -> list[tuple[str | None, pd.DataFrame]]:
    if column not in frame.columns:
        return [(None, frame)]
    return [(value, frame[frame[column] == value]) for value in sorted(frame[column].unique())]


def plot_latency_cdfs(requests: pd.DataFrame, out_base: str | Path, *, ttft_slo_s: float | None = None,
                      tpot_slo_s: float | None = None, title: str | None = None) -> list[Path]:
    """Empirical CDFs of TTFT, TPOT and E2E over requests (columns of ``laddersim serving --out``:
    ``schedule``, ``ttft_s``, ``tpot_s``, ``e2e_s``; optionally ``hardware``), a line per schedule."""
    slos = {"ttft_s": ttft_slo_s, "tpot_s": tpot_slo_s}
    blocks = _rows_by(requests, "hardware")
    with styled():
        fig, axes = new_figure(len(blocks) * len(LATENCIES), panel_w_in=3.6, panel_h_in=2.7)
        for b, (hardware, block) in enumerate(blocks):
            schedules = schedule_order(block["schedule"].unique())
            for j, (column, label, scale) in enumerate(LATENCIES):
                ax = axes[b * len(LATENCIES) + j]
                for k, schedule in enumerate(schedules):
                    values = np.sort(block.loc[block["schedule"] == schedule, column].dropna().to_numpy()) * scale
                    if len(values):
                        ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=schedule,
                                color=schedule_color(schedule, k))
                if slos.get(column) is not None:
                    ax.axvline(slos[column] * scale, color="black", linestyle="--", linewidth=1, label="SLO")
                ax.set_xlabel(label)
                ax.set_ylabel("share of requests")
                ax.set_ylim(0, 1.02)
                if hardware is not None and j == 0:
                    ax.set_title(str(hardware), loc="left")
        # One legend below the panels: inside one it covered the curves and the SLO line.
        legend: dict[str, object] = {}
        for ax in axes:
            for handle, name in zip(*ax.get_legend_handles_labels()):
                legend.setdefault(name, handle)
        fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncol=len(legend))
        if title:
            fig.suptitle(title)
    return save_figure(fig, out_base)


def plot_goodput_vs_rate(results: pd.DataFrame, out_base: str | Path, *, slo_attainment: float = 0.9,
                         capacities: dict | None = None, title: str | None = None) -> list[Path]:
    """Goodput (requests/s within the SLOs) and SLO attainment against the offered rate, a line per
    schedule. ``results``: one row per (hardware, schedule, rate) with ``goodput_req_per_s`` and
    ``slo_attainment``; ``capacities``: (hardware, schedule) -> capacity, drawn as dotted lines."""
    blocks = _rows_by(results, "hardware")
    capacities = capacities or {}
    with styled():
        fig, axes = new_figure(2 * len(blocks), panel_w_in=4.0, panel_h_in=2.9, max_cols=2)
        for b, (hardware, block) in enumerate(blocks):
            good_ax, share_ax = axes[2 * b], axes[2 * b + 1]
            top = float(block["rate"].max())
            good_ax.plot([0, top], [0, top], color="#bbbbbb", linewidth=1, label="offered")
            for k, schedule in enumerate(schedule_order(block["schedule"].unique())):
                mine = block[block["schedule"] == schedule].sort_values("rate")
                color = schedule_color(schedule, k)
                good_ax.plot(mine["rate"], mine["goodput_req_per_s"], marker="o", markersize=3, color=color,
                             label=schedule)
                share_ax.plot(mine["rate"], mine["slo_attainment"], marker="o", markersize=3, color=color,
                              label=schedule)
                cap = capacities.get((hardware, schedule))
                if cap:
                    for ax in (good_ax, share_ax):
                        ax.axvline(cap, color=color, linestyle=":", linewidth=1)
            share_ax.axhline(slo_attainment, color="black", linestyle="--", linewidth=1,
                             label=f"SLO attainment {slo_attainment:.0%}")
            good_ax.set_xlabel("offered rate (requests/s)")
            good_ax.set_ylabel("goodput (requests/s within SLO)")
            share_ax.set_xlabel("offered rate (requests/s)")
            share_ax.set_ylabel("share of requests within SLO")
            share_ax.set_ylim(0, 1.05)
            if hardware is not None:
                good_ax.set_title(str(hardware), loc="left")
        axes[0].legend(loc="upper left")
        axes[1].legend(loc="lower left")
        if title:
            fig.suptitle(title)
    return save_figure(fig, out_base)
