"""``framework.graph_host_node_us`` fitted to graph-captured network collectives.

What each network collective of a CUDA-graph-captured pass waits on the compute stream for NCCL's
host node (``laddersim.costs.graph_proxy``), read from the one table of graph-captured network
collectives: the Ladder Residual authors' 405B rows (``laddersim/data/validation/ladder_405b_2node.csv``:
Llama-3.1-405B, TP 16 over 2 nodes x 8 H100 on InfiniBand, gpt-fast's compiled decode).

The fit's rows are the ladder and upper_bound rows: ladder overlaps each AllReduce with the next
module, so (ladder - upper_bound) decode is the collective time no overlap hides, and measured
minus predicted (with the field at 0) over the seconds one microsecond of the field adds (every
collective of every decode step, counted by laddersim itself) is the field, per batch; the fit is
their median. Held out: standard - upper_bound the same way (that also holds the collective's own
time, which ladder hides: a difference between the two batches is the collective's, not the host
node's). ``tools/fits/fit_graph_host_node.py`` prints the fit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.hardware.sourced import Sourced
from laddersim.support.resources import data_path
from laddersim.validation.core import ValidationSetup, error_summary, validate

TABLE = data_path("validation", "ladder_405b_2node.csv")
PROFILE = "h100-sxm-nvswitch"
ASKING_SCHEDULES = ("ladder", "standard", "parallel")  # ladder: the fit; the others held out


def with_host_node(host_node_us: float, name: str | HardwareProfile = PROFILE) -> HardwareProfile:
    """Profile ``name`` with ``framework.graph_host_node_us`` set to ``host_node_us``."""
    profile = load_profile(name) if isinstance(name, str) else name
    framework = profile.framework.model_copy(
        update={"graph_host_node_us": Sourced(value=host_node_us, source="fit_graph_host_node grid")})
    return profile.model_copy(update={"framework": framework})


def decode_s(rows: pd.DataFrame, host_node_us: float, name: str = PROFILE) -> pd.DataFrame:
    """Measured and predicted decode seconds per (batch, schedule) at ``host_node_us``."""
    profile = with_host_node(host_node_us, name)
    out = validate(rows, ValidationSetup(profile, profile))
    return out.set_index(["batch", "schedule"])[["decode_s", "predicted_decode_s"]]


def per_collective_us(at_zero: pd.DataFrame, at_one: pd.DataFrame, schedule: str) -> pd.Series:
    """Per batch: (schedule - upper_bound) decode, measured minus predicted at 0, over the seconds
    one microsecond of the field adds to that difference: the field's value these rows ask for."""
    out = {}
    for batch in sorted({b for b, _ in at_zero.index}):
        measured = at_zero.loc[(batch, schedule), "decode_s"] - at_zero.loc[(batch, "upper_bound"), "decode_s"]
        predicted = (at_zero.loc[(batch, schedule), "predicted_decode_s"]
                     - at_zero.loc[(batch, "upper_bound"), "predicted_decode_s"])
        per_us = ((at_one.loc[(batch, schedule), "predicted_decode_s"]
                   - at_one.loc[(batch, "upper_bound"), "predicted_decode_s"]) - predicted)
        out[batch] = (measured - predicted) / per_us
    return pd.Series(out, name=schedule)


def asked_us(rows: pd.DataFrame, name: str = PROFILE) -> pd.DataFrame:
    """Per batch (index) and schedule (columns ``ASKING_SCHEDULES``), the field's value the rows
    ask of profile ``name`` (``per_collective_us``)."""
    at_zero, at_one = decode_s(rows, 0.0, name), decode_s(rows, 1.0, name)
    return pd.DataFrame({schedule: per_collective_us(at_zero, at_one, schedule) for schedule in ASKING_SCHEDULES})


def fitted_us(asked: pd.DataFrame) -> float:
    """The fit: the median over the batches of what the ladder rows ask for."""
    return float(np.median(asked["ladder"].to_numpy()))


def errors_at(rows: pd.DataFrame, host_node_us: float, name: str = PROFILE) -> dict[str, float]:
    """The rows' errors with the field at ``host_node_us``: tokens/s median (%), speedup median and
    worst (percentage points), prefill median (%)."""
    profile = with_host_node(host_node_us, name)
    frame = validate(rows, ValidationSetup(profile, profile))
    summary = error_summary(frame).iloc[0]
    prefill = ((frame["predicted_prefill_s"] / frame["prefill_s"] - 1).abs() * 100).median()
    return {"tokens_per_s_median_abs_err_pct": float(summary["tokens_per_s_median_abs_err_pct"]),
            "speedup_median_abs_err_pp": float(summary["speedup_median_abs_err_pp"]),
            "speedup_worst_abs_err_pp": float(summary["speedup_worst_abs_err_pp"]),
            "prefill_median_abs_err_pct": float(prefill)}
