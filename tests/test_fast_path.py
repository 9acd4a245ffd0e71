"""The engine's fast paths, each against the SimPy engine or what it replaces, bit for bit.

* ``run_direct`` (the engine's run on a minimal event loop, without SimPy) against the SimPy engine,
  the reference, on random programs with ties and zeros;
* ``replay_many`` (many runs along an event-order tree at once) against one replay per run, and
  ``replay_kinds`` / ``run_cached_kinds`` (the same runs given by op kind) against it and the engine;
* ``step_metrics_many`` against ``step_metrics``;
* ``simulate_many`` (the symmetric simulations of many scenarios at once) against ``simulate``
  with every run on the SimPy engine (``SimOptions(reference=True)``), over drawn points of every
  schedule, framework, shipped profile, TP, batch and what-if override;
* ``op_times_s``'s shared part: the kinds but the collectives read no part of a profile a what-if
  override changes.
"""

from __future__ import annotations

import traceback

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_paths import assert_same, programs

from laddersim.costs.allreduce import _kept_measured
from laddersim.costs.op_costs import Phase, _kept_gathers, _op_times_s, op_times_s
from laddersim.engine.direct import run_direct
from laddersim.engine.order_tree import OrderTree
from laddersim.engine.simulator import RankWork, run_engine
from laddersim.engine.cached import forget, run_cached_kinds
from laddersim.engine.tree_batch import replay_kinds, replay_many
from laddersim.hardware.overrides import with_overrides
from laddersim.hardware.profile import list_profiles, load_profile
from laddersim.model.shape import ModelShape
from laddersim.simulation.results import step_metrics, step_metrics_many
from laddersim.schedules.program import build_program
from laddersim.simulation.simulate import SimOptions, make_scenario, simulate
from laddersim.simulation.many import simulate_many
from laddersim.model.workload import Workload

SETTINGS = settings(max_examples=60, deadline=None)
PROFILES = tuple(list_profiles())
FRAMEWORKS = ("gpt-fast", "gpt-fast-flash", "gpt-fast-graph", "vllm")
SCHEDULES = ("standard", "parallel", "ladder", "upper_bound", "desync_half", "hybrid:1")
MODELS = (
    ModelShape(name="gqa-3l", n_layers=3, dim=1024, n_heads=16, n_kv_heads=4, intermediate_size=4096, vocab_size=32000),
    ModelShape(name="mha-2l", n_layers=2, dim=1536, n_heads=24, n_kv_heads=24, intermediate_size=4096,
               vocab_size=49152),
    ModelShape(name="wide-2l", n_layers=2, dim=8192, n_heads=64, n_kv_heads=8, intermediate_size=28672,
               vocab_size=128256),
)


# -- the engine without SimPy --------------------------------------------------------------------
@SETTINGS
@given(programs())
def test_direct_engine_is_the_simpy_engine_bit_for_bit(case):
    works, cs, ms, links = case
    expected = simpy_run = run_engine(works, cs, ms, links, record_tape=True)
    got = run_direct(works, cs, ms, links, record_tape=True)
    assert_same(got, expected)
    assert got.events == simpy_run.events  # the same timeouts scheduled
    assert got.tape.entries == simpy_run.tape.entries  # the same starts and completions, in order
    assert np.array_equal(got.tape.moments, simpy_run.tape.moments)
    quiet = run_direct(works, cs, ms, links, record_signature=False)
    assert quiet.signature == () and np.array_equal(quiet.end_s, expected.end_s)


def test_direct_engine_reports_a_dependency_cycle():
    works = [RankWork(["compute", "comm"], [(1,), (0,)], np.array([1.0, 1.0]))]
    try:
        run_direct(works)
    except RuntimeError as exc:
        assert "deadlock" in str(exc)
    else:
        raise AssertionError("a cycle must not pass")


# -- many runs along a tree at once --------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(programs(), st.lists(st.lists(st.floats(0.3, 3.0), min_size=25, max_size=25), min_size=1, max_size=24),
       st.integers(1, 4), st.booleans())
