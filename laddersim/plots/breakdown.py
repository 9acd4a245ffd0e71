"""Where the time goes: stacked bars of compute, exposed communication and fixed overhead.

Per schedule and TP degree, seconds of one request (prefill + all decode steps, on rank 0):
compute (GEMMs, attention, elementwise), exposed communication (collective time not hidden
under compute), fixed overhead (step launch, sampling) and any remainder (idle waiting).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.errors import UserInputError
from laddersim.plots.figure_io import new_figure, save_figure, styled
from laddersim.plots.frames import groups, input_columns, ok_rows, panel_title, titled, varying
from laddersim.plots.throughput import schedule_order

MAX_PANELS = 16
# Width of one character of a 7 pt tick label (DejaVu Sans averages ~0.55 em), and the part of a
# panel the y axis label and ticks take: schedule names wider than a bar's share are drawn slanted.
_TICK_CHAR_IN = 7 * 0.55 / 72
_Y_AXIS_IN = 0.9
# (column, legend label, colour); "other_s" is derived: total_s minus the rest, floored at 0.
PARTS = (
    ("compute_s", "compute", "#4c72b0"),
    ("exposed_comm_s", "exposed communication", "#d62728"),
    ("overhead_s", "fixed overhead", "#8c8c8c"),
    ("other_s", "other (idle)", "#f2c45a"),
)


def plot_breakdown(frame: pd.DataFrame, out_base: str | Path, *, title: str | None = None) -> list[Path]:
    """Stacked seconds per (TP, schedule) bar; writes PNG and SVG."""
    needed = ["schedule", "tp", "total_s", "compute_s", "exposed_comm_s", "overhead_s"]
    rows = ok_rows(frame, "breakdown", needed).copy()
    panel_keys = varying(rows, [c for c in input_columns(rows) if c != "tp"])
    rows["other_s"] = (rows["total_s"] - rows["compute_s"] - rows["exposed_comm_s"] - rows["overhead_s"]).clip(lower=0)
    panels = groups(rows, panel_keys)
    if len(panels) > MAX_PANELS:
        raise UserInputError(f"breakdown: {len(panels)} panels (columns {', '.join(panel_keys)} vary); "
                             f"at most {MAX_PANELS}: narrow the table with --where COLUMN=VALUE")
    schedules = schedule_order(rows["schedule"].unique())
    with styled():
        bars_per_panel = rows.groupby(["tp", "schedule"]).ngroups
        panel_w_in = max(3.6, 1.2 + 0.42 * bars_per_panel)
        fig, axes = new_figure(len(panels), panel_w_in=panel_w_in, max_cols=2)
        for ax, (selector, panel) in zip(axes, panels):
            means = panel.groupby(["tp", "schedule"])[[p[0] for p in PARTS] + ["total_s"]].mean()
            keys = sorted(means.index, key=lambda k: (k[0], schedules.index(k[1])))
            xs = np.arange(len(keys))
            bottom = np.zeros(len(keys))
            for column, name, color in PARTS:
                heights = np.array([means.loc[k, column] for k in keys])
                ax.bar(xs, heights, 0.7, bottom=bottom, label=name, color=color)
                bottom += heights
            ticks = [f"{s}\nTP {tp}" for tp, s in keys]
            if max(len(s) for _, s in keys) * _TICK_CHAR_IN > (panel_w_in - _Y_AXIS_IN) / bars_per_panel:
                # Names wider than a bar (desync_half, hybrid:40) would run into each other.
                ax.set_xticks(xs, ticks, fontsize=7, rotation=45, ha="right", rotation_mode="anchor")
            else:
                ax.set_xticks(xs, ticks, fontsize=7, rotation=0)
            ax.set_ylabel("time per request (s)\nprefill + decode")  # one line overruns a short panel
            ax.set_title(panel_title(selector, panel_w_in - 0.6) or "time breakdown")
            ax.grid(axis="x", visible=False)
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside lower center", ncol=len(PARTS))
        fig.suptitle(titled(title or "Time breakdown (rank 0)", rows, panel_keys + ["tp", "schedule"]))
        return save_figure(fig, out_base)
