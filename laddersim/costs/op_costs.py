"""Time of every op kind one rank runs in one forward pass (prefill or a decode step).

Shapes are the model's divided by TP (column-parallel QKV and gate/up, row-parallel O and down,
vocab-parallel LM head). ``tokens`` is the GEMM M dimension: batch * prompt_len in prefill, batch
in decode. Each function returns seconds; decode-step attention takes an array of KV lengths so a
whole generation is costed in one call.
"""

from __future__ import annotations

import numpy as np

from laddersim.costs.attention_kernels import attention_kernels, writes_cache
from laddersim.costs.calibrated_kernels import calibrated_decode
from laddersim.costs.allreduce import allgather_source, allgather_time_s, allreduce_source, allreduce_time_s
from laddersim.costs.gemm import memory_bound_time_s
from laddersim.costs.gemm_tables import HYBRID, SOL, library_gemm_time_s
from laddersim.costs.generated_gemv import generated_gemv_time_s
from laddersim.costs.graph_proxy import graph_host_node_s
from laddersim.costs.l2_reuse import group_reads_s
from laddersim.costs.family_ops import qk_norm_bytes, qkv_bias_bytes
from laddersim.costs.quantized_gemm import is_quantized_linear, quantized_linear_time_s
from laddersim.costs.moe_costs import moe_op_times_s
from laddersim.costs.mla_costs import mla_attention_time_s, mla_linear_times_s, mla_rope_bytes
from laddersim.costs.pass_shapes import (  # noqa: F401  (re-exported: the pass's shapes and kernel paths)
    SPLIT_K_WAVES, Phase, linear_shapes, logits_rows, single_token_path, splitk_reduce, splits_k)
from laddersim.model.framework import load_framework
from laddersim.model.layer_ops import standard_layer_op_counts
from laddersim.costs.host_overhead import COLLECTIVE_KINDS, with_host_overhead
from laddersim.costs.kernel_counts import op_kernels
from laddersim.hardware.profile import HardwareProfile
from laddersim.support.memo import IdentityMemo
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload


# Op kinds counted as fixed framework overhead (not compute) in the time breakdown.
OVERHEAD_KINDS = frozenset({"sampling", "step_overhead"})


# op_times_s of recent passes, by the profile's parts the kinds other than the collectives read
# (see op_times_s): a sweep's points on one machine and model differ in their interconnect only;
# and the collectives' times by profile (the schedules of a sweep share them).
_kept_times = IdentityMemo(256)
_kept_collectives = IdentityMemo(65536)
_kept_gathers = IdentityMemo(65536)  # the logits AllGather by profile, framework, TP and bytes (prefill and decode share it)


def op_times_s(
    model: ModelShape,
    hw: HardwareProfile,
    work: Workload,
    tp: int,
    phase: Phase,
    kv_lens: np.ndarray,
) -> dict[str, np.ndarray]:
    """Seconds per op kind, each an array over ``kv_lens`` (positions attended per sequence).

    Only ``attention`` depends on the KV length (and, from a traced stack's calibration, any kernel
    class the trace drives by K/V bytes); the others are broadcast to the same shape.
    """
    kinds, shared, collectives = op_times_parts_s(model, hw, work, tp, phase, kv_lens)
    shape = np.shape(kv_lens)
    return {kind: np.full(shape, collectives[kind]) if kind in collectives else shared[kind] for kind in kinds}