def test_replay_many_is_one_replay_per_run(case, scales, kept, per_run_slowdowns):
    """Runs of a single-rank program with other durations (and slowdowns): each is its own replay's
    result (hence the engine's) or declined where its own replay declines; more runs than FEW walk
    as arrays, fewer one by one, both checked."""
    works, cs, ms, links = case
    work = works[0]
    n = len(work.streams)
    durations = np.array([work.durations_s * np.array(f[:n]) for f in scales])
    compute = np.array([cs * (f[0] if per_run_slowdowns else 1.0) for f in scales])
    comm = np.array([ms * (f[-1] if per_run_slowdowns else 1.0) for f in scales])
    tree = OrderTree(1, n)
    for i in range(min(kept, len(scales))):
        tree.insert(run_engine([RankWork(work.streams, work.deps, durations[i])], compute[i], comm[i], links,
                               record_tape=True).tape)
    got = replay_many(tree, durations, compute, comm)
    replayed = [r for r in got if r is not None]
    for i, result in enumerate(got):
        one = tree.replay(durations[i:i + 1], compute[i], comm[i])
        assert (result is None) == (one is None)
        if result is not None:
            assert_same(result, one)
            assert_same(result, run_engine([RankWork(work.streams, work.deps, durations[i])],
                                                            compute[i], comm[i], links))
    assert len(replayed) >= min(kept, len(scales))  # every inserted order replays


@st.composite
def runs_by_kind(draw):
    """A random single-rank program, each op given one of a few kinds, and runs that give each
    kind its seconds and slowdowns (some runs repeated, some kinds with equal slowdowns)."""
    works, _, _, links = draw(programs())
    work = works[0]
    n = len(work.streams)
    n_kinds = draw(st.integers(1, 4))
    kind_of_op = np.array(draw(st.lists(st.integers(0, n_kinds - 1), min_size=n, max_size=n)))
    values = st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0.0, 3.0)
    row = st.lists(values, min_size=n_kinds, max_size=n_kinds)
    slow = st.lists(st.sampled_from([0.0, 0.25]) | st.floats(0.0, 1.0), min_size=n_kinds, max_size=n_kinds)
    n_runs = draw(st.integers(1, 24))
    durations = np.array([draw(row) for _ in range(n_runs)])
    compute, comm = np.array([draw(slow) for _ in range(n_runs)]), np.array([draw(slow) for _ in range(n_runs)])
    if n_runs > 2 and draw(st.booleans()):  # a run asked for again
        durations[-1], compute[-1], comm[-1] = durations[0], compute[0], comm[0]
    return work, links, kind_of_op, durations, compute, comm


@settings(max_examples=40, deadline=None)
@given(runs_by_kind(), st.integers(0, 3))
def test_runs_given_by_op_kind_are_the_runs_of_their_ops(case, kept):
    """``replay_kinds`` (kinds x runs) is ``replay_many`` of each op's kind's column (runs x ops),
    run by run, declined or not; ``run_cached_kinds`` is the engine's run of each."""
    work, links, kind_of_op, durations, compute, comm = case
    per_op = [m[:, kind_of_op] for m in (durations, compute, comm)]
    tree = OrderTree(1, len(work.streams))
    for i in range(min(kept, len(durations))):
        tree.insert(run_direct([RankWork(work.streams, work.deps, per_op[0][i])], per_op[1][i], per_op[2][i], links,
                               record_tape=True).tape)
    got = replay_kinds(tree, kind_of_op, durations.T, compute.T, comm.T)
    for result, expected in zip(got, replay_many(tree, *per_op)):
        assert (result is None) == (expected is None)
        if result is not None:
            assert_same(result, expected)
    forget()
    for i, result in enumerate(run_cached_kinds(work.streams, work.deps, links, "decode", kind_of_op, durations,
                                                compute, comm)):
        assert_same(result, run_engine([RankWork(work.streams, work.deps, per_op[0][i])],
                                                        per_op[1][i], per_op[2][i], links))
    forget()


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(SCHEDULES[:5]), st.integers(1, 4), st.lists(st.floats(0.2, 3.0), min_size=8, max_size=40),
       st.sampled_from([0.0, 0.3]))
