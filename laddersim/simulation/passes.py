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
from dataclasses import dataclass

import numpy as np

from laddersim.costs.memory_fit import MemoryUse
from laddersim.costs.op_costs import Phase, collective_message_bytes, op_times_s
from laddersim.costs.rank_skew import skew_wait_per_compute
from laddersim.engine import entry as engine
from laddersim.engine.work import EngineResult, EngineRun
from laddersim.schedules.stages import Stage
from laddersim.simulation.compiled_program import CompiledProgram, compile_program
from laddersim.simulation.engine_inputs import (engine_run, group_links, kind_slowdowns, layout_slowdowns,
                                                layout_times_s, op_seconds)
from laddersim.simulation.results import METRICS, SimResult, StreamMasks, step_metrics
from laddersim.simulation.scenario import Scenario, SimOptions
from laddersim.simulation.step_sampling import choose_steps, estimate, sample_size


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
    """One run of a batch by the engine's entry, and its metrics."""
    result = engine.run(run, replay=batch.cached, reference=batch.reference, orders=batch.orders)
    return result, step_metrics(result, masks)


def pass_simulation(scenario: Scenario, setup: PassSetup, memory: MemoryUse, options: SimOptions | None = None,
                    progress=None) -> Generator[RunBatch, list[tuple[EngineResult, np.ndarray]], SimResult]:
    """``simulate_passes`` as a generator: it yields each ``RunBatch`` it needs and is sent the
    answers; it returns the SimResult."""
    options = options or SimOptions()
    model, hw, work, tp = scenario.model, scenario.hardware, scenario.workload, scenario.tp
    stage, nodes = setup.stage, setup.nodes
    layout, dp = model.mlp_layout(), scenario.layout
    decode_pass = compile_program(scenario.schedule, model.n_layers, tp, stage, "decode", mlp_layout=layout,
                                  expert_alltoall=dp is not None)
    prefill_pass = compile_program(scenario.schedule, model.n_layers, tp, stage, "prefill", mlp_layout=layout) \
        if stage is not None else decode_pass
    times_s = op_times_s if dp is None else layout_times_s(dp)
    program, masks, kind_names = decode_pass.program, decode_pass.masks, decode_pass.kind_names
    skew = skew_wait_per_compute(hw, tp)
    ops_per_pass = decode_pass.n_ops
    stochastic = options.jitter > 0.0
    rng = np.random.default_rng(options.seed) if stochastic else None  # (drawn from only with jitter)
    n_ranks = tp if (stochastic or options.all_ranks) else 1
    links = group_links(setup.group_nodes)

    def interference(phase: Phase, compiled: CompiledProgram = decode_pass) -> tuple[np.ndarray, np.ndarray]:
        if dp is not None:
            return layout_slowdowns(model, hw, work, dp, phase, compiled.kind_names)
        return kind_slowdowns(hw, tp, collective_message_bytes(model, work, tp, phase), compiled.kind_names, work)

    cached = options.replay and not stochastic and not options.reference  # jittered runs rarely share an order

    def ask(per_kind_s: np.ndarray, slow: tuple[np.ndarray, np.ndarray], family: str,
            compiled: CompiledProgram = decode_pass) -> EngineRun:
        return engine_run(compiled, op_seconds(compiled, per_kind_s, skew), slow, links, family, n_ranks, rng,
                          options.jitter)

    def with_boundary(costs: dict[str, np.ndarray], phase: str, shape) -> dict[str, np.ndarray]:
        return {**costs, **{kind: np.full(shape, seconds) for kind, seconds in setup.boundary(phase).items()}}

    # Prefill (its run asked for with the first decode steps'; its noise drawn first, as before them).
    prefill_phase = Phase("prefill", work.batch, work.prompt_len)
    prefill_costs = with_boundary(times_s(model, hw, work, tp, prefill_phase, np.array([work.prompt_len])),
                                  "prefill", (1,))
    prefill_run = ask(np.array([prefill_costs[k][0] for k in prefill_pass.kind_names]),
                      interference(prefill_phase, prefill_pass), "prefill", prefill_pass)
    prefill: list = []  # (result, metrics) once run

    # Decode: gen_len - 1 steps (the prefill already produced the first token).
    n_steps = work.gen_len - 1
    kv_lens = np.broadcast_to(work.kv_len_at_decode_step(np.arange(n_steps)), (n_steps,))  # every step at once
    decode_phase = Phase("decode", work.batch, 1)
    decode_slowdowns = interference(decode_phase)
    costs = with_boundary(times_s(model, hw, work, tp, decode_phase, kv_lens), "decode", (n_steps,))
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
        runs = ([] if prefill else [prefill_run]) + [ask(by_kind[s], decode_slowdowns, "decode") for s in steps]
        if not runs:
            return
        run_masks = ([] if prefill else [prefill_pass.masks]) + [masks] * len(steps)
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
                     step_lo, step_hi, step_frac, anchors, prefill_pass.program if stage is not None else None, half_width)
