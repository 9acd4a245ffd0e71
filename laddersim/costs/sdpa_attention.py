"""Attention as eager torch SDPA with an explicit mask runs it (``prefill_attention`` /
``decode_attention``: ``sdpa_mem_efficient`` in a framework file): the K/V cache's indexed write,
the K/V ``repeat_interleave`` copies, the boolean mask made an additive bias, and PyTorch's
memory-efficient attention kernel over the whole static cache.

The gpt-fast model code outside ``torch.compile`` (the Ladder Residual
repository's benchmark code and logs: the September 2024 CUDA graphs), per layer and pass:

* ``k_cache[:, :, input_pos] = k`` and the same for V: two ``index_put_`` kernels, each reading
  the pass's new K (or V) and writing it into the ``(batch, KV heads, max length, head dim)`` cache;
* ``k.repeat_interleave(n_head // n_kv_head, dim=1)`` and the same for V: ATen's scalar
  ``repeat_interleave`` is ``unsqueeze``, ``expand`` and ``clone`` (an H100 trace of the same code
  under Inductor names the kernel ``..._clone_expand_...``: the Llama-3.1-8B TP 1 trace
  measured with calibration/kernel_trace.py), so each is one copy writing the whole
  static cache once per query head, also at ratio 1 (an MHA model). Each output element loads its
  source element (a repeat of the group's rows from L2, the first from HBM) and stores itself;
* ``F.scaled_dot_product_attention(q, k, v, attn_mask=mask)`` with a boolean mask: the flash
  backend refuses an explicit mask, and the memory-efficient backend takes these inputs (head dim
  a multiple of 8, fp16/bf16, last dims contiguous), so it runs. ATen first makes the boolean mask
  an additive one of the query dtype (``convert_boolean_attn_mask``: ``zeros_like``,
  ``logical_not``, ``masked_fill_``, three small kernels over the ``(queries, cache)`` mask shared
  by every batch and head; ``preprocess_mask`` pads it only where a row is not 8-aligned), then
  launches one kernel, xFormers' CUTLASS fMHA.

The fMHA kernel's tiling, read from its code as torch ships it (``AttentionKernel`` of
ATen/native/transformers/cuda/mem_eff_attention/kernel_forward.h and kernels/cutlassF.h in torch
2.13.0's include folder; the kernel family the late-2024 benchmark ran): on Sm80 and later (torch
runs the Sm80 kernels on Hopper) the first kernel whose ``kMaxK`` holds the head dim runs:
``64x64`` (64 queries x 64 keys a block, head dim <= 64), ``64x128`` (<= 128) or ``32x128_gmem``.
Its grid is ``(ceil(queries / kQueriesPerBlock), heads, batch)`` CTAs (``getBlocksGrid``) of
``kQueriesPerBlock x kKeysPerBlock / 1024`` warps, launched with ``kMinBlocksPerSm = 16 / warps``
CTAs an SM (``getWarpsPerSmFw``: 16 warps on Sm80+ for 16-bit types). Each CTA walks every key
of the cache one ``kKeysPerBlock`` block at a time (an explicit bias masks nothing out of the
loop), and each block is a chain of global-memory round trips the CTA waits on: the K tile for
Q.K^T (a 4-stage cp.async mainloop over the head dim in 32-wide slices: one wait per 3 slices in
flight), the bias tile (``TileSmemLoader::load``: a plain load into shared memory and a barrier;
the V tile's prologue is issued before it and rides along), and the slices of V its 3-stage
prologue did not hold (one more wait for a 128-key block). A tile computes all its query rows,
real or not, so a decode pass (one query) issues the tensor work of 64 query rows per CTA.

The kernel takes the slowest of: its CTAs' chains (waves of ``SMs x kMinBlocksPerSm`` CTAs, each
``key blocks x (round trips x gpu.global_load_latency_us + one tile's work)`` long: what binds
when the grid is smaller than the GPU, as at decode, where it is ``heads x batch`` CTAs of one
query), its padded tensor work at the profile's attention efficiency, and its bytes (HBM at the
streaming rate; what its CTAs load at the profile's L2 rate, where it has one).

Every function returns seconds on one rank (numpy arrays over cache lengths where given);
``sdpa_kernels`` lists them with their class (``laddersim.costs.kernel_counts``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from laddersim.costs.gemm import memory_bound_time_s
from laddersim.costs.math_attention import Kernel

WARPS_PER_SM = 16  # kernel_forward.h getWarpsPerSmFw: Sm80+ and a 16-bit scalar type
MMA_STAGES = 4  # kernel_forward.h MM0/MM1: ``kMinComputeCapability >= 80 && kIsHalf ? 4 : kStages``
K_SLICE = 32  # gemm_kernel_utils.h DefaultGemmType<Sm80, half>: ThreadK = 32, a mainloop step's depth


@dataclass(frozen=True)
class FmhaTile:
    """One forward kernel of PyTorch's memory-efficient attention (``AttentionKernel<...>``)."""

    name: str
    queries_per_block: int  # kQueriesPerBlock
    keys_per_block: int  # kKeysPerBlock
    max_head_dim: int  # kMaxK

    @property
    def warps(self) -> int:
        """kNumWarpsPerBlock = kQueriesPerBlock * kKeysPerBlock / (32 * 32)."""
        return self.queries_per_block * self.keys_per_block // (32 * 32)

    @property
    def ctas_per_sm(self) -> int:
        """kMinBlocksPerSm, its launch bound: getWarpsPerSmFw() / warps."""
        return WARPS_PER_SM // self.warps

    def round_trips(self, head_dim: int) -> int:
        """Global-memory round trips a CTA waits on per key block (module docstring): Q.K^T's
        slices of the head dim, the bias tile, and V's slices beyond the prologue."""
        def waits(slices: int) -> int:  # MMA_STAGES - 1 slices in flight per wait
            return -(-slices // (MMA_STAGES - 1))
        return waits(-(-head_dim // K_SLICE)) + 1 + waits(self.keys_per_block // K_SLICE) - 1

    def tile_flops(self, head_dim: int) -> float:
        """Q.K^T and P.V over one whole tile: 2 x 2 x queries x keys x head dim."""
        return 4.0 * self.queries_per_block * self.keys_per_block * head_dim


# kernels/cutlassF.h, dispatch_cutlassF_f16_sm80 (bf16 the same), in the order tried.
SM80_TILES = (FmhaTile("fmha_cutlassF_f16_aligned_64x64_rf_sm80", 64, 64, 64),
              FmhaTile("fmha_cutlassF_f16_aligned_64x128_rf_sm80", 64, 128, 128),
              FmhaTile("fmha_cutlassF_f16_aligned_32x128_gmem_sm80", 32, 128, 65536))


def fmha_tile(head_dim: int) -> FmhaTile:
    """The kernel the dispatcher picks for ``head_dim`` (the first whose kMaxK holds it)."""
    return next(tile for tile in SM80_TILES if head_dim <= tile.max_head_dim)


@dataclass(frozen=True)
class FmhaGrid:
    """One fMHA launch: its tile, CTAs, the waves they take on ``sms`` SMs (one wave where the
    SM count is unknown), the key blocks each CTA walks (one per cache length) and the query
    blocks of each (sequence, head)."""

    tile: FmhaTile
    ctas: int
    waves: int
    key_blocks: np.ndarray
    query_blocks: int


def fmha_grid(tile: FmhaTile, *, batch: int, heads: int, queries: int, keys, sms: int | None) -> FmhaGrid:
    """``getBlocksGrid`` of ``batch`` sequences of ``queries`` queries over ``keys`` cache positions
    (a number or an array), in waves of ``sms x kMinBlocksPerSm`` resident CTAs."""
    query_blocks = -(-queries // tile.queries_per_block)
    ctas = query_blocks * heads * batch
    waves = -(-ctas // (sms * tile.ctas_per_sm)) if sms else 1
    key_blocks = np.ceil(np.asarray(keys, dtype=float) / tile.keys_per_block)
    return FmhaGrid(tile, ctas, waves, key_blocks, query_blocks)


def fmha_bytes(grid: FmhaGrid, *, batch: int, heads: int, kv_copies: int, queries: int, keys, head_dim: int,
               dtype_bytes: int) -> dict[str, np.ndarray]:
    """Bytes the kernel moves: ``hbm`` from or to HBM (Q read and O written once; K and V once per
    sequence and each of the ``kv_copies`` heads they are stored for: every query head after the
    repeat, the KV heads without it; the bias, one ``queries x keys`` matrix broadcast over batch and
    heads, once) and ``l2``, what its CTAs load (each query block of a head the head's whole K and
    V, and the bias rows of its queries)."""
    keys = np.asarray(keys, dtype=float)
    q_and_o = 2 * batch * heads * queries * head_dim
    kv_per_head = 2 * batch * keys * head_dim
    return {"hbm": (q_and_o + kv_copies * kv_per_head + queries * keys) * dtype_bytes,
            "l2": (q_and_o + grid.query_blocks * heads * kv_per_head + batch * heads * queries * keys) * dtype_bytes}


def mem_efficient_attention_s(gpu, *, batch: int, heads: int, kv_copies: int, queries: int, keys, head_dim: int,
                              dtype_bytes: int, peak_flops_per_s: float):
    """Seconds of one fMHA forward kernel (module docstring): its floor plus the slowest of its
    CTAs' chains, its padded tensor work and its bytes."""
    tile = fmha_tile(head_dim)
    sms = int(gpu.sm_count.value) if gpu.sm_count is not None else None
    grid = fmha_grid(tile, batch=batch, heads=heads, queries=queries, keys=keys, sms=sms)
    rate = peak_flops_per_s * gpu.attention_compute_efficiency.value
    compute = grid.ctas * grid.key_blocks * tile.tile_flops(head_dim) / rate
    moved = fmha_bytes(grid, batch=batch, heads=heads, kv_copies=kv_copies, queries=queries, keys=keys,
                       head_dim=head_dim, dtype_bytes=dtype_bytes)
    memory = moved["hbm"] / (gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value)
    if gpu.l2_bandwidth_gb_per_s is not None:
        memory = np.maximum(memory, moved["l2"] / (gpu.l2_bandwidth_gb_per_s.value * 1e9))
    chains = 0.0
    if sms is not None and gpu.global_load_latency_us is not None:
        block_s = (tile.round_trips(head_dim) * gpu.global_load_latency_us.value * 1e-6
                   + tile.tile_flops(head_dim) / (rate / sms))  # one SM's share of the rate
        chains = grid.waves * grid.key_blocks * block_s
    return gpu.kernel_launch_s + np.maximum(np.maximum(compute, memory), chains)


def repeat_copy_bytes(*, batch: int, heads: int, kv_heads: int, cache_len, head_dim: int,
                      dtype_bytes: int) -> dict[str, np.ndarray]:
    """Bytes of one ``repeat_interleave`` copy (K or V) over ``cache_len`` positions: ``read``, the
    cache of ``kv_heads`` from HBM once; ``written``, the tensor of ``heads`` (every query head its
    copy); ``moved``, what its threads load and store (each output element loads its source and
    stores itself: twice the written bytes, whatever the ratio), which prices the copy."""
    per_head = batch * np.asarray(cache_len, dtype=float) * head_dim * dtype_bytes
    return {"read": per_head * kv_heads, "written": per_head * heads, "moved": 2 * per_head * heads}


def sdpa_peak_bytes(*, batch: int, queries: int, cache_len: int, heads: int, kv_heads: int, head_dim: int,
                    dtype_bytes: int, repeat_kv: bool = True) -> float:
    """Bytes one layer's attention on this path holds at its peak on one rank (the buffers of
    ``sdpa_kernels``, same shapes): K and V expanded to every query head (``repeat_copy_bytes``'
    written; none without ``repeat_kv``), the boolean mask rows (one byte per query and cache
    position, broadcast over batch and heads), its ``logical_not`` and the additive bias of the
    query dtype made from them (``convert_boolean_attn_mask``), Q, the kernel's output and its fp32
    log-sum-exp per query row and head. All live together while the fMHA kernel runs."""
    copy = repeat_copy_bytes(batch=batch, heads=heads, kv_heads=kv_heads, cache_len=cache_len, head_dim=head_dim,
                             dtype_bytes=dtype_bytes)
    expanded = 2 * float(copy["written"]) if repeat_kv else 0.0
    mask = queries * cache_len * (1 + 1 + dtype_bytes)
    rows = batch * queries * heads
    return expanded + mask + rows * (2 * head_dim * dtype_bytes + 4)


def sdpa_kernels(gpu, *, batch: int, queries: int, cache_len, heads: int, kv_heads: int, head_dim: int,
                 dtype_bytes: int, peak_flops_per_s: float, repeat_kv: bool = True) -> list[Kernel]:
    """One layer's attention on this path, on one rank: ``batch`` sequences of ``queries`` new
    positions each over ``cache_len`` cache positions (a number or an array; each kernel's seconds
    then one per length), ``heads`` query and ``kv_heads`` KV heads of ``head_dim``. ``repeat_kv``
    False: K and V reach the kernel unexpanded (no copies; each KV head's rows read for its group)."""
    new_kv_bytes = batch * queries * kv_heads * head_dim * dtype_bytes
    mask_elems = queries * np.asarray(cache_len, dtype=float)
    copy = repeat_copy_bytes(batch=batch, heads=heads, kv_heads=kv_heads, cache_len=cache_len, head_dim=head_dim,
                             dtype_bytes=dtype_bytes)
    copies = 2 if repeat_kv else 0
    return [
        # index_put_ of the new K, then V: each reads them and writes them into the cache.
        Kernel("cache_write", "generated", 2, float(memory_bound_time_s(gpu, 2 * 2 * new_kv_bytes, kernels=2))),
        # K, then V, expanded to every query head: elementwise copies, priced by what they move.
        Kernel("kv_repeat", "copy", copies, memory_bound_time_s(gpu, copies * copy["moved"], kernels=copies)),
        # convert_boolean_attn_mask: zeros_like writes the dtype, logical_not reads and writes a
        # bool, masked_fill_ reads the bool and reads and writes the dtype: 3 + 3 x dtype bytes.
        Kernel("mask_bias", "generated", 3, memory_bound_time_s(gpu, mask_elems * (3 + 3 * dtype_bytes), kernels=3)),
        Kernel("mem_efficient", "attention", 1, mem_efficient_attention_s(
            gpu, batch=batch, heads=heads, kv_copies=heads if repeat_kv else kv_heads, queries=queries,
            keys=cache_len, head_dim=head_dim, dtype_bytes=dtype_bytes, peak_flops_per_s=peak_flops_per_s)),
    ]


def pass_sdpa_kernels(model, hw, work, tp: int, phase, cache_len) -> list[Kernel]:
    """``sdpa_kernels`` of a scenario's pass (``phase``) on one rank of ``tp`` over ``cache_len``
    positions (a static cache: all of them, whatever is written yet)."""
    return sdpa_kernels(hw.gpu, batch=phase.batch, queries=phase.new_tokens_per_seq, cache_len=cache_len,
                        heads=model.heads_per_rank(tp), kv_heads=model.kv_heads_per_rank(tp), head_dim=model.head_dim,
                        dtype_bytes=work.dtype_bytes, peak_flops_per_s=hw.gpu.peak_flops_per_s_for(work.dtype),
                        repeat_kv=work.kv_reads == "repeat_interleave")
