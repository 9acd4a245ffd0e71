"""CPU ranks' placement (laddersim.measure.cores) and the interference solve from mean timings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laddersim.measure.cores import rank_cores
from laddersim.engine.simulator import run_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def test_each_local_rank_gets_its_own_equal_share_of_the_allowed_cores():
    cores = [0, 1, 2, 3, 6, 7]
    shares = [rank_cores(r, 3, cores) for r in range(3)]
    assert shares == [[0, 1], [2, 3], [6, 7]]
    assert rank_cores(1, 2, [0, 1]) == [1]
    assert rank_cores(1, 4, [0, 1, 2, 3, 4]) == [1]  # the fifth core is left over, never shared
    assert rank_cores(0, 3, [0, 1]) is None  # more ranks than cores: nothing is pinned
    assert rank_cores(2, 2, [0, 1]) is None


def test_the_ladder_chain_solve_recovers_the_engines_comm_rate():
    """A ladder chain run by the engine with known rates; the solve (laddersim/measure/ladder_chain)
    gives both rates back from the chain's end and its time in the modules."""
    from laddersim.fitting.ladder_chain import chain_run, chain_work, ladder_rates

    n, module_s, issue_s, comm_s = 8, 0.001, 0.0001, 0.0015
    for slow_c, slow_a in ((0.0, 0.5), (0.2, 3.0), (0.1, 0.0)):
        ladder_s = chain_run(chain_work(n, module_s, issue_s, comm_s), slow_c, slow_a)[0]
        # the modules' time in the chain: what the engine's compute ops took
        result = run_engine([chain_work(n, module_s, issue_s, comm_s)], slow_c, slow_a)
        modules_s = float(sum(result.end_s[0, 3 * i] - result.start_s[0, 3 * i] for i in range(n)))
        compute, comm = ladder_rates(n, n * module_s, ladder_s, modules_s, issue_s, comm_s)
        assert comm == pytest.approx(slow_a, rel=1e-3, abs=1e-3)
        assert compute == pytest.approx(slow_c, rel=1e-3, abs=1e-3)


@settings(max_examples=15, deadline=None)
@given(slow_c=st.floats(0.0, 1.0), slow_a=st.floats(-0.85, 20.0), comm_per_module=st.floats(0.3, 3.0))
def test_the_interference_row_runs_the_measured_ladder_chain_again(slow_c, slow_a, comm_per_module):
    """Whatever the rates behind a ladder chain, the row's rates make the engine end the chain
    and spend its time in the modules as measured (calibrate's row reproduces what it measured)."""
    pytest.importorskip("torch")
    from calibration.interference_bench import ladder_row
    from laddersim.fitting.ladder_chain import chain_run, chain_work

    n, module_s, issue_s = 8, 0.001, 0.0001
    comm_s = comm_per_module * module_s
    ladder_s, modules_s = chain_run(chain_work(n, module_s, issue_s, comm_s), slow_c, slow_a)
    row = ladder_row(n, [(n * module_s, ladder_s, modules_s, issue_s, comm_s + issue_s)] * 3, comm_s)
    again = chain_run(chain_work(n, module_s, issue_s, comm_s), row["compute_slowdown"], row["comm_slowdown"])
    assert again[0] == pytest.approx(ladder_s, rel=1e-3)
    assert again[1] == pytest.approx(modules_s, rel=1e-3)


def test_modules_faster_in_the_ladder_than_alone_are_reported_not_clamped():
    from laddersim.fitting.ladder_chain import ladder_rates

    from laddersim.fitting.ladder_chain import MIN_COMM_SLOWDOWN

    compute, comm = ladder_rates(8, 0.008, 0.011, 0.0076, 0.0001, 0.0015)
    assert compute == pytest.approx(-0.05) and comm >= MIN_COMM_SLOWDOWN
