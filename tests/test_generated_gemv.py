"""gpt-fast's batch-1 linear, a generated reduction (``single_token_linear: generated``), priced at
the best streaming the profile's measured GEMM table shows for its weight bytes
(laddersim.costs.generated_gemv); the eager frameworks' library GEMMs do not move."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laddersim.costs.gemm_tables import SILICON, SOL, library_gemm_time_s
from laddersim.costs.generated_gemv import generated_gemv_time_s, weight_bytes
from laddersim.costs.op_costs import Phase, linear_shapes, op_times_s
from laddersim.fitting.row_parameters import apply
from laddersim.hardware.profile import list_profiles, load_profile
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload
from laddersim.support.resources import data_path

WIDTHS = [256, 512, 768, 1024, 1280, 1536, 2048, 3072, 3328, 4096, 5120, 6656, 8192, 12288, 16384, 28672]


def test_a_generated_linear_streams_as_the_fastest_measured_kernels_of_its_bytes(h100):
    """Golden, from tables/aic_gemm_h100_sxm_vllm_0.24.0.csv (AIConfigurator h100_sxm vllm 0.24.0,
    M = 1 rows): Llama-3.1-405B's gate/up shard at TP 16 (6656 x 16384, 218.1 MB of weights) lies
    between two of the fastest rows of their bytes, n x k = 2048 x 51200 (209.7 MB, 71.1662 us) and
    16384 x 7168 (234.9 MB, 77.9813 us), and is priced between them, linearly in bytes; cuBLAS at
    its own shape is interpolated between 6144 x 16384 (82.97 us) and 7168 x 16384 (97.27 us), tall
    shapes cuBLAS streams 20% slower than their transposes."""
    peak = h100.gpu.peak_flops_per_s
    low, high = (2 * 2048 * 51200, 71.1662e-6), (2 * 16384 * 7168, 77.9813e-6)
    moved = weight_bytes(6656, 16384, 2)
    expected = low[1] + (high[1] - low[1]) * (moved - low[0]) / (high[0] - low[0])
    seconds, label = generated_gemv_time_s(h100, 6656, 16384, 2, peak)
    assert (seconds, label) == (pytest.approx(expected, rel=1e-12), SILICON)
    library_s, _ = library_gemm_time_s(h100, 1, 6656, 16384, 2, peak)
    assert 82.97e-6 < library_s < 97.28e-6 and seconds < 0.82 * library_s
    # A shape measured as one of the fastest of its bytes is its own row.
    assert generated_gemv_time_s(h100, 16384, 7168, 2, peak)[0] == pytest.approx(77.9813e-6, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(WIDTHS), st.sampled_from(WIDTHS), st.sampled_from(WIDTHS), st.sampled_from(WIDTHS))
def test_the_generated_kernel_sees_bytes_not_aspect(h100, n, k, n2, k2):
    """Properties: never slower than the library GEMM of its own shape; where it is faster, the same
    time for a shape and its transpose (the reduction streams the same weights whatever their
    aspect) and no shape with more weight bytes is faster."""
    peak = h100.gpu.peak_flops_per_s

    def both(a: int, b: int) -> tuple[float, float]:
        return generated_gemv_time_s(h100, a, b, 2, peak)[0], library_gemm_time_s(h100, 1, a, b, 2, peak)[0]

    (seconds, library_s), (transposed, transposed_library_s), (other, other_library_s) = both(n, k), both(k, n), both(n2, k2)
    assert seconds <= library_s and transposed <= transposed_library_s and other <= other_library_s
    if seconds < library_s and transposed < transposed_library_s:
        assert seconds == pytest.approx(transposed, rel=1e-12)
    if n2 * k2 > n * k and other < other_library_s:
        assert other >= seconds


def test_outside_the_table_it_is_the_library_gemm(h100):
    """No measured 16-bit kernel to stand for it: another dtype (the tables are 16-bit), a profile
    without a table, more weight bytes than any M = 1 row: the library GEMM, as before."""
    peak = h100.gpu.peak_flops_per_s
    for dtype_bytes in (1, 4):
        assert generated_gemv_time_s(h100, 8192, 8192, dtype_bytes, peak) == \
            library_gemm_time_s(h100, 1, 8192, 8192, dtype_bytes, peak)
    no_table = h100.model_copy(update={"gpu": h100.gpu.model_copy(update={"gemm_tables": []})})
    assert generated_gemv_time_s(no_table, 8192, 8192, 2, peak) == library_gemm_time_s(no_table, 1, 8192, 8192, 2, peak)
    assert generated_gemv_time_s(no_table, 8192, 8192, 2, peak)[1] == SOL
    huge = generated_gemv_time_s(h100, 131072, 65536, 2, peak)  # 17 GB, past the 6.7 GB largest row
    assert huge == library_gemm_time_s(h100, 1, 131072, 65536, 2, peak)


@pytest.mark.parametrize("name", list_profiles())
def test_no_faster_than_device_memory(name):
    """A decode step streams each layer's weights from device memory: the generated kernel is never
    faster than the datasheet bandwidth allows, though a table row may be (52 of the L40S table's
    483 M = 1 rows, served by L2 in the collector's loop, up to 2.7x its 864 GB/s), unless the
    library GEMM of its own shape, which it never exceeds, is."""
    profile = load_profile(name)
    peak = profile.gpu.peak_flops_per_s
    for n in WIDTHS:
        for k in (512, 4096, 8192, 16384):
            seconds = generated_gemv_time_s(profile, n, k, 2, peak)[0]
            library_s = library_gemm_time_s(profile, 1, n, k, 2, peak)[0]
            streamed_s = weight_bytes(n, k, 2) / profile.gpu.memory_bandwidth_bytes_per_s
            assert seconds >= min(streamed_s, library_s) * (1 - 1e-12), (n, k)
    if name == "l40s-pcie":  # Llama-3.1-8B's QKV shard at TP 8: the table's best rows of its bytes beat DRAM
        assert generated_gemv_time_s(profile, 768, 4096, 2, peak)[0] == pytest.approx(
            weight_bytes(768, 4096, 2) / 864e9, rel=1e-12)


def test_a_fitted_machine_moves_the_generated_kernel_as_the_library_one(h100):
    """A fitted device speed s (laddersim fit) moves the generated kernel's table time as it moves a
    library GEMM's: above the floor, 1/s the time, the floor included (gemm_tables.follow_fit)."""
    peak = h100.gpu.peak_flops_per_s
    fitted = apply(h100, {"device_speed_scale": 0.8}, "test")
    for n, k in ((6656, 16384), (1280, 8192), (768, 4096)):
        base_s = generated_gemv_time_s(h100, n, k, 2, peak)[0]
        assert generated_gemv_time_s(fitted, n, k, 2, peak)[0] == pytest.approx(base_s / 0.8, rel=1e-9)


MODEL = ModelShape(name="llama-3.1-8b-like", n_layers=4, dim=4096, n_heads=32, n_kv_heads=8,
                   intermediate_size=14336, vocab_size=128256)


@pytest.mark.parametrize("framework, batch, generated", [("gpt-fast", 1, True), ("gpt-fast", 2, False),
                                                         ("gpt-fast-flash", 1, False), ("gpt-fast-graph", 1, False),
                                                         ("vllm", 1, False)])
def test_only_a_compiled_one_row_linear_is_generated(h100, framework, batch, generated):
    """gpt-fast's batch-1 decode linears are generated kernels; at batch 2, and in the eager
    frameworks (library GEMMs at every M: gpt-fast-flash, gpt-fast-graph, vLLM) every linear is the
    library GEMM of the table, unchanged."""
    peak = h100.gpu.peak_flops_per_s
    work = Workload(batch=batch, prompt_len=64, gen_len=4, dtype="bfloat16", framework=framework)
    phase = Phase("decode", batch, 1)
    times = op_times_s(MODEL, h100, work, 2, phase, np.array([64.0]))
    for kind in ("qkv", "o_proj", "gate_up", "down"):
        m, n, k, _ = linear_shapes(MODEL, 2, phase)[kind]
        priced = generated_gemv_time_s if generated else (lambda hw, n, k, b, p: library_gemm_time_s(hw, m, n, k, b, p))
        split_reduce = times[kind][0] - priced(h100, n, k, 2, peak)[0]
        if generated or framework == "vllm" or batch == 1:  # no split-K reduce at M = 1 nor in vLLM's table
            assert split_reduce == pytest.approx(0.0, abs=1e-15), kind
        else:
            assert split_reduce > 0.0, kind


def test_the_compiled_tables_batch_1_rows():
    """The paper's 70B figure and the 8B TP sweep (gpt-fast compiled, laddersim/data/validation), their
    41 batch-1 rows: tokens/s median |error| 3.3% (7.0% with the linears at cuBLAS's M = 1 rows, all
    predicted slow); the upper_bound rows (no collective: the step's compute) -5.0% to +1.6%
    (-13.1% to -4.0% before). And the 405B figure's batch-1 upper_bound decode (TP 16, 11.69 s
    measured): within 3% (12.60 s, 7.7% slow, before)."""
    from laddersim.validation.core import ValidationSetup, read_measured, validate

    rows = [validate(read_measured(data_path("validation", name)), ValidationSetup())
            for name in ("ladder_70b_tp_sweep.csv", "ladder_8b_tp_sweep.csv")]
    batch_1 = [frame[frame["batch"] == 1] for frame in rows]
    errors = np.concatenate([frame["rel_error"].to_numpy() for frame in batch_1])
    assert len(errors) == 41 and np.median(np.abs(errors)) < 0.04
    bound = np.concatenate([frame[frame["schedule"] == "upper_bound"]["rel_error"].to_numpy() for frame in batch_1])
    assert np.all(np.abs(bound) < 0.055)
    big = validate(read_measured(data_path("validation", "ladder_405b_2node.csv")))
    ub = big[(big["batch"] == 1) & (big["schedule"] == "upper_bound")].iloc[0]
    assert ub["predicted_decode_s"] == pytest.approx(ub["decode_s"], rel=0.03)
