"""GEMM model: the measured tables (shipped rows) are reproduced, small-M decode GEMMs are
memory-bound and large-M ones compute-bound at the fitted efficiencies."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.costs.gemm import gemm_time_s, memory_bound_time_s
from laddersim.hardware.profile import load_profile
from laddersim.profiles_check.compare import check_gemm


@pytest.mark.parametrize("name", ["h100-sxm-nvswitch", "h200-sxm-nvswitch", "a100-sxm-nvswitch", "l40s-pcie"])
def test_gemm_tables_median_error_within_10pct(name):
    """Acceptance of issue 3 on the llama subset (n, k >= 512); every table the profile measures."""
    checks = check_gemm(load_profile(name), force_shipped=True)
    assert checks
    for c in checks:
        assert c.median("llama") <= 0.10, (c.table.file, c.median("llama"))
        assert c.median("all") <= 0.15, (c.table.file, c.median("all"))


def test_decode_gemm_is_memory_bound():
    """Llama-70B gate/up at TP 8, m = 1..16: time is the weight read at the fitted bandwidth."""
    gpu = load_profile("h100-sxm-nvswitch").gpu
    n, k = 2 * 28672 // 8, 8192
    weight_bytes = 2 * n * k
    floor = weight_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value)
    t = gemm_time_s(gpu, np.array([1, 8, 16]), n, k)
    assert np.all(t >= floor) and np.all(t <= 1.25 * floor + gpu.kernel_launch_s)
    assert t[2] / t[0] < 1.05  # 16x the tokens, same time: memory-bound


def test_large_m_gemm_is_compute_bound():
    gpu = load_profile("h100-sxm-nvswitch").gpu
    m, n, k = 8192, 8192, 8192
    ideal = 2.0 * m * n * k / (gpu.peak_flops_per_s * gpu.gemm_compute_efficiency.value)
    t = gemm_time_s(gpu, m, n, k)
    assert ideal <= t <= 1.1 * ideal + gpu.kernel_launch_s
    assert gemm_time_s(gpu, 2 * m, n, k) / t == pytest.approx(2.0, rel=0.05)


def test_measured_h100_points():
    """AIConfigurator h100_sxm, m=n=k=8192: vLLM 0.24.0 1.542 ms, TRT-LLM 1.3.0rc20 1.405 ms;
    m=1024: 164 / 191 us. The one efficiency fitted over all shapes lands between the two
    frameworks' kernels (within 15% of each)."""
    gpu = load_profile("h100-sxm-nvswitch").gpu
    for m, measured in ((8192, (1.542e-3, 1.405e-3)), (1024, (164.0e-6, 190.7e-6))):
        t = gemm_time_s(gpu, m, 8192, 8192)
        for value in measured:
            assert t == pytest.approx(value, rel=0.15)


def test_memory_bound_kernels_closed_form():
    gpu = load_profile("a100-sxm-nvswitch").gpu
    moved = 1e9
    expected = 2 * gpu.kernel_launch_s + moved / (gpu.memory_bandwidth_bytes_per_s * gpu.elementwise_memory_efficiency.value)
    assert memory_bound_time_s(gpu, moved, kernels=2) == pytest.approx(expected)
