"""The data-parallel-attention layout of a mixture-of-experts model, and what each of its GPUs holds.

The layout (vLLM docs ``serving/data_parallel_deployment.md`` and ``expert_parallel_deployment.md``,
vllm-project/vllm @ b863fe5bf4e1: ``--data-parallel-size D --tensor-parallel-size T
--enable-expert-parallel``; SGLang ``--tp N --dp D --enable-dp-attention``, attention TP ``N / D``):
``dp`` attention replicas, each a TP group of ``attn_tp`` GPUs with its own sequences and their KV
cache; the expert layers span all ``ep = dp x attn_tp`` GPUs, each holding ``n_experts / ep`` whole
experts; the router, the shared experts and the dense layers stay with the replica (TP
``attn_tp``). Tokens reach their experts by an all-to-all dispatch and come back by an all-to-all
combine (``laddersim.costs.moe_alltoall``).
"""

from __future__ import annotations

from dataclasses import dataclass

from laddersim.model.quantization import linear_weights_per_layer_per_rank
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload


@dataclass(frozen=True)
class DpAttentionLayout:
    """``dp`` replicas of attention at TP ``attn_tp``; experts over all ``ep`` GPUs."""

    attn_tp: int
    dp: int

    @property
    def ep(self) -> int:
        return self.attn_tp * self.dp

    def seqs_per_replica(self, batch: int) -> int:
        """Sequences of one replica when ``batch`` are spread over the replicas (rounded up)."""
        return -(-batch // self.dp)

    def decode_tokens_per_gpu(self, batch: int) -> int:
        """A decode step's tokens one GPU of a replica dispatches (its share of the replica's, rounded up)."""
        return -(-self.seqs_per_replica(batch) // self.attn_tp)


def params_per_gpu(model: ModelShape, layout: DpAttentionLayout) -> tuple[int, int]:
    """(all parameters one GPU holds, of which routed-expert weights): the replica's share of
    everything but the routed experts at TP ``attn_tp``, and ``n_experts / ep`` whole experts of
    every MoE layer."""
    moe, tp = model.moe, layout.attn_tp
    assert moe is not None
    as_dense = model.params_per_rank(tp) - model.moe_extra_params_per_rank(tp)  # every layer a dense MLP
    per_layer = (model.dim * moe.n_experts + 3 * model.dim * (moe.shared_intermediate // tp)
                 - 3 * model.dim * model.intermediate_per_rank(tp))
    experts = len(moe.moe_layers) * (moe.n_experts // layout.ep) * 3 * model.dim * moe.expert_intermediate
    return as_dense + len(moe.moe_layers) * per_layer + experts, experts


def weight_bytes_per_gpu(model: ModelShape, layout: DpAttentionLayout, work: Workload) -> float:
    """Bytes of ``params_per_gpu``, the linears (attention, dense MLPs, shared and routed experts) at
    the workload's quantized bytes, the rest (router, norms, embedding, LM head) at its dtype."""
    total, experts = params_per_gpu(model, layout)
    b = work.dtype_bytes
    quant = work.quantization
    if quant.weight_bytes is None:
        return float(total * b)
    moe, tp = model.moe, layout.attn_tp
    shared = len(moe.moe_layers) * 3 * model.dim * (moe.shared_intermediate // tp)
    replaced = len(moe.moe_layers) * 3 * model.dim * model.intermediate_per_rank(tp)
    linear = model.n_layers * linear_weights_per_layer_per_rank(model, tp) - replaced + shared + experts
    return float(total * b - linear * (b - quant.weight_bytes))


def bytes_per_gpu(model: ModelShape, layout: DpAttentionLayout, work: Workload) -> float:
    """Weights plus the KV cache of the replica's ``batch / dp`` sequences (rounded up) at
    ``max_seq_len`` positions, plus the prefill's largest transient of those sequences (the hidden
    states and the gate/up output of the widest MLP the replica runs)."""
    weights, kv, transient = memory_parts_per_gpu(model, layout, work)
    return weights + kv + transient


def memory_parts_per_gpu(model: ModelShape, layout: DpAttentionLayout, work: Workload) -> tuple[float, float, float]:
    """(weights, KV cache, prefill transient) bytes of ``bytes_per_gpu``."""
    seqs = layout.seqs_per_replica(work.batch)
    kv = seqs * work.max_seq_len * model.kv_bytes_per_token_per_rank(layout.attn_tp, work.kv_bytes)
    tokens = seqs * work.prompt_len
    width = max(model.intermediate_per_rank(layout.attn_tp), model.moe.expert_intermediate)
    transient = tokens * (4 * model.dim + 2 * width) * work.dtype_bytes + seqs * model.vocab_size * 4
    return weight_bytes_per_gpu(model, layout, work), kv, transient
