"""Costs of multi-head latent attention (``laddersim.model.mla``) on one rank: the projections'
GEMMs folded into the op program's ``qkv`` and ``o_proj`` ops, RoPE and the latent cache write,
and the attention core of prefill (compute-friendly, MHA over up-projected K/V) and decode
(weight-absorbed MQA over the latent cache), as vLLM's MLA backend runs them
(vllm-project/vllm @ 37fa5c0940ef ``vllm/v1/attention/backends/mla/common.py``).

The absorbed per-head products (``q_nope @ W_UK``, ``o @ W_UV``) are batched GEMMs of one small
matrix per head; they are priced as one GEMM of the same FLOPs and weight bytes
(``[tokens, heads x n] x [k, heads x n]``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from laddersim.model.mla import MLAGemm, MLASpec
from laddersim.model.shape import ModelShape

# The GEMMs of each op kind the program runs: everything before the attention core is ``qkv``,
# the per-head V up-projection and W_O are ``o_proj``.
_O_PROJ_GEMMS = frozenset({"out_absorb_uv", "o"})


def mla_gemms(model: ModelShape, tp: int, tokens: int, decode: bool) -> tuple[MLAGemm, ...]:
    """The projections' GEMMs of one MLA layer on one rank (``MLASpec.gemms``)."""
    assert model.mla is not None
    return model.mla.gemms(model.dim, model.n_heads, tp, tokens, absorbed=decode)


def mla_linear_times_s(model: ModelShape, tp: int, tokens: int, decode: bool,
                       linear: Callable[[str, int, int, int], float]) -> dict[str, float]:
    """``{"qkv": s, "o_proj": s}``: each op's GEMMs priced by ``linear(kind, m, n, k)`` (the op
    program's GEMM pricing), a batched GEMM as one GEMM of its FLOPs and weights."""
    out = {"qkv": 0.0, "o_proj": 0.0}
    for g in mla_gemms(model, tp, tokens, decode):
        kind = "o_proj" if g.name in _O_PROJ_GEMMS else "qkv"
        out[kind] += linear(kind, g.m, g.n * g.batch, g.k)
    return out


def mla_rope_bytes(mla: MLASpec, heads: int, tokens: int, dtype_bytes: float, kv_bytes: float) -> float:
    """RoPE on each head's rope part of q and on the shared rope key (read and written), the two
    latent RMSNorms (q and kv latents read and written), and the new latent written to the cache."""
    rope = 2 * tokens * (heads + 1) * mla.qk_rope_head_dim * dtype_bytes
    norms = 2 * tokens * (mla.q_lora_rank + mla.kv_lora_rank) * dtype_bytes
    return rope + norms + tokens * mla.latent_width * kv_bytes


def mla_decode_attention_bytes(mla: MLASpec, heads: int, batch: int, kv_lens, dtype_bytes: float,
                               kv_bytes: float) -> np.ndarray:
    """Bytes a weight-absorbed decode step's attention moves on one rank: every sequence's cached
    latent read once for all heads (``Lkv + R`` elements per position), each head's latent query
    (``Lkv + R``) read and its latent output (``Lkv``) written."""
    kv_lens = np.asarray(kv_lens, dtype=float)
    cache = batch * kv_lens * mla.latent_width * kv_bytes
    return cache + batch * heads * (mla.latent_width + mla.kv_lora_rank) * dtype_bytes


def mla_decode_attention_flops(mla: MLASpec, heads: int, batch: int, kv_lens) -> np.ndarray:
    """FLOPs of absorbed decode attention: scores over ``Lkv + R`` and the weighted sum over ``Lkv``
    per head and cached position."""
    return 2.0 * batch * np.asarray(kv_lens, dtype=float) * heads * (mla.latent_width + mla.kv_lora_rank)