def op_times_parts_s(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int, phase: Phase,
                     kv_lens: np.ndarray) -> tuple[tuple[str, ...], dict[str, np.ndarray], dict[str, float]]:
    """``op_times_s`` in parts: its kinds in order, the seconds of the kinds but the collectives
    (arrays over ``kv_lens``; shared with other calls, not to be changed), and the collectives'
    seconds (the same at every KV length).

    Outside a traced stack's decode (whose kernel classes may reprice any kind), the kinds other
    than the collectives read the profile's GPU, node, framework and host spec only, never its
    collectives, network, interference or what-if scales (the parts a sweep's overrides change;
    tests/test_fast_path.py holds this for every shipped profile): they are remembered by those
    parts and the rest of the pass (the same dict for every such profile), and only the
    collectives are priced anew (remembered by profile: the schedules of a sweep share them).
    """
    kv_lens = np.asarray(kv_lens, dtype=float)
    fw = load_framework(work.framework)
    if fw.kernel_calibration is not None and phase.name == "decode":  # its classes may reprice any kind
        times = _op_times_s(model, hw, work, tp, phase, kv_lens)
        return tuple(times), times, {}
    kinds, shared = _kept_times.get((hw.gpu, hw.node, hw.framework, hw.host_overhead, fw, model, work),
                                    (hw.base_dir, tp, phase, kv_lens.shape, kv_lens.tobytes()),
                                    lambda: _without_collectives(_op_times_s(model, hw, work, tp, phase, kv_lens)))
    collectives = _kept_collectives.get((hw, fw, model, work), (tp, phase),
                                        lambda: _collectives_with_host(model, hw, fw, work, tp, phase))
    return kinds, shared, collectives


def _without_collectives(times: dict[str, np.ndarray]) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
    return tuple(times), {kind: seconds for kind, seconds in times.items() if kind not in COLLECTIVE_KINDS}


def _collectives_with_host(model, hw, fw, work, tp, phase) -> dict[str, float]:
    """The collectives' seconds as ``op_times_s`` gives them (the host spec applied)."""
    seconds = with_host_overhead(hw, _collective_op_times(model, hw, fw, work, tp, phase)[0])
    return {kind: float(value) for kind, value in seconds.items()}


def _op_times_s(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int, phase: Phase,
                kv_lens: np.ndarray) -> dict[str, np.ndarray]:
    """``op_times_s`` computed."""
    times, _ = fixed_op_times(model, hw, work, tp, phase)
    fw = load_framework(work.framework)
    if fw.kernel_calibration is not None and phase.name == "decode" and model.mla is None:  # a traced stack
        out = _calibrated_decode_times(model, hw, work, tp, phase, times, kv_lens, fw)
    else:
        out = {kind: np.full(kv_lens.shape, value) for kind, value in times.items()}
        out["attention"] = attention_time_s(model, hw, work, tp, phase, kv_lens)
    return with_host_overhead(hw, out)  # the framework's per-op dispatch (None in compiled profiles)


def _calibrated_decode_times(model, hw, work, tp, phase, times, kv_lens, fw) -> dict[str, np.ndarray]:
    """Decode op times from the framework's kernel calibration (laddersim.costs.calibrated_kernels)."""
    return calibrated_decode(fw.kernel_calibration, model, hw, work, tp, phase, times,
                             op_kernels(model, hw, work, tp, phase), linear_shapes(model, tp, phase),
                             standard_layer_op_counts(tp), kv_lens)


def op_time_sources(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int,
                    phase: Phase) -> dict[str, str]:
    """Where each op kind's time came from: ``SILICON`` (a measured table), ``HYBRID`` (a measured
    table extrapolated by the roofline), ``SOL`` (the roofline / bandwidth model)."""
    return fixed_op_times(model, hw, work, tp, phase)[1] | {"attention": SOL}


