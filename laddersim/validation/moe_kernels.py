"""The MoE layer's expert computation predicted beside a measured fused-MoE kernel table.

A table row (``laddersim/data/validation/moe/aic_moe_h100_sxm_vllm_0.24.0_bf16.csv``: AIConfigurator's
measured vLLM 0.24.0 fused MoE on an H100 SXM, bf16, balanced routing; columns ``num_tokens,
hidden_size, inter_size, topk, num_experts, moe_tp_size, moe_ep_size, latency_us``) is one MoE
layer's experts on one GPU: routing top-k and alignment, both grouped GEMMs, the activation and
the weighted sum, without the router GEMM or any communication. The prediction is the same ops of
``laddersim.costs.moe_costs`` under ``balanced`` routing (how the table was taken).
"""

from __future__ import annotations

from pathlib import Path

from laddersim.costs.moe_costs import moe_op_times_s
from laddersim.costs.pass_shapes import Phase
from laddersim.hardware.profile import HardwareProfile
from laddersim.model.moe import MoESpec
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload
from laddersim.support.resources import data_path

KERNEL_TABLE = data_path("validation", "moe", "aic_moe_h100_sxm_vllm_0.24.0_bf16.csv")

# The ops a fused-MoE kernel benchmark times (vLLM benchmarks/kernels/benchmark_moe.py: fused_moe
# from the router's scores on).
KERNEL_TABLE_KINDS = ("moe_topk", "moe_gate_up", "moe_act", "moe_down", "moe_combine")


def predicted_expert_us(hw: HardwareProfile, tokens: int, hidden: int, inter: int, top_k: int, experts: int,
                        tp: int, framework: str = "vllm", compute_share: float | None = None, ep: int = 1) -> float:
    """Predicted microseconds of one MoE layer's expert ops (``KERNEL_TABLE_KINDS``) on one GPU,
    experts split ``tp`` ways by TP within ``ep`` expert-parallel groups, balanced routing."""
    model = ModelShape(name="moe-layer", n_layers=1, dim=hidden, n_heads=1, n_kv_heads=1, head_dim=128,
                       intermediate_size=inter, vocab_size=1,
                       moe=MoESpec(n_experts=experts, top_k=top_k, expert_intermediate=inter, moe_layers=(0,)))
    work = Workload(batch=1, prompt_len=1, gen_len=1, framework=framework, kv_cache="dynamic", kv_reads="per_kv_head")
    times = moe_op_times_s(model, hw, work, tp * ep, Phase("decode", tokens, 1), routing="balanced",
                           compute_share=compute_share, ep=ep)
    return 1e6 * sum(times[kind] for kind in KERNEL_TABLE_KINDS)


def kernel_table_rows(hw: HardwareProfile, table: str | Path, ep: int = 1,
                      compute_share: float | None = None) -> "pd.DataFrame":
    """The table's rows of expert parallelism ``ep`` with ``predicted_us`` and ``error``
    (predicted / measured - 1) beside them."""
    import pandas as pd

    rows = pd.read_csv(table)
    rows = rows[rows.moe_ep_size == ep].reset_index(drop=True)
    rows["predicted_us"] = [predicted_expert_us(hw, r.num_tokens, r.hidden_size, r.inter_size, r.topk,
                                                r.num_experts, r.moe_tp_size, compute_share=compute_share,
                                                ep=ep) for r in rows.itertuples()]
    rows["error"] = rows.predicted_us / rows.latency_us - 1.0
    return rows
