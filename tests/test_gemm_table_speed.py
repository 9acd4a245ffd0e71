"""Speed-ups of the GEMM table path give the same numbers as the plain computation."""

from __future__ import annotations

import numpy as np

from laddersim.costs import gemm_tables
from laddersim.hardware.profile import load_profile


def test_cell_medians_at_once_equal_np_median_per_cell(tmp_path):
    rng = np.random.default_rng(3)
    rows = []
    for m in (1, 4, 16):
        for n in (64, 128):
            for k in (256, 512):
                for _ in range(int(rng.integers(1, 5))):  # 1-4 repeats: odd and even counts
                    rows.append((m, n, k, float(rng.choice([1.0, 2.5, 7.25, 3.0]) * rng.uniform(1, 9))))
    path = tmp_path / "gemm.csv"
    path.write_text("m,n,k,time_us\n" + "".join(f"{m},{n},{k},{t!r}\n" for m, n, k, t in rows))
    axes, cube = gemm_tables._grid(path, 0)
    points = np.array(rows)
    for m, n, k in {(r[0], r[1], r[2]) for r in rows}:
        cell = tuple(int(np.searchsorted(a, np.log(v))) for a, v in zip(axes, (m, n, k)))
        same = (points[:, 0] == m) & (points[:, 1] == n) & (points[:, 2] == k)
        assert cube[cell] == np.log(np.median(points[same, 3]) * 1e-6)


def test_remembered_gemm_times_equal_a_fresh_computation():
    hw = load_profile("h100-sxm-nvswitch")
    peak = hw.gpu.peak_flops_per_s_for("bfloat16")
    shapes = [(1, 1024, 8192), (16, 10240, 8192), (4096, 8192, 3584), (3, 7, 5)]
    first = [gemm_tables.library_gemm_time_s(hw, *s, 2, peak) for s in shapes]
    again = [gemm_tables.library_gemm_time_s(hw, *s, 2, peak) for s in shapes]
    gemm_tables._times.clear()
    fresh = [gemm_tables.library_gemm_time_s(hw, *s, 2, peak) for s in shapes]
    assert first == again == fresh
    assert {source for _, source in first} >= {gemm_tables.SILICON}
