"""One TP group's passes: the prefill, then every decode step with its own KV length, of the whole
model or of one pipeline stage (``laddersim.simulation.simulate`` picks; ``laddersim.simulation.pipeline`` composes stages).

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
(``laddersim.simulation.step_sampling``).

The simulation itself (``pass_simulation``) is a generator that asks for its engine runs in
batches and is given their results; ``simulate_passes`` answers it one run after the other (the
direct event loop, ``laddersim.engine.direct``, or a replay), ``laddersim.simulation.many`` answers
the batches of many scenarios at once. Both give the same result, bit for bit.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from laddersim.costs.collectives import slowdowns
from laddersim.costs.memory_fit import MemoryUse
from laddersim.costs.op_costs import Phase, collective_message_bytes, op_times_s
from laddersim.costs.rank_skew import compute_before_collectives, skew_wait_per_compute
from laddersim.engine.cached import run_cached
from laddersim.engine.direct import run_direct
from laddersim.engine.work import EngineResult, EngineRun, RankWork
from laddersim.hardware.profile import HardwareProfile
from laddersim.support.memo import IdentityMemo
from laddersim.model.shape import ModelShape
from laddersim.simulation.results import METRICS, StreamMasks, step_metrics, summarize, timeline_frame
from laddersim.schedules.program import Program, build_program
from laddersim.schedules.stages import Stage
from laddersim.simulation.step_sampling import choose_steps, estimate, sample_size
from laddersim.model.workload import Workload

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Scenario:
    model: ModelShape
    hardware: HardwareProfile
    workload: Workload
    tp: int
    schedule: str
    pp: int = 1  # pipeline stages, each a TP group of ``tp`` GPUs (laddersim.pipeline)
    microbatches: int = 1  # batches in flight through the pipeline, ``workload.batch`` split evenly


@dataclass(frozen=True)
class SimOptions:
    jitter: float = 0.0  # sigma of a per-rank, per-op lognormal duration multiplier
    seed: int = 0
    all_ranks: bool = False  # simulate every rank even when they are symmetric
    exact_steps: bool = False  # simulate every decode step (no interpolation; with jitter: no sample)
    sample_steps: int | None = None  # with jitter: decode steps to simulate (None: step_sampling's rule)
    replay: bool = True  # replay a recorded event order where it holds (bit for bit the engine's)
    # Every run on the SimPy engine itself (no replay, no direct event loop): the reference the
    # fast paths are checked against (laddersim.engine.direct, laddersim.engine.tree_batch).
    reference: bool = False


@dataclass
class SimResult:
    scenario: Scenario
    nodes: int
    program: Program
    memory: MemoryUse
    sim_ranks: int  # ranks simulated (1 under symmetry)
    prefill: EngineResult
    prefill_metrics: np.ndarray  # METRICS of the prefill
    decode_metrics: np.ndarray  # (steps, METRICS)
    # Per decode step: anchor steps (simulated) and the interpolation weight between them.
    step_lo: np.ndarray
    step_hi: np.ndarray
    step_frac: np.ndarray
    anchors: dict[int, EngineResult] = field(default_factory=dict)
    prefill_program: Program | None = None  # where the prefill runs other ops than a decode step (a pipeline stage)
    # With jitter and a sample of decode steps (laddersim.simulation.step_sampling): 95% half-width of each
    # METRICS' decode total; None where every step was simulated.
    decode_half_width_s: np.ndarray | None = None

    @property
    def simulated_steps(self) -> int:
        return len(self.anchors) + 1

    @property
    def engine_events(self) -> int:
        """Starts and ends of ops the engine ordered: two per op and rank of each simulated pass
        (a jittered run records no order of its own: nothing reads it)."""
        return 2 * self.sim_ranks * (len(self.prefill_program or self.program) + len(self.program) * len(self.anchors))

    def decode_spans(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi, frac = int(self.step_lo[step]), int(self.step_hi[step]), float(self.step_frac[step])
        a, b = self.anchors[lo], self.anchors[hi]
        if lo == hi or frac == 0.0:
            return a.start_s, a.end_s
        return a.start_s + (b.start_s - a.start_s) * frac, a.end_s + (b.end_s - a.end_s) * frac

    def summary(self) -> dict:
        return summarize(self)

    def pass_frame(self, step: int, ranks: list[int], offset_s: float, rank_base: int = 0) -> "pd.DataFrame":
        """The spans of the prefill (``step`` -1) or decode step ``step`` on ``ranks`` (of this TP
        group; labelled ``rank_base + rank``), shifted by ``offset_s``. Under rank symmetry every
        rank gets the simulated rank's spans."""
        if step < 0:
            start, end, program, phase = self.prefill.start_s, self.prefill.end_s, self.prefill_program or self.program, "prefill"
        else:
            (start, end), program, phase = self.decode_spans(step), self.program, "decode"
        rows = [r if self.sim_ranks > 1 else 0 for r in ranks]
        return timeline_frame(program, start[rows], end[rows], [rank_base + r for r in ranks], step, phase, offset_s)

    def timeline(self, steps: str | list[int] = "all", ranks: list[int] | None = None) -> "pd.DataFrame":
        """Spans as rows: phase, step, rank, stream, layer, op, kind, start_s, end_s (absolute).

        ``steps``: "all", "prefill" (prefill only), or a list of decode step indices. Under rank
        symmetry every requested rank gets the simulated rank's spans.
        """
        ranks = list(range(self.scenario.tp)) if ranks is None else ranks
        frames = [self.pass_frame(-1, ranks, 0.0)] if steps in ("all", "prefill") else []
        wanted = range(len(self.decode_metrics)) if steps == "all" else ([] if steps == "prefill" else steps)
        offsets = float(self.prefill_metrics[0]) + np.concatenate([[0.0], np.cumsum(self.decode_metrics[:, 0])])
        frames += [self.pass_frame(step, ranks, float(offsets[step])) for step in wanted]
        import pandas as pd

        return pd.concat(frames, ignore_index=True)


