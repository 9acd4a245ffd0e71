"""Seconds per op kind of one GPU of the data-parallel-attention layout
(``laddersim.model.dp_attention``), the kinds its program runs (``laddersim.schedules.program``
with ``expert_alltoall``), and what that GPU holds in memory.

One GPU belongs to one attention replica of ``attn_tp`` GPUs, which serves ``ceil(batch / dp)``
of the batch's sequences: its attention, dense MLPs, router, shared experts, the weighted
sum of each token's expert outputs, the embedding, LM head and sampling are the replica's, priced
by ``op_costs.op_times_s`` at TP ``attn_tp`` over the replica's sequences. Its routed experts are
``n_experts / ep`` whole experts that every replica's tokens reach: the grouped GEMMs and their
activation are ``moe_costs.moe_op_times_s`` at TP = EP = ``ep`` over the tokens of all ``dp``
replicas (the busiest GPU's share), as is the top-k's sort of the (token, slot) pairs by expert. The dispatch and the combine are each one all-to-all of the
GPU's share of its replica's tokens, each sent to ``top_k`` experts (``moe_alltoall``).

Every replica steps with ``ceil(batch / dp)`` sequences, also where the batch leaves some without
one: vLLM runs "empty dummy forward passes ... in all ranks that don't currently have any requests
scheduled" so the expert layers synchronize every step (vllm-project/vllm @ 624b7aff3e99,
docs/serving/data_parallel_deployment.md).
"""

from __future__ import annotations

import numpy as np

from laddersim.costs.host_overhead import with_host_overhead
from laddersim.costs.memory_fit import MemoryUse
from laddersim.costs.moe_alltoall import alltoall_time_s, dispatch_bytes
from laddersim.costs.moe_costs import moe_op_times_s
from laddersim.costs.op_costs import op_times_s
from laddersim.costs.pass_shapes import Phase
from laddersim.errors import DoesNotFitError
from laddersim.hardware.profile import HardwareProfile
from laddersim.model.dp_attention import DpAttentionLayout, memory_parts_per_gpu
from laddersim.model.layer_ops import EP_COMBINE_KIND, EP_DISPATCH_KIND
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload

# The MoE op kinds priced on the GPU's own experts over every replica's tokens (the sort of the
# (token, slot) pairs by expert in ``moe_topk`` is the busiest GPU's, as under TP x EP); the MoE's
# other kinds (router, shared experts, the weighted sum) stay with the replica.
EXPERT_KINDS = ("moe_topk", "moe_gate_up", "moe_act", "moe_down")


def replica_phase(layout: DpAttentionLayout, phase: Phase) -> Phase:
    """The pass of one replica: its ``ceil(batch / dp)`` sequences."""
    return Phase(phase.name, layout.seqs_per_replica(phase.batch), phase.new_tokens_per_seq)


def replica_workload(layout: DpAttentionLayout | None, work: Workload) -> Workload:
    """The workload one TP group runs: ``work``, or with data-parallel attention (``layout``) one
    replica's share of its batch (``DpAttentionLayout.seqs_per_replica``)."""
    return work if layout is None else work.model_copy(update={"batch": layout.seqs_per_replica(work.batch)})


def alltoall_bytes(model: ModelShape, work: Workload, layout: DpAttentionLayout, phase: Phase) -> float:
    """One GPU's send buffer of one dispatch (or combine): its share of the replica's tokens
    (rounded up), each sent to ``top_k`` experts."""
    tokens = -(-replica_phase(layout, phase).tokens // layout.attn_tp)
    return dispatch_bytes(tokens, model.moe.top_k, model.dim, work.dtype_bytes)


def dp_attention_op_times_s(model: ModelShape, hw: HardwareProfile, work: Workload, layout: DpAttentionLayout,
                            phase: Phase, kv_lens: np.ndarray) -> dict[str, np.ndarray]:
    """Seconds per op kind of one GPU of ``layout`` in ``phase`` (``phase.batch``: every replica's
    sequences), each an array over ``kv_lens`` as ``op_times_s`` gives them, with the all-to-alls'
    kinds (``EP_DISPATCH_KIND``, ``EP_COMBINE_KIND``). The all-to-all spans the ``ep`` GPUs of one
    node."""
    assert model.moe is not None
    if layout.ep > hw.node.gpus_per_node:
        raise ValueError(f"ep {layout.ep} spans nodes: the all-to-all is priced within one node")
    own = replica_phase(layout, phase)
    times = dict(op_times_s(model, hw, work.model_copy(update={"batch": own.batch}), layout.attn_tp, own, kv_lens))
    everyone = Phase(phase.name, own.batch * layout.dp, phase.new_tokens_per_seq)
    experts = moe_op_times_s(model.with_ep(layout.ep), hw, work.model_copy(update={"batch": everyone.batch}),
                             layout.ep, everyone)
    alltoall_s, _ = alltoall_time_s(hw, layout.ep, alltoall_bytes(model, work, layout, phase))
    shape = np.shape(kv_lens)
    extra = {kind: np.full(shape, experts[kind]) for kind in EXPERT_KINDS}
    extra.update({EP_DISPATCH_KIND: np.full(shape, alltoall_s), EP_COMBINE_KIND: np.full(shape, alltoall_s)})
    times.update(with_host_overhead(hw, extra))
    return times


def alltoall_source(model: ModelShape, hw: HardwareProfile, work: Workload, layout: DpAttentionLayout,
                    phase: Phase) -> str:
    """Where the dispatch's and combine's seconds come from: ``SILICON`` (the profile's all-to-all
    table) or ``SOL`` (its links)."""
    return alltoall_time_s(hw, layout.ep, alltoall_bytes(model, work, layout, phase))[1]


def dp_attention_memory(model: ModelShape, hw: HardwareProfile, work: Workload,
                        layout: DpAttentionLayout) -> MemoryUse:
    """What one GPU of ``layout`` holds (``laddersim.model.dp_attention.memory_parts_per_gpu``), or
    one line saying it does not fit."""
    weights, kv, transient = memory_parts_per_gpu(model, layout, work)
    capacity = hw.gpu.memory_capacity_bytes * hw.gpu.usable_memory_fraction.value
    use = MemoryUse(weights, kv, transient, capacity, mlp_transient_bytes=transient)
    if not use.fits:
        gib = 2**30
        raise DoesNotFitError(
            f"memory: {model.name} with data-parallel attention ({layout.dp} replicas of tp {layout.attn_tp}, "
            f"ep {layout.ep}), batch={work.batch}, seq={work.max_seq_len} needs {use.total_bytes / gib:.1f} GiB per "
            f"GPU (weights {weights / gib:.1f}, KV cache {kv / gib:.1f}, activations {transient / gib:.1f}) but "
            f"{hw.name} has {capacity / gib:.1f} GiB usable; raise ep or lower batch/lengths")
    return use
