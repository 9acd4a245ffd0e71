"""gpt-fast-graph's attention (issue 37, item 1): eager torch SDPA with a boolean mask over the
whole static cache, as the September CUDA graphs ran it (laddersim.costs.sdpa_attention): the
repeat_interleave copies' bytes at MHA and GQA ratios, the memory-efficient kernel's tiling and
time at query length 1, a golden layer of kernels, and the framework against its measured table."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laddersim.cli import main
from laddersim.costs.op_costs import Phase, fixed_op_times
from laddersim.costs.sdpa_attention import (SM80_TILES, fmha_bytes, fmha_grid, fmha_tile, mem_efficient_attention_s,
                                            repeat_copy_bytes, sdpa_kernels)
from laddersim.hardware.profile import load_profile
from laddersim.simulation.kernel_view import kernel_table
from laddersim.simulation.simulate import make_scenario
from laddersim.support.resources import data_path

GPU = load_profile("h100-sxm-nvswitch").gpu
SMS = int(GPU.sm_count.value)
PEAK = GPU.peak_flops_per_s_for("float16")
GRAPH_TABLE = data_path("validation", "ladder_graph_p2p_sweep.csv")


def _elementwise_s(moved_bytes: float, kernels: int) -> float:
    return kernels * GPU.kernel_launch_s + moved_bytes / (GPU.memory_bandwidth_bytes_per_s
                                                          * GPU.elementwise_memory_efficiency.value)


# ---- repeat_interleave: a copy of the whole static cache, per K and V, at every ratio ----------

@pytest.mark.parametrize("heads, kv_heads", [(24, 24), (32, 8), (4, 1)])  # paper 1B (MHA), 8B (4:1), 8B TP 8
def test_repeat_interleave_reads_the_cache_once_and_writes_every_query_heads_copy(heads, kv_heads):
    batch, cache, head_dim = 3, 1280, 64
    row = cache * head_dim * 2  # one head's K (or V) of one sequence, fp16
    got = repeat_copy_bytes(batch=batch, heads=heads, kv_heads=kv_heads, cache_len=cache, head_dim=head_dim,
                            dtype_bytes=2)
    assert got["read"] == batch * kv_heads * row  # the cache as stored
    assert got["written"] == batch * heads * row  # heads / kv_heads copies of it, 1 at MHA: still a copy
    assert got["moved"] == 2 * batch * heads * row  # each output element loaded once and stored once
    assert got["written"] / got["read"] == heads // kv_heads


def test_the_repeat_kernels_are_two_copies_priced_by_what_they_move_and_none_without_the_repeat():
    kw = dict(batch=16, queries=1, cache_len=1280, heads=32, kv_heads=8, head_dim=128, dtype_bytes=2,
              peak_flops_per_s=PEAK)
    repeat = {k.name: k for k in sdpa_kernels(GPU, **kw)}["kv_repeat"]
    assert (repeat.kernel_class, repeat.count) == ("copy", 2)
    assert repeat.seconds == pytest.approx(_elementwise_s(2 * (2 * 16 * 32 * 1280 * 128 * 2), 2))
    bare = {k.name: k for k in sdpa_kernels(GPU, **kw, repeat_kv=False)}
    assert (bare["kv_repeat"].count, float(bare["kv_repeat"].seconds)) == (0, 0.0)
    assert bare["mem_efficient"].seconds <= {k.name: k for k in sdpa_kernels(GPU, **kw)}["mem_efficient"].seconds


# ---- the memory-efficient kernel's tiling (kernel_forward.h, cutlassF.h) ------------------------

def test_the_dispatcher_picks_the_first_tile_whose_max_head_dim_holds_it():
    assert [fmha_tile(d).name.split("_")[-3] for d in (64, 80, 128, 256)] == ["64x64", "64x128", "64x128", "32x128"]
    small, large, gmem = SM80_TILES
    assert (small.warps, small.ctas_per_sm, small.round_trips(64)) == (4, 4, 2)  # K tile + bias
    assert (large.warps, large.ctas_per_sm, large.round_trips(128)) == (8, 2, 4)  # K in two waits, bias, V's 4th slice
    assert (gmem.warps, gmem.ctas_per_sm) == (4, 4)


@pytest.mark.parametrize("batch, heads, head_dim, ctas, waves, key_blocks", [
    (1, 24, 64, 24, 1, 20),     # paper 1B TP 1 batch 1: 24 CTAs on 132 SMs, one wave
    (16, 36, 64, 576, 2, 20),   # paper 3B batch 16: 576 > 132 x 4 slots, a second wave
    (16, 32, 128, 512, 2, 10),  # 8B batch 16: 64x128 tiles, 2 an SM: 264 slots
    (4, 4, 128, 16, 1, 10),     # 8B TP 8 batch 4
])
def test_decode_grid_is_one_query_block_per_sequence_and_head(batch, heads, head_dim, ctas, waves, key_blocks):
    grid = fmha_grid(fmha_tile(head_dim), batch=batch, heads=heads, queries=1, keys=1280, sms=SMS)
    assert (grid.ctas, grid.waves, float(grid.key_blocks), grid.query_blocks) == (ctas, waves, key_blocks, 1)
    moved = fmha_bytes(grid, batch=batch, heads=heads, kv_copies=heads, queries=1, keys=1280, head_dim=head_dim,
                       dtype_bytes=2)
    kv = 2 * batch * heads * 1280 * head_dim  # K and V, every query head's copy, once
    assert moved["hbm"] == pytest.approx((2 * batch * heads * head_dim + kv + 1280) * 2)
    assert moved["l2"] == pytest.approx((2 * batch * heads * head_dim + kv + batch * heads * 1280) * 2)


def test_prefill_grid_tiles_the_prompt_and_every_query_block_rereads_its_head():
    grid = fmha_grid(fmha_tile(128), batch=1, heads=32, queries=1024, keys=1280, sms=SMS)
    assert (grid.query_blocks, grid.ctas, grid.waves) == (16, 512, 2)
    moved = fmha_bytes(grid, batch=1, heads=32, kv_copies=32, queries=1024, keys=1280, head_dim=128, dtype_bytes=2)
    assert moved["l2"] - moved["hbm"] == pytest.approx((15 * 2 * 32 * 1280 * 128 + (32 - 1) * 1024 * 1280) * 2)


def test_at_query_length_one_under_the_sm_count_the_kernel_is_its_ctas_chain():
    """Paper 1B, TP 1, batch 1: 24 CTAs, each 20 key blocks of 2 round trips and one 64x64x64
    tile pair of tensor work at the profile's attention efficiency on one SM, whatever the heads."""
    latency = GPU.global_load_latency_us.value * 1e-6
    block = 2 * latency + 4 * 64 * 64 * 64 / (PEAK * GPU.attention_compute_efficiency.value / SMS)
    for heads in (3, 24, 96):  # one wave each (<= 528 CTAs): the same time
        got = mem_efficient_attention_s(GPU, batch=1, heads=heads, kv_copies=heads, queries=1, keys=1280,
                                        head_dim=64, dtype_bytes=2, peak_flops_per_s=PEAK)
        assert got == pytest.approx(GPU.kernel_launch_s + 20 * block)
    # 8B: ten 128-key blocks of 4 round trips and a 64x128x128 tile pair
    block = 4 * latency + 4 * 64 * 128 * 128 / (PEAK * GPU.attention_compute_efficiency.value / SMS)
    got = mem_efficient_attention_s(GPU, batch=1, heads=32, kv_copies=32, queries=1, keys=1280, head_dim=128,
                                    dtype_bytes=2, peak_flops_per_s=PEAK)
    assert got == pytest.approx(GPU.kernel_launch_s + 10 * block)


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 128), heads=st.integers(1, 64), head_dim=st.sampled_from([64, 128]),
       keys=st.integers(1, 8192))
