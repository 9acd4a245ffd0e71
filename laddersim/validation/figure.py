"""The paper's figure style: tokens/s vs TP, one panel per batch size (and P2P setting);
bars are measured, markers are predicted."""

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


def paper_figure(frame: pd.DataFrame, out_base: str | Path) -> list[Path]:
    """Measured (bars) and predicted (black markers) tokens/s per schedule, TP and batch."""
    schedules = [s for s in SCHEDULE_ORDER if s in set(frame["schedule"])]
    schedules += sorted(set(frame["schedule"]) - set(schedules))
    p2ps = [p for p in ("on", "off") if p in set(frame["p2p"])]
    batches = sorted(frame["batch"].unique())
    fig, axes = plt.subplots(len(p2ps), len(batches), figsize=(3.6 * len(batches), 3.0 * len(p2ps)),
                             squeeze=False)
    width = 0.8 / len(schedules)
    for i, p2p in enumerate(p2ps):
        for j, batch in enumerate(batches):
            ax = axes[i, j]
            part = frame[(frame["p2p"] == p2p) & (frame["batch"] == batch)]
            tps = sorted(part["tp"].unique())
            x = np.arange(len(tps))
            for k, schedule in enumerate(schedules):
                rows = part[part["schedule"] == schedule].set_index("tp").reindex(tps)
                offset = (k - (len(schedules) - 1) / 2) * width
                ax.bar(x + offset, rows["tokens_per_s"], width, color=COLORS.get(schedule, "#999999"),
                       label=schedule if (i, j) == (0, 0) else None)
                ax.scatter(x + offset, rows["predicted_tokens_per_s"], marker="D", s=14, color="black",
                           zorder=3, label="predicted" if (i, j, k) == (0, 0, 0) else None)
            ax.set_xticks(x, [f"TP{tp}" for tp in tps])
            if i == len(p2ps) - 1:
                ax.set_xlabel("tensor-parallel degree")
            ax.set_title(f"batch {batch}, P2P {p2p}", fontsize=9)
            if j == 0:
                ax.set_ylabel("tokens/s")
            ax.grid(axis="y", alpha=0.3)
    model = ", ".join(sorted(frame["model"].unique()))
    fig.suptitle(f"{model}: measured (bars) vs laddersim (markers)", fontsize=11)
    fig.legend(loc="lower center", ncol=len(schedules) + 1, fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.04))
    fig.tight_layout()
    return save_figure(fig, out_base)
