"""The repeated K/V reads of a grouped-query decode attention served by L2 (laddersim.costs.l2_reuse)
and the math path's decode kernels (laddersim.costs.math_attention.math_decode_kernels)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laddersim.costs.l2_reuse import group_reads_s
from laddersim.costs.math_attention import math_decode_kernels
from laddersim.costs.op_costs import Phase, attention_time_s
from laddersim.hardware.profile import load_profile
from laddersim.model.shape import load_model_shape
from laddersim.model.workload import Workload

H100 = load_profile("h100-sxm-nvswitch")
HBM = 3350e9 * 0.873  # the profile's HBM peak x gemm_memory_efficiency
L2 = 4400e9


def test_h100_states_its_l2():
    assert H100.gpu.l2_cache_mb.value == 50 and "datasheet" in H100.gpu.l2_cache_mb.source
    assert H100.gpu.l2_bandwidth_gb_per_s.value == 4400


def test_group_reads_golden():
    """8B at TP 1, batch 64, a 1536-position cache: K of 8 KV heads read by 32 query heads."""
    once, repeated, window = 64 * 1536 * 8 * 128 * 2, 64 * 1536 * 32 * 128 * 2, 1536 * 128 * 2
    assert float(group_reads_s(H100.gpu, once, repeated, window)) == pytest.approx(repeated / L2)
    # the reuse window beyond the 50 MB L2: every query head's read from HBM
    assert float(group_reads_s(H100.gpu, once, repeated, 51e6)) == pytest.approx(repeated / HBM)
    # no repeats (one query head per KV head): HBM bounds it, L2 gives nothing
    assert float(group_reads_s(H100.gpu, once, once, window)) == pytest.approx(once / HBM)


def test_a_gpu_without_l2_figures_reads_every_repeat_from_hbm():
    gpu = load_profile("a100-sxm-nvswitch").gpu
    assert gpu.l2_bandwidth_gb_per_s is None
    hbm = gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value
    assert float(group_reads_s(gpu, 1e6, 4e6, 1e3)) == pytest.approx(4e6 / hbm)


@settings(max_examples=60, deadline=None)
@given(unique=st.floats(1e3, 1e10), group=st.integers(1, 16), window=st.floats(1e3, 1e9))
def test_l2_never_beats_hbm_on_the_unique_bytes_nor_loses_to_hbm_on_all(unique, group, window):
    seconds = float(group_reads_s(H100.gpu, unique, group * unique, window))
    assert unique / HBM * (1 - 1e-12) <= seconds <= group * unique / HBM * (1 + 1e-12)


def test_math_decode_kernels_golden():
    """Llama-3.1-8B TP 1, batch 64, cache 1536, fp32 scores: three generated reductions."""
    kernels = math_decode_kernels(H100.gpu, variant="math_fp32", batch=64, cache_len=1536, heads=32, kv_heads=8,
                                  head_dim=128, dtype_bytes=2, fp32_peak_flops_per_s=67e12)
    by_name = {k.name: k for k in kernels}
    assert [k.kernel_class for k in kernels] == ["generated"] * 3
    scores = 64 * 32 * 1536 * 4
    repeated = 64 * 1536 * 32 * 128 * 2
    launch = 3.55e-6
    assert float(by_name["scores"].seconds) == pytest.approx(launch + repeated / L2 + (scores + 64 * 1536) / HBM)
    assert float(by_name["softmax"].seconds) == pytest.approx(launch + 2 * scores / HBM)  # 1536 > 1024: two passes
    assert float(by_name["values"].seconds) == pytest.approx(launch + repeated / L2 + (scores + 64 * 32 * 128 * 2) / HBM)
    # a row within Inductor's persistent-reduction limit is read once
    short = math_decode_kernels(H100.gpu, variant="math_fp32", batch=64, cache_len=1024, heads=32, kv_heads=8,
                                head_dim=128, dtype_bytes=2, fp32_peak_flops_per_s=67e12)
    assert float(short[1].seconds) == pytest.approx(launch + 64 * 32 * 1024 * 4 / HBM)


def test_decode_attention_of_gpt_fast_is_the_math_kernels_and_grows_with_the_cache():
    model = load_model_shape("llama-3.1-8b")
    work = Workload(batch=64, prompt_len=1024, gen_len=512, kv_cache="dynamic", framework="gpt-fast")
    lens = np.array([1025.0, 1536.0, 4096.0])
    seconds = attention_time_s(model, H100, work, 1, Phase("decode", 64, 1), lens)
    for length, got in zip(lens, seconds):
        want = sum(float(k.seconds) for k in math_decode_kernels(
            H100.gpu, variant="math_fp32", batch=64, cache_len=length, heads=32, kv_heads=8, head_dim=128,
            dtype_bytes=2, fp32_peak_flops_per_s=67e12))
        assert got == pytest.approx(want)
    assert np.all(np.diff(seconds) > 0)
    # ~4.4 TB/s over the repeated K/V reads at 1536 positions: below what HBM alone could stream
    assert seconds[1] < 2 * 64 * 1536 * 32 * 128 * 2 / 3350e9


def test_math_decode_reading_each_kv_head_once_streams_the_cache_once():
    """kv_reads per_kv_head: no repeats, so the cache is streamed once from HBM (nothing for L2)."""
    once = 64 * 1536 * 8 * 128 * 2
    kernels = math_decode_kernels(H100.gpu, variant="math_fp32", batch=64, cache_len=1536, heads=32, kv_heads=8,
                                  head_dim=128, dtype_bytes=2, fp32_peak_flops_per_s=67e12, kv_reads="per_kv_head")
    scores = 64 * 32 * 1536 * 4
    assert float(kernels[0].seconds) == pytest.approx(3.55e-6 + once / HBM + (scores + 64 * 1536) / HBM)
