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
from laddersim.plots.frames import (
    groups,
    input_columns,
    not_run_reason,
    not_run_rows,
    ok_rows,
    panel_title,
    titled,
    varying,
)
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
    # Configurations that did not run (out of memory) keep their place in their panel, marked.
    skipped = not_run_rows(frame, ["schedule", "tp"])
    every = pd.concat([rows, skipped], ignore_index=True)
    # Panels by the inputs that vary, over the rows that ran and those that did not (a batch none
    # of whose configurations fit still gets its panel); a column the not-run rows leave empty
    # (a summary field, written only for rows that ran) does not split panels.
    candidates = [c for c in input_columns(rows) if c != "tp"]
    ran_varying = varying(rows, candidates)
    panel_keys = [c for c in varying(every, candidates) if c in ran_varying or skipped[c].notna().all()]
    every["other_s"] = (every["total_s"] - every["compute_s"] - every["exposed_comm_s"]
                        - every["overhead_s"]).clip(lower=0)
    panels = groups(every, panel_keys)
    if len(panels) > MAX_PANELS:
        raise UserInputError(f"breakdown: {len(panels)} panels (columns {', '.join(panel_keys)} vary); "
                             f"at most {MAX_PANELS}: narrow the table with --where COLUMN=VALUE")
    schedules = schedule_order(every["schedule"].unique())
    with styled():
        bars_per_panel = max(len(_bar_keys(panel, schedules)) for _, panel in panels)
        panel_w_in = max(3.6, 1.2 + 0.42 * bars_per_panel)
        fig, axes = new_figure(len(panels), panel_w_in=panel_w_in, max_cols=2)
        for ax, (selector, both) in zip(axes, panels):
            ran = both["status"] == "ok" if "status" in both.columns else pd.Series(True, index=both.index)
            panel, missing = both[ran], both[~ran]
            means = panel.groupby(["tp", "schedule"])[[p[0] for p in PARTS] + ["total_s"]].mean()
            keys = _bar_keys(both, schedules)
            xs = np.arange(len(keys))
            bottom = np.zeros(len(keys))
            for column, name, color in PARTS:
                heights = np.array([means.loc[k, column] if k in means.index else 0.0 for k in keys])
                ax.bar(xs, heights, 0.7, bottom=bottom, label=name, color=color)
                bottom += heights
            top = float(bottom.max()) or 1.0
            ax.set_ylim(0, top * 1.08)  # the tallest bar's top stays inside the panel
            for x, key in zip(xs, keys):
                if key not in means.index:  # did not run: its place says why
                    why = missing[(missing["tp"] == key[0]) & (missing["schedule"] == key[1])]["error"]
                    ax.text(x, 0.03 * top, not_run_reason(why.iloc[0] if len(why) else None), rotation=90,
                            ha="center", va="bottom", fontsize=8, color="#555555")
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
        fig.suptitle(titled(title or "Time breakdown (rank 0)", every, panel_keys + ["tp", "schedule"]))
        return save_figure(fig, out_base)


def _bar_keys(panel: pd.DataFrame, schedules: list[str]) -> list[tuple]:
    """(TP, schedule) of every bar of a panel (the configurations that ran and those that did
    not), by TP then schedule."""
    return sorted(set(zip(panel["tp"], panel["schedule"])), key=lambda k: (k[0], schedules.index(k[1])))