def framework_linear_shapes(fw, model: ModelShape, tp: int, phase: Phase) -> dict[str, tuple]:
    """``linear_shapes`` as ``fw`` runs them: gate and up as two GEMMs where its ``split_gate_up``
    says so (each its own floor and the library's rate at half the width)."""
    shapes = linear_shapes(model, tp, phase, logits_rows(fw, phase))
    if fw.split_gate_up is not None and fw.split_gate_up.value and "gate_up" in shapes:
        m, n, k, _ = shapes["gate_up"]
        shapes["gate_up"] = (m, n, k, (n // 2, n // 2))
    return shapes


def fixed_op_times(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int,
                    phase: Phase) -> tuple[dict[str, float], dict[str, str]]:
    """Seconds of every op kind but attention, and each one's source label."""
    gpu = hw.gpu
    fw = load_framework(work.framework)
    b = work.dtype_bytes
    t = phase.tokens
    d = model.dim
    hd = model.head_dim
    h_r = model.heads_per_rank(tp)
    kv_r = model.kv_heads_per_rank(tp)
    i_r = model.intermediate_per_rank(tp)
    sources: dict[str, str] = {}

    # A single-token pass (batch-1 decode) may run its kernels with another floor (a fitted
    # profile's FrameworkSpec.single_token_kernel_floor_us); attention, embedding and sampling keep theirs.
    floor = hw.framework.single_token_kernel_floor_us
    launch = floor.value * 1e-6 if (floor is not None and t == 1) else None
    # A one-token pass's linears may be generated reductions fused with their pointwise neighbours.
    generated_linears, fused = single_token_path(fw, t)
    generated_linears = generated_linears and t == 1

    def streamed(moved_bytes: float, kind: str = "") -> float:  # one memory-bound kernel of this pass
        kernels = 0 if kind in fused else fw.kernels_for(kind)  # an eager framework: several per op
        moved_bytes *= fw.bytes_factor_for(kind)
        return float(memory_bound_time_s(gpu, moved_bytes, kernels=kernels, launch_s=launch))

    def norm(rows: int, kind: str = "") -> float:  # RMSNorm: read and write rows x dim
        return streamed(2 * rows * d * b, kind)

    peak = gpu.peak_flops_per_s_for(work.dtype)
    gemm_library = fw.gemm_library.value if fw.gemm_library is not None else None

    def linear(kind: str, m: int, n: int, k: int, parts: tuple[int, ...] = ()) -> float:
        """One linear layer. ``parts``: the widths of the weights stacked along N into this one
        (parallel's fused QKV and gate/up). The stacked GEMM streams the same weight bytes and does
        the same FLOPs as its parts, so each part's share costs what the library runs at that
        part's own shape. A library GEMM keeps each part's floor too: stacking saves a launch, not
        device time. Measured on the paper's benchmark model (reports/kernel_trace/h200_paper_config,
        Llama-3.1-8B, rank 0's shard of TP 2, batch 4, torch 2.11 on an H200): parallel's stacked
        QKV + gate/up and standard's two GEMMs take 63.6 and 63.3 us of cuBLAS time a layer; what
        parallel gains is in the norms and element-wise kernels it drops, priced by the op program.
        A one-row linear lowered to a generated reduction is one kernel streaming its weights,
        stacked or not, at the best streaming the profile's GEMM table shows for those bytes
        (laddersim.costs.generated_gemv)."""
        if is_quantized_linear(work, kind):  # its own GEMM and input quantization (quantized_gemm)
            fused = fw.quantize_fused_into(kind)  # the input already quantized by its producer
            priced = [quantized_linear_time_s(hw, work, m, part, k, peak, input_quantized=fused)
                      for part in (parts or (n,))]
            labels = {label for _, label in priced}
            sources[kind] = labels.pop() if len(labels) == 1 else HYBRID
            return sum(s for s, _ in priced)
        if generated_linears and m == 1:
            seconds, sources[kind] = generated_gemv_time_s(hw, n, k, b, peak)
        elif parts:
            priced = [library_gemm_time_s(hw, m, part, k, b, peak, gemm_library) for part in parts]
            seconds = sum(s for s, _ in priced)
            labels = {label for _, label in priced}
            sources[kind] = labels.pop() if len(labels) == 1 else HYBRID
        else:
            seconds, sources[kind] = library_gemm_time_s(hw, m, n, k, b, peak, gemm_library)
        if launch is not None:  # a fitted single-token floor replaces the GPU's kernel floor
            seconds += launch - gpu.kernel_launch_s
        if splitk_reduce(fw, gpu, m, n):
            seconds += float(memory_bound_time_s(gpu, 2 * m * n * 4))  # the partial sums' reduce kernel
        return seconds

    elementwise_add = streamed(3 * t * d * b)
    messages = collective_message_bytes(model, work, tp, phase)
    hidden_bytes = messages["allreduce"]  # the hidden-state AllReduce message
    sync_s = hw.framework.collective_sync_us.value * 1e-6 if tp > 1 else 0.0
    sync_gbps = hw.framework.collective_sync_gb_per_s.value
    sync_bytes_s = hidden_bytes / (sync_gbps * 1e9) if (tp > 1 and sync_gbps > 0) else 0.0
    copies = hw.framework.collective_input_copies.value if (tp > 1 and fw.collective_input_copy.value) else 0.0
    copy_s = copies * streamed(2 * hidden_bytes, "collective_input_copy")
    handoff_half_s = fw.collective_handoff_half_s() if tp > 1 else 0.0  # the compute stream's side of the hand-off
    host_node_s = graph_host_node_s(hw, fw, tp, phase.name)  # a network collective in a CUDA graph
    times = {
        "embedding": float(memory_bound_time_s(gpu, 2 * t * d * b)),
        "attn_norm": norm(t, "attn_norm"),
        "mlp_norm": norm(t, "mlp_norm"),
        "norm": norm(t),
        "final_norm": norm(logits_rows(fw, phase)),
        **{kind: linear(kind, m, n, k, parts)
           for kind, (m, n, k, parts) in framework_linear_shapes(fw, model, tp, phase).items()},
        # RoPE on q and k, and the new k, v written into the cache (unless the attention path
        # writes them in kernels of its own: laddersim.costs.attention_kernels).
        "rope": streamed(t * (2 * (h_r + kv_r) + (0 if writes_cache(fw, phase) else 2 * kv_r)) * hd * b, "rope"),
        "act": streamed(3 * t * i_r * b, "act"),  # SiLU(gate) * up
        "residual_add": streamed(3 * t * d * b, "residual_add"),
        "partial_add": elementwise_add,
        "sampling": hw.framework.sampling_us.value * 1e-6
        + float(memory_bound_time_s(gpu, 4 * phase.batch * model.vocab_size * 4, kernels=0))
        + phase.batch * fw.step_host_per_sequence_s(),  # the host's per-sequence work between steps
        "step_overhead": hw.framework.step_overhead_us.value * 1e-6 + fw.step_host_s(),
        # the compute stream's half of the framework's stream hand-off (framework_collectives), and
        # the host node NCCL adds for a network collective inside a CUDA graph (graph_proxy)
        "collective_launch": sync_bytes_s + copy_s + handoff_half_s + host_node_s,
    }
    if work.kv_cache_dtype != "auto" and not writes_cache(fw, phase):  # the new k, v written in their own bytes
        times["rope"] = streamed(t * (2 * (h_r + kv_r) * hd * b + 2 * kv_r * hd * work.kv_bytes), "rope")
    if model.qk_norm:  # one more kernel before RoPE (laddersim.costs.family_ops)
        times["rope"] += streamed(qk_norm_bytes(model, tp, t, b), "qk_norm")
    if model.qkv_bias:  # read in the QKV GEMM's epilogue (laddersim.costs.family_ops)
        bias_s = qkv_bias_bytes(model, tp, b) / (gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value)
        times["qkv"] += bias_s
        times["qkv_gate_up"] += bias_s
    if model.moe is not None:  # the routed experts' ops (laddersim.costs.moe_costs)
        times.update(moe_op_times_s(model, hw, work, tp, phase))
    if model.mla is not None:  # latent attention's projections, RoPE and cache write (laddersim.costs.mla_costs)
        times.update(mla_linear_times_s(model, tp, t, phase.name == "decode", linear))
        times["rope"] = streamed(mla_rope_bytes(model.mla, h_r, t, b, work.kv_bytes), "rope")
    collectives, collective_sources = _collective_op_times(model, hw, fw, work, tp, phase)
    times.update(collectives)
    sources.update(collective_sources)
    return times, {kind: sources.get(kind, SOL) for kind in times}


def _collective_op_times(model: ModelShape, hw: HardwareProfile, fw, work: Workload, tp: int,
                         phase: Phase) -> tuple[dict[str, float], dict[str, str]]:
    """Seconds of the comm stream's kinds (before the host spec), and their source labels."""
    times: dict[str, float] = {}
    sources: dict[str, str] = {}
    sync_s = hw.framework.collective_sync_us.value * 1e-6 if tp > 1 else 0.0
    handoff_half_s = fw.collective_handoff_half_s() if tp > 1 else 0.0  # the compute stream's side of the hand-off
    messages = collective_message_bytes(model, work, tp, phase)
    rule = {"dtype": work.dtype, "forced": work.allreduce}  # the workload's dtype and forced implementation
    times["allreduce"] = allreduce_time_s(hw, tp, messages["allreduce"], fw, **rule)
    sources["allreduce"] = allreduce_source(hw, tp, messages["allreduce"], fw, **rule)
    # The gather from its own measured table where the profile has one (its message above is the
    # AllReduce equivalent, for its interference).
    gathered = float(model.gathered_logits_bytes(phase.batch, tp, work.dtype_bytes))  # (a pass's and its batch's)
    times["allgather_logits"], sources["allgather_logits"] = _kept_gathers.get(
        (hw, fw), (tp, gathered), lambda: (allgather_time_s(hw, tp, gathered, fw), allgather_source(hw, tp, gathered, fw)))
    # The NCCL kernel's start-up behind its producer (collective_sync_us) delays the collective on
    # the communication stream; the compute stream does not wait for it, so a schedule that
    # overlaps the collective (ladder) hides it with the collective. Its per-byte part (staging the
    # message, collective_sync_gb_per_s) stays on the compute stream's side of the hand-off.
    times["allreduce"] += sync_s
    times["allgather_logits"] += sync_s + handoff_half_s  # the collective's half (the AllReduce's is in its price)
    return times, sources


def collective_message_bytes(model: ModelShape, work: Workload, tp: int, phase: Phase) -> dict[str, float]:
    """Per rank, the AllReduce message each collective kind is equivalent to, for its time and
    its interference: the hidden-state AllReduce itself, and the logits AllGather. A ring
    AllGather moves (n-1)/n of its output per rank, half of what an AllReduce of the same buffer
    moves, with the same latency structure, so it counts as an AllReduce of half its output."""
    b = work.dtype_bytes
    return {
        "allreduce": float(phase.tokens * model.dim * b),
        "allgather_logits": float(model.gathered_logits_bytes(phase.batch, tp, b)) / 2.0,
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
    (nothing is written back) but every query head still reads its own copy, B * kv_len * 2 *
    h_r * hd elements, the repeats of a group served by L2 (laddersim.costs.l2_reuse). Long
    contiguous streams run at the GEMV weight-streaming efficiency (``gemm_memory_efficiency``).
    FLOPs 4 * B * kv_len * h_r * hd; the slower of the two. A framework whose decode attention is
    the math path (``decode_attention: math``/``math_fp32``) runs it as three generated
    reductions instead (laddersim.costs.math_attention.math_decode_kernels); ``sdpa_mem_efficient``
    as eager torch SDPA runs it, cache writes, K/V copies, mask kernels and the memory-efficient
    kernel (laddersim.costs.sdpa_attention). Both through laddersim.costs.attention_kernels.
    """
    kv_lens = np.asarray(kv_lens, dtype=float)
    if model.mla is not None:  # latent attention (laddersim.costs.mla_costs)
        return mla_attention_time_s(model, hw, work, tp, phase, kv_lens)
    if phase.name == "prefill":  # the same for every KV length
        return np.full(kv_lens.shape, prefill_attention_time_s(model, hw, work, tp, phase))
    gpu = hw.gpu
    b = work.dtype_bytes
    hd = model.head_dim
    h_r = model.heads_per_rank(tp)
    kv_r = model.kv_heads_per_rank(tp)
    attn_peak = gpu.peak_flops_per_s_for(work.dtype) * gpu.attention_compute_efficiency.value
    stream_bw = gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value
    if load_framework(work.framework).decode_attention_path != "fused":  # several kernels (attention_kernels)
        return sum(k.seconds for k in attention_kernels(model, hw, work, tp, phase, kv_lens))  # one per length
    flops = 4.0 * phase.batch * kv_lens * h_r * hd
    queries = phase.batch * 2 * h_r * hd * b  # q read, the output written
    kv_b = work.kv_bytes  # K and V in the cache's own dtype (an FP8 cache: one byte)
    if work.kv_reads == "repeat_interleave":  # each KV head read once per query head (l2_reuse)
        reads = group_reads_s(gpu, phase.batch * kv_lens * 2 * kv_r * hd * kv_b,
                              phase.batch * kv_lens * 2 * h_r * hd * kv_b, kv_lens * hd * kv_b)
    else:
        reads = phase.batch * kv_lens * 2 * kv_r * hd * kv_b / stream_bw
    return gpu.kernel_launch_s + np.maximum(flops / attn_peak, reads + queries / stream_bw)


def prefill_attention_time_s(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int, phase: Phase,
                             cached_positions: int = 0) -> float:
    """Prefill attention of ``phase`` (``batch`` sequences of ``new_tokens_per_seq`` queries) on
    one rank, on the framework's path (see ``attention_time_s``). A dynamic cache's queries attend
    the ``cached_positions`` each sequence already holds and, causally, each other: 0 is a whole
    prompt, more a chunk of chunked prefill (4 * B * S * (cached + S / 2) * h_r * hd FLOPs, the
    cached K/V read once). A static cache's attend the whole cache whatever is cached."""
    if model.mla is not None:
        return float(mla_attention_time_s(model, hw, work, tp, phase, [0], cached_positions)[0])
    gpu = hw.gpu
    fw = load_framework(work.framework)
    if fw.prefill_attention_path != "fused":
        return float(sum(k.seconds for k in attention_kernels(model, hw, work, tp, phase,
                                                              cached_positions=cached_positions)))
    b, hd, s = work.dtype_bytes, model.head_dim, phase.new_tokens_per_seq
    h_r = model.heads_per_rank(tp)
    heads_streamed = h_r if work.kv_reads == "repeat_interleave" else model.kv_heads_per_rank(tp)
    attn_peak = (gpu.peak_flops_per_s_for(work.dtype) * gpu.attention_compute_efficiency.value
                 * fw.prefill_attention_speedup.value)  # the framework's kernel (e.g. FlashAttention-3)
    stream_bw = gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value
    if work.kv_cache == "static":
        flops = 4.0 * phase.batch * s * work.max_seq_len * h_r * hd
        moved = phase.batch * (2 * s * h_r + 2 * work.max_seq_len * heads_streamed) * hd * b
    else:
        flops = 4.0 * phase.batch * s * s * h_r * hd / 2.0 + 4.0 * phase.batch * s * cached_positions * h_r * hd
        moved = (phase.tokens * (2 * h_r + 2 * heads_streamed) + phase.batch * cached_positions * 2 * heads_streamed) \
            * hd * b
        if work.kv_cache_dtype != "auto":  # the cached K/V read in the cache's own bytes
            moved -= phase.batch * cached_positions * 2 * heads_streamed * hd * (b - work.kv_bytes)
    return float(gpu.kernel_launch_s + max(flops / attn_peak, moved / stream_bw))