def test_metrics_of_many_runs_are_each_runs_metrics(schedule, layers, scales, slowdown):
    from laddersim.simulation.results import StreamMasks

    program = build_program(schedule, layers, 2)
    streams, deps = tuple(op.stream for op in program.ops), tuple(op.deps for op in program.ops)
    base = np.linspace(1.0, 2.0, len(streams))
    durations = np.array([base * np.where(np.array(streams) == "comm", s, 1.0) for s in scales])
    tree = OrderTree(1, len(streams))
    for row in durations:
        if tree.replay(row[None], slowdown, slowdown) is None:
            tree.insert(run_direct([RankWork(streams, deps, row)], slowdown, slowdown, {0: ("a",)}, record_tape=True).tape)
    results = replay_many(tree, durations, np.full(durations.shape, slowdown), np.full(durations.shape, slowdown))
    masks = StreamMasks.of(program)
    many = step_metrics_many(results, masks)
    assert np.array_equal(many, np.array([step_metrics(r, masks) for r in results]))


# -- the symmetric simulations of many scenarios at once -----------------------------------------
OVERRIDES = st.fixed_dictionaries({}, optional={
    "intra_bandwidth_scale": st.sampled_from([0.1, 0.5, 1.0, 3.0]),
    "intra_latency_scale": st.sampled_from([0.25, 1.0, 4.0]),
    "inter_bandwidth_scale": st.sampled_from([0.5, 2.0]),
    "nics_per_node": st.sampled_from([1.0, 4.0]),
    "compute_slowdown": st.sampled_from([0.0, 0.2]),
    "comm_slowdown": st.sampled_from([0.0, 0.3]),
    "gpus_per_node": st.sampled_from([4.0, 8.0]),
})


@st.composite
def points(draw):
    profile = load_profile(draw(st.sampled_from(PROFILES)))
    overrides = draw(OVERRIDES)
    if profile.network is None:
        overrides.pop("nics_per_node", None)
    try:
        profile = with_overrides(profile, **overrides)
    except Exception:  # noqa: BLE001 - an override the profile cannot take: the plain profile
        pass
    model = draw(st.sampled_from(MODELS))
    return dict(model=model, hardware=profile, tp=draw(st.sampled_from([1, 2, 4, 8, 16])),
                batch=draw(st.sampled_from([1, 2, 8, 48])), prompt_len=draw(st.sampled_from([64, 512])),
                gen_len=draw(st.sampled_from([1, 2, 3, 40])), schedule=draw(st.sampled_from(SCHEDULES)),
                kv_cache=draw(st.sampled_from(["static", "dynamic"])), framework=draw(st.sampled_from(FRAMEWORKS)))


def _scenario_or_error(point: dict):
    try:
        return make_scenario(model=point["model"], hardware=point["hardware"], tp=point["tp"], batch=point["batch"],
                             prompt_len=point["prompt_len"], gen_len=point["gen_len"], schedule=point["schedule"],
                             kv_cache=point["kv_cache"], framework=point["framework"])
    except Exception as exc:  # noqa: BLE001 - compared as such
        return exc


@settings(max_examples=25, deadline=None)
@given(st.lists(points(), min_size=1, max_size=12))
def test_simulate_many_is_simulate_on_the_simpy_engine(drawn):
    """Every point's result from the fast path (runs of one program replayed together, costs in
    parts, interpolation as arrays) equals the one-by-one simulation whose every run is the SimPy
    engine's: summary, every decode step's metrics, the prefill's, or the same error."""
    scenarios = [s for s in map(_scenario_or_error, drawn) if not isinstance(s, Exception)]
    for got, scenario in zip(simulate_many(scenarios), scenarios):
        try:
            expected = simulate(scenario, SimOptions(replay=False, reference=True))
        except Exception as exc:  # noqa: BLE001 - the fast path must give the same error
            assert type(got) is type(exc) and str(got) == str(exc)
            continue
        assert not isinstance(got, Exception), got
        assert got.summary() == expected.summary()
        assert np.array_equal(got.decode_metrics, expected.decode_metrics)
        assert np.array_equal(got.prefill_metrics, expected.prefill_metrics)
        assert np.array_equal(got.prefill.end_s, expected.prefill.end_s)
        assert (got.step_lo == expected.step_lo).all() and (got.step_hi == expected.step_hi).all()
        assert np.array_equal(got.step_frac, expected.step_frac)