def test_the_kernel_never_gets_faster_with_more_work_and_never_beats_its_bytes(batch, heads, head_dim, keys):
    def t(b, k):
        return float(mem_efficient_attention_s(GPU, batch=b, heads=heads, kv_copies=heads, queries=1, keys=k,
                                               head_dim=head_dim, dtype_bytes=2, peak_flops_per_s=PEAK))
    assert t(batch + 1, keys) >= t(batch, keys) and t(batch, keys + 64) >= t(batch, keys)
    floor = 2 * batch * heads * keys * head_dim * 2 / (GPU.memory_bandwidth_bytes_per_s * GPU.gemm_memory_efficiency.value)
    assert t(batch, keys) >= GPU.kernel_launch_s + floor


def test_a_gpu_without_the_latency_prices_the_kernel_by_its_work_and_bytes():
    bare = GPU.model_copy(update={"global_load_latency_us": None})
    kw = dict(batch=1, heads=24, kv_copies=24, queries=1, keys=1280, head_dim=64, dtype_bytes=2, peak_flops_per_s=PEAK)
    assert mem_efficient_attention_s(bare, **kw) < mem_efficient_attention_s(GPU, **kw) / 3


# ---- the framework: one layer's kernels, the cache write moved out of RoPE -------------------

def test_golden_decode_layer_lists_the_new_kernels_with_their_classes():
    """Llama-3.1-8B, TP 8, batch 4, prompt 1024 + 256: the eager layer of gpt-fast-flash with its
    one attention kernel replaced by two cache writes, two repeat copies, three mask kernels and the
    fMHA kernel; each attention row its closed form."""
    frame = kernel_table("llama-3.1-8b", "h100-sxm-nvswitch", 8, 4, framework="gpt-fast-graph",
                         prompt_len=1024, gen_len=256, dtype="float16")
    rows = {name: (cls, count) for name, cls, count in zip(frame["kernel"], frame["class"], frame["count"])}
    assert rows == {"attn_norm": ("generated", 1), "qkv.splitk_reduce": ("splitk_reduce", 1),
                    "qkv": ("library_gemm", 1), "rope": ("generated", 18),
                    "attention.cache_write": ("generated", 2), "attention.kv_repeat": ("copy", 2),
                    "attention.mask_bias": ("generated", 3), "attention.mem_efficient": ("attention", 1),
                    "o_proj.splitk_reduce": ("splitk_reduce", 1), "o_proj": ("library_gemm", 1),
                    "allreduce": ("collective", 2), "residual_add": ("generated", 2), "mlp_norm": ("generated", 1),
                    "gate_up.splitk_reduce": ("splitk_reduce", 1), "gate_up": ("library_gemm", 1),
                    "act": ("generated", 2), "down.splitk_reduce": ("splitk_reduce", 1), "down": ("library_gemm", 1)}
    us = dict(zip(frame["kernel"], frame["us"]))
    cache, new_kv = 1280, 4 * 1 * 128 * 2  # 4 sequences x 1 KV head x 128 x fp16
    assert us["attention.cache_write"] == pytest.approx(_elementwise_s(2 * 2 * new_kv, 2) * 1e6, abs=1e-3)
    assert us["attention.kv_repeat"] == pytest.approx(_elementwise_s(2 * 2 * 4 * 4 * cache * 128 * 2, 2) * 1e6, abs=1e-3)
    assert us["attention.mask_bias"] == pytest.approx(_elementwise_s(cache * (3 + 3 * 2), 3) * 1e6, abs=1e-3)
    block = 4 * GPU.global_load_latency_us.value * 1e-6 + 4 * 64 * 128 * 128 / (
        PEAK * GPU.attention_compute_efficiency.value / SMS)  # 16 CTAs, one wave, 10 key blocks
    assert us["attention.mem_efficient"] == pytest.approx((GPU.kernel_launch_s + 10 * block) * 1e6, abs=1e-3)


