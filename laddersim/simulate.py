"""Simulate one scenario: prefill, then every decode step with its own KV length.

Exact shortcuts, both tested against the plain simulation:

* **rank symmetry**: without jitter every rank of the TP group runs the same program with the
  same durations, so one rank stands for all (a collective of a symmetric group starts the moment
  its one simulated member arrives, as it would for all of them).
* **step interpolation**: op durations are affine in the KV length, and for a fixed order of
  engine events every event time is linear in the durations (rates change only at events). If
  two simulated decode steps have the same event order (signature) and the durations of every
  step between them lie on the line joining theirs, then every step between them has that order
  too (a linear function non-negative at both ends is non-negative between), so its spans are
  the linear interpolation of the two. Otherwise the interval is bisected and simulated.
* **replay**: a run of a program seen before in this process is replayed along its recorded event
  orders where one holds (``laddersim.engine.cached``): bit for bit the engine's result.

With jitter, every rank is simulated and no two steps are alike; unless ``exact_steps``, the
decode is estimated from a random sample of steps with its 95% interval
(``laddersim.step_sampling``).

The simulation itself (``simulation``) is a generator that asks for its engine runs in batches and
is given their results; ``simulate`` answers it one run after the other (the SimPy engine, or a
replay), ``laddersim.simulate_many`` answers the batches of many scenarios at once (replays of
many runs in one walk of their program's tree). Both give the same result, bit for bit.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from pydantic import ValidationError

from laddersim.costs.collectives import slowdowns
from laddersim.costs.memory_fit import check_fits
from laddersim.costs.op_costs import Phase, collective_message_bytes, op_times_s
from laddersim.costs.rank_skew import compute_before_collectives, skew_wait_per_compute
from laddersim.engine.cached import run_cached
from laddersim.engine.direct import run_direct
from laddersim.engine.work import EngineResult, EngineRun, RankWork
from laddersim.errors import UserInputError
from laddersim.framework import load_framework
from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.memo import IdentityMemo
from laddersim.model_shape import ModelShape, load_model_shape
from laddersim.results import METRICS, StreamMasks, step_metrics
from laddersim.schedules.plan import parse_schedule
from laddersim.schedules.program import Program, build_program
from laddersim.sim_result import Scenario, SimOptions, SimResult
from laddersim.step_sampling import choose_steps, estimate, sample_size
from laddersim.workload import Workload

# Collectives' interference by profile, TP and message (the schedules of a sweep share them).
_kept_slowdowns = IdentityMemo(65536)

__all__ = ["RunBatch", "Scenario", "SimOptions", "SimResult", "make_scenario", "simulate", "simulation"]


@dataclass(frozen=True)
class RunBatch:
    """Engine runs a simulation asks for at once, all of one program (``masks``: its streams, for
    each run's metrics); ``cached``: each may be replayed (``laddersim.engine.cached``), else run
    on the direct event loop (``laddersim.engine.direct``), or on the SimPy engine itself where
    ``reference``. The answer is one (result, ``laddersim.results.step_metrics``) pair per run,
    in order."""

    runs: list[EngineRun]
    masks: StreamMasks
    cached: bool
    reference: bool = False
    orders: bool = True  # the runs' orders of events are compared (interpolation): record them


@lru_cache(maxsize=64)
def _program(schedule: str, n_layers: int, tp: int) -> tuple[Program, StreamMasks, tuple, tuple, tuple, np.ndarray,
                                                             np.ndarray]:
    """A program (frozen) with its stream masks, streams, deps, op kinds (each once), each op's
    index in them and each collective's compute ops before it (``laddersim.costs.rank_skew``),
    built once per process: a sweep repeats a handful of programs over many points."""
    program = build_program(schedule, n_layers, tp)
    kind_names = tuple(dict.fromkeys(program.kinds))
    kind_of_op = np.array([kind_names.index(k) for k in program.kinds], dtype=int)
    streams = tuple(op.stream for op in program.ops)
    return (program, StreamMasks.of(program), streams, tuple(op.deps for op in program.ops), kind_names,
            kind_of_op, compute_before_collectives(streams, kind_of_op, len(kind_names)))


def _rank_works(streams: tuple[str, ...], deps: tuple[tuple, ...], durations: np.ndarray, n_ranks: int, rng,
                jitter: float) -> list[RankWork]:
    works = []
    for _ in range(n_ranks):
        d = durations
        if jitter > 0.0:
            d = durations * rng.lognormal(0.0, jitter, size=durations.shape)
        works.append(RankWork(streams, deps, d))
    return works


def _affine_between(durations: np.ndarray, lo: int, hi: int) -> bool:
    """Do the durations of steps lo..hi lie on the line joining steps lo and hi?"""
    if hi - lo < 2:
        return True
    frac = (np.arange(lo, hi + 1) - lo) / (hi - lo)
    line = durations[lo] + np.outer(frac, durations[hi] - durations[lo])
    scale = max(float(np.abs(durations[lo:hi + 1]).max()), 1e-30)
    return bool(np.abs(durations[lo:hi + 1] - line).max() <= 1e-12 * scale)


def simulate(scenario: Scenario, options: SimOptions | None = None, progress=None) -> SimResult:
    """Prefill and decode of one scenario. ``progress(done, total, op_ranks)``, if given, is called
    after each engine run of a jittered simulation (op_ranks: ops x ranks of one run)."""
    steps = simulation(scenario, options, progress)
    try:
        batch = next(steps)
        while True:
            batch = steps.send([_answer(run, batch) for run in batch.runs])
    except StopIteration as stop:
        return stop.value


def _answer(run: EngineRun, batch: RunBatch) -> tuple[EngineResult, np.ndarray]:
    """One run of a batch by the engine (replayed where it can be, if cached), and its metrics."""
    if batch.cached:
        result = run_cached(run.ranks, run.compute_slowdown, run.comm_slowdown, group_links=run.group_links,
                            family=run.family)
    else:  # jittered, every rank or the reference
        engine = run_direct
        if batch.reference:  # (SimPy loads only for the reference)
            from laddersim.engine.simulator import run_engine as engine
        result = engine(run.ranks, run.compute_slowdown, run.comm_slowdown, group_links=run.group_links,
                        record_signature=batch.orders)
    return result, step_metrics(result, batch.masks)


def simulation(scenario: Scenario, options: SimOptions | None = None,
               progress=None) -> Generator[RunBatch, list[tuple[EngineResult, np.ndarray]], SimResult]:
    """``simulate`` as a generator: it yields each ``RunBatch`` it needs and is sent the answers;
    it returns the SimResult. Checks of the scenario raise before the first batch."""
    options = options or SimOptions()
    model, hw, work, tp = scenario.model, scenario.hardware, scenario.workload, scenario.tp
    model.check_tp(tp)
    nodes = hw.nodes_for(tp)
    parse_schedule(scenario.schedule, model.n_layers)
    memory = check_fits(model, hw, work, tp)
    program, masks, streams, deps, kind_names, kind_of_op, before = _program(scenario.schedule, model.n_layers, tp)
    skew = skew_wait_per_compute(hw, tp)

    def op_durations(per_kind: np.ndarray) -> np.ndarray:
        """Seconds per op from seconds per kind; each collective waits for the slowest rank."""
        durations = per_kind[kind_of_op]
        return durations + skew * (before @ per_kind) if skew else durations
    ops_per_pass = len(kind_of_op)
    stochastic = options.jitter > 0.0
    rng = np.random.default_rng(options.seed) if stochastic else None  # (drawn from only with jitter)
    n_ranks = tp if (stochastic or options.all_ranks) else 1
    links = {0: tuple(f"node{i}" for i in range(nodes)) + (("network",) if nodes > 1 else ())}

    def interference(phase: Phase) -> tuple[np.ndarray, np.ndarray]:
        """Per-op (compute, comm) slowdowns; only the collectives' entries are read."""
        by_kind = {kind: _kept_slowdowns.get((hw,), (tp, size), lambda: slowdowns(hw, tp, size))
                   for kind, size in collective_message_bytes(model, work, tp, phase).items()}
        pairs = np.array([by_kind.get(kind, (0.0, 0.0)) for kind in kind_names], dtype=float).reshape(-1, 2)
        return pairs[kind_of_op, 0], pairs[kind_of_op, 1]

    cached = options.replay and not stochastic and not options.reference  # jittered runs rarely share an order

    def ask(durations: np.ndarray, slowdowns: tuple[np.ndarray, np.ndarray], family: str) -> EngineRun:
        works = _rank_works(streams, deps, durations, n_ranks, rng, options.jitter)
        return EngineRun(works, slowdowns[0], slowdowns[1], links, family)

    # Prefill (its run asked for with the first decode steps'; its noise drawn first, as before them).
    prefill_phase = Phase("prefill", work.batch, work.prompt_len)
    prefill_costs = op_times_s(model, hw, work, tp, prefill_phase, np.array([work.prompt_len]))
    prefill_run = ask(op_durations(np.array([prefill_costs[k][0] for k in kind_names])),
                      interference(prefill_phase), "prefill")
    prefill: list = []  # (result, metrics) once run

    # Decode: gen_len - 1 steps (the prefill already produced the first token).
    n_steps = work.gen_len - 1
    kv_lens = np.broadcast_to(work.kv_len_at_decode_step(np.arange(n_steps)), (n_steps,))  # every step at once
    decode_phase = Phase("decode", work.batch, 1)
    decode_slowdowns = interference(decode_phase)
    costs = op_times_s(model, hw, work, tp, decode_phase, kv_lens)
    # Durations per (step, op kind), not per (step, op): ops of one kind cost the same, and a
    # (steps x ops) matrix of a long generation would not fit in memory. A step's row per op is
    # ``by_kind[step][kind_of_op]``.
    by_kind = np.zeros((n_steps, len(kind_names)))
    for j, name in enumerate(kind_names):
        by_kind[:, j] = costs[name]

    anchors: dict[int, EngineResult] = {}
    metrics = np.zeros((n_steps, len(METRICS)))
    step_lo = np.arange(n_steps)
    step_hi = np.arange(n_steps)
    step_frac = np.zeros(n_steps)

    def run(steps) -> Generator[RunBatch, list, None]:
        """Simulate these decode steps (those not simulated yet), and the prefill if not yet."""
        steps = [int(s) for s in dict.fromkeys(steps) if s not in anchors]
        runs = ([] if prefill else [prefill_run]) + [ask(op_durations(by_kind[s]), decode_slowdowns, "decode")
                                                     for s in steps]
        if not runs:
            return
        answers = yield RunBatch(runs, masks, cached, options.reference, not stochastic)
        if not prefill:
            prefill.append(answers[0])
            answers = answers[1:]
        for step, (result, step_row) in zip(steps, answers):
            anchors[step] = result
            metrics[step] = step_row

    half_width = None
    n_sample = n_steps if options.exact_steps else (options.sample_steps or sample_size(n_steps, n_ranks, ops_per_pass))
    if n_steps and stochastic:
        yield from run([])  # the prefill, alone: the noise of each step is drawn as its run is asked for
        steps = np.arange(n_steps) if n_sample >= n_steps else choose_steps(n_steps, n_sample, options.seed)
        for done, step in enumerate(steps):
            if progress:
                progress(done + 1, len(steps) + 1, n_ranks * ops_per_pass)
            yield from run([step])
        if progress:
            progress(len(steps) + 1, len(steps) + 1, n_ranks * ops_per_pass)
        if len(steps) < n_steps:
            control = (yield from simulation(scenario, SimOptions(replay=options.replay,
                                                                  reference=options.reference))).decode_metrics
            sampled = estimate(control, steps, metrics[steps])
            metrics[:], half_width = sampled.metrics, sampled.half_width_s
            nearest = steps[np.clip(np.searchsorted(steps, np.arange(n_steps)), 0, len(steps) - 1)]
            step_lo[:], step_hi[:] = nearest, nearest  # a step not simulated shows a simulated one's spans
    elif n_steps and options.exact_steps:
        yield from run(range(n_steps))
    elif n_steps:
        stack = [(0, n_steps - 1)]
        while stack:
            lo, hi = stack.pop()
            yield from run([lo, hi])
            a, b = anchors[lo], anchors[hi]
            if hi - lo < 2:
                continue
            if a.signature == b.signature and _affine_between(by_kind, lo, hi):
                inner = np.arange(lo + 1, hi)
                frac = (inner - lo) / (hi - lo)
                step_lo[inner], step_hi[inner], step_frac[inner] = lo, hi, frac
                metrics[inner] = metrics[lo] + np.outer(frac, metrics[hi] - metrics[lo])
            else:
                mid = (lo + hi) // 2
                stack.extend([(mid, hi), (lo, mid)])
    yield from run([])  # (the prefill, where no decode step was simulated)
    (prefill_result, prefill_metrics), = prefill
    return SimResult(scenario, nodes, program, memory, n_ranks, prefill_result, prefill_metrics, metrics,
                     step_lo, step_hi, step_frac, anchors, half_width)


def make_scenario(model, hardware, tp: int, batch: int, prompt_len: int, gen_len: int, schedule: str,
                  dtype: str = "bfloat16", kv_cache: str | None = None, kv_reads: str | None = None,
                  framework: str = "gpt-fast") -> Scenario:
    """A Scenario from names or objects (model preset / config.json path, profile name / path);
    ``kv_cache`` and ``kv_reads`` default to the ``framework``'s (laddersim/data/frameworks)."""
    shape = model if isinstance(model, ModelShape) else load_model_shape(model)
    profile = hardware if isinstance(hardware, HardwareProfile) else load_profile(hardware)
    fw = load_framework(framework)
    try:
        work = _workload(batch, prompt_len, gen_len, dtype, kv_cache or fw.kv_cache.value,
                         kv_reads or fw.kv_reads.value, framework)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UserInputError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    parse_schedule(schedule, shape.n_layers)
    profile.gpu.peak_flops_per_s_for(work.dtype)  # a dtype this GPU cannot run is one error line now
    shape.check_window(work.prompt_len, work.gen_len)
    return Scenario(shape, profile, work, tp, schedule)


@lru_cache(maxsize=4096)
def _workload(batch: int, prompt_len: int, gen_len: int, dtype: str, kv_cache: str, kv_reads: str,
              framework: str) -> Workload:
    """One (frozen) Workload per distinct set of values: a sweep's points share them, and the
    costs remembered by workload find them by identity."""
    return Workload(batch=batch, prompt_len=prompt_len, gen_len=gen_len, dtype=dtype, kv_cache=kv_cache,
                    kv_reads=kv_reads, framework=framework)
