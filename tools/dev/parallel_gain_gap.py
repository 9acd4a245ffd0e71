"""What the parallel schedule gains per layer over desync_half and standard, measured and predicted
(the 8B table's parallel rows at TP 2 batch 4 are its worst). Diagnostic: prices nothing, writes nothing.

desync_half and parallel both run one AllReduce a layer, so their decode-time difference is what
the parallel block's own structure gains (one norm, QKV and gate/up stacked into one GEMM: one
kernel floor and one split-K reduce fewer, as laddersim prices it); standard - desync_half is one
AllReduce. Per (model, P2P, TP, batch), in us per layer and decode step, from ``decode_s`` where the
table has it, else from the whole run (batch x gen_len / tokens/s, prefill included). The last
column is the stacked GEMM's per-rank weight bytes (QKV + gate/up), against which the gap grows.

    PYTHONPATH=$PWD python tools/dev/parallel_gain_gap.py [TABLE.csv ...] [--framework gpt-fast]

Default tables: the shipped 8B TP sweep and 70B figure (laddersim/data/validation).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from laddersim.costs.pass_shapes import Phase, linear_shapes
from laddersim.model.shape import ModelShape, load_model_shape
from laddersim.errors import UserInputError
from laddersim.support.resources import data_path
from laddersim.validation.core import ValidationSetup, read_measured, validate

TABLES = (data_path("validation", "ladder_8b_tp_sweep.csv"), data_path("validation", "ladder_70b_tp_sweep.csv"))
PAIRS = (("desync_half", "parallel"), ("standard", "desync_half"), ("standard", "parallel"))


def run_seconds(frame: pd.DataFrame, predicted: bool) -> pd.Series:
    """Decode seconds of each row where the table has them, else the whole run's seconds."""
    pre = "predicted_" if predicted else ""
    if has_decode(frame):
        return frame[f"{pre}decode_s"]
    return frame["batch"] * frame["gen_len"] / frame[f"{pre}tokens_per_s"]


def has_decode(frame: pd.DataFrame) -> bool:
    return "decode_s" in frame and bool(frame["decode_s"].notna().all())


def stacked_weight_bytes(model: ModelShape, tp: int, dtype_bytes: int = 2) -> int:
    """Per-rank bytes of the parallel block's stacked QKV + gate/up weight (its GEMM's N x K)."""
    _, n, k, _ = linear_shapes(model, tp, Phase("decode", 1, 1))["qkv_gate_up"]
    return n * k * dtype_bytes


def layer_gains(frame: pd.DataFrame, model: ModelShape) -> pd.DataFrame:
    """One row per (p2p, tp, batch): for each schedule pair (a, b) the per-layer, per-step time a
    runs over b, measured and predicted (us); ``gap``: the predicted minus the measured gain of
    parallel over desync_half (where both were measured), ``gap_vs_standard`` the same over standard."""
    frame = frame.drop_duplicates(["p2p", "tp", "batch", "schedule"]).copy()
    frame["meas_s"] = run_seconds(frame, predicted=False)
    frame["pred_s"] = run_seconds(frame, predicted=True)
    rows = []
    for (p2p, tp, batch), group in frame.groupby(["p2p", "tp", "batch"]):
        by = group.set_index("schedule")
        per_layer_step_us = 1e6 / (model.n_layers * int(group["gen_len"].iloc[0]))
        row = {"p2p": p2p, "tp": int(tp), "batch": int(batch)}
        for a, b in PAIRS:
            if a in by.index and b in by.index:
                row[f"{a}-{b} meas"] = (by.loc[a, "meas_s"] - by.loc[b, "meas_s"]) * per_layer_step_us
                row[f"{a}-{b} pred"] = (by.loc[a, "pred_s"] - by.loc[b, "pred_s"]) * per_layer_step_us
        if "desync_half-parallel meas" in row:
            row["gap"] = row["desync_half-parallel pred"] - row["desync_half-parallel meas"]
        row["gap_vs_standard"] = row["standard-parallel pred"] - row["standard-parallel meas"]
        row["stacked_MB"] = stacked_weight_bytes(model, int(tp)) / 1e6
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="*", default=[str(t) for t in TABLES],
                        help="measured tables (default: the shipped 8B TP sweep and 70B figure)")
    parser.add_argument("--framework", default="gpt-fast")
    args = parser.parse_args(argv)
    setup = ValidationSetup(framework=args.framework)
    for table in args.tables:
        try:
            measured = read_measured(table)
        except UserInputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        name = Path(table).name
        frame = validate(measured, setup)
        model = load_model_shape(str(frame["model"].iloc[0]))
        source = "decode_s" if has_decode(frame) else "whole run (tokens/s)"
        print(f"{name}: us per layer and step, from {source}")
        print(layer_gains(frame, model).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