@lru_cache(maxsize=64)
def _program(schedule: str, n_layers: int, tp: int, stage: Stage | None = None,
             phase: str = "decode", mlp_layout: tuple[str, ...] | None = None) -> tuple[Program, StreamMasks, tuple, tuple, tuple, np.ndarray, np.ndarray]:
    """A program (frozen) with its stream masks, streams, deps, op kinds (each once), each op's
    index in them and each collective's compute ops before it (``laddersim.costs.rank_skew``),
    built once per process: a sweep repeats a handful of programs over many points. A pipeline
    ``stage``'s prefill runs other ops than its decode step (no token ids to receive)."""
    program = build_program(schedule, n_layers, tp, phase, stage, mlp_layout)
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


@dataclass(frozen=True)
class PassSetup:
    """What one TP group's passes run on: the nodes of the scenario, the ones the group spans, and
    (a pipeline stage) its stage and the point-to-point ops' seconds per phase."""

    nodes: int
    group_nodes: tuple[int, ...]
    stage: Stage | None = None
    boundary_s: tuple[tuple[str, dict[str, float]], ...] = ()  # ((phase, {op kind: seconds}), ...)

    def boundary(self, phase: str) -> dict[str, float]:
        return dict(self.boundary_s).get(phase, {})


# Collectives' interference by profile, TP and message (the schedules of a sweep share them).
_kept_slowdowns = IdentityMemo(65536)


@dataclass(frozen=True)
class RunBatch:
    """Engine runs a simulation asks for at once, each with its program's stream masks (for its
    metrics); ``cached``: each may be replayed (``laddersim.engine.cached``), else run on the
    direct event loop (``laddersim.engine.direct``), or on the SimPy engine itself where
    ``reference``; ``orders``: the runs' orders of events are compared (interpolation), so they are
    recorded. The answer is one (result, ``laddersim.simulation.results.step_metrics``) pair per run, in order."""

    runs: list[EngineRun]
    masks: list[StreamMasks]
    cached: bool
    reference: bool = False
    orders: bool = True


def simulate_passes(scenario: Scenario, setup: PassSetup, memory: MemoryUse, options: SimOptions | None = None,
                    progress=None) -> SimResult:
    """The prefill and every decode step of one TP group running ``setup``'s program (the whole
    model, or one pipeline stage)."""
    return drive(pass_simulation(scenario, setup, memory, options, progress))


def drive(steps: Generator[RunBatch, list, SimResult]) -> SimResult:
    """A simulation's result, its run batches answered one run after the other."""
    try:
        batch = next(steps)
        while True:
            batch = steps.send([answer(run, masks, batch) for run, masks in zip(batch.runs, batch.masks)])
    except StopIteration as stop:
        return stop.value


def answer(run: EngineRun, masks: StreamMasks, batch: RunBatch) -> tuple[EngineResult, np.ndarray]:
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
    return result, step_metrics(result, masks)


