"""The paper's figure style: tokens/s vs TP, one panel per batch size and P2P setting (and per
model, prompt and generation length when the rows differ in them); bars are measured, markers are
predicted."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from laddersim.validation.labels import model_label, setting_columns, setting_label  # noqa: E402

SCHEDULE_ORDER = ["standard", "parallel", "ladder", "desync_half", "upper_bound"]
COLORS = {"standard": "#4c72b0", "parallel": "#dd8452", "ladder": "#55a868", "desync_half": "#8172b3",
          "upper_bound": "#937860"}


def save_validation_figure(fig, out_base: str | Path) -> list[Path]:
    """Write ``out_base.png`` and ``out_base.svg``, byte-identical for identical inputs
    (``laddersim.plots.figure_io.write_figure_file``); returns the paths."""
    from laddersim.plots.figure_io import write_figure_file

    out_base = Path(out_base)
    out_base.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        path = out_base.with_suffix(f".{ext}")
        write_figure_file(fig, path, dpi=110, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


MAX_PANEL_COLUMNS = 4
PANEL_ORDER = ["hardware", "model", "framework", "pp", "batch", "prompt_len", "gen_len", "dtype"]


def paper_figure(frame: pd.DataFrame, out_base: str | Path) -> list[Path]:
    """Measured (bars) and predicted (black markers) tokens/s per schedule and TP; one panel per
    P2P setting and batch (and hardware, model, prompt and generation length where the rows differ
    in them), at most four panels a row."""
    schedules = [s for s in SCHEDULE_ORDER if s in set(frame["schedule"])]
    schedules += sorted(set(frame["schedule"]) - set(schedules))
    p2ps = [p for p in ("on", "off") if p in set(frame["p2p"])]
    shown = set(setting_columns(frame)) | {"batch"}
    varying = [c for c in PANEL_ORDER if c in shown]
    panels = []  # (p2p, key) in drawing order, each P2P setting starting a new row
    per_p2p = {p: [dict(zip(varying, k)) for k in sorted(set(map(tuple, frame.loc[frame["p2p"] == p, varying]
                                                                  .itertuples(index=False))))] for p in p2ps}
    n_cols = min(max(len(keys) for keys in per_p2p.values()), MAX_PANEL_COLUMNS)
    for p in p2ps:
        keys = per_p2p[p]
        panels += [(p, key) for key in keys] + [None] * (-len(keys) % n_cols)
    n_rows = len(panels) // n_cols
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.6 * n_cols, 3.0 * n_rows), squeeze=False)
    width = 0.8 / len(schedules)
    for index, panel in enumerate(panels):
        ax = axes[index // n_cols, index % n_cols]
        if panel is None:  # the empty end of a P2P setting's last row
            ax.set_visible(False)
            continue
        p2p, key = panel
        part = frame[frame["p2p"] == p2p]
        for column, value in key.items():
            part = part[part[column] == value]
        groups = sorted(set(zip(part["tp"], part["nodes"])))
        x = np.arange(len(groups))
        for k, schedule in enumerate(schedules):
            rows = part[part["schedule"] == schedule].set_index(["tp", "nodes"]).reindex(groups)
            offset = (k - (len(schedules) - 1) / 2) * width
            ax.bar(x + offset, rows["tokens_per_s"], width, color=COLORS.get(schedule, "#999999"),
                   label=schedule if index == 0 else None)
            ax.scatter(x + offset, rows["predicted_tokens_per_s"], marker="D", s=14, color="black",
                       zorder=3, label="predicted" if (index, k) == (0, 0) else None)
        ax.set_xticks(x, [f"TP{tp}" + (f" ({nodes} nodes)" if nodes > 1 else "") for tp, nodes in groups])
        if index // n_cols == n_rows - 1 or panels[min(index + n_cols, len(panels) - 1)] is None:
            ax.set_xlabel("tensor-parallel degree")
        ax.set_title(", ".join([setting_label(c, v) for c, v in key.items()] + [f"P2P {p2p}"]), fontsize=9)
        if index % n_cols == 0:
            ax.set_ylabel("tokens/s")
        ax.grid(axis="y", alpha=0.3)
    model = ", ".join(sorted(model_label(m) for m in frame["model"].unique()))
    fig.suptitle(f"{model}: measured (bars) vs laddersim (markers)", fontsize=11)
    fig.legend(loc="lower center", ncol=len(schedules) + 1, fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.04))
    fig.tight_layout()
    return save_validation_figure(fig, out_base)