def mla_prefill_attention_flops(mla: MLASpec, heads: int, batch: int, new_tokens: int, cached: int = 0) -> float:
    """FLOPs of compute-friendly prefill attention: causal MHA with QK head dim ``P + R`` and V head
    dim ``V`` over the new tokens, plus the ``cached`` positions each query attends, whose latents
    are first up-projected by ``kv_b_proj`` (the new tokens' are the ``kv_b`` GEMM of the op program)."""
    per_pair = 2.0 * heads * (mla.qk_head_dim + mla.v_head_dim)
    # the cached latents up-projected to K (nope) and V per chunk of context (vLLM's chunked prefill)
    up_projection = 2.0 * batch * cached * mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    return batch * new_tokens * (new_tokens / 2.0 + cached) * per_pair + up_projection


def mla_decode_bytes_per_token(model: ModelShape, tp: int, context_len: int, dtype_bytes: float,
                               kv_bytes: float) -> float:
    """Attention bytes one rank moves per layer to decode one token of one sequence alone (batch 1)
    at ``context_len`` cached positions: the attention weights this rank holds (absorbed decode
    reads ``kv_b_proj`` as ``W_UK`` and ``W_UV``, the same bytes) and the latent cache read."""
    assert model.mla is not None
    heads = model.heads_per_rank(tp)
    weights = model.mla.attention_params_per_rank(model.dim, model.n_heads, tp) * dtype_bytes
    return float(weights + mla_decode_attention_bytes(model.mla, heads, 1, context_len, dtype_bytes, kv_bytes))


def mla_attention_time_s(model: ModelShape, hw, work, tp: int, phase, kv_lens, cached_positions: int = 0) -> np.ndarray:
    """The attention core of an MLA layer on one rank, one time per KV length: decode the slower of
    its FLOPs at the attention peak and its bytes (``mla_decode_attention_bytes``) at the GEMV
    streaming efficiency; prefill the compute-friendly MHA at the attention peak (times the
    framework's prefill kernel speedup), or the up-projected K/V streamed, whichever is slower."""
    assert model.mla is not None
    gpu, heads, b = hw.gpu, model.heads_per_rank(tp), work.dtype_bytes
    kv_lens = np.asarray(kv_lens, dtype=float)
    attn_peak = gpu.peak_flops_per_s_for(work.dtype) * gpu.attention_compute_efficiency.value
    stream_bw = gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value
    if phase.name == "prefill":
        from laddersim.model.framework import load_framework

        s = phase.new_tokens_per_seq
        flops = mla_prefill_attention_flops(model.mla, heads, phase.batch, s, cached_positions)
        peak = attn_peak * load_framework(work.framework).prefill_attention_speedup.value
        qk, v = model.mla.qk_head_dim, model.mla.v_head_dim
        moved = phase.batch * (s + cached_positions) * heads * (2 * qk + v) * b + phase.tokens * heads * v * b
        return np.full(kv_lens.shape, gpu.kernel_launch_s + max(flops / peak, moved / stream_bw))
    flops = mla_decode_attention_flops(model.mla, heads, phase.batch, kv_lens)
    moved = mla_decode_attention_bytes(model.mla, heads, phase.batch, kv_lens, b, work.kv_bytes)
    return gpu.kernel_launch_s + np.maximum(flops / attn_peak, moved / stream_bw)


def mla_op_kernels(model: ModelShape, work, tokens: int, decode: bool, generated: bool) -> dict[str, dict[str, float]]:
    """``{op kind: {kernel class: kernels}}`` of the MLA ops as ``mla_linear_times_s`` charges them:
    one GEMM per projection (a generated reduction where the framework lowers a one-row linear,
    ``generated``), each quantized one after its input's quantize kernels; one attention kernel."""
    from laddersim.costs.quantized_gemm import is_quantized_linear

    out: dict[str, dict[str, float]] = {"qkv": {}, "o_proj": {}}
    for g in mla_gemms(model, 1, tokens, decode):
        kind = "o_proj" if g.name in _O_PROJ_GEMMS else "qkv"
        cls = "generated" if (generated and tokens == 1) else "library_gemm"
        counts = out[kind]
        counts[cls] = counts.get(cls, 0) + 1
        if is_quantized_linear(work, kind) and work.quantization.quantize_kernels:
            counts["generated"] = counts.get("generated", 0) + work.quantization.quantize_kernels
    return out | {"attention": {"attention": 1}}
