"""The shapes and kernel paths of one forward pass on one rank: the pass itself (``Phase``), the
linears' GEMM shapes, whether a one-row linear is a generated reduction, whether the library
splits a GEMM along K, and how many rows the LM head runs on. What ``laddersim.costs.op_costs``
prices and ``laddersim.costs.kernel_counts`` counts, kept below both."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from laddersim.model.shape import ModelShape


@dataclass(frozen=True)
class Phase:
    """One forward pass: ``prefill`` over the prompt or one ``decode`` step."""

    name: str  # "prefill" | "decode"
    batch: int
    new_tokens_per_seq: int  # prompt_len in prefill, 1 in decode

    @property
    def tokens(self) -> int:
        return self.batch * self.new_tokens_per_seq


SPLIT_K_WAVES = 4  # fewer output tiles than this many full waves of the SMs: K is split


def weight_streaming_rows(gpu) -> float:
    """The most rows M at which a linear is still bound by streaming its weights: a 16-bit GEMM of
    M rows over K x N weights (M << N, K) does 2MNK FLOPs on 2NK bytes, so M FLOPs a byte, and is
    memory-bound while M stays below the GPU's achieved ridge (FLOP/s at the GEMM compute
    efficiency over bytes/s at the GEMM streaming efficiency: ~275 rows on an H100 SXM, ~140 on an
    A100; fp8's doubled peak over half the bytes gives the same M)."""
    return (gpu.peak_flops_per_s * gpu.gemm_compute_efficiency.value
            / (gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value))


def splits_k(gpu, m: int, n: int) -> bool:
    """Does the library split K for an m x n output? A weight-streaming GEMM (M below
    ``weight_streaming_rows``: decode shapes) reaches the memory bandwidth only with every SM
    loading weights; when its output tiles (``gemm_tile_m`` x ``gemm_tile_n``) fill the SMs only a
    few waves deep, cuBLAS's heuristics split the reduction dimension over more CTAs and add a
    kernel that sums the fp32 partials. A compute-bound GEMM (prefill's M of hundreds of tokens
    and up) is not split: the H100 kernel traces (measured with calibration/kernel_trace.py, and
    reports/kernel_trace/h200_paper_config: every ``splitKreduce_kernel`` is at decode M <= 64)
    show the splits thinning as M grows (Llama-3.1-8B TP 1: 2 of the layer's GEMMs split at M = 4
    and 16, 1 at M = 64), and cuBLAS's own kernels for the large, compute-bound M it picks tiles
    for have no split (none is traced above M = 64: no prefill was traced); a 1024-token prefill of
    8B at TP 2 was charged ~59 us of reduces a layer under the tile count alone. The threshold sits
    at four waves so that a linear and the same weights stacked with a neighbour's (parallel's
    QKV + gate/up: Llama-3.1-8B's gate/up at TP 1 is 224 tiles, stacked with QKV 272) take one
    kernel path, as the 8B table's TP 1 rows (no communication) show: at batch 64 parallel's
    decode gains nothing over desync_half (-2.3 us a layer, from ``decode_s``; the 9 us once cited
    here was the whole run's gain over standard, prefill included), where this rule predicts 11
    and a rule at two waves (only the stacked GEMM unsplit) 24. The H100 kernel trace
    (torch 2.11) splits fewer: at batch 4 and 16 only the two 4096-wide outputs (32 tiles here),
    not QKV (48) nor gate or up (112), at batch 64 only the down projection; a rule at a third of
    a wave (44 tiles), which matches it but at batch 64, makes the 70B table's tokens/s median
    3.15% -> 7.19% (its reduce kernels are part of what the gpt-fast decode is priced at), so the
    rule stays cuBLAS's heuristic approximated (tools/dev/parallel_gain_gap.py prints parallel's
    gains, measured and predicted)."""
    if gpu.sm_count is None:
        return False
    tiles = np.ceil(m / gpu.gemm_tile_m.value) * np.ceil(n / gpu.gemm_tile_n.value)
    return bool(1 < m < weight_streaming_rows(gpu) and tiles < SPLIT_K_WAVES * gpu.sm_count.value)


def splitk_reduce(fw, gpu, m: int, n: int) -> bool:
    """Does an m x n library GEMM under framework ``fw`` launch a split-K reduce kernel: the
    framework's library splits K (``splitk_reduce_kernel``) and this shape is split (``splits_k``)."""
    return bool(fw.splitk_reduce_kernel.value) and splits_k(gpu, m, n)


def single_token_path(fw, tokens: int) -> tuple[bool, frozenset[str]]:
    """The kernel path of a linear with M rows (see laddersim.model.framework): is a one-row linear a
    generated reduction under framework ``fw``, and which op kinds does it absorb in a pass of
    ``tokens`` tokens (only a one-token pass fuses; a library GEMM fuses nothing)."""
    generated = fw.single_token_linear.value == "generated"
    fused = frozenset(fw.fused_into_single_token_linear.kinds) if (generated and tokens == 1) else frozenset()
    return generated, fused


def first_decode_positions(work) -> int:
    """Positions the first decode step after the prompt attends: the whole static cache, or the
    prompt and the new token."""
    return work.max_seq_len if work.kv_cache == "static" else work.prompt_len + 1


def logits_rows(fw, phase: Phase) -> int:
    """Rows of the LM head (and the final norm) in a pass: each sequence's last position, or in a
    prefill under ``prefill_logits: all`` every prompt position (gpt-fast returns every token's logits)."""
    if phase.name == "prefill" and fw.prefill_logits_positions == "all":
        return phase.tokens
    return phase.batch


def linear_shapes(model: ModelShape, tp: int, phase: Phase,
                  lm_head_rows: int | None = None) -> dict[str, tuple[int, int, int, tuple[int, ...]]]:
    """``{linear op kind: (m, n, k, parts)}`` on one rank: column-parallel QKV and gate/up (one
    fused GEMM of width 2 x intermediate / TP, as gpt-fast's ``w1`` and vLLM's
    ``MergedColumnParallelLinear``), row-parallel O and down, the vocab-parallel LM head on
    ``lm_head_rows`` rows (default: the last position of each sequence, ``logits_rows``);
    ``parts``, the widths stacked along N into parallel's fused QKV + gate/up."""
    t, d = phase.tokens, model.dim
    i_r = model.intermediate_per_rank(tp)
    qkv_n = (model.heads_per_rank(tp) + 2 * model.kv_heads_per_rank(tp)) * model.head_dim
    return {
        "qkv": (t, qkv_n, d, ()),
        "o_proj": (t, d, model.heads_per_rank(tp) * model.head_dim, ()),
        "gate_up": (t, 2 * i_r, d, ()),
        "qkv_gate_up": (t, qkv_n + 2 * i_r, d, (qkv_n, 2 * i_r)),
        "down": (t, d, i_r, ()),
        "lm_head": (phase.batch if lm_head_rows is None else lm_head_rows, model.vocab_per_rank(tp), d, ()),
    }
