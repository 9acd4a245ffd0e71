"""CPU ranks' placement (laddersim.calibrate.cores) and the interference solve from mean timings."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from laddersim.calibrate.cores import rank_cores
from laddersim.engine.simulator import RankWork, run_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def test_each_local_rank_gets_its_own_equal_share_of_the_allowed_cores():
    cores = [0, 1, 2, 3, 6, 7]
    shares = [rank_cores(r, 3, cores) for r in range(3)]
    assert shares == [[0, 1], [2, 3], [6, 7]]
    assert rank_cores(1, 2, [0, 1]) == [1]
    assert rank_cores(1, 4, [0, 1, 2, 3, 4]) == [1]  # the fifth core is left over, never shared
    assert rank_cores(0, 3, [0, 1]) is None  # more ranks than cores: nothing is pinned
    assert rank_cores(2, 2, [0, 1]) is None


def test_the_interference_row_solves_the_engines_rates_from_mean_timings():
    """Repetitions simulated by the engine with known rates, the compute alone varying from one
    repetition to the next (as modules do; the AllReduce ends during each): the rates solved from
    the means are the engine's."""
    pytest.importorskip("torch")
    from calibration.interference_bench import _mean_solve

    comm_s, slow_c, slow_a = 0.002, 0.3, 1.0
    rows = []
    for compute_s in (0.004, 0.005, 0.007):
        work = RankWork(["compute", "comm", "compute"], [(), (0,), ()], np.array([1e-12, comm_s, compute_s]))
        result = run_engine([work], compute_slowdown=slow_c, comm_slowdown=slow_a)
        rows.append((compute_s, result.end_s[0, 2], result.end_s[0, 1]))
    row = _mean_solve(rows, comm_s)
    assert row["compute_slowdown"] == pytest.approx(slow_c, rel=1e-6)
    assert row["comm_slowdown"] == pytest.approx(slow_a, rel=1e-6)
    assert row["compute_p10"] == pytest.approx(slow_c, rel=1e-6) and row["comm_p90"] == pytest.approx(slow_a, rel=1e-6)
    assert row["comm_alone_us"] == pytest.approx(2000.0) and row["reps"] == 3


def test_an_allreduce_done_before_the_compute_began_gives_no_rate_and_no_crash():
    pytest.importorskip("torch")
    from calibration.interference_bench import _mean_solve

    row = _mean_solve([(0.001, 0.0011, 0.0), (0.001, 0.0012, 0.0)], 0.0005)
    assert (row["compute_slowdown"], row["comm_slowdown"]) == (0.0, 0.0)
