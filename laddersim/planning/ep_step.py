"""A decode step of the data-parallel-attention layout (``laddersim.planning.ep_layout``) in
closed form: the op costs of ``laddersim.costs`` summed in program order, one replica's attention at
its TP over its own sequences, the expert layers over all ``ep`` GPUs, no overlap (the standard
schedule). An estimate for planning, not an event-driven run.

Per layer: the attention module (norm, projections, attention over ``context`` positions, its TP
AllReduce and residual add) at TP ``attn_tp`` on ``ceil(batch / dp)`` sequences; then a dense MLP
at the same TP, or the MoE: its ops as vLLM's expert map runs them with ``n_experts / ep`` whole
experts per GPU over the step's tokens of every replica (``laddersim.costs.moe_costs`` at TP = EP =
``ep``), plus the dispatch and combine all-to-alls of the replica's tokens
(``laddersim.costs.moe_alltoall``). Per step: embedding, final norm, LM head and sampling of the
replica. ``layout_verdicts`` gives ``plan`` the layout where no split of an MoE model fits.
"""

from __future__ import annotations

import numpy as np

from laddersim.costs.dp_attention_costs import dp_attention_op_times_s
from laddersim.costs.moe_alltoall import ep_layer_comm_s
from laddersim.costs.pass_shapes import Phase
from laddersim.model.layer_ops import EP_ALLTOALL_KINDS, MODULE_OPS
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload
from laddersim.planning.ep_layout import DpAttentionLayout, bytes_per_gpu, smallest_fitting_layout

def dp_attention_decode_step_s(model: ModelShape, hw, work: Workload, layout: DpAttentionLayout,
                               context: int) -> float:
    """Seconds of one decode step of the layout at ``context`` cached positions per sequence: every
    op of one GPU in program order, none overlapped; the EP group must fit one node (its
    all-to-all is priced from one node's table or links)."""
    assert model.moe is not None
    per_kind = dp_attention_op_times_s(model, hw, work, layout, Phase("decode", work.batch, 1),
                                       np.array([float(context)]))
    times = {kind: float(np.asarray(value).reshape(-1)[0]) for kind, value in per_kind.items()}
    allreduce = ("collective_launch", "allreduce") if layout.attn_tp > 1 else ()

    def module(kinds: tuple[str, ...]) -> float:
        return sum(times.get(kind, 0.0) for kind in kinds) + times["residual_add"]

    moe_kind = "moe_shared" if model.moe.shared_intermediate else "moe"
    attention = module(MODULE_OPS["attn"] + allreduce)
    dense = module(MODULE_OPS["mlp"] + allreduce)
    moe = module(MODULE_OPS[moe_kind] + EP_ALLTOALL_KINDS)
    n_moe = len(model.moe.moe_layers)
    step = ("step_overhead", "embedding", "final_norm", "lm_head", "sampling") \
        + (("collective_launch", "allgather_logits") if layout.attn_tp > 1 else ())
    return model.n_layers * attention + n_moe * moe + (model.n_layers - n_moe) * dense \
        + sum(times[kind] for kind in step)


def layout_verdicts(model_name: str, model: ModelShape, candidates: dict, tps, batch: int, prompt_len: int,
                    gen_len: int, dtype: str, kv_cache: str) -> list[tuple[str, int, int, int, str]]:
    """For a plan in which no split fits: per candidate profile and TP (one node), the smallest
    layout with data-parallel attention that fits, as (profile, TP, PP 1, EP, why) verdicts; its
    step time is not simulated (the plan simulates the one-node layouts among its EP choices:
    ``laddersim.planning.planner.candidate_layouts``)."""
    from laddersim.simulation.scenario import make_scenario

    gib, out = 2**30, []
    for name, (_, profile) in candidates.items():
        for tp in (tps or model.allowed_tps()):
            if tp > profile.node.gpus_per_node or model.n_heads % tp:
                continue
            work = make_scenario(model=model_name, hardware=profile, tp=tp, batch=batch, prompt_len=prompt_len,
                                 gen_len=gen_len, schedule="standard", dtype=dtype, kv_cache=kv_cache).workload
            layout = smallest_fitting_layout(model, profile, work, tp)
            if layout is not None and layout.ep > 1:
                out.append((name, tp, 1, layout.ep, (
                    f"fits only with data-parallel attention: {layout.dp} replicas of TP {tp} on {layout.ep} GPUs, "
                    f"{model.moe.n_experts // layout.ep} whole experts per GPU "
                    f"({bytes_per_gpu(model, layout, work) / gib:.1f} GiB per GPU){_comm(model, profile, layout, work)}"
                    + ("; not simulated here (laddersim simulate --dp-attention "
                       f"--tp {tp} --ep {layout.ep} runs it)" if layout.ep <= profile.node.gpus_per_node
                       else "; the engine does not simulate a layout across nodes"))))
    return out


def _comm(model: ModelShape, hw, layout: DpAttentionLayout, work: Workload) -> str:
    """``, decode dispatch + combine N us per MoE layer, estimated decode step M ms`` where the EP
    group is one node (its measured all-to-all or links; ``dp_attention_decode_step_s``);
    empty across nodes."""
    if layout.ep > hw.node.gpus_per_node:
        return ""
    seconds, source = ep_layer_comm_s(hw, layout.ep, layout.decode_tokens_per_gpu(work.batch), model.moe.top_k,
                                      model.dim, work.dtype_bytes)
    step = dp_attention_decode_step_s(model, hw, work, layout, work.prompt_len + work.gen_len // 2)
    return (f", decode dispatch + combine {seconds * 1e6:.0f} us per MoE layer ({source}), estimated decode step "
            f"{step * 1e3:.1f} ms at batch {work.batch} (laddersim.planning.ep_step, standard schedule)")
