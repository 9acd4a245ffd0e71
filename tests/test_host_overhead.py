"""Host (framework) overhead per op kind, the interference solve calibrate uses, and its warnings."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from laddersim.fitting.host import format_counts, host_ops, negative_interference_warnings, parse_counts
from laddersim.costs.op_costs import Phase, op_times_s
from laddersim.hardware.compute_specs import HostOps, HostOverheadSpec
from laddersim.hardware.sourced import Sourced
from laddersim.model.workload import Workload

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WORK = Workload(batch=2, prompt_len=64, gen_len=6)


def _us(value: float) -> Sourced:
    return Sourced(value=value, source="test value")


def _with_host(hw, timing: str):
    spec = HostOverheadSpec(
        timing=timing, compute_op_us=_us(4.0), view_op_us=_us(1.0), collective_op_us=_us(40.0),
        ops=[HostOps(kind="rope", compute=20, view=31), HostOps(kind="collective_launch", collective=1),
             HostOps(kind="sampling", compute=11, view=3)],
        ops_source="test counts")
    return hw.model_copy(update={"host_overhead": spec})


def _decode(model, hw):
    return op_times_s(model, hw, WORK, 4, Phase("decode", WORK.batch, 1), np.array([70.0]))


def test_synchronous_host_time_adds_to_the_kernel_less_the_floor_already_charged(tiny_model, h100):
    plain, host = _decode(tiny_model, h100), _decode(tiny_model, _with_host(h100, "synchronous"))
    floor_s = h100.gpu.kernel_launch_s
    assert host["rope"][0] == pytest.approx(plain["rope"][0] + (20 * 4.0 + 31 * 1.0) * 1e-6 - floor_s, rel=1e-12)
    # Framework-only kinds had no kernel floor to take back.
    assert host["sampling"][0] == pytest.approx(plain["sampling"][0] + (11 * 4.0 + 3 * 1.0) * 1e-6, rel=1e-12)
    assert host["collective_launch"][0] == pytest.approx(plain["collective_launch"][0] + 40e-6, rel=1e-12)
    # Kinds without an entry are unchanged; the comm stream's collectives, whole calls that held
    # their issue, give it to collective_launch.
    for kind in ("qkv", "attention"):
        assert host[kind][0] == plain[kind][0]
    for kind in ("allreduce", "allgather_logits"):
        assert host[kind][0] == pytest.approx(max(plain[kind][0] - 40e-6, 0.0), rel=1e-12, abs=1e-15)


def test_a_measured_allreduce_and_its_host_issue_are_charged_once(tiny_model, h100_no_interference):
    """Golden case: a CPU (synchronous) profile whose AllReduce is a measured call (the issue in
    it) and whose collective issue is 3 us. A standard decode step at TP 2 pays each collective,
    with its issue, once: exactly what it pays without the host section (each launch op's +3 us is
    its collective's -3 us), not 3 us more per collective."""
    from laddersim.simulation.simulate import make_scenario, simulate

    hw = h100_no_interference
    issue = HostOverheadSpec(timing="synchronous", compute_op_us=_us(4.0), view_op_us=_us(1.0),
                             collective_op_us=_us(3.0), ops=[HostOps(kind="collective_launch", collective=1)],
                             ops_source="test counts")
    with_issue = hw.model_copy(update={"host_overhead": issue})

    def step_s(profile) -> float:
        return simulate(make_scenario(model=tiny_model, hardware=profile, tp=2, batch=1, prompt_len=16, gen_len=3,
                                      schedule="standard")).summary()["decode_step_s"]

    plain, host = _decode(tiny_model, hw), _decode(tiny_model, with_issue)
    assert plain["allreduce"][0] > 3e-6 and plain["allgather_logits"][0] > 3e-6  # nothing clamped
    for kind in ("allreduce", "allgather_logits"):
        assert host[kind][0] + (host["collective_launch"][0] - plain["collective_launch"][0]) == \
            pytest.approx(plain[kind][0], rel=1e-12)
    launches = 2 * tiny_model.n_layers + 1  # one per AllReduce and one for the logits' AllGather
    assert step_s(with_issue) == pytest.approx(step_s(hw), rel=1e-9)
    assert abs(step_s(with_issue) - step_s(hw)) < 0.01 * launches * 3e-6


def test_a_gemm_kind_keeps_its_measured_call_and_adds_its_other_ops(tiny_model, h100):
    """A library GEMM's time is a measured call (its fitted floor holds that call's dispatch): the
    kind adds the host time of its other traced ops, never less than nothing."""
    full = _with_host(h100, "synchronous")
    spec = full.host_overhead.model_copy(update={"ops": [*full.host_overhead.ops, HostOps(kind="qkv", compute=1, view=3),
                                                         HostOps(kind="down", compute=1)]})
    plain, host = _decode(tiny_model, h100), _decode(tiny_model, full.model_copy(update={"host_overhead": spec}))
    assert host["qkv"][0] == pytest.approx(plain["qkv"][0] + 3 * 1.0e-6, rel=1e-12)
    assert host["down"][0] == pytest.approx(plain["down"][0], rel=1e-12)


def test_measured_sampling_replaces_the_modelled_kernels_and_its_own_ops(tiny_model, h100):
    """With the sampling call measured (1800 us, 8 of the kind's 11 compute ops), the kind is that
    call plus the host time of the kind's other ops: 3 compute + 3 view ops."""
    full = _with_host(h100, "synchronous")
    spec = full.host_overhead.model_copy(update={"sampling_us": _us(1800.0), "sampling_ops": 8.0})
    host = _decode(tiny_model, full.model_copy(update={"host_overhead": spec}))
    assert host["sampling"][0] == pytest.approx((1800.0 + 3 * 4.0 + 3 * 1.0) * 1e-6, rel=1e-12)
    # More measured ops than the kind traced leave no negative host time.
    spec = spec.model_copy(update={"sampling_ops": 30.0})
    assert _decode(tiny_model, full.model_copy(update={"host_overhead": spec}))["sampling"][0] == \
        pytest.approx(1800e-6, rel=1e-12)


def test_a_rank_with_a_share_of_its_cores_computes_that_much_slower(tiny_model, h100):
    full = _with_host(h100, "synchronous")
    spec = full.host_overhead.model_copy(update={"cpu_share": _us(0.25), "collective_progress": "host_cores"})
    shared = _decode(tiny_model, full.model_copy(update={"host_overhead": spec}))
    for kind, seconds in _decode(tiny_model, full).items():
        # A measured collective is a whole call: the waits for the cores are in it already.
        factor = 1.0 if kind in ("allreduce", "allgather_logits") else 4.0
        assert shared[kind][0] == pytest.approx(seconds[0] * factor, rel=1e-12), kind


def test_asynchronous_host_time_hides_behind_a_longer_kernel(tiny_model, h100):
    plain, host = _decode(tiny_model, h100), _decode(tiny_model, _with_host(h100, "asynchronous"))
    assert host["rope"][0] == pytest.approx(max(plain["rope"][0], 111e-6))
    assert host["qkv"][0] == plain["qkv"][0]


def test_a_profile_without_the_section_is_unchanged(tiny_model, h100):
    assert h100.host_overhead is None
    assert {k: v[0] for k, v in _decode(tiny_model, h100).items()} == \
        {k: v[0] for k, v in _decode(tiny_model, h100.model_copy(update={"host_overhead": None})).items()}


def test_two_entries_for_one_kind_are_refused():
    with pytest.raises(ValueError, match="one entry per kind"):
        HostOverheadSpec(timing="synchronous", compute_op_us=_us(1), view_op_us=_us(1), collective_op_us=_us(1),
                         ops=[HostOps(kind="rope", compute=1), HostOps(kind="rope", compute=2)], ops_source="test")


def test_op_counts_round_trip_and_disagreeing_schedules_are_reported():
    counts = {("rope", "compute"): 20.0, ("rope", "view"): 31.0, ("collective_launch", "collective"): 1.0}
    assert parse_counts(format_counts(counts)) == counts
    rows = pd.DataFrame({"schedule": ["standard", "ladder"],
                         "counts": [format_counts(counts), format_counts({**counts, ("rope", "view"): 29.0})]})
    entries, warnings = host_ops(rows)
    rope = next(e for e in entries if e.kind == "rope")
    assert (rope.compute, rope.view) == (20.0, 30.0)
    assert len(warnings) == 1 and "rope" in warnings[0]
    assert host_ops(rows.iloc[:1])[1] == []


def test_a_negative_slowdown_is_one_warning_line_with_its_figure():
    rows = pd.DataFrame({"size_bytes": [2048, 8192], "reps": [10, 10], "compute_slowdown": [-0.58, 0.1],
                         "comm_slowdown": [0.3, 0.2], "compute_p10": [-0.9, 0.0], "compute_p90": [0.2, 0.2],
                         "comm_p10": [0.1, 0.1], "comm_p90": [0.5, 0.5]})
    lines = negative_interference_warnings(rows)
    assert len(lines) == 1 and "-58.0%" in lines[0] and "2048 B" in lines[0] and "p10 -90.0%" in lines[0]
