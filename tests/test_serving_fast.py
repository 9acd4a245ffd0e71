"""Serving at a million requests (issue 40): the direct event loop with its decode runs
(laddersim.traffic.replica_loop), the slot-based scheduler, and the pipelined replica's SimPy loop
over it, bit for bit against serving as it was (tests/reference_serving.py: SimPy processes over
the per-request scheduler) on hypothesis-drawn workloads; the array paths against their one-by-one
arithmetic; the per-request files against the one-shot writer; a rate plan the same on one and two
workers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import reference_serving
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from laddersim.errors import UserInputError
from laddersim.hardware import load_profile
from laddersim.hardware.compute_specs import HostOps, HostOverheadSpec
from laddersim.hardware.sourced import Sourced
from laddersim.model.shape import ModelShape
from laddersim.traffic.arrivals import Requests, draw_requests, parse_length
from laddersim.traffic.attention_cost import TABLE_START
from laddersim.traffic.iteration_time import IterationTimer
from laddersim.traffic.options import serving_options
from laddersim.traffic.pipelined import simulate_pipelined_replica, stage_timers
from laddersim.traffic.arrivals import arrival_events
from laddersim.traffic.replica import simulate_replica
from laddersim.traffic.run import kv_blocks_for, serving_scenario

TINY = ModelShape(name="tiny8", n_layers=8, dim=1024, n_heads=16, n_kv_heads=4, intermediate_size=4096,
                  vocab_size=32000, max_position_embeddings=16384)
# (model, profile, tp, pp): one node and two, NVSwitch, P2P off, PCIe, the profiles' own GPUs
SPLITS = [(TINY, "h100-sxm-nvswitch", 2, 1), (TINY, "h100-sxm-p2p-off", 4, 1), (TINY, "l40s-pcie", 2, 1),
          (TINY, "a100-sxm-nvswitch", 1, 2), (TINY, "h100-sxm-nvswitch", 2, 2), (TINY, "host-overhead", 2, 1),
          ("llama-3.1-8b", "h100-sxm-nvswitch", 2, 1), ("llama-3.1-8b", "h100-pcie", 1, 2),
          ("llama-3.1-70b", "h100-sxm-nvswitch", 8, 1), ("llama-3.1-8b", "h100-sxm-aws-p5-efa", 16, 1)]
SCHEDULES = ["standard", "ladder", "parallel", "desync_half", "upper_bound", "hybrid:3"]
FRAMEWORKS = ["gpt-fast", "vllm", "gpt-fast-flash"]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _profile(name: str):
    """A shipped profile, or h100-sxm-nvswitch with the framework's host dispatch of attention
    (laddersim.costs.host_overhead: the attention path's host time)."""
    if name != "host-overhead":
        return load_profile(name)
    us = lambda v: Sourced(value=v, source="test value")  # noqa: E731
    spec = HostOverheadSpec(timing="synchronous", compute_op_us=us(4.0), view_op_us=us(1.0),
                            collective_op_us=us(40.0), ops_source="test counts",
                            ops=[HostOps(kind="attention", compute=6, view=9), HostOps(kind="sampling", compute=11)])
    return load_profile("h100-sxm-nvswitch").model_copy(update={"host_overhead": spec})


def _timers(scenario, options):
    return stage_timers(scenario, options) if scenario.pp > 1 else IterationTimer(scenario, options.points_per_octave)


def _serve_both(scenario, requests, options, kv_blocks):
    """(the reference's run, this one's), each on timers of its own."""
    if scenario.pp > 1:
        return (reference_serving.simulate_pipelined_replica(_timers(scenario, options), requests, options, kv_blocks),
                simulate_pipelined_replica(_timers(scenario, options), requests, options, kv_blocks))
    return (reference_serving.simulate_replica(_timers(scenario, options), requests, options, kv_blocks),
            simulate_replica(_timers(scenario, options), requests, options, kv_blocks))


def assert_same_run(expected, got):
    for name in ("first_token_s", "finish_s", "preemptions"):
        a, b = getattr(expected, name), getattr(got, name)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), name
    assert (expected.iterations, expected.kv_blocks, expected.engine_runs, expected.iteration_error_bound) == \
        (got.iterations, got.kv_blocks, got.engine_runs, got.iteration_error_bound)
    assert np.array_equal([expected.mean_in_system], [got.mean_in_system], equal_nan=True)


