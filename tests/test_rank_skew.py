"""Rank skew: each collective waits for the slowest rank in proportion to the compute before it
(laddersim.costs.rank_skew), fitted from the skew benchmark (laddersim.fitting.host)."""

from __future__ import annotations

from math import pi, sqrt
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from laddersim.fitting.host import rank_skew
from laddersim.costs.op_costs import Phase, op_times_s
from laddersim.costs.rank_skew import compute_before_collectives, expected_max_normal, skew_wait_per_compute
from laddersim.hardware.compute_specs import HostOps, HostOverheadSpec
from laddersim.hardware.sourced import Sourced
from laddersim.schedules.program import build_program
from laddersim.simulation.simulate import make_scenario, simulate

FRACTION = 0.08


def _skewed(hw, fraction: float = FRACTION, group: int = 2):
    spec = HostOverheadSpec(timing="asynchronous", compute_op_us=Sourced(value=0.0, source="test"),
                            view_op_us=Sourced(value=0.0, source="test"),
                            collective_op_us=Sourced(value=0.0, source="test"),
                            ops=[HostOps(kind="collective_launch", collective=1)], ops_source="test counts",
                            rank_skew_fraction=Sourced(value=fraction, source="test"), rank_skew_group=group)
    return hw.model_copy(update={"host_overhead": spec})


def test_expected_largest_normal_draw_closed_forms():
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / sqrt(pi), rel=1e-9)
    assert expected_max_normal(3) == pytest.approx(1.5 / sqrt(pi), rel=1e-9)
    assert expected_max_normal(8) == pytest.approx(1.4236003, rel=1e-6)  # the tabulated order statistic


def test_a_collective_counts_the_compute_since_the_previous_one_cyclically():
    program = build_program("standard", 2, 2)
    kinds = tuple(dict.fromkeys(program.kinds))
    kind_of_op = np.array([kinds.index(k) for k in program.kinds])
    streams = [op.stream for op in program.ops]
    counts = compute_before_collectives(streams, kind_of_op, len(kinds))
    collectives = [i for i, s in enumerate(streams) if s != "compute"]
    assert not counts[[i for i, s in enumerate(streams) if s == "compute"]].any()
    # Every compute op is counted exactly once, before the collective that follows it.
    assert counts.sum(axis=0) == pytest.approx(np.bincount(kind_of_op[[s == "compute" for s in streams]],
                                                           minlength=len(kinds)))
    first = {kinds[k]: n for k, n in enumerate(counts[collectives[0]]) if n}
    # The first AllReduce follows the previous step's sampling (decode steps run back to back).
    assert first == {"sampling": 1, "step_overhead": 1, "embedding": 1, "attn_norm": 1, "qkv": 1, "rope": 1,
                     "attention": 1, "o_proj": 1, "collective_launch": 1}
    gather = {kinds[k]: n for k, n in enumerate(counts[collectives[-1]]) if n}
    assert gather == {"residual_add": 1, "final_norm": 1, "lm_head": 1, "collective_launch": 1}
    # The upper bound's one collective follows the whole pass.
    ub = build_program("upper_bound", 2, 2)
    ub_kinds = tuple(dict.fromkeys(ub.kinds))
    ub_of_op = np.array([ub_kinds.index(k) for k in ub.kinds])
    ub_counts = compute_before_collectives([op.stream for op in ub.ops], ub_of_op, len(ub_kinds))
    assert ub_counts.sum() == len(ub.ops) - 1


def _decode_step(model, hw, tp: int, schedule: str) -> tuple[float, float]:
    """(decode step seconds, the pass's compute-stream seconds) of one decode step."""
    scenario = make_scenario(model=model, hardware=hw, tp=tp, batch=1, prompt_len=16, gen_len=2, schedule=schedule)
    step_s = simulate(scenario).summary()["decode_step_s"]
    work = scenario.workload
    kv_lens = np.atleast_1d(work.kv_len_at_decode_step(np.arange(1))).astype(float)
    times = op_times_s(model, hw, work, tp, Phase("decode", 1, 1), kv_lens)
    program = build_program(schedule, model.n_layers, tp)
    compute_s = sum(float(times[op.kind][0]) for op in program.ops if op.stream == "compute")
    return step_s, compute_s


@pytest.mark.parametrize("schedule", ["standard", "upper_bound"])
@pytest.mark.parametrize("tp", [2, 4])
def test_blocking_collectives_add_the_wait_for_the_slowest_rank(tiny_model, h100_no_interference, schedule, tp):
    """Golden: every collective of these schedules blocks, so a step pays each one's wait; their
    stretches cover the pass once, so the step grows by the fraction of all its compute, carried from
    the two measured ranks to tp by the expected largest normal draw."""
    plain_s, compute_s = _decode_step(tiny_model, h100_no_interference, tp, schedule)
    skewed_s, _ = _decode_step(tiny_model, _skewed(h100_no_interference), tp, schedule)
    scale = expected_max_normal(tp) / expected_max_normal(2)
    assert skewed_s - plain_s == pytest.approx(FRACTION * scale * compute_s, rel=1e-9)


def test_an_overlapped_collective_hides_part_of_its_wait(tiny_model, h100_no_interference):
    standard = [_decode_step(tiny_model, hw, 2, "standard")[0]
                for hw in (h100_no_interference, _skewed(h100_no_interference))]
    ladder = [_decode_step(tiny_model, hw, 2, "ladder")[0]
              for hw in (h100_no_interference, _skewed(h100_no_interference))]
    assert 0.0 < ladder[1] - ladder[0] < standard[1] - standard[0]


def test_one_rank_and_profiles_without_a_measured_skew_wait_for_nobody(h100):
    assert skew_wait_per_compute(h100, 8) == 0.0  # no host section
    assert skew_wait_per_compute(_skewed(h100), 1) == 0.0
    assert skew_wait_per_compute(_skewed(h100, group=4), 4) == pytest.approx(FRACTION)


def test_the_fit_is_the_least_squares_line_through_the_origin():
    stretch = np.array([800.0, 1600.0, 3200.0, 6400.0])
    frame = pd.DataFrame({"world_size": 2, "group_size": 2, "dtype": "float32", "model": "m", "batch": 1,
                          "modules": [1, 2, 4, 8], "reps": 100, "stretch_us": stretch,
                          "wait_us": 0.06 * stretch + np.array([5.0, -5.0, 5.0, -5.0]),
                          "wait_fraction": 0.06})
    fit = SimpleNamespace(frames={"skew": frame}, cite=lambda benchmark, detail: f"{benchmark}: {detail}")
    fitted = rank_skew(fit)
    wait = frame["wait_us"].to_numpy()
    assert fitted["rank_skew_fraction"].value == pytest.approx((stretch * wait).sum() / (stretch ** 2).sum())
    assert fitted["rank_skew_fraction"].value == pytest.approx(0.06, rel=1e-2)
    assert fitted["rank_skew_group"] == 2 and "skew" in fitted["rank_skew_fraction"].source
    assert rank_skew(SimpleNamespace(frames={})) == {}
