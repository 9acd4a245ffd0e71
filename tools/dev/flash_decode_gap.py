"""Where gpt-fast-flash's decode step time goes, measured against laddersim, model by model: a
diagnostic, it fits and changes nothing.

For each model of the authors' flash table (laddersim/data/validation/ladder_flash_p2p_sweep.csv) at one
TP, P2P on, standard schedule (no collective hides anything), the decode step time is fitted as

    step_s = fixed_s + kv_bytes_per_step / kv_read_bytes_per_s

over the batch sizes measured (kv_bytes_per_step: every layer's K and V over the whole static cache,
batch x layers x max_seq_len x 2 x kv_heads/TP x head_dim x 2 bytes), once for the measured times
and once for laddersim's predicted ones. The intercept is what a step costs without a KV cache
(weights, eager kernel floors, LM head), the slope the bandwidth the decode attention reads the
cache at (the linears' small growth with batch is folded in). Each setting's FlashAttention grid is
printed beside it: FlashAttention-2's split-KV decode kernel (flash_attn_with_kvcache) runs one block
of kBlockM = 64 query rows per (batch, KV head) when the query heads of a group are packed into the
rows (seqlen_q = 1 and more query than KV heads: the group's heads become the rows), else per
(batch, query head) with one real row; the K/V tile is kBlockN = 256 rows for head_dim <= 64, 128
for <= 128; num_splits by FA2's num_splits_heuristic over 2 blocks per SM. These are recalled from
FlashAttention-2's flash_api.cpp / flash_fwd_launch_template.h (Dao-AILab/flash-attention v2.5-2.6,
not fetchable here): reasoned from memory, not read from the source.

    PYTHONPATH=$PWD python tools/dev/flash_decode_gap.py [--table T] [--tp 1]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.model.shape import load_model_shape
from laddersim.support.resources import data_path
from laddersim.validation.core import ValidationSetup, read_measured, validate

TABLE = data_path("validation", "ladder_flash_p2p_sweep.csv")
H100_SMS = 132  # H100 SXM5 streaming multiprocessors (datasheet)
BLOCK_M = 64  # FA2 run_mha_fwd_splitkv_dispatch: kBlockM = 64 for every head_dim


def block_n(head_dim: int) -> int:
    """FA2 split-KV kernel's K/V tile rows: 256 for head_dim <= 64, 128 for <= 128, else 64."""
    return 256 if head_dim <= 64 else (128 if head_dim <= 128 else 64)


def num_splits_heuristic(blocks: int, sm_slots: int, n_blocks: int, max_splits: int = 128) -> int:
    """FA2's num_splits_heuristic: one split once the blocks nearly fill the SMs (>= 0.8 of the
    slots); else the fewest splits whose wave efficiency (n_waves / ceil(n_waves)) is within 85% of
    the best, skipping split counts that give the same blocks per split as one fewer."""
    if blocks >= 0.8 * sm_slots:
        return 1
    max_splits = min(max_splits, sm_slots, n_blocks)
    per_split = [math.ceil(n_blocks / s) for s in range(1, max_splits + 1)]
    eligible = [s == 1 or per_split[s - 1] != per_split[s - 2] for s in range(1, max_splits + 1)]
    efficiency = [(w := blocks * s / sm_slots) / math.ceil(w) if ok else 0.0
                  for s, ok in zip(range(1, max_splits + 1), eligible)]
    best = max(efficiency)
    return next(s for s, eff in zip(range(1, max_splits + 1), efficiency) if eff >= 0.85 * best)


def flash_grid(batch: int, heads: int, kv_heads: int, head_dim: int, max_seq_len: int,
               sms: int = H100_SMS) -> dict:
    """One decode step's FA2 split-KV grid on one rank: blocks, splits, real query rows per block."""
    packed = heads > kv_heads  # seqlenq_ngroups_swapped: a group's query heads become the rows
    rows = heads // kv_heads if packed else 1
    grid_heads = kv_heads if packed else heads
    blocks = batch * grid_heads * math.ceil(rows / BLOCK_M)
    n_blocks = math.ceil(max_seq_len / block_n(head_dim))
    splits = num_splits_heuristic(blocks, 2 * sms, n_blocks)
    return {"blocks": blocks, "splits": splits, "rows_per_tile": rows,
            "tile_bytes": 2 * block_n(head_dim) * head_dim * 2}


def decomposition(frame: pd.DataFrame, column: str) -> tuple[float, float]:
    """(fixed seconds a step, K/V read bytes per second) from a least-squares line over the rows."""
    slope, intercept = np.polyfit(frame["kv_bytes"], frame[column], 1)
    return float(intercept), float(1.0 / slope) if slope > 0 else float("inf")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", default=str(TABLE), help="the flash runs (default: the shipped "
                        "ladder_flash_p2p_sweep.csv)")
    parser.add_argument("--tp", type=int, default=1)
    args = parser.parse_args(argv)
    frame = read_measured(args.table).query("p2p == 'on' and schedule == 'standard' and tp == @args.tp")
    result = validate(frame, ValidationSetup(framework="gpt-fast-flash"))
    lines = []
    for model_name, part in result.groupby("model", sort=True):
        model = load_model_shape(model_name)
        part = part.copy()
        # gpt-fast's setup_caches: find_multiple(prompt + new tokens, 8)
        part["max_seq"] = (np.ceil((part["prompt_len"] + part["gen_len"]) / 8) * 8).astype(int)
        kv_r, h_r = model.kv_heads_per_rank(args.tp), model.heads_per_rank(args.tp)
        part["kv_bytes"] = part["batch"] * model.n_layers * part["max_seq"] * 2 * kv_r * model.head_dim * 2
        part["step_s"] = part["decode_s"] / part["gen_len"]
        part["pred_step_s"] = part["predicted_decode_s"] / part["gen_len"]
        if part["batch"].nunique() < 2:
            continue
        fixed, bandwidth = decomposition(part, "step_s")
        pred_fixed, pred_bandwidth = decomposition(part, "pred_step_s")
        name = Path(model_name).name.removesuffix(".json")
        lines.append(f"{name} (TP {args.tp}, {model.n_layers} layers, heads {h_r}/{kv_r} per rank, "
                     f"head_dim {model.head_dim}):")
        lines.append(f"  fixed per layer: measured {fixed / model.n_layers * 1e6:.1f} us, laddersim "
                     f"{pred_fixed / model.n_layers * 1e6:.1f} us")
        lines.append(f"  K/V read: measured {bandwidth / 1e12:.2f} TB/s, laddersim {pred_bandwidth / 1e12:.2f} TB/s")
        for row in part.sort_values(["batch", "gen_len"]).itertuples():
            grid = flash_grid(int(row.batch), h_r, kv_r, model.head_dim, int(row.max_seq))
            lines.append(f"    batch {row.batch:3d} gen {row.gen_len}: step {row.step_s * 1e3:6.2f} ms, laddersim "
                         f"{row.pred_step_s * 1e3:6.2f} ms; FA2 grid {grid['blocks']} blocks x {grid['splits']} "
                         f"splits, {grid['rows_per_tile']} of {BLOCK_M} query rows real")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
