"""The op kinds a transformer layer runs on one rank, as data: each module kind's ops in launch
order (the cost kinds ``laddersim.costs.op_costs`` prices), and the op counts of one standard
pre-norm residual layer (gpt-fast's ``TransformerBlock.forward``: ``h = x + attention(norm(x));
out = h + feed_forward(norm(h))``), the layer a kernel trace of a framework is taken on.

The schedules (``laddersim.schedules.program``) build every program from ``MODULE_OPS``; the
costs read ``standard_layer_op_counts`` without building one."""

from __future__ import annotations

# The ops inside each kind of module, in launch order.
MODULE_OPS: dict[str, tuple[str, ...]] = {
    "attn": ("attn_norm", "qkv", "rope", "attention", "o_proj"),
    "mlp": ("mlp_norm", "gate_up", "act", "down"),
    # A mixture of experts (laddersim.costs.moe_costs): the router, top-k and the tokens sorted by
    # expert, the grouped GEMMs, the weighted sum of each token's expert outputs; with shared
    # experts (Llama 4) their dense MLP before the routed ones.
    "moe": ("mlp_norm", "moe_router", "moe_topk", "moe_gate_up", "moe_act", "moe_down", "moe_combine"),
    "moe_shared": ("mlp_norm", "moe_router", "moe_topk", "moe_shared", "moe_gate_up", "moe_act", "moe_down",
                   "moe_combine"),
    # GPT-J / PaLM: one norm, QKV and gate/up fused, both row-parallel outputs summed locally.
    "parallel": ("norm", "qkv_gate_up", "rope", "attention", "act", "o_proj", "down", "partial_add"),
}

# Expert parallelism over data-parallel attention (laddersim.model.dp_attention): a mixture of
# experts' tokens leave for the GPUs holding their experts by an all-to-all once routed
# (``ep_dispatch``, after ``EP_DISPATCH_AFTER``; the expert GEMMs wait for it) and come back by
# another (``ep_combine``), which takes the place of the module's AllReduce: vLLM's modular fused
# MoE runs "[Router] -> [Quantize-Dispatch] -> [Permute-Experts-Unpermute] -> [Combine]", its
# finalize doing "any combine plus apply weights and perform a reduction" (vllm-project/vllm @
# 003d383eb3f3, vllm/model_executor/layers/fused_moe/modular_kernel.py).
EP_DISPATCH_KIND = "ep_dispatch"
EP_COMBINE_KIND = "ep_combine"
EP_ALLTOALL_KINDS = (EP_DISPATCH_KIND, EP_COMBINE_KIND)
EP_DISPATCH_AFTER = "moe_topk"
EXPERT_MODULES = ("moe", "moe_shared")

# The modules of one standard layer, bottom first.
STANDARD_LAYER = ("attn", "mlp")


def standard_layer_op_counts(tp: int) -> dict[str, int]:
    """``{op kind: ops}`` of one standard layer on one rank of a TP group of ``tp``: each module's
    ops, its output's residual add, and above TP 1 its AllReduce with the hand-off that launches it
    (``collective_launch``)."""
    counts: dict[str, int] = {}
    for module in STANDARD_LAYER:
        kinds = MODULE_OPS[module] + (("collective_launch", "allreduce") if tp > 1 else ()) + ("residual_add",)
        for kind in kinds:
            counts[kind] = counts.get(kind, 0) + 1
    return counts
