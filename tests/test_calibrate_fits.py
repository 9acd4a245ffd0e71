"""Calibration fits recover the parameters that generated synthetic data (closed-form goldens)."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.fitting.curve_fits import (
    EFFICIENCY_BOUNDS, MEASURED_BANDWIDTH_EFFICIENCY_MAX, _solve_efficiencies, bandwidth_efficiency, fit_line_relative,
    fit_ring_tier, fit_roofline, roofline_time_s,
)
from laddersim.costs.collectives import alpha_beta_time_s
from laddersim.costs.gemm import gemm_time_s
from laddersim.hardware.comm_specs import AlphaBeta
from laddersim.hardware.compute_specs import GpuSpec
from laddersim.hardware.sourced import Sourced


def _s(value: float) -> Sourced:
    return Sourced(value=value, source="test")


def test_line_fit_is_exact_on_a_line_and_clamps_a_negative_intercept():
    x = np.array([1e3, 1e5, 1e7])
    assert fit_line_relative(x, 5e-6 + 2e-10 * x) == pytest.approx((5e-6, 2e-10), rel=1e-9)
    a, b = fit_line_relative(x, 3e-10 * x - 1e-7)  # would need a < 0
    assert a == 0.0 and b > 0


def test_ring_tier_recovers_base_step_and_busbw():
    tier = AlphaBeta(algorithm="ring", base_latency_us=_s(8.0), step_latency_us=_s(0.6),
                     bus_bandwidth_gb_per_s=_s(370.0))
    sizes = 2.0 ** np.arange(10, 29)
    curves = {g: (sizes, alpha_beta_time_s(tier, g, sizes)) for g in (2, 4, 8)}
    fit = fit_ring_tier(curves)
    assert fit.base_latency_s == pytest.approx(8e-6, rel=1e-6)
    assert fit.step_latency_s == pytest.approx(0.6e-6, rel=1e-6)
    assert fit.bus_bandwidth_bytes_per_s == pytest.approx(370e9, rel=1e-6)


def test_ring_tier_of_a_flat_noisy_curve_stays_finite():
    sizes = np.array([1024.0, 65536.0, 1048576.0])
    fit = fit_ring_tier({2: (sizes, np.array([4e-3, 1e-4, 1e-4]))})  # slope would be negative
    assert np.isfinite(fit.bus_bandwidth_bytes_per_s) and fit.bus_bandwidth_bytes_per_s > 0
    assert fit.bus_bandwidth_bytes_per_s == pytest.approx(1048576.0 / 1e-4, rel=1e-9)


def test_roofline_fit_recovers_the_gemm_model_parameters():
    gpu = GpuSpec(name="test", peak_tflops=_s(989.4), memory_bandwidth_gb_per_s=_s(3350), memory_gb=_s(80),
                  gemm_compute_efficiency=_s(0.72), gemm_memory_efficiency=_s(0.85),
                  gemm_blend_order=_s(4.0), gemm_tile_m=_s(64), elementwise_memory_efficiency=_s(0.8),
                  attention_compute_efficiency=_s(0.5), kernel_launch_us=_s(2.7))
    m, n, k = (np.array(v, float) for v in zip(*[(m, n, k) for m in (1, 4, 16, 64, 256, 1024, 4096, 8192)
                                                 for n, k in ((1024, 1024), (4096, 4096), (8192, 8192), (14336, 4096))]))
    times = gemm_time_s(gpu, m, n, k, 2)
    fit = fit_roofline(m, n, k, times, 2, gpu.peak_flops_per_s, gpu.memory_bandwidth_bytes_per_s)
    assert (fit.blend_order, fit.tile_m) == (4.0, 64.0)
    assert fit.compute_efficiency == pytest.approx(0.72, rel=0.01)
    assert fit.memory_efficiency == pytest.approx(0.85, rel=0.01)
    assert fit.launch_s == pytest.approx(2.7e-6, rel=0.02)
    pred = roofline_time_s(fit, m, n, k, 2, gpu.peak_flops_per_s, gpu.memory_bandwidth_bytes_per_s)
    assert np.max(np.abs(pred / times - 1)) < 1e-3


def test_a_time_weighted_roofline_fit_is_right_where_the_time_is():
    """Small GEMMs on one roofline and one long GEMM (an LM head) twice as slow as that roofline
    says: alike, the fit follows the many small ones; weighted by time, it moves toward the long
    one, where a step's seconds are."""
    gpu = GpuSpec(name="test", peak_tflops=_s(0.09), memory_bandwidth_gb_per_s=_s(45), memory_gb=_s(12),
                  gemm_compute_efficiency=_s(0.9), gemm_memory_efficiency=_s(0.3),
                  gemm_blend_order=_s(1.0), gemm_tile_m=_s(1), elementwise_memory_efficiency=_s(0.5),
                  attention_compute_efficiency=_s(0.5), kernel_launch_us=_s(10.0))
    shapes = [(m, n, k) for m in (1, 4, 16, 64) for n, k in ((384, 512), (512, 256), (1536, 512), (512, 768))]
    m, n, k = (np.array(v, float) for v in zip(*(shapes + [(16, 16000, 512)])))
    times = gemm_time_s(gpu, m, n, k, 4)
    times[-1] *= 2.0
    args = (m, n, k, times, 4, gpu.peak_flops_per_s, gpu.memory_bandwidth_bytes_per_s)
    alike, weighted = fit_roofline(*args), fit_roofline(*args, weights=times)
    miss = [abs(roofline_time_s(f, 16, 16000, 512, 4, *args[-2:]) / times[-1] - 1) for f in (alike, weighted)]
    assert miss[0] > 0.4 and miss[1] < miss[0] - 0.15