def pass_simulation(scenario: Scenario, setup: PassSetup, memory: MemoryUse, options: SimOptions | None = None,
                    progress=None) -> Generator[RunBatch, list[tuple[EngineResult, np.ndarray]], SimResult]:
    """``simulate_passes`` as a generator: it yields each ``RunBatch`` it needs and is sent the
    answers; it returns the SimResult."""
    options = options or SimOptions()
    model, hw, work, tp = scenario.model, scenario.hardware, scenario.workload, scenario.tp
    stage, nodes = setup.stage, setup.nodes
    layout = model.mlp_layout()
    decode_pass = _program(scenario.schedule, model.n_layers, tp, stage, "decode", layout)
    prefill_pass = _program(scenario.schedule, model.n_layers, tp, stage, "prefill", layout) if stage is not None else decode_pass
    program, masks, streams, deps, kind_names, kind_of_op, _ = decode_pass
    skew = skew_wait_per_compute(hw, tp)

    def op_durations(per_kind: np.ndarray, bundle: tuple = decode_pass) -> np.ndarray:
        """Seconds per op from seconds per kind; each collective waits for the slowest rank."""
        kind_of, before = bundle[5], bundle[6]
        durations = per_kind[kind_of]
        return durations + skew * (before @ per_kind) if skew else durations
    ops_per_pass = len(kind_of_op)
    stochastic = options.jitter > 0.0
    rng = np.random.default_rng(options.seed) if stochastic else None  # (drawn from only with jitter)
    n_ranks = tp if (stochastic or options.all_ranks) else 1
    group_nodes = setup.group_nodes
    links = {0: tuple(f"node{i}" for i in group_nodes) + (("network",) if len(group_nodes) > 1 else ())}

    def interference(phase: Phase, bundle: tuple = decode_pass) -> tuple[np.ndarray, np.ndarray]:
        """Per-op (compute, comm) slowdowns; only the collectives' entries are read (the
        point-to-point ops of a stage boundary overlap nothing: none)."""
        kinds, kind_of = bundle[4], bundle[5]
        by_kind = {kind: _kept_slowdowns.get((hw,), (tp, size), lambda: slowdowns(hw, tp, size))
                   for kind, size in collective_message_bytes(model, work, tp, phase).items()}
        pairs = np.array([by_kind.get(kind, (0.0, 0.0)) for kind in kinds], dtype=float).reshape(-1, 2)
        return pairs[kind_of, 0], pairs[kind_of, 1]

    cached = options.replay and not stochastic and not options.reference  # jittered runs rarely share an order

    def ask(durations: np.ndarray, slow: tuple[np.ndarray, np.ndarray], family: str,
            bundle: tuple = decode_pass) -> EngineRun:
        works = _rank_works(bundle[2], bundle[3], durations, n_ranks, rng, options.jitter)
        return EngineRun(works, slow[0], slow[1], links, family)

    def with_boundary(costs: dict[str, np.ndarray], phase: str, shape) -> dict[str, np.ndarray]:
        return {**costs, **{kind: np.full(shape, seconds) for kind, seconds in setup.boundary(phase).items()}}

    # Prefill (its run asked for with the first decode steps'; its noise drawn first, as before them).
    prefill_phase = Phase("prefill", work.batch, work.prompt_len)
    prefill_costs = with_boundary(op_times_s(model, hw, work, tp, prefill_phase, np.array([work.prompt_len])),
                                  "prefill", (1,))
    prefill_run = ask(op_durations(np.array([prefill_costs[k][0] for k in prefill_pass[4]]), prefill_pass),
                      interference(prefill_phase, prefill_pass), "prefill", prefill_pass)
    prefill: list = []  # (result, metrics) once run

    # Decode: gen_len - 1 steps (the prefill already produced the first token).
    n_steps = work.gen_len - 1
    kv_lens = np.broadcast_to(work.kv_len_at_decode_step(np.arange(n_steps)), (n_steps,))  # every step at once
    decode_phase = Phase("decode", work.batch, 1)
    decode_slowdowns = interference(decode_phase)
    costs = with_boundary(op_times_s(model, hw, work, tp, decode_phase, kv_lens), "decode", (n_steps,))
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
        run_masks = ([] if prefill else [prefill_pass[1]]) + [masks] * len(steps)
        answers = yield RunBatch(runs, run_masks, cached, options.reference, not stochastic)
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
            control = (yield from pass_simulation(scenario, setup, memory,
                                                  SimOptions(replay=options.replay,
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
                     step_lo, step_hi, step_frac, anchors, prefill_pass[0] if stage is not None else None, half_width)
