"""Prefill attention on torch's math SDPA path, kernel by kernel (``prefill_attention: math`` or
``math_fp32`` in a framework file).

The Ladder Residual benchmark forces ``sdp_kernel(enable_math=True)`` only (the Ladder Residual
repository's benchmark code and logs; docs/architecture.md): K and V are read from the
static cache of ``max_seq_len`` positions, expanded with ``repeat_interleave`` to every query
head, and ``scaled_dot_product_attention`` gets a boolean mask row over the whole cache. torch's
``_scaled_dot_product_attention_math`` (aten/src/ATen/native/transformers/attention.cpp) then runs

    attn = (q * scale) @ (k * scale)^T ; attn.masked_fill(~mask, -inf) ; softmax ; attn @ v

materialising one score per query head, query position and cache position. Since torch 2.5 the
math path upcasts fp16/bf16 Q, K and V to fp32 ("Keep query, key, value in high precision for
accuracy", unless ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)``): the two
batched GEMMs are fp32 GEMMs and the scores fp32 (``math_fp32``). Under ``torch.compile`` the
GEMMs stay extern (cuBLAS) calls and the pointwise work around them becomes generated kernels.

Every function returns seconds on one rank; ``kernels`` lists them with their class (the classes of
``laddersim.costs.kernel_counts``) so the kernel view shows what the sum is made of.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from laddersim.costs.gemm import memory_bound_time_s
from laddersim.costs.l2_reuse import group_reads_s
from laddersim.model.framework import load_framework

ACC_BYTES = {"math": None, "math_fp32": 4}  # None: the scores keep the input dtype


@dataclass(frozen=True)
class Kernel:
    """One kernel (or ``count`` identical ones) of an op, and its seconds in total."""

    name: str
    kernel_class: str
    count: float
    seconds: float


PERSISTENT_REDUCTION_MAX = 1024  # torch/_inductor/codegen/simd.py should_use_persistent_reduction: INNER <= 1024


def softmax_reads(row_len):
    """Reads of each score row by Inductor's softmax: a row of at most 1024 elements is one
    persistent reduction (read once, kept in registers); a longer one a looped reduction that
    reads the row for its max and sum of exponentials, then again to normalise it (the kernel pair
    ``triton_red_fused__softmax_..._prepare_softmax_online`` + its normalising kernel in an H100
    trace of torch 2.11; torch 2.5's looped softmax reads it a third time, counted as an L2 hit)."""
    return np.where(np.asarray(row_len) <= PERSISTENT_REDUCTION_MAX, 1, 2)  # a length or an array of them


def _batched_gemm_s(gpu, flops: float, moved_bytes: float, peak_flops_per_s: float) -> float:
    """A batched library GEMM: the slower of its FLOPs at the library's compute efficiency and
    its bytes at the GEMM streaming efficiency, plus one kernel floor."""
    compute = flops / (peak_flops_per_s * gpu.gemm_compute_efficiency.value)
    memory = moved_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value)
    return gpu.kernel_launch_s + max(compute, memory)


