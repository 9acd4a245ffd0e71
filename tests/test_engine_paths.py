"""The engine's replays, bit for bit against the SimPy engine (the reference) on random programs,
and the rate law's forms (one rank, any running set, one run or an array of runs) against each other.

A replay (``laddersim.engine.order_tree``) redoes a recorded event order for new durations without
SimPy; it must give the SimPy engine's spans exactly (equal floats) or decline.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import programs as plain_programs

from laddersim.engine import entry
from laddersim.engine.cached import forget, run_cached
from laddersim.engine.order_tree import OrderTree
from laddersim.engine.rates import comm_rate, compute_rate, one_rank_rates, running_rates
from laddersim.engine.simulator import RankWork, run_engine
from laddersim.engine.work import EngineRun

SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def programs(draw):
    """test_properties' random programs, with ranks in one or two groups, links shared or not,
    per-collective slowdowns, and durations that may tie exactly or be zero."""
    plain, _ = draw(plain_programs())
    streams, deps, n = plain[0].streams, plain[0].deps, len(plain[0].streams)
    n_ranks = len(plain)
    two_groups = n_ranks > 1 and draw(st.booleans())
    values = st.sampled_from([0.0, 0.5, 1.0, 1.5]) | st.floats(0.0, 3.0)
    works = [RankWork(streams, deps, np.array(draw(st.lists(values, min_size=n, max_size=n))),
                      r % 2 if two_groups else 0) for r in range(n_ranks)]
    slow = st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)
    cs, ms = np.array(draw(slow)), np.array(draw(slow))
    links = draw(st.sampled_from([{}, {0: ("a",), 1: ("a",)}, {0: ("a", "b"), 1: ("b",)}]))
    return works, cs, ms, links


def replay(tape, durations_s, compute_slowdown, comm_slowdown):
    """A run replayed along one recorded order (a tree of one tape), or None where it leaves it."""
    return OrderTree.of(tape).replay(durations_s, compute_slowdown, comm_slowdown)


def assert_same(a, b):
    for name in ("start_s", "end_s", "ready_s"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.signature == b.signature


@SETTINGS
@given(programs())
def test_replaying_a_runs_own_tape_reproduces_it(case):
    works, cs, ms, links = case
    got = run_engine(works, cs, ms, links, record_tape=True)
    assert_same(replay(got.tape, np.stack([w.durations_s for w in works]), cs, ms), got)


running_sets = st.lists(st.tuples(st.booleans(), st.sampled_from([0.0, 0.25]) | st.floats(0.0, 2.0),
                                  st.sampled_from([0.0, 0.5]) | st.floats(0.0, 2.0)), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(running_sets, st.integers(0, 2), st.integers(1, 5))
def test_the_rate_law_is_one_law_in_every_form(drawn, n_links, n_runs):
    """One rank's rates (what the single-rank replays use: every collective on the group's links)
    are the full recomputation's on that rank; the same law over arrays of runs gives each run's
    floats."""
    acts = [(c, s, m, n_links) if c else (False, 0.0, 0.0, 0) for c, s, m in drawn]
    one = one_rank_rates(acts)
    assert one == running_rates([(c, (0,), ("a", "b")[:n], s, m) for c, s, m, n in acts])
    scales = np.linspace(1.0, 2.0, n_runs)
    arrays = one_rank_rates([(c, s * scales, m * scales, n) if c else (c, s, m, n) for c, s, m, n in acts])
    for run, scale in enumerate(scales):
        each = one_rank_rates([(c, float(s * scale), float(m * scale), n) if c else (c, s, m, n)
                               for c, s, m, n in acts])
        for a, b in zip(arrays, each):
            assert (a if isinstance(a, float) else a[run]) == b
    assert compute_rate([]) == 1.0 and comm_rate(0.7, False, []) == 1.0


def test_the_rate_law_closed_form():
    """A compute op slowed by its rank's most disturbing collective; a collective slowed by its
    ranks' compute and divided by the busiest of its links."""
    assert compute_rate([0.25, 1.0, 0.5]) == 0.5
    assert comm_rate(0.25, True, [1, 3, 2]) == 0.8 / 3
    assert running_rates([(False, (0,), (), 0.0, 0.0), (True, (0, 1), ("x",), 0.5, 1.0), (True, (1,), ("x",), 3.0, 0.0),
                          (False, (1,), (), 0.0, 0.0)]) == [1.0 / 1.5, 0.25, 0.5, 0.25]


@SETTINGS
@given(programs(), st.lists(st.floats(0.5, 2.0), min_size=25, max_size=25), st.booleans())
def test_replay_with_new_durations_is_the_engine_or_declines(case, scales, same_scale):
    works, cs, ms, links = case
    tape = run_engine(works, cs, ms, links, record_tape=True).tape
    n = len(works[0].streams)
    factor = np.full(n, scales[0]) if same_scale else np.array(scales[:n])
    new = [RankWork(w.streams, w.deps, w.durations_s * factor, w.group) for w in works]
    got = replay(tape, np.stack([w.durations_s for w in new]), cs, ms)
    expected = run_engine(new, cs, ms, links)
    if got is not None:
        assert_same(got, expected)


@SETTINGS
@given(programs(), st.floats(0.9, 1.1))
def test_run_cached_equals_the_engine_across_a_sequence_of_runs(case, scale):
    works, cs, ms, links = case
    forget()
    for k in range(3):
        new = [RankWork(w.streams, w.deps, w.durations_s * scale ** k, w.group) for w in works]
        assert_same(run_cached(new, cs, ms, links), run_engine(new, cs, ms, links))


def test_replay_of_decode_steps_of_a_real_program_is_taken_and_exact():
    from laddersim.costs.op_costs import Phase, op_times_s
    from laddersim.schedules.program import build_program
    from laddersim.simulation.simulate import make_scenario

    scenario = make_scenario(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=4, batch=4, prompt_len=512,
                             gen_len=16, schedule="ladder")
    program = build_program("ladder", scenario.model.n_layers, 4)
    costs = op_times_s(scenario.model, scenario.hardware, scenario.workload, 4, Phase("decode", 4, 1),
                       np.array([600.0, 700.0]))
    streams, deps = [op.stream for op in program.ops], [op.deps for op in program.ops]
    rows = [np.array([costs[k][j] for k in program.kinds]) for j in (0, 1)]
    first = run_engine([RankWork(streams, deps, rows[0])], 0.1, 0.3, {0: ("node0",)}, record_tape=True)
    got = replay(first.tape, rows[1][None, :], 0.1, 0.3)
    assert got is not None  # one KV step later the event order holds
    assert_same(got, run_engine([RankWork(streams, deps, rows[1])], 0.1, 0.3, {0: ("node0",)}))


@SETTINGS
@given(programs(), st.booleans())
def test_every_strategy_of_the_engine_entry_is_the_simpy_engine(case, repeat):
    """The entry's strategies (replay along kept orders or the direct loop, the batch over runs,
    the direct loop alone) each give the SimPy engine's spans; a run asked for again too."""
    works, cs, ms, links = case
    forget()
    expected = run_engine(works, cs, ms, links)
    asked = EngineRun(works, cs, ms, links, "decode")
    for _ in range(2 if repeat else 1):
        assert_same(entry.run(asked), expected)
        assert_same(entry.run(asked, replay=False), expected)
        assert_same(entry.run(asked, reference=True), expected)
        for got in entry.run_many([asked, asked]):
            assert_same(got, expected)
    forget()