def _cpu_like_gpu(memory_efficiency: float) -> GpuSpec:
    return GpuSpec(name="test", peak_tflops=_s(0.08), memory_bandwidth_gb_per_s=_s(56), memory_gb=_s(12),
                   gemm_compute_efficiency=_s(0.9), gemm_memory_efficiency=_s(memory_efficiency),
                   gemm_blend_order=_s(1.0), gemm_tile_m=_s(1), elementwise_memory_efficiency=_s(0.5),
                   attention_compute_efficiency=_s(0.5), kernel_launch_us=_s(5.0))


def test_a_memory_term_the_points_do_not_pin_is_held_at_the_bound_and_the_compute_term_refitted():
    """Compute-bound GEMMs (batch 64, weights in cache: memory at 10x the bandwidth): without a
    bound the memory efficiency runs to the generic limit; with the measured-bandwidth bound it
    stops there and the compute term, solved again, still prices the points."""
    gpu = _cpu_like_gpu(10.0)
    m, n, k = (np.array(v, float) for v in zip(*[(64, n, k) for n, k in ((384, 512), (512, 256), (1536, 512),
                                                                          (512, 768), (2048, 2048))]))
    times = gemm_time_s(gpu, m, n, k, 4)
    args = (m, n, k, times, 4, gpu.peak_flops_per_s, gpu.memory_bandwidth_bytes_per_s)
    free = fit_roofline(*args)
    held = fit_roofline(*args, memory_efficiency_max=MEASURED_BANDWIDTH_EFFICIENCY_MAX)
    assert free.memory_efficiency > MEASURED_BANDWIDTH_EFFICIENCY_MAX
    assert held.memory_efficiency <= MEASURED_BANDWIDTH_EFFICIENCY_MAX
    pred = roofline_time_s(held, m, n, k, 4, *args[-2:])
    assert np.max(np.abs(pred / times - 1)) < 0.05  # as good: the points never pinned it


def test_held_at_the_bound_the_compute_efficiency_is_solved_again():
    # Times with no memory part at all (compute at efficiency 0.9): unbounded, the memory
    # efficiency goes to the generic limit; held at 2, the compute one rises to make room for the
    # memory time the bound now adds, the least-squares answer for that memory efficiency.
    c0, m0 = np.array([1e-4, 2e-4, 5e-4, 1e-3]), np.array([1e-5, 1e-5, 4e-5, 5e-5])
    body = c0 / 0.9
    ce_free, me_free = _solve_efficiencies(c0, m0, body, 1.0)
    ce, me = _solve_efficiencies(c0, m0, body, 1.0, memory_max=2.0)
    assert (me_free, me) == (EFFICIENCY_BOUNDS[1], 2.0)
    assert ce_free == pytest.approx(0.9, rel=0.02)
    u = 1.0 / ce  # p = 1: body = c0 * u + m0 / 2, u by least squares in relative terms
    a, r = c0 / body, 1.0 - m0 / 2.0 / body
    assert u == pytest.approx(a @ r / (a @ a), rel=1e-9) and ce > 0.9


def test_the_bound_leaves_a_memory_term_the_points_pin_alone():
    gpu = _cpu_like_gpu(0.3)  # weight streaming at 17 GB/s: batch-1 GEMVs are memory-bound
    shapes = [(mm, n, k) for mm in (1, 4, 16, 64) for n, k in ((384, 512), (1536, 512), (16000, 512))]
    m, n, k = (np.array(v, float) for v in zip(*shapes))
    times = gemm_time_s(gpu, m, n, k, 4)
    args = (m, n, k, times, 4, gpu.peak_flops_per_s, gpu.memory_bandwidth_bytes_per_s)
    free = fit_roofline(*args)
    held = fit_roofline(*args, memory_efficiency_max=MEASURED_BANDWIDTH_EFFICIENCY_MAX)
    assert held == free
    assert held.memory_efficiency == pytest.approx(0.3, rel=0.01)


def test_bandwidth_efficiency_ignores_launch_dominated_points():
    moved = np.array([1e3, 1e8, 1e9])
    times = 2e-6 + moved / (0.8 * 1e12)
    assert bandwidth_efficiency(moved, times, 2e-6, 1e12) == pytest.approx(0.8, rel=1e-9)


