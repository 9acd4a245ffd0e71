"""The event-order tree, bit for bit against the SimPy engine (the reference).

A program run with other durations may take another event order part-way through; the tree keeps
the orders seen as shared prefixes, and a replay that meets an outcome the first branch does not
have continues on the branch that has it. Every replay that answers must give the SimPy
engine's spans exactly; one whose order was inserted must answer.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_paths import assert_same, programs

from laddersim.engine.order_tree import OrderTree
from laddersim.engine.simulator import RankWork, run_engine
from laddersim.simulation.results import _overlap_s

SETTINGS = settings(max_examples=40, deadline=None)


def _scaled(works, factor):
    return [RankWork(w.streams, w.deps, w.durations_s * factor, w.group) for w in works]


def _stack(works):
    return np.stack([w.durations_s for w in works])


def test_a_run_that_leaves_the_first_branch_mid_run_continues_on_the_second():
    # compute c0, c1, c2 back to back; a collective m alongside from t = 0 (it slows them while
    # it runs). It finishes during c1 or during c2: the orders share the start and c0's completion.
    streams, deps = ["compute", "compute", "compute", "comm"], [(), (), (), ()]
    runs = {m: [RankWork(streams, deps, np.array([1.0, 1.0, 1.0, m]))] for m in (1.5, 2.5, 1.7, 2.2, 0.5)}
    tree = OrderTree(1, 4)
    tapes = {m: run_engine(runs[m], 0.2, 0.1, {0: ("a",)}, record_tape=True).tape for m in (1.5, 2.5)}
    assert tapes[1.5].entries[:3] == tapes[2.5].entries[:3] and tapes[1.5].entries != tapes[2.5].entries
    for m in (1.5, 2.5):
        tree.insert(tapes[m])
    steps = [sum(len(e) == 2 for e in tape.entries) for tape in tapes.values()]
    assert tree.nodes < sum(steps) + 1  # the shared prefix is kept once
    for m in (1.5, 2.5, 1.7, 2.2):  # 1.7 follows the first order, 2.2 the second
        assert_same(tree.replay(_stack(runs[m]), 0.2, 0.1), run_engine(runs[m], 0.2, 0.1, {0: ("a",)}))
    assert tree.replay(_stack(runs[0.5]), 0.2, 0.1) is None  # an order not kept: the caller runs the engine


@SETTINGS
@given(programs(), st.lists(st.lists(st.floats(0.3, 3.0), min_size=25, max_size=25), min_size=2, max_size=5),
       st.integers(0, 4))
def test_tree_of_several_orders_replays_each_exactly(case, scales, kept):
    works, cs, ms, links = case
    n = len(works[0].streams)
    variants = [_scaled(works, np.array(f[:n])) for f in scales]
    tree = OrderTree(len(works), n)
    inserted = variants[:max(1, kept)]
    for v in inserted:
        tree.insert(run_engine(v, cs, ms, links, record_tape=True).tape)
    for i, v in enumerate(variants):
        expected = run_engine(v, cs, ms, links)
        got = tree.replay(_stack(v), cs, ms)
        if i < len(inserted):
            assert got is not None
        if got is not None:
            assert_same(got, expected)
            assert got.events == expected.events


def _merged_overlap_s(a_start, a_end, b_start, b_end) -> float:
    """The overlap as a merge of the two sorted sets (step_metrics' former loop)."""
    total, i, j = 0.0, 0, 0
    while i < len(a_start) and j < len(b_start):
        lo, hi = max(a_start[i], b_start[j]), min(a_end[i], b_end[j])
        if hi > lo:
            total += hi - lo
        if a_end[i] < b_end[j]:
            i += 1
        else:
            j += 1
    return total


@st.composite
def streams_of_intervals(draw):
    """A disjoint sorted set of intervals (gaps and lengths may be zero)."""
    steps = draw(st.lists(st.sampled_from([0.0, 0.25, 1.0]) | st.floats(0.0, 2.0), min_size=0, max_size=40))
    edges = np.cumsum(steps) if steps else np.zeros(0)
    n = len(edges) // 2
    return edges[0:2 * n:2], edges[1:2 * n:2]


@settings(max_examples=150, deadline=None)
@given(streams_of_intervals(), streams_of_intervals())
def test_overlap_by_binary_search_is_the_merge_bit_for_bit(a, b):
    got = _overlap_s(a[0], a[1], b[0], b[1])
    assert got == _merged_overlap_s(a[0].tolist(), a[1].tolist(), b[0].tolist(), b[1].tolist())


def test_sweep_tasks_group_points_by_program():
    from laddersim.sweeps.grid import parse_grid
    from laddersim.sweeps.points import expand_grid
    from laddersim.sweeps.runner import batches

    grid = {"models": ["llama-3.1-8b"], "hardware": ["h100-sxm-nvswitch"], "tp": [2, 4], "batch": [1, 2, 4],
            "prompt_len": [64], "gen_len": [4], "schedules": ["standard", "ladder"],
            "overrides": {"intra_bandwidth_scale": [0.5, 1.0, 2.0], "intra_latency_scale": [0.5, 1.0]}}
    points = expand_grid(parse_grid(grid))
    tasks = batches(points, 2)
    flat = [p for task in tasks for p in task]
    assert sorted(p.key for p in flat) == sorted(p.key for p in points)  # each point once
    programs = [(p.model, p.schedule) for p in flat]
    changes = sum(a != b for a, b in zip(programs, programs[1:]))
    assert changes == 1  # two programs (the schedules; TP changes durations only), each one contiguous run
    assert len(tasks) >= 2 and all(len({(p.model, p.schedule) for p in task}) == 1 for task in tasks)
