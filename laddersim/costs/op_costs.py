"""Time of every op kind one rank runs in one forward pass (prefill or a decode step).

Shapes are the model's divided by TP (column-parallel QKV and gate/up, row-parallel O and down,
vocab-parallel LM head). ``tokens`` is the GEMM M dimension: batch * prompt_len in prefill, batch
in decode. Each function returns seconds; decode-step attention takes an array of KV lengths so a
whole generation is costed in one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from laddersim.costs.collectives import allreduce_time_s
from laddersim.costs.gemm import gemm_time_s, memory_bound_time_s
from laddersim.costs.host_overhead import with_host_overhead
from laddersim.hardware.profile import HardwareProfile
from laddersim.model_shape import ModelShape
from laddersim.workload import Workload


@dataclass(frozen=True)
class Phase:
    """One forward pass: ``prefill`` over the prompt or one ``decode`` step."""

    name: str  # "prefill" | "decode"
    batch: int
    new_tokens_per_seq: int  # prompt_len in prefill, 1 in decode

    @property
    def tokens(self) -> int:
        return self.batch * self.new_tokens_per_seq


# Op kinds counted as fixed framework overhead (not compute) in the time breakdown.
OVERHEAD_KINDS = frozenset({"sampling", "step_overhead"})


def op_times_s(
    model: ModelShape,
    hw: HardwareProfile,
    work: Workload,
    tp: int,
    phase: Phase,
    kv_lens: np.ndarray,
) -> dict[str, np.ndarray]:
    """Seconds per op kind, each an array over ``kv_lens`` (positions attended per sequence).

    Only ``attention`` depends on the KV length; the others are broadcast to the same shape.
    """
    gpu = hw.gpu
    b = work.dtype_bytes
    t = phase.tokens
    d = model.dim
    hd = model.head_dim
    h_r = model.heads_per_rank(tp)
    kv_r = model.kv_heads_per_rank(tp)
    i_r = model.intermediate_per_rank(tp)
    v_r = model.vocab_per_rank(tp)
    qkv_n = (h_r + 2 * kv_r) * hd
    kv_lens = np.asarray(kv_lens, dtype=float)

    # A single-token pass (batch-1 decode) may run its kernels with another floor (see
    # FrameworkSpec.single_token_kernel_floor_us); attention, embedding and sampling keep theirs.
    floor = hw.framework.single_token_kernel_floor_us
    launch = floor.value * 1e-6 if (floor is not None and t == 1) else None

    def streamed(moved_bytes: float) -> float:  # one memory-bound kernel of this pass
        return float(memory_bound_time_s(gpu, moved_bytes, launch_s=launch))

    def norm(rows: int) -> float:  # RMSNorm: read and write rows x dim
        return streamed(2 * rows * d * b)

    peak = gpu.peak_flops_per_s_for(work.dtype)

    def gemm(m: int, n: int, k: int) -> float:
        return float(gemm_time_s(gpu, m, n, k, b, launch, peak))

    elementwise_add = streamed(3 * t * d * b)
    messages = collective_message_bytes(model, work, tp, phase)
    hidden_bytes = messages["allreduce"]  # the hidden-state AllReduce message
    sync_s = hw.framework.collective_sync_us.value * 1e-6 if tp > 1 else 0.0
    sync_gbps = hw.framework.collective_sync_gbps.value
    sync_bytes_s = hidden_bytes / (sync_gbps * 1e9) if (tp > 1 and sync_gbps > 0) else 0.0
    copies = hw.framework.collective_input_copies.value if tp > 1 else 0.0
    copy_s = copies * streamed(2 * hidden_bytes)
    times = {
        "embedding": float(memory_bound_time_s(gpu, 2 * t * d * b)),
        "attn_norm": norm(t),
        "mlp_norm": norm(t),
        "norm": norm(t),
        "final_norm": norm(phase.batch),
        "qkv": gemm(t, qkv_n, d),
        # RoPE on q and k, and the new k, v written into the cache.
        "rope": streamed(t * (2 * (h_r + kv_r) + 2 * kv_r) * hd * b),
        "o_proj": gemm(t, d, h_r * hd),
        "gate_up": gemm(t, 2 * i_r, d),
        "qkv_gate_up": gemm(t, qkv_n + 2 * i_r, d),
        "act": streamed(3 * t * i_r * b),  # SiLU(gate) * up
        "down": gemm(t, d, i_r),
        "residual_add": elementwise_add,
        "partial_add": elementwise_add,
        # Logits of the last position of each sequence only.
        "lm_head": gemm(phase.batch, v_r, d),
        "sampling": hw.framework.sampling_us.value * 1e-6
        + float(memory_bound_time_s(gpu, 4 * phase.batch * model.vocab_size * 4, kernels=0)),
        "step_overhead": hw.framework.step_overhead_us.value * 1e-6,
        "collective_launch": sync_s + sync_bytes_s + copy_s,
        # Both collectives are costed as the AllReduce of their equivalent message.
        **{kind: float(allreduce_time_s(hw, tp, size)) for kind, size in messages.items()},
    }
    out = {kind: np.full(kv_lens.shape, value) for kind, value in times.items()}
    out["attention"] = attention_time_s(model, hw, work, tp, phase, kv_lens)
    return with_host_overhead(hw, out)  # the framework's per-op dispatch (None in compiled profiles)


def collective_message_bytes(model: ModelShape, work: Workload, tp: int, phase: Phase) -> dict[str, float]:
    """Per rank, the AllReduce message each collective kind is equivalent to, for its time and
    its interference: the hidden-state AllReduce itself, and the logits AllGather. A ring
    AllGather moves (n-1)/n of its output per rank, half of what an AllReduce of the same buffer
    moves, with the same latency structure, so it counts as an AllReduce of half its output."""
    b = work.dtype_bytes
    return {
        "allreduce": float(phase.tokens * model.dim * b),
        "allgather_logits": float(phase.batch * model.vocab_per_rank(tp) * tp * b) / 2.0,
    }


def attention_time_s(
    model: ModelShape, hw: HardwareProfile, work: Workload, tp: int, phase: Phase, kv_lens
) -> np.ndarray:
    """Attention core (softmax(QK^T)V) on one rank.

    Prefill: compute-bound. A static cache (gpt-fast) runs masked attention over all
    ``max_seq_len`` cache positions, 4 * B * S * max_seq_len * h_r * hd FLOPs; a dynamic cache runs
    causal flash attention, 4 * B * S^2 * h_r * hd / 2 FLOPs.
    Decode: streaming K and V dominates. ``kv_reads`` = ``per_kv_head``: each KV head is read once
    (B * kv_len * 2 * kv_r * hd elements); ``repeat_interleave`` (gpt-fast): K and V are expanded
    to every query head; under torch.compile the expansion is fused into the attention's loads
    (nothing is written back) but every query head still streams its own copy, B * kv_len * 2 *
    h_r * hd elements. Long contiguous streams run at the GEMV weight-streaming efficiency
    (``gemm_memory_efficiency``). FLOPs 4 * B * kv_len * h_r * hd; the slower of the two.
    """
    gpu = hw.gpu
    b = work.dtype_bytes
    hd = model.head_dim
    h_r = model.heads_per_rank(tp)
    kv_r = model.kv_heads_per_rank(tp)
    heads_streamed = h_r if work.kv_reads == "repeat_interleave" else kv_r
    kv_lens = np.asarray(kv_lens, dtype=float)
    attn_peak = gpu.peak_flops_per_s_for(work.dtype) * gpu.attention_compute_efficiency.value
    stream_bw = gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value
    if phase.name == "prefill":
        s = phase.new_tokens_per_seq
        if work.kv_cache == "static":
            flops = 4.0 * phase.batch * s * work.max_seq_len * h_r * hd
            moved = phase.batch * (2 * s * h_r + 2 * work.max_seq_len * heads_streamed) * hd * b
        else:
            flops = 4.0 * phase.batch * s * s * h_r * hd / 2.0
            moved = phase.tokens * (2 * h_r + 2 * heads_streamed) * hd * b
        body = np.maximum(flops / attn_peak, moved / stream_bw)
        return gpu.kernel_launch_s + np.full(kv_lens.shape, body)
    flops = 4.0 * phase.batch * kv_lens * h_r * hd
    moved = phase.batch * (kv_lens * 2 * heads_streamed * hd + 2 * h_r * hd) * b
    return gpu.kernel_launch_s + np.maximum(flops / attn_peak, moved / stream_bw)
