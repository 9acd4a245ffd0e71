"""The decode time P2P off adds over P2P on, measured and predicted, for every setting a table
measured both ways (``ladder_flash_p2p_sweep.csv`` measures each setting with NCCL_P2P_DISABLE=0
and 1 in one campaign): ``decode_s`` off minus on isolates what the host-staged transport costs a
step's AllReduces, and how much of it each schedule hides."""

from __future__ import annotations

import numpy as np
import pandas as pd

from laddersim.validation.labels import model_label

# Pairs whose measured extra is at least this share of the P2P-on decode time are scored (below
# it, run-to-run noise is of the same size as the difference).
SCORED_EXTRA_SHARE = 0.03


def p2p_off_pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per setting and schedule measured with P2P on and off (both with ``decode_s``):
    measured and predicted extra decode seconds (off minus on), the measured extra as a share of
    the P2P-on decode time, and ``extra_error`` = predicted / measured extra - 1. Empty when the
    table has no ``decode_s`` column or no pair."""
    columns = ["model", "framework", "tp", "nodes", "batch", "prompt_len", "gen_len", "schedule", "decode_on_s",
               "measured_extra_s", "predicted_extra_s", "measured_extra_share", "extra_error", "scored"]
    if "decode_s" not in frame.columns or "predicted_decode_s" not in frame.columns:
        return pd.DataFrame(columns=columns)
    keys = [c for c in ["model", "framework", "tp", "pp", "nodes", "batch", "prompt_len", "gen_len", "dtype", "schedule"]
            if c in frame.columns]
    rows = frame.dropna(subset=["decode_s"])
    on = rows[rows["p2p"] == "on"].set_index(keys)
    off = rows[rows["p2p"] == "off"].set_index(keys)
    both = on.index.intersection(off.index)
    if both.empty:
        return pd.DataFrame(columns=columns)
    on, off = on.loc[both], off.loc[both]
    out = pd.DataFrame(index=both).reset_index()
    out["model"] = [model_label(m) for m in out["model"]]
    out["decode_on_s"] = on["decode_s"].to_numpy()
    out["measured_extra_s"] = off["decode_s"].to_numpy() - on["decode_s"].to_numpy()
    out["predicted_extra_s"] = off["predicted_decode_s"].to_numpy() - on["predicted_decode_s"].to_numpy()
    out["measured_extra_share"] = out["measured_extra_s"] / out["decode_on_s"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["extra_error"] = out["predicted_extra_s"] / out["measured_extra_s"] - 1.0
    out["scored"] = out["measured_extra_share"] >= SCORED_EXTRA_SHARE
    return out[[c for c in columns if c in out.columns]].sort_values(
        [c for c in ["model", "framework", "tp", "batch", "gen_len", "schedule"] if c in out.columns],
        kind="stable").reset_index(drop=True)


def pair_summary(pairs: pd.DataFrame) -> dict[str, float]:
    """Over the scored pairs (measured extra >= 3% of the P2P-on decode time): their count, and
    the median and worst absolute error of the predicted extra (%)."""
    scored = pairs[pairs["scored"].astype(bool)] if len(pairs) else pairs
    errors = scored["extra_error"].abs() * 100 if len(scored) else pd.Series(dtype=float)
    return {"pairs": len(pairs), "scored_pairs": len(scored),
            "extra_decode_median_abs_err_pct": float(errors.median()) if len(errors) else np.nan,
            "extra_decode_worst_abs_err_pct": float(errors.max()) if len(errors) else np.nan}
