"""The kernels of one layer's attention on the framework's path for a pass, where that path is
several kernels: torch's math SDPA (``laddersim.costs.math_attention``) or eager SDPA on the
memory-efficient backend with its copies (``laddersim.costs.sdpa_attention``). The cost model sums
them (``laddersim.costs.op_costs``); the kernel counts and the kernel view list them."""

from __future__ import annotations

from laddersim.costs.math_attention import Kernel, decode_math_kernels, prefill_math_kernels
from laddersim.costs.pass_shapes import first_decode_positions
from laddersim.costs.sdpa_attention import pass_sdpa_kernels
from laddersim.model.framework import load_framework

SDPA = "sdpa_mem_efficient"


def writes_cache(fw, phase) -> bool:
    """Does the framework's attention path for ``phase`` write the new K/V into the cache in kernels
    of its own (eager SDPA's ``index_put_``, ``sdpa_kernels``' cache_write), rather than fused with
    RoPE (Inductor) or inside the attention kernel (FlashAttention's kvcache kernel)?"""
    return fw.attention_path(phase.name) == SDPA


def attention_kernels(model, hw, work, tp: int, phase, cache_len=None, cached_positions: int = 0) -> list[Kernel]:
    """The kernels of one layer's attention in ``phase`` on one rank; empty on the fused path.

    Decode attends ``cache_len`` positions (a number or an array: each kernel's seconds then one per
    length; default the first decode step's, ``first_decode_positions``). Prefill attends the whole
    static cache, or over a dynamic one the ``cached_positions`` already cached and the pass's own."""
    path = load_framework(work.framework).attention_path(phase.name)
    if path == "fused":
        return []
    if phase.name == "prefill":
        if path == SDPA:
            attended = work.max_seq_len if work.kv_cache == "static" else cached_positions + phase.new_tokens_per_seq
            return pass_sdpa_kernels(model, hw, work, tp, phase, attended)
        return prefill_math_kernels(model, hw, work, tp, phase, cached_positions)
    if cache_len is None:
        return [Kernel(k.name, k.kernel_class, k.count, float(k.seconds)) for k in
                attention_kernels(model, hw, work, tp, phase, first_decode_positions(work))]
    if path == SDPA:
        return pass_sdpa_kernels(model, hw, work, tp, phase, cache_len)
    return decode_math_kernels(model, hw, work, tp, phase, cache_len)