def test_scenarios_sharing_their_checks_fail_each_as_simulate_does():
    """A scenario's checks are made once for all its schedules: each one still fails with the
    error simulate gives it (a TP the model cannot take, a batch that does not fit), raised anew."""
    scenarios = [make_scenario(model=MODELS[2], hardware="a100-sxm-nvswitch", tp=tp, batch=batch, prompt_len=512,
                               gen_len=8, schedule=schedule)
                 for tp, batch in ((3, 1), (1, 4096), (2, 1)) for schedule in ("standard", "ladder", "standard")]
    for got, scenario in zip(simulate_many(scenarios), scenarios):
        try:
            expected = simulate(scenario, SimOptions(replay=False, reference=True))
        except Exception as exc:  # noqa: BLE001 - compared as such
            assert type(got) is type(exc) and str(got) == str(exc)
            assert got.__traceback__ is None or len(traceback.extract_tb(got.__traceback__)) < 10
            continue
        assert got.summary() == expected.summary()
    assert sum(isinstance(r, Exception) for r in simulate_many(scenarios)) == 6


def test_simulate_many_with_other_options_runs_them_as_simulate_does():
    scenario = make_scenario(model=MODELS[0], hardware="h100-sxm-nvswitch", tp=4, batch=2, prompt_len=64, gen_len=12,
                             schedule="ladder")
    options = SimOptions(jitter=0.1, seed=5, sample_steps=3)
    got, = simulate_many([scenario], options)
    assert got.summary() == simulate(scenario, options).summary()


# -- costs: what a sweep's what-ifs leave alone ----------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.sampled_from(PROFILES), st.sampled_from(FRAMEWORKS), OVERRIDES, st.sampled_from(MODELS),
       st.sampled_from([1, 2, 8]), st.sampled_from([1, 16]), st.sampled_from(["prefill", "decode"]))
def test_kinds_but_the_collectives_do_not_read_what_overrides_change(profile, framework, overrides, model, tp,
                                                                      batch, phase_name):
    """op_times_s shares the kinds but the collectives between profiles with the same GPU, node,
    framework and host spec: the base profile's are asked for first, then the overridden one's,
    which must equal its own from scratch (the collectives' kept parts too: whether a group shape
    has a measured table, by the profile's collectives; the logits AllGather, by profile)."""
    base = load_profile(profile)
    try:
        changed = with_overrides(base, **overrides)
        changed.nodes_for(tp)
    except Exception:  # noqa: BLE001 - an override this profile cannot take, or a TP it cannot hold
        return
    work = Workload(batch=batch, prompt_len=256, gen_len=32, framework=framework)
    phase = Phase(phase_name, batch, 256 if phase_name == "prefill" else 1)
    kv = np.array([256.0]) if phase_name == "prefill" else np.arange(256.0, 288.0)
    op_times_s(model, base, work, tp, phase, kv)
    got = op_times_s(model, changed, work, tp, phase, kv)
    for memo in (_kept_measured, _kept_gathers):  # what the collectives share between profiles: from scratch
        memo.clear()
    expected = _op_times_s(model, changed, work, tp, phase, kv)
    assert list(got) == list(expected)
    for kind in expected:
        assert np.array_equal(got[kind], expected[kind]), kind


def test_pipelines_leave_the_fast_path_and_give_what_simulate_gives():
    """A pipeline (pp > 1, or micro-batches) is its stages composed: simulate_many hands it to
    simulate, whose every stage's runs here are the SimPy engine's."""
    from laddersim.simulation.symmetric_batch import simulate_symmetric

    scenarios = [make_scenario(model=MODELS[0], hardware="h100-sxm-nvswitch", tp=2, batch=4, prompt_len=64, gen_len=6,
                               schedule=schedule, pp=pp, microbatches=m)
                 for schedule in ("standard", "ladder") for pp, m in ((2, 1), (3, 2))]
    assert simulate_symmetric(scenarios) == [None] * len(scenarios)
    for got, scenario in zip(simulate_many(scenarios), scenarios):
        assert got.summary() == simulate(scenario, SimOptions(replay=False, reference=True)).summary()
