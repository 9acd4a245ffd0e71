"""Heatmap of a schedule's speedup over standard across TP degree x batch size.

One panel per combination of the other inputs that vary (model, hardware, what-if overrides).
Cells the table marks infeasible (does not fit in memory) read "no fit"; absent cells stay blank.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm

from laddersim.errors import UserInputError
from laddersim.plots.figure_io import new_figure, save_figure, styled
from laddersim.plots.frames import groups, input_columns, matching, ok_rows, panel_title, titled, varying, with_speedup

MAX_PANELS = 12


def plot_heatmap(frame: pd.DataFrame, out_base: str | Path, *, schedule: str = "ladder",
                 title: str | None = None) -> list[Path]:
    """Speedup (x) of ``schedule`` over standard, TP on x, batch on y; writes PNG and SVG."""
    infeasible = frame[frame["status"] != "ok"] if "status" in frame.columns else frame.iloc[:0]
    frame = with_speedup(ok_rows(frame, "heatmap", ["schedule", "tokens_per_s", "tp", "batch"]))
    rows = frame[frame["schedule"] == schedule].dropna(subset=["speedup_vs_standard"])
    if rows.empty:
        have = ", ".join(sorted(frame["schedule"].astype(str).unique()))
        raise UserInputError(f"schedule: no '{schedule}' rows with a standard baseline; allowed: {have}")
    panel_keys = varying(rows, [c for c in input_columns(rows) if c not in ("tp", "batch")])
    panels = groups(rows, panel_keys)
    if len(panels) > MAX_PANELS:
        raise UserInputError(f"heatmap: {len(panels)} panels (columns {', '.join(panel_keys)} vary); "
                             f"at most {MAX_PANELS}: narrow the table with --where COLUMN=VALUE")
    infeasible = infeasible[infeasible["schedule"].isin([schedule, "standard"])] if "schedule" in infeasible else infeasible
    # Axes span the infeasible points too, so "no fit" cells show where the grid ran out of memory.
    tps = sorted(set(rows["tp"]) | set(infeasible.get("tp", [])))
    batches = sorted(set(rows["batch"]) | set(infeasible.get("batch", [])))
    values = rows["speedup_vs_standard"]
    # Centre the colour scale on 1.0 (no gain): red above, blue below.
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(float(values.min()), 0.99), vmax=max(float(values.max()), 1.01))
    with styled():
        panel_w_in = 1.2 + 0.9 * len(tps)
        fig, axes = new_figure(len(panels), panel_w_in=panel_w_in, panel_h_in=1.2 + 0.55 * len(batches))
        image = None
        for ax, (selector, panel) in zip(axes, panels):
            grid = panel.groupby(["batch", "tp"])["speedup_vs_standard"].mean()
            cells = np.full((len(batches), len(tps)), np.nan)
            for (batch, tp), value in grid.items():
                cells[batches.index(batch), tps.index(tp)] = value
            image = ax.imshow(cells, cmap="coolwarm", norm=norm, origin="lower", aspect="auto")
            no_fit = matching(infeasible, selector)
            for i, batch in enumerate(batches):
                for j, tp in enumerate(tps):
                    if not np.isnan(cells[i, j]):
                        ax.text(j, i, f"{cells[i, j]:.2f}", ha="center", va="center", fontsize=8)
                    elif ((no_fit.get("tp") == tp) & (no_fit.get("batch") == batch)).any():
                        ax.text(j, i, "no fit", ha="center", va="center", fontsize=7, color="grey")
            ax.set_xticks(range(len(tps)), [str(t) for t in tps])
            ax.set_yticks(range(len(batches)), [str(b) for b in batches])
            ax.set_xlabel("TP degree (GPUs)")
            ax.set_ylabel("batch size (sequences)")
            ax.set_title(panel_title(selector, panel_w_in - 0.6) or f"{schedule} vs standard")
            ax.grid(False)
        fig.colorbar(image, ax=axes, label=f"{schedule} speedup over standard (x)", shrink=0.9)
        fig.suptitle(titled(title or f"Speedup of {schedule} over standard", rows, panel_keys + ["tp", "batch"]))
        return save_figure(fig, out_base)

