"""Tokens/s per schedule at each TP degree, as grouped bars (the style of the paper's figures).

One panel per batch size (and per model / hardware / override when those vary), all on one
y scale. Bars of non-standard schedules carry their speedup over standard.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.errors import UserInputError
from laddersim.plots.figure_io import new_figure, save_figure, schedule_color, styled
from laddersim.plots.frames import (
    groups,
    input_columns,
    matching,
    not_run_reason,
    not_run_rows,
    ok_rows,
    panel_title,
    titled,
    varying,
    with_speedup,
)

MAX_PANELS = 16
# Width a bar gets (inches), the speedup labels' size (points), the average width of a character
# (DejaVu Sans, in em) and what the y axis takes of a panel (inches).
BAR_IN = 0.45
LABEL_PT = 8
_CHAR_EM = 0.55
_Y_AXIS_IN = 0.9
SCHEDULE_ORDER = ("standard", "parallel", "ladder", "upper_bound", "desync_half")


def schedule_order(schedules) -> list[str]:
    """Known schedules in a fixed order, then the rest (hybrid:N ...) sorted."""
    present = set(map(str, schedules))
    return [s for s in SCHEDULE_ORDER if s in present] + sorted(present - set(SCHEDULE_ORDER))


def plot_throughput(frame: pd.DataFrame, out_base: str | Path, *, title: str | None = None) -> list[Path]:
    """Tokens/s (batch x generated tokens / (prefill + decode)) vs TP, a bar per schedule."""
    rows = with_speedup(ok_rows(frame, "throughput", ["schedule", "tokens_per_s", "tp"]))
    panel_keys = varying(rows, [c for c in input_columns(rows) if c != "tp"])
    panels = groups(rows, panel_keys)
    if len(panels) > MAX_PANELS:
        raise UserInputError(f"throughput: {len(panels)} panels (columns {', '.join(panel_keys)} vary); "
                             f"at most {MAX_PANELS}: narrow the table with --where COLUMN=VALUE")
    skipped = not_run_rows(frame, ["schedule", "tp"])  # out of memory: marked in its place
    skipped = skipped[skipped["schedule"].isin(rows["schedule"].unique())]
    schedules = schedule_order(rows["schedule"].unique())
    width = 0.8 / len(schedules)
    with styled():
        bars = len(schedules) * len(set(rows["tp"]) | set(skipped["tp"]))
        panel_w_in = max(3.6, 1.0 + BAR_IN * bars)
        # A speedup label ("1.40x") reads level above its bar where the bar is wide enough for it.
        bar_w_in = (panel_w_in - _Y_AXIS_IN) / bars * 0.8
        flat = 5 * LABEL_PT * _CHAR_EM / 72 <= bar_w_in * 1.1
        label_pt = LABEL_PT if flat else 7
        # One y scale for every panel (bars of two batches or models compare by height across
        # panels), the tick labels on the left panel of each row.
        fig, axes = new_figure(len(panels), panel_w_in=panel_w_in, sharey=True)
        top = float(rows["tokens_per_s"].max())
        for ax, (selector, panel) in zip(axes, panels):
            missing = matching(skipped, selector)
            tps = sorted(set(panel["tp"]) | set(missing["tp"]))
            for k, schedule in enumerate(schedules):
                mine = panel[panel["schedule"] == schedule].groupby("tp")[["tokens_per_s", "speedup_vs_standard"]].mean()
                xs = np.array([tps.index(tp) for tp in mine.index]) + (k - (len(schedules) - 1) / 2) * width
                ax.bar(xs, mine["tokens_per_s"], width, label=schedule, color=schedule_color(schedule, k))
                if schedule == "standard":
                    continue
                for x, (tokens, speedup) in zip(xs, mine.itertuples(index=False)):
                    if not np.isnan(speedup):
                        ax.text(x, tokens + 0.01 * top, f"{speedup:.2f}x", ha="center", va="bottom",
                                fontsize=label_pt, rotation=0 if flat else 90)
            for row in missing.itertuples(index=False):
                if not ((panel["tp"] == row.tp) & (panel["schedule"] == row.schedule)).any():
                    x = tps.index(row.tp) + (schedules.index(row.schedule) - (len(schedules) - 1) / 2) * width
                    ax.text(x, 0.02 * top, not_run_reason(getattr(row, "error", None)), rotation=90, ha="center",
                            va="bottom", fontsize=8, color="#555555")
            ax.set_xticks(range(len(tps)), [str(t) for t in tps])
            ax.set_xlim(-0.5, len(tps) - 0.5)  # a TP whose bars are all marked not run keeps its width
            ax.set_xlabel("TP degree (GPUs)")
            if ax.get_subplotspec().is_first_col():
                ax.set_ylabel("throughput (tokens/s)")
            ax.set_ylim(0, top * 1.22)
            ax.set_title(panel_title(selector, panel_w_in - 0.6) or "tokens/s")
            ax.grid(axis="x", visible=False)
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside lower center", ncol=len(schedules))
        fig.suptitle(titled(title or "Throughput by TP degree and schedule (labels: speedup over standard)",
                            rows, panel_keys + ["tp"]))
        return save_figure(fig, out_base)
