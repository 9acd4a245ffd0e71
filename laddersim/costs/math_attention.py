"""Prefill attention on torch's math SDPA path, kernel by kernel (``prefill_attention: math`` or
``math_fp32`` in a framework file).

The Ladder Residual benchmark forces ``sdp_kernel(enable_math=True)`` only (../shared/docs/
ladder-residual.md, "The benchmark, read from its code and logs"): K and V are read from the
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

from laddersim.costs.gemm import memory_bound_time_s
from laddersim.framework import load_framework

ACC_BYTES = {"math": None, "math_fp32": 4}  # None: the scores keep the input dtype


@dataclass(frozen=True)
class Kernel:
    """One kernel (or ``count`` identical ones) of an op, and its seconds in total."""

    name: str
    kernel_class: str
    count: float
    seconds: float


PERSISTENT_REDUCTION_MAX = 1024  # torch/_inductor/codegen/simd.py should_use_persistent_reduction: INNER <= 1024


def softmax_reads(row_len: int) -> int:
    """Reads of each score row by Inductor's softmax: a row of at most 1024 elements is one
    persistent reduction (read once, kept in registers); a longer one a looped reduction that
    reads the row for its max and sum of exponentials, then again to normalise it (the kernel pair
    ``triton_red_fused__softmax_..._prepare_softmax_online`` + its normalising kernel in an H100
    trace of torch 2.11; torch 2.5's looped softmax reads it a third time, counted as an L2 hit)."""
    return 1 if row_len <= PERSISTENT_REDUCTION_MAX else 2


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


def prefill_math_kernels(model, hw, work, tp: int, phase) -> list:
    """``math_prefill_kernels`` of a scenario's pass (``phase``) on one rank of ``tp``, the path
    the framework's ``prefill_attention`` names: over the whole static cache, or over the prompt
    with a dynamic one."""
    gpu = hw.gpu
    fp32 = gpu.peak_tflops_fp32.value * 1e12 if gpu.peak_tflops_fp32 is not None else None
    s = phase.new_tokens_per_seq
    return math_prefill_kernels(
        gpu, variant=load_framework(work.framework).prefill_attention_path, batch=phase.batch, prompt_len=s,
        cache_len=work.max_seq_len if work.kv_cache == "static" else s, heads=model.heads_per_rank(tp),
        kv_heads=model.kv_heads_per_rank(tp), head_dim=model.head_dim, dtype_bytes=work.dtype_bytes,
        peak_flops_per_s=gpu.peak_flops_per_s_for(work.dtype), fp32_peak_flops_per_s=fp32)