@st.composite
def workloads(draw):
    """A replica (model, profile, TP, PP, schedule, framework), its engine's options and requests:
    Poisson or gamma arrivals, all at once, or a trace's rounded times (arrivals at one instant);
    fixed or drawn lengths; KV blocks as the memory gives or few enough to preempt."""
    model, hw, tp, pp = draw(st.sampled_from(SPLITS))
    schedule, framework = draw(st.sampled_from(SCHEDULES)), draw(st.sampled_from(FRAMEWORKS))
    try:
        scenario = serving_scenario(model, _profile(hw), tp, schedule, framework=framework, pp=pp)
    except UserInputError:
        assume(False)
    chunked = draw(st.booleans())
    options = serving_options(chunked_prefill=chunked, max_running=draw(st.sampled_from([2, 4, 16, 64])),
                              max_batched_tokens=draw(st.sampled_from([256, 1024, 8192])),
                              block_size=draw(st.sampled_from([1, 8, 16])))
    n = draw(st.integers(1, 60))
    prompt = draw(st.sampled_from(["1", "64", "uniform:1:200", "exponential:60"]))
    output = draw(st.sampled_from(["1", "40", "uniform:1:90", "exponential:20"]))
    rate = draw(st.sampled_from([0.5, 5.0, 40.0, 400.0]))
    requests = draw_requests(n, rate, parse_length(prompt, "p"), parse_length(output, "g"),
                             draw(st.integers(0, 50)), draw(st.sampled_from([1.0, 0.3])))
    arrivals = draw(st.sampled_from(["drawn", "burst", "rounded"]))
    if arrivals == "burst":
        requests = Requests(np.zeros(n), requests.prompt_len, requests.output_len)
    elif arrivals == "rounded":  # a trace with 0.1 s resolution: several requests per instant
        requests = Requests(np.round(requests.arrival_s, 1), requests.prompt_len, requests.output_len)
    if not chunked:  # vLLM's model-length rule: prompt + output within one iteration's budget
        assume(int((requests.prompt_len + requests.output_len).max()) <= options.max_batched_tokens)
    blocks = kv_blocks_for(scenario, options)
    longest = -(-int((requests.prompt_len + requests.output_len).max()) // options.block_size)
    if draw(st.booleans()):  # room for a few requests only: preemption by recompute
        blocks = min(blocks, max(longest * scenario.pp, draw(st.integers(1, 3)) * longest * scenario.pp))
    return scenario, requests, options, blocks


@SETTINGS
@given(workloads())
def test_replica_equals_the_simpy_reference(case):
    scenario, requests, options, blocks = case
    expected, got = _serve_both(scenario, requests, options, blocks)
    assert_same_run(expected, got)


@pytest.mark.parametrize("pp", [1, 2])
def test_arrivals_at_the_instant_an_iteration_ends(pp):
    """An arrival at the very instant an iteration ends: SimPy's event order decides which comes
    first (the one scheduled first). The arrivals are placed at the ends of a first run's
    iterations (its first tokens and finishes), which the second run shares up to them."""
    scenario = serving_scenario(TINY, "h100-sxm-nvswitch", 2, "ladder", pp=pp)
    options = serving_options(max_running=4)
    first = draw_requests(30, 20.0, parse_length("48", "p"), parse_length("uniform:8:40", "g"), 3)
    blocks = kv_blocks_for(scenario, options)
    base, _ = _serve_both(scenario, first, options, blocks)
    ends = np.unique(np.concatenate([base.first_token_s, base.finish_s]))
    for at in ends[[1, len(ends) // 3, len(ends) // 2, -2]]:
        arrival = np.sort(np.concatenate([first.arrival_s, [at, at]]))
        lengths = np.concatenate([first.prompt_len, [30, 60]]), np.concatenate([first.output_len, [12, 50]])
        expected, got = _serve_both(scenario, Requests(arrival, *lengths), options, blocks)
        assert_same_run(expected, got)


@pytest.mark.parametrize("framework", ["gpt-fast", "vllm"])
def test_decode_run_past_the_priced_kv_lengths(framework):
    """Sequences outgrowing the attention table's first 4096 positions in a decode run: the table
    grows where the one-by-one pricing grows it."""
    scenario = serving_scenario("llama-3.1-8b", "h100-sxm-nvswitch", 1, "ladder", framework=framework)
    options = serving_options(max_running=8, chunked_prefill=True)
    requests = Requests(np.array([0.0, 0.0, 0.01, 0.5]), np.array([4000, 4090, 3000, 100]), np.array([200, 90, 60, 9]))
    expected, got = _serve_both(scenario, requests, options, kv_blocks_for(scenario, options))
    assert_same_run(expected, got)


def _landings_one_by_one(arrival_s):
    now, out = 0.0, []
    for at in arrival_s:
        if at > now:
            now = now + (at - now)
        out.append(now)
    return np.array(out)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(0.0, 1e-3), st.floats(0.0, 10.0), st.sampled_from([0.0, 0.1, 0.2, 0.3, 0.7])),
                min_size=1, max_size=40))