def math_prefill_kernels(gpu, *, variant: str, batch: int, prompt_len: int, cache_len: int, heads: int,
                         kv_heads: int, head_dim: int, dtype_bytes: int,
                         peak_flops_per_s: float, fp32_peak_flops_per_s: float | None) -> list[Kernel]:
    """The kernels of one layer's prefill attention on the math path (see the module docstring):
    ``batch`` sequences of ``prompt_len`` queries over ``cache_len`` cache positions, ``heads``
    query and ``kv_heads`` KV heads of ``head_dim`` on this rank."""
    acc = ACC_BYTES[variant] or dtype_bytes
    upcast = acc != dtype_bytes
    peak = fp32_peak_flops_per_s if (upcast and fp32_peak_flops_per_s) else peak_flops_per_s
    b, s, L, h, hd = batch, prompt_len, cache_len, heads, head_dim
    q_elems = b * s * h * hd
    kv_elems = b * L * h * hd  # K (or V) expanded to every query head
    scores = b * h * s * L
    flops = 2.0 * scores * hd
    return [
        # K and V: the cache read per KV head, written expanded per query head (and upcast).
        Kernel("kv_expand", "generated", 1, float(memory_bound_time_s(
            gpu, 2 * b * L * kv_heads * hd * dtype_bytes + 2 * kv_elems * acc))),
        # Q scaled (and upcast) for the GEMM.
        Kernel("q_scale", "generated", 1, float(memory_bound_time_s(gpu, q_elems * (dtype_bytes + acc)))),
        Kernel("scores_bmm", "library_gemm", 1, _batched_gemm_s(
            gpu, flops, acc * (q_elems + kv_elems + scores), peak)),
        # The boolean mask row (one per query position, broadcast over heads) and the softmax:
        # probabilities written once, scores read once per pass over the row.
        Kernel("masked_softmax", "generated", 1, float(memory_bound_time_s(
            gpu, (softmax_reads(L) + 1) * scores * acc + b * s * L))),
        Kernel("values_bmm", "library_gemm", 1, _batched_gemm_s(
            gpu, flops, acc * (scores + kv_elems + q_elems), peak)),
        # The output back to the input dtype, heads transposed into the hidden dimension.
        Kernel("out_cast", "generated", 1 if upcast else 0,
               float(memory_bound_time_s(gpu, q_elems * (acc + dtype_bytes))) if upcast else 0.0),
    ]


def math_prefill_peak_bytes(*, variant: str, batch: int, prompt_len: int, cache_len: int, heads: int,
                            head_dim: int, dtype_bytes: int) -> float:
    """Bytes one layer's prefill attention on the math path holds at its peak on one rank, from the
    buffers of ``math_prefill_kernels`` (same shapes): Q scaled, K and V expanded to every query
    head (in the scores' dtype after the upcast), the scores and the softmax's probabilities (one
    per query head, query position and cache position each), the boolean mask rows (gpt-fast's
    ``causal_mask[None, None, input_pos]``: one per query and cache position, broadcast over batch
    and heads) and the output. The largest set live at once, kernel by kernel: the scores GEMM
    (Q, K, V, the scores, the mask), the masked softmax (V, the scores it reads, the
    probabilities it writes, the mask) or the values GEMM (V, the probabilities, the output)."""
    acc = ACC_BYTES[variant] or dtype_bytes
    b, s, L, h, hd = batch, prompt_len, cache_len, heads, head_dim
    q = b * s * h * hd * acc
    kv = b * L * h * hd * acc  # K or V, expanded
    scores = b * h * s * L * acc
    mask = s * L
    return float(max(q + 2 * kv + scores + mask, kv + 2 * scores + mask, kv + scores + q))


def math_decode_peak_bytes(*, variant: str, batch: int, cache_len: int, heads: int, dtype_bytes: int) -> float:
    """Bytes one layer's decode attention on the math path (``math_decode_kernels``) writes: the
    scores of one query row per query head over ``cache_len`` positions; the softmax keeps only
    each row's max and sum and the values reduction normalises in its loads (nothing expanded)."""
    acc = ACC_BYTES[variant] or dtype_bytes
    return float(batch * heads * cache_len * acc)