def test_laddersim_core_and_calibrate_cli_import_without_torch():
    import subprocess
    import sys

    code = ("import sys; from laddersim.cli import build_parser; build_parser(load_all=True); "
            "import laddersim.fitting.profile_from_run, laddersim.fitting.nccl_tests, laddersim.measure.runner; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_size_decreases_flags_only_drops_beyond_the_margin_below_any_smaller_size():
    from laddersim.fitting.noisy_tables import size_decreases

    sizes = [1024, 4096, 16384, 65536, 262144]
    # 16 KiB is 19% below 4 KiB (kept: within the margin); 64 KiB is 26.7% below 4 KiB, the slowest
    # smaller size; unsorted input is sorted by size first.
    times = [100.0, 150.0, 121.5, 110.0, 400.0]
    assert size_decreases(sizes[::-1], times[::-1]) == [(65536, 110.0, 4096, 150.0)]
    assert size_decreases(sizes, sorted(times)) == []
    # One slow point is one drop (the deepest below it), not one per point after it.
    assert size_decreases(sizes, times, drop=0.1) == [(65536, 110.0, 4096, 150.0)]
    assert size_decreases(sizes, [10.0, 30.0, 11.0, 12.0, 13.0]) == [(16384, 11.0, 4096, 30.0)]
    assert size_decreases(sizes, [10.0, 30.0, 11.0, 40.0, 20.0]) == [(16384, 11.0, 4096, 30.0),
                                                                      (262144, 20.0, 65536, 40.0)]


def test_copied_reason_reads_what_the_fit_wrote_for_that_base_only():
    from laddersim.fitting.run_context import COPIED_PREFIX, copied_reason

    base = "h100-sxm-nvswitch"
    assert copied_reason(Sourced(value=1, source=f"{COPIED_PREFIX}{base} (no GEMM measured): datasheet (x)"),
                         base) == "no GEMM measured"
    assert copied_reason(Sourced(value=1, source=f"{COPIED_PREFIX}{base}: datasheet (SXM5)"), base) == "not measured"
    assert copied_reason(Sourced(value=1, source=f"{COPIED_PREFIX}{base}-other: x"), base) is None
    assert copied_reason(Sourced(value=1, source="fit: calibration run r measurements/gemm.csv"), base) is None


def _interference_fit(is_cuda: bool, sizes_bytes, compute_slowdowns):
    """A stand-in for calibrate fit's context: interference rows on 8 ranks, base h100-sxm-nvswitch."""
    import types

    import pandas as pd

    from laddersim.hardware.profile import load_profile

    rows = pd.DataFrame({"group_size": 8, "size_bytes": sizes_bytes, "compute_slowdown": compute_slowdowns,
                         "comm_slowdown": 0.5, "m": 1, "n": 1024, "k": 1024})
    return types.SimpleNamespace(
        frames={"interference": rows}, base=load_profile("h100-sxm-nvswitch"), is_cuda=is_cuda, resolved_chains=0,
        cite=lambda benchmark, detail: f"fit: test {benchmark}, {detail}",
        copied=lambda value, what="": Sourced(value=value.value, source=f"copied from base profile test{what}"))


def test_interference_measured_at_one_size_on_gpus_keeps_the_channel_rule():
    from laddersim.fitting.profile_from_run import interference_spec

    # 64 KiB on 8 ranks ran on 2 of NCCL's 32 channels: the measured 0.01 is 2/32 of the full-size one.
    gpu = interference_spec(_interference_fit(True, [65536], [0.01]))
    assert gpu.collective_channels.value == 32 and gpu.by_size == []
    assert gpu.compute_slowdown.value == pytest.approx(0.01 * 32 / 2)
    assert gpu.at(65536, 1.0, 8)[0] == pytest.approx(0.01)  # its own point is reproduced
    assert gpu.at(1 << 20, 1.0, 8)[0] == pytest.approx(0.16)
    # gloo has no channels; several sizes give a measured curve instead.
    assert interference_spec(_interference_fit(False, [65536], [0.01])).collective_channels is None
    curve = interference_spec(_interference_fit(True, [65536, 1 << 20], [0.01, 0.1]))
    assert curve.collective_channels is None and len(curve.by_size) == 2


def test_calibrate_fit_says_in_one_line_when_the_gemm_memory_term_sits_at_its_bound(tmp_path):
    """A real CPU calibration (tests/data/calibration_compute_bound_gemms/SOURCE.md) whose batch-4
    GEMMs fit as well at any weight-streaming rate: the profile holds the bound, says so in the
    value's source, and calibrate fit warns once."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from laddersim.hardware.profile import load_profile

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "calibration_compute_bound_gemms", run)
    proc = subprocess.run([sys.executable, "-m", "laddersim", "calibrate", "fit", str(run), "--name", "cb"],
                          capture_output=True, text=True, check=True)
    warnings = [line for line in proc.stderr.splitlines() if "gemm_memory_efficiency" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: gpu.gemm_memory_efficiency: 2,")
    spec = load_profile(str(run / "profile.yaml")).gpu.gemm_memory_efficiency
    assert spec.value == MEASURED_BANDWIDTH_EFFICIENCY_MAX and "held at its bound" in spec.source
