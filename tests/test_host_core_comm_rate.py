"""A comm rate below 0: on CPU ranks whose collectives progress on the compute cores (gloo), an
AllReduce beside compute ends sooner than one waited on (``laddersim.fitting.ladder_chain``).

The engine runs it as it runs any rate (1 / (1 + x) while a rank computes), every path alike; the
ladder-chain solver finds it where the measured chain ended sooner than its AllReduces allow one
after another; the profile schema takes it above -1 and nowhere at or below."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from test_engine_paths import assert_same, programs

from laddersim.engine import entry
from laddersim.engine.cached import forget
from laddersim.engine.simulator import run_engine
from laddersim.engine.work import EngineRun
from laddersim.fitting.host import negative_interference_warnings
from laddersim.fitting.ladder_chain import MIN_COMM_SLOWDOWN, chain_run, chain_work, ladder_rates
from laddersim.hardware import load_profile
from laddersim.hardware.comm_specs import InterferencePoint, InterferenceSpec
from laddersim.hardware.sourced import Sourced

import pandas as pd


@settings(max_examples=60, deadline=None)
@given(programs())
def test_every_engine_path_runs_a_comm_rate_below_zero_alike(case):
    works, cs, ms, links = case
    faster = -0.9 * ms  # in (-0.9, 0]: collectives beside compute up to 10x faster
    forget()
    expected = run_engine(works, cs, faster, links)
    asked = EngineRun(works, cs, faster, links, "decode")
    assert_same(entry.run(asked), expected)
    assert_same(entry.run(asked, replay=False), expected)
    for got in entry.run_many([asked, asked]):
        assert_same(got, expected)
    forget()


def test_a_collective_beside_compute_ends_sooner_at_a_rate_below_zero():
    # One module (1 ms) then its AllReduce (2 ms) beside the next module (1 ms): the AllReduce
    # runs beside compute for the first ms. At x = -0.5 it moves 2 ms of work per ms there.
    work = chain_work(3, 1e-3, 0.0, 2e-3)
    end_0, _ = chain_run(work, 0.0, 0.0)
    end_neg, _ = chain_run(work, 0.0, -0.5)
    assert end_neg < end_0
    assert chain_run(work, 0.0, -0.5)[1] == pytest.approx(3e-3)  # the modules' own time is unchanged


@pytest.mark.parametrize("compute, comm", [(0.0, -0.5), (0.8, -0.46), (0.3, -0.2), (1.5, 0.4)])
def test_ladder_rates_recover_the_rates_a_chain_ran_at(compute, comm):
    # A chain of 8 modules of 0.4 ms, AllReduces of 2.2 ms (a gloo step on two shared cores):
    # timed by the engine at known rates, solved back.
    n, module_s, issue_s, comm_s = 8, 0.4e-3, 10e-6, 2.2e-3
    work = chain_work(n, module_s, issue_s, comm_s)
    ladder_s, modules_s = chain_run(work, compute, comm)
    got = ladder_rates(n, n * module_s, ladder_s, modules_s, issue_s, comm_s)
    assert got == pytest.approx((compute, comm), abs=2e-3)


def test_a_chain_faster_than_any_rate_is_held_at_the_floor():
    n, module_s, comm_s = 8, 0.4e-3, 2.2e-3
    work = chain_work(n, module_s, 0.0, comm_s)
    fastest, _ = chain_run(work, 0.0, MIN_COMM_SLOWDOWN)
    assert ladder_rates(n, n * module_s, 0.5 * fastest, n * module_s, 0.0, comm_s)[1] == MIN_COMM_SLOWDOWN


def test_the_schema_takes_a_comm_rate_above_minus_one_only():
    spec = InterferenceSpec(compute_slowdown=Sourced(value=0.5, source="test"),
                            comm_slowdown=Sourced(value=-0.46, source="test"))
    assert spec.at(2048) == (0.5, -0.46)
    InterferencePoint(size_bytes=2048, compute_slowdown=0.5, comm_slowdown=-0.9, source="test")
    for bad in (-1.0, -1.5):
        with pytest.raises(ValueError):
            InterferenceSpec(compute_slowdown=Sourced(value=0.5, source="test"),
                             comm_slowdown=Sourced(value=bad, source="test"))
        with pytest.raises(ValueError):
            InterferencePoint(size_bytes=2048, compute_slowdown=0.5, comm_slowdown=bad, source="test")
    with pytest.raises(ValueError):  # compute below 0 stays a measurement problem
        InterferenceSpec(compute_slowdown=Sourced(value=-0.1, source="test"),
                         comm_slowdown=Sourced(value=0.0, source="test"))


def test_fit_warns_about_a_negative_comm_rate_only_where_it_is_not_a_ladder_chain():
    row = {"size_bytes": 2048, "reps": 30, "compute_slowdown": 0.8, "comm_slowdown": -0.4,
           "compute_p10": 0.5, "compute_p90": 1.0, "comm_p10": -0.6, "comm_p90": -0.2}
    chain = pd.DataFrame([{**row, "model": "examples/small-4l-512/config.json"}])
    gemms = pd.DataFrame([{**row, "model": "-"}])
    assert negative_interference_warnings(chain) == []
    (line,) = negative_interference_warnings(gemms)
    assert "comm slowdown measured -40.0%" in line


def test_a_profile_with_a_comm_rate_below_zero_predicts_a_faster_ladder_only():
    # The same profile with the AllReduce beside compute faster: ladder (which overlaps) speeds
    # up, standard (which never overlaps a collective with compute) is unchanged.
    from laddersim.simulation.simulate import SimOptions, make_scenario, simulate

    base = load_profile("h100-sxm-nvswitch")

    def with_comm(x):
        itf = base.interference.model_copy(update={"comm_slowdown": Sourced(value=x, source="test")})
        return base.model_copy(update={"interference": itf})

    def tokens(profile, schedule):
        return simulate(make_scenario(model="llama-3.1-8b", hardware=profile, tp=8, batch=1, prompt_len=64, gen_len=8,
                                         schedule=schedule)).summary()["tokens_per_s"]

    assert tokens(with_comm(-0.5), "standard") == pytest.approx(tokens(with_comm(0.0), "standard"), rel=1e-12)
    assert tokens(with_comm(-0.5), "ladder") > tokens(with_comm(0.0), "ladder")
    assert np.isfinite(tokens(with_comm(-0.9), "ladder"))
    # The fast paths give what the SimPy engine gives at a rate below 0 too.
    for schedule in ("ladder", "parallel", "desync_half"):
        scenario = make_scenario(model="llama-3.1-8b", hardware=with_comm(-0.6), tp=8, batch=4, prompt_len=64,
                                 gen_len=8, schedule=schedule)
        fast, reference = simulate(scenario).summary(), simulate(scenario, SimOptions(reference=True)).summary()
        assert fast["tokens_per_s"] == pytest.approx(reference["tokens_per_s"], rel=1e-9), schedule