def test_rope_moves_q_and_k_only_where_the_attention_path_writes_the_cache():
    """Same eager RoPE kernels in both frameworks; gpt-fast-flash's RoPE op carries the cache write,
    gpt-fast-graph's index_put_ kernels carry it (attention.cache_write)."""
    phase = Phase("prefill", 2, 1024)
    rope = {}
    for fw in ("gpt-fast-flash", "gpt-fast-graph"):
        s = make_scenario(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=1, batch=2, prompt_len=1024,
                          gen_len=256, schedule="standard", dtype="float16", framework=fw)
        rope[fw] = fixed_op_times(s.model, s.hardware, s.workload, 1, phase)[0]["rope"]
    per_kv_head = 2 * 1024 * 128 * 2 * 16  # tokens x head dim x fp16, x16 RoPE's bytes factor
    bw = GPU.memory_bandwidth_bytes_per_s * GPU.elementwise_memory_efficiency.value
    assert rope["gpt-fast-flash"] - rope["gpt-fast-graph"] == pytest.approx(2 * 8 * per_kv_head / bw)


# ---- against the September runs (the shipped graph table) ------------------------------------

def test_every_group_of_the_graph_table_is_within_the_bar(tmp_path, capsys):
    """`laddersim validate` on the table as measured: its framework column names gpt-fast-graph, the
    rows group by model x P2P x framework, and every group's median tokens/s error is <= 8% (issue
    37's bar; they were 46-54% off for the paper 1B/3B rows priced as FlashAttention)."""
    assert main(["validate", str(GRAPH_TABLE), "--report", str(tmp_path / "r")]) == 0
    printed = capsys.readouterr().out
    for group in ("llama-3.1-8b p2p=off gpt-fast-graph", "llama-3.1-8b p2p=on gpt-fast-graph",
                  "paper-1b p2p=on gpt-fast-graph", "paper-3b p2p=off gpt-fast-graph"):
        assert group in printed
    written = pd.read_csv(tmp_path / "r" / "validation.csv")
    assert set(written["framework"]) == {"gpt-fast-graph"}
    medians = (written["rel_error"].abs().groupby([written["model"], written["p2p"]]).median())
    assert len(medians) == 6 and (medians <= 0.08).all(), medians


def test_one_gpu_decode_steps_follow_the_kernel_across_tiles_and_batches():
    """TP 1 (no collective): the decode step of the paper 1B/3B (64x64 tiles, MHA) and Llama-3.1-8B
    (64x128 tiles, GQA 4:1) rows, batch 1-64, within 8% each; at batch 1 the fixed time the
    FlashAttention pricing missed (40-80 us a layer) is the fMHA chain and the added kernels."""
    from laddersim.validation.core import read_measured, validate

    rows = read_measured(GRAPH_TABLE).query("tp == 1 and p2p == 'on'")
    out = validate(rows)
    error = out["predicted_decode_s"] / out["decode_s"] - 1
    assert error.abs().max() < 0.08, out.assign(error=error)[["model", "batch", "schedule", "error"]]
    assert np.sqrt((error ** 2).mean()) < 0.035