@example([0.03, 0.3, 0.7, 0.7, 2.9, 2.9, 3.0])  # 0.03 + (0.3 - 0.03) and 0.7 + (2.9 - 0.7) round up
def test_arrival_events_are_simpys_clock(times):
    arrival_s = np.sort(np.array(times))
    got = arrival_events(arrival_s)
    assert np.array_equal(got, _landings_one_by_one(arrival_s.tolist()))


def test_arrival_events_differ_from_arrival_times_where_a_sum_rounds():
    """The reason the landings are computed: 0.03 + (0.3 - 0.03) is not 0.3."""
    got = arrival_events(np.array([0.03, 0.3, 0.4]))
    assert got[1] != 0.3 and got[1] == 0.03 + (0.3 - 0.03) and got[2] == 0.4


@pytest.mark.parametrize("framework", ["gpt-fast", "vllm"])
@pytest.mark.parametrize("tokens", [3, 16, 37])
def test_decode_steps_equal_one_iteration_at_a_time(framework, tokens):
    """``decode_steps`` of the attention and of the timer: the values ``seconds`` gives one by one
    (equal floats), stopping exactly where the next one needs an engine run or a bigger table."""
    scenario = serving_scenario(TINY, "h100-sxm-p2p-off", 2, "ladder", framework=framework)
    timer = IterationTimer(scenario)
    att = timer.attention
    cached = np.random.default_rng(tokens).integers(1, 3000, tokens)
    steps = 1500
    a_s = att.decode_steps(cached, 0, steps)
    kv_sum = int(cached.sum()) + tokens * np.arange(1, steps + 1)
    size = TABLE_START + 1  # the table prices lengths 0 .. TABLE_START at first
    grows = (kv_sum >= size) & (int(cached.max()) + np.arange(1, steps + 1) >= size)
    assert len(a_s) == (int(np.argmax(grows)) if grows.any() else steps)
    one_by_one = [att.decode_only_seconds(cached + i + 1, int(kv_sum[i])) for i in range(steps)]
    assert np.array_equal(a_s, one_by_one[:len(a_s)])
    assert len(timer.decode_steps(tokens, a_s)[0]) == 0  # nothing resolved yet: engine runs needed
    for a in a_s[::50]:  # resolve some intervals one by one
        timer.seconds(tokens, tokens, float(a))
    before = timer.max_error_bound
    seconds, bounds = timer.decode_steps(tokens, a_s)
    assert 0 < len(seconds) and timer.max_error_bound == before  # nothing recorded
    assert np.array_equal(seconds, [timer.seconds(tokens, tokens, float(a)) for a in a_s[:len(seconds)]])
    assert timer.max_error_bound == max(before, float(bounds.max()))


def test_request_files_equal_the_one_shot_writer(tmp_path):
    """``serving --out`` writes one schedule's rows at a time: the CSV is byte for byte the
    concatenated rows' CSV, the Parquet file the same table (one row group per schedule)."""
    from laddersim.api import serving_run
    from laddersim.api.serving_params import ServingParams

    params = ServingParams.of(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2, rate=5.0, requests=50,
                              prompt_len="uniform:20:300", gen_len="uniform:2:40", max_running=16,
                              max_batched_tokens=4096, ttft_slo_s=0.2, seed=4)
    run = serving_run(params, ["standard", "ladder"], out=tmp_path)
    whole = run.requests
    assert list(whole["schedule"].unique()) == ["standard", "ladder"] and len(whole) == 100
    assert (tmp_path / "requests.csv").read_text() == whole.to_csv(index=False, lineterminator="\n")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "requests.parquet"), whole)


def test_rate_plan_is_the_same_on_one_and_two_workers():
    """Each candidate is evaluated with timers of its own: the plan does not depend on the worker
    that takes it, nor on what the process planned before."""
    from laddersim.api.plan_params import PlanParams
    from laddersim.api.rate_planning import serving_plan

    kwargs = dict(model="llama-3.1-8b", profiles=["h100-sxm-nvswitch", "h100-sxm-p2p-off"],
                  schedules=["standard", "ladder"], tps=[1, 2, 4], max_nodes=1, prompt_len=256, gen_len=32, dtype="bfloat16", rate=8.0, ttft_slo_s=0.3,
                  tpot_slo_s=0.03, requests=40, pps=[1, 2])
    two = serving_plan(PlanParams.of(workers=2, **kwargs))
    one = serving_plan(PlanParams.of(workers=1, **kwargs))
    again = serving_plan(PlanParams.of(workers=1, **kwargs))
    assert two.tried == 24 and len(two.plan.options) >= 12 and any(o.pp == 2 for o in two.plan.options)
    assert one.plan == two.plan == again.plan
