"""Hypothesis properties of the engine and of whole simulations."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laddersim.engine.simulator import RankWork, run_engine
from laddersim.hardware.overrides import with_overrides
from laddersim.hardware.profile import list_profiles
from laddersim.model.shape import ModelShape
from laddersim.simulation.simulate import Scenario, SimOptions, simulate
from laddersim.model.workload import Workload

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def programs(draw):
    """Random valid two-stream programs: deps only point backwards, to the other stream."""
    n = draw(st.integers(1, 25))
    streams = draw(st.lists(st.sampled_from(["compute", "comm"]), min_size=n, max_size=n))
    deps = []
    for i in range(n):
        other = [j for j in range(i) if streams[j] != streams[i]]
        deps.append(tuple(sorted(draw(st.sets(st.sampled_from(other), max_size=2))) if other else ()))
    n_ranks = draw(st.integers(1, 3))
    durations = [np.array(draw(st.lists(st.floats(0.0, 5.0), min_size=n, max_size=n))) for _ in range(n_ranks)]
    slow = draw(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)))
    return [RankWork(streams, deps, d) for d in durations], slow


@SETTINGS
@given(programs())
def test_streams_never_overlap_and_deps_are_respected(case):
    works, (cs, ms) = case
    result = run_engine(works, compute_slowdown=cs, comm_slowdown=ms)
    eps = 1e-9
    for rank, work in enumerate(works):
        for stream in ("compute", "comm"):
            idx = [i for i, s in enumerate(work.streams) if s == stream]
            for a, b in zip(idx, idx[1:]):  # program order on one stream, no overlap
                assert result.end_s[rank, a] <= result.start_s[rank, b] + eps
        for i, deps in enumerate(work.deps):
            for d in deps:
                assert result.end_s[rank, d] <= result.start_s[rank, i] + eps
            assert result.end_s[rank, i] >= result.start_s[rank, i] - eps
            # an op never runs faster than its standalone time
            assert result.end_s[rank, i] - result.start_s[rank, i] >= work.durations_s[i] - eps


@SETTINGS
@given(programs())
def test_engine_is_deterministic(case):
    works, (cs, ms) = case
    a = run_engine(works, cs, ms)
    b = run_engine(works, cs, ms)
    assert a.signature == b.signature
    assert np.array_equal(a.end_s, b.end_s)


@st.composite
def scenarios(draw):
    n_heads = draw(st.sampled_from([8, 16]))
    model = ModelShape(
        name="prop", n_layers=draw(st.integers(1, 4)), dim=n_heads * 64, n_heads=n_heads,
        n_kv_heads=draw(st.sampled_from([1, 2, 8])), intermediate_size=draw(st.sampled_from([512, 2048, 8192])),
        vocab_size=4096,
    )
    work = Workload(batch=draw(st.sampled_from([1, 4, 32])), prompt_len=draw(st.integers(8, 256)),
                    gen_len=draw(st.integers(2, 12)), kv_cache=draw(st.sampled_from(["static", "dynamic"])))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    return model, work, tp


@SETTINGS
@given(scenarios(), st.floats(1.0, 8.0), st.sampled_from(["standard", "ladder", "parallel", "hybrid:1"]))
def test_more_bandwidth_or_lower_latency_is_never_slower(h100, scenario, factor, schedule):
    model, work, tp = scenario
    base = simulate(Scenario(model, h100, work, tp, schedule)).summary()["total_s"]
    faster_bw = with_overrides(h100, intra_bandwidth_scale=factor)
    lower_lat = with_overrides(h100, intra_latency_scale=1.0 / factor)
    assert simulate(Scenario(model, faster_bw, work, tp, schedule)).summary()["total_s"] <= base * (1 + 1e-12)
    assert simulate(Scenario(model, lower_lat, work, tp, schedule)).summary()["total_s"] <= base * (1 + 1e-12)


@SETTINGS
@given(scenarios())
def test_ladder_never_slower_than_standard_without_interference(h100_no_interference, scenario):
    model, work, tp = scenario
    hw = h100_no_interference
    std = simulate(Scenario(model, hw, work, tp, "standard")).summary()["total_s"]
    lad = simulate(Scenario(model, hw, work, tp, "ladder")).summary()["total_s"]
    assert lad <= std * (1 + 1e-12)


@SETTINGS
@given(scenarios(), st.sampled_from(["standard", "ladder", "desync_half"]))
def test_identical_inputs_give_identical_outputs(h100, scenario, schedule):
    model, work, tp = scenario
    a = simulate(Scenario(model, h100, work, tp, schedule), SimOptions(jitter=0.05, seed=7))
    b = simulate(Scenario(model, h100, work, tp, schedule), SimOptions(jitter=0.05, seed=7))
    assert a.summary() == b.summary()
    assert a.timeline().equals(b.timeline())


SHIPPED_PROFILES = tuple(list_profiles())  # every profile in hardware_profiles/


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SHIPPED_PROFILES), st.sampled_from(["gpt-fast", "gpt-fast-flash", "vllm"]),
       st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([1, 8, 64]),
       st.sampled_from([ModelShape(name="mha-small", n_layers=4, dim=1536, n_heads=24, n_kv_heads=24,
                                   intermediate_size=4096, vocab_size=49152),
                        ModelShape(name="gqa-wide", n_layers=4, dim=8192, n_heads=64, n_kv_heads=8,
                                   intermediate_size=22016, vocab_size=32000)]))
def test_schedules_keep_their_order_on_every_shipped_profile_and_framework(profile, framework, tp, batch, model):
    """On every shipped machine and framework, interference included: Ladder is never much slower than
    standard, and no schedule that still communicates beats upper_bound (no AllReduce at all) by more
    than rounding; every time is finite and positive. A tp one node cannot hold on a machine without a
    network is refused as user input."""
    from laddersim.api import simulate as api_simulate
    from laddersim.errors import UserInputError

    try:
        frame = api_simulate(model, profile, tp, batch, prompt_len=256, gen_len=16, framework=framework,
                             schedules=("standard", "ladder", "desync_half", "upper_bound"))
    except UserInputError as exc:
        assert tp > 8 and "tp" in str(exc)
        return
    tps = frame.set_index("schedule")["tokens_per_s"]
    assert np.isfinite(frame[["prefill_s", "decode_s", "tokens_per_s"]].to_numpy()).all()
    assert (frame[["prefill_s", "decode_s"]] > 0).all().all()
    assert tps["ladder"] >= 0.98 * tps["standard"]
    for schedule in ("standard", "ladder", "desync_half"):
        assert tps[schedule] <= 1.02 * tps["upper_bound"]
