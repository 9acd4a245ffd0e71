"""What one rank of ``ladder_bench.py`` allocates, estimated before anything is, and what the
host can still give (the benchmark's memory pre-check)."""

from __future__ import annotations

import os
from pathlib import Path

from laddersim.model.shape import ModelShape

GIB = 2 ** 30
CACHE_MULTIPLE = 8  # gpt-fast rounds the static cache up to a multiple of 8 (max_seq_length)
# Memory pre-check: a rank's torch runtime, communicator buffers and allocator slack on top of
# its tensors, and a relative margin on the whole estimate.
RANK_OVERHEAD_BYTES = GIB // 2
MEMORY_MARGIN = 0.10


def model_bytes_per_rank(shape: ModelShape, tp: int, batch: int, max_seq: int, dtype_bytes: int) -> int:
    """Bytes of the buffers ``ladder_model.build_model`` allocates on one rank: the weight shards (the
    embedding replicated, the LM head's last shard padded), KV cache, RoPE table, causal mask."""
    d = shape.dim
    weights = (shape.n_layers * shape.layer_params_per_rank(tp) + shape.vocab_size * d
               + shape.vocab_per_rank(tp) * d + d)
    kv_cache = batch * max_seq * shape.kv_bytes_per_token_per_rank(tp, dtype_bytes)
    rope = max_seq * shape.head_dim * dtype_bytes
    mask = max_seq * max_seq  # torch.bool
    return weights * dtype_bytes + kv_cache + rope + mask


def static_cache_len(prompt_len: int, gen_len: int) -> int:
    """The static KV cache's length: prompt + new tokens, rounded up to a multiple of 8 (gpt-fast's
    ``max_seq_length``, as the paper's benchmark sets it)."""
    return -(-(prompt_len + gen_len) // CACHE_MULTIPLE) * CACHE_MULTIPLE


def peak_bytes_per_rank(shape: ModelShape, tp: int, batch: int, prompt_len: int, gen_len: int,
                        dtype_bytes: int, math_attention: bool = True, all_logits: bool = True) -> int:
    """Estimated peak of one rank: :func:`model_bytes_per_rank`, plus the larger of what lives
    only while building (the unsharded weights ``build_model`` shards: one layer, or
    embedding + LM head) or only while running (one layer's prefill activations: QKV, gate/up,
    K/V repeated to every query head, residuals, and the ``2 * n_layers`` module outputs
    the ``ladder`` schedule keeps until the forward ends; with ``math_attention`` also the prefill's
    attention scores, one per query head over the whole cache, and their softmax; with
    ``all_logits`` the prefill's logits of every prompt position, this rank's vocab slice and the
    gathered whole), plus ``MEMORY_MARGIN`` and ``RANK_OVERHEAD_BYTES``."""
    max_seq = static_cache_len(prompt_len, gen_len)
    d, hd, heads = shape.dim, shape.head_dim, shape.heads_per_rank(tp)
    build = max(shape.layer_params_per_rank(1) + shape.layer_params_per_rank(tp),
                2 * shape.vocab_size * d + d)
    qkv = (heads + 2 * shape.kv_heads_per_rank(tp)) * hd
    per_token = (2 * shape.n_layers + 6) * d + qkv + 3 * shape.intermediate_per_rank(tp)
    activations = batch * prompt_len * per_token + 2 * batch * heads * max_seq * hd
    if math_attention:
        activations += 2 * batch * heads * prompt_len * max_seq
    if all_logits:
        activations += batch * prompt_len * (shape.vocab_per_rank(tp) + tp * shape.vocab_per_rank(tp))
    total = (model_bytes_per_rank(shape, tp, batch, max_seq, dtype_bytes)
             + max(build, activations) * dtype_bytes)
    return int(total * (1 + MEMORY_MARGIN)) + RANK_OVERHEAD_BYTES


def available_host_bytes() -> int | None:
    """Memory the host can still give: ``MemAvailable`` of /proc/meminfo (else the free pages
    from sysconf), capped by a cgroup v2 limit; None if unknown."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available