def math_decode_kernels(gpu, *, variant: str, batch: int, cache_len: int, heads: int, kv_heads: int,
                        head_dim: int, dtype_bytes: int, fp32_peak_flops_per_s: float | None,
                        kv_reads: str = "repeat_interleave") -> list[Kernel]:
    """The kernels of one layer's decode attention on the math path, one query row per sequence
    over ``cache_len`` cache positions (a number, or an array: each kernel's seconds then one per
    length). With ``coordinate_descent_tuning`` (gpt-fast's setting)
    Inductor decomposes a batched GEMM with one row (torch/_inductor/decomposition.py ``bmm``:
    ``(a.unsqueeze(-1) * b.unsqueeze(1)).sum(dim=2)``), so both of the math path's GEMMs are
    generated reductions, and the K/V ``repeat_interleave``, the scaling and the upcast fuse into
    their loads: nothing expanded is written. Each query head reads its KV head's rows from the
    cache, the heads of one group one after the other (their repeats served by L2,
    laddersim.costs.l2_reuse). The scores (fp32 after the upcast) are written once, read by the
    softmax's pass(es) and once more by the values reduction, which computes the normalised
    probabilities in its loads. ``kv_reads`` ``per_kv_head``: each KV head is read once (no repeat).
    """
    acc = ACC_BYTES[variant] or dtype_bytes
    b, L, h, hd = batch, np.asarray(cache_len, dtype=float), heads, head_dim
    once = b * L * kv_heads * hd * dtype_bytes  # K (or V) as cached: each KV head once
    repeated = once * h / kv_heads if kv_reads == "repeat_interleave" else once  # every query head's read
    window = L * hd * dtype_bytes  # one KV head's rows, re-read by the next head of its group
    scores = b * h * L * acc
    stream = gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value
    fp32 = fp32_peak_flops_per_s or float("inf")
    reduction_s = 2.0 * b * h * L * hd / fp32  # fp32 multiply-adds on the CUDA cores

    def reading_cache(extra_bytes):
        return gpu.kernel_launch_s + np.maximum(reduction_s, group_reads_s(gpu, once, repeated, window)
                                                + extra_bytes / stream)
    return [
        # q . k per cache position (the mask row added in its epilogue); the scores written.
        Kernel("scores", "generated", 1, reading_cache(scores + b * L)),
        # The softmax's max and sum of exponentials: the scores read once per pass over the row.
        Kernel("softmax", "generated", 1,
               gpu.kernel_launch_s + softmax_reads(L) * scores / stream),
        # p . v per head dimension, p normalised in its loads; the output back to the input dtype.
        Kernel("values", "generated", 1, reading_cache(scores + b * h * hd * dtype_bytes)),
    ]


def decode_math_kernels(model, hw, work, tp: int, phase, cache_len) -> list:
    """``math_decode_kernels`` of a scenario's decode step on one rank, over ``cache_len``
    positions (a number or an array of them)."""
    gpu = hw.gpu
    return math_decode_kernels(
        gpu, variant=load_framework(work.framework).decode_attention_path, batch=phase.batch,
        cache_len=cache_len, heads=model.heads_per_rank(tp), kv_heads=model.kv_heads_per_rank(tp),
        head_dim=model.head_dim, dtype_bytes=work.dtype_bytes, kv_reads=work.kv_reads,
        fp32_peak_flops_per_s=gpu.peak_tflops_fp32.value * 1e12 if gpu.peak_tflops_fp32 is not None else None)


def prefill_math_kernels(model, hw, work, tp: int, phase, cached_positions: int = 0) -> list:
    """``math_prefill_kernels`` of a scenario's pass (``phase``) on one rank of ``tp``, the path
    the framework's ``prefill_attention`` names: over the whole static cache, or with a dynamic
    one over the ``cached_positions`` already cached (0: a whole prompt; a chunk of chunked
    prefill attends its sequence's earlier positions too) and the pass's own tokens."""
    gpu = hw.gpu
    fp32 = gpu.peak_tflops_fp32.value * 1e12 if gpu.peak_tflops_fp32 is not None else None
    s = phase.new_tokens_per_seq
    return math_prefill_kernels(
        gpu, variant=load_framework(work.framework).prefill_attention_path, batch=phase.batch, prompt_len=s,
        cache_len=work.max_seq_len if work.kv_cache == "static" else cached_positions + s,
        heads=model.heads_per_rank(tp),
        kv_heads=model.kv_heads_per_rank(tp), head_dim=model.head_dim, dtype_bytes=work.dtype_bytes,
        peak_flops_per_s=gpu.peak_flops_per_s_for(work.dtype), fp32_peak_flops_per_s=fp32)
