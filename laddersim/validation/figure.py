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

SCHEDULE_ORDER = ["standard", "parallel", "ladder", "desync_half", "upper_bound"]
COLORS = {"standard": "#4c72b0", "parallel": "#dd8452", "ladder": "#55a868", "desync_half": "#8172b3",
          "upper_bound": "#937860"}
# Byte-identical files for identical inputs.
SAVE_KW = {"png": {"metadata": {"Software": None}}, "svg": {"metadata": {"Date": None, "Creator": None}}}


def save_figure(fig, out_base: str | Path) -> list[Path]:
    """Write ``out_base.png`` and ``out_base.svg`` reproducibly; returns the paths."""
    out_base = Path(out_base)
    out_base.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    with plt.rc_context({"svg.hashsalt": "laddersim"}):
        for ext, kw in SAVE_KW.items():
            path = out_base.with_suffix(f".{ext}")
            fig.savefig(path, dpi=110, bbox_inches="tight", **kw)
            paths.append(path)
    plt.close(fig)
    return paths


# Setting columns besides TP and P2P; a panel per distinct combination (batch always shown).
PANEL_COLUMNS = ["model", "batch", "prompt_len", "gen_len"]
MAX_PANEL_COLUMNS = 4


def model_label(model: str) -> str:
    """A preset's name, or a config.json's file stem (its folder's name for ``config.json``)."""
    path = Path(str(model))
    if path.suffix != ".json":
        return str(model)
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def _panel_title(key: dict, p2p: str) -> str:
    model = model_label(key["model"]) if "model" in key else None
    parts = ([model] if model else []) + [f"batch {key['batch']}"]
    parts += [f"prompt {key['prompt_len']}"] if "prompt_len" in key else []
    parts += [f"gen {key['gen_len']}"] if "gen_len" in key else []
    return ", ".join(parts + [f"P2P {p2p}"])


def paper_figure(frame: pd.DataFrame, out_base: str | Path) -> list[Path]:
    """Measured (bars) and predicted (black markers) tokens/s per schedule and TP; one panel per
    P2P setting and batch (and model, prompt and generation length where the rows differ in them),
    at most four panels a row."""
    schedules = [s for s in SCHEDULE_ORDER if s in set(frame["schedule"])]
    schedules += sorted(set(frame["schedule"]) - set(schedules))
    p2ps = [p for p in ("on", "off") if p in set(frame["p2p"])]
    varying = [c for c in PANEL_COLUMNS if c == "batch" or frame[c].nunique() > 1]
    keys = [dict(zip(varying, k)) for k in sorted(set(map(tuple, frame[varying].itertuples(index=False))))]
    n_cols = min(len(keys), MAX_PANEL_COLUMNS)
    rows_per_p2p = -(-len(keys) // n_cols)
    fig, axes = plt.subplots(len(p2ps) * rows_per_p2p, n_cols,
                             figsize=(3.6 * n_cols, 3.0 * len(p2ps) * rows_per_p2p), squeeze=False)
    width = 0.8 / len(schedules)
    for i, p2p in enumerate(p2ps):
        for j, key in enumerate(keys):
            row_index = i * rows_per_p2p + j // n_cols
            ax = axes[row_index, j % n_cols]
            part = frame[frame["p2p"] == p2p]
            for column, value in key.items():
                part = part[part[column] == value]
            groups = sorted(set(zip(part["tp"], part["nodes"])))
            x = np.arange(len(groups))
            for k, schedule in enumerate(schedules):
                rows = part[part["schedule"] == schedule].set_index(["tp", "nodes"]).reindex(groups)
                offset = (k - (len(schedules) - 1) / 2) * width
                ax.bar(x + offset, rows["tokens_per_s"], width, color=COLORS.get(schedule, "#999999"),
                       label=schedule if (i, j) == (0, 0) else None)
                ax.scatter(x + offset, rows["predicted_tokens_per_s"], marker="D", s=14, color="black",
                           zorder=3, label="predicted" if (i, j, k) == (0, 0, 0) else None)
            ax.set_xticks(x, [f"TP{tp}" + (f" ({nodes} nodes)" if nodes > 1 else "") for tp, nodes in groups])
            if row_index == len(p2ps) * rows_per_p2p - 1:
                ax.set_xlabel("tensor-parallel degree")
            ax.set_title(_panel_title(key, p2p), fontsize=9)
            if j % n_cols == 0:
                ax.set_ylabel("tokens/s")
            ax.grid(axis="y", alpha=0.3)
    for j in range(len(keys), rows_per_p2p * n_cols):  # empty slots of a last, partial row
        for i in range(len(p2ps)):
            axes[i * rows_per_p2p + j // n_cols, j % n_cols].set_visible(False)
    model = ", ".join(sorted(model_label(m) for m in frame["model"].unique()))
    fig.suptitle(f"{model}: measured (bars) vs laddersim (markers)", fontsize=11)
    fig.legend(loc="lower center", ncol=len(schedules) + 1, fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.04))
    fig.tight_layout()
    return save_figure(fig, out_base)
