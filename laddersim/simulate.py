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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
from pydantic import ValidationError

from laddersim.costs.collectives import slowdowns
from laddersim.costs.memory_fit import MemoryUse, check_fits
from laddersim.costs.op_costs import Phase, collective_message_bytes, op_times_s
from laddersim.costs.rank_skew import compute_before_collectives, skew_wait_per_compute
from laddersim.engine.cached import run_cached
from laddersim.engine.simulator import EngineResult, RankWork, run_engine
from laddersim.errors import UserInputError
from laddersim.framework import load_framework
from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.model_shape import ModelShape, load_model_shape
from laddersim.results import METRICS, StreamMasks, step_metrics, timeline_frame
from laddersim.schedules.plan import parse_schedule
from laddersim.schedules.program import Program, build_program
from laddersim.step_sampling import choose_steps, estimate, sample_size
from laddersim.workload import Workload

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Scenario:
    model: ModelShape
    hardware: HardwareProfile
    workload: Workload
    tp: int
    schedule: str


@dataclass(frozen=True)
class SimOptions:
    jitter: float = 0.0  # sigma of a per-rank, per-op lognormal duration multiplier
    seed: int = 0
    all_ranks: bool = False  # simulate every rank even when they are symmetric
    exact_steps: bool = False  # simulate every decode step (no interpolation; with jitter: no sample)
    sample_steps: int | None = None  # with jitter: decode steps to simulate (None: step_sampling's rule)
    replay: bool = True  # replay a recorded event order where it holds (bit for bit the engine's)


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
    # With jitter and a sample of decode steps (laddersim.step_sampling): 95% half-width of each
    # METRICS' decode total; None where every step was simulated.
    decode_half_width_s: np.ndarray | None = None

    @property
    def simulated_steps(self) -> int:
        return len(self.anchors) + 1

    @property
    def engine_events(self) -> int:
        return len(self.prefill.signature) + sum(len(a.signature) for a in self.anchors.values())

    def decode_spans(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi, frac = int(self.step_lo[step]), int(self.step_hi[step]), float(self.step_frac[step])
        a, b = self.anchors[lo], self.anchors[hi]
        if lo == hi or frac == 0.0:
            return a.start_s, a.end_s
        return a.start_s + (b.start_s - a.start_s) * frac, a.end_s + (b.end_s - a.end_s) * frac

    def summary(self) -> dict:
        s = self.scenario
        w = s.workload
        prefill_s = float(self.prefill_metrics[0])
        decode_s = float(self.decode_metrics[:, 0].sum())
        total_s = prefill_s + decode_s
        both = self.prefill_metrics + self.decode_metrics.sum(axis=0)
        n_decode = len(self.decode_metrics)
        summary = {
            "schedule": s.schedule,
            "model": s.model.name,
            "hardware": s.hardware.name,
            "tp": s.tp,
            "nodes": self.nodes,
            "batch": w.batch,
            "prompt_len": w.prompt_len,
            "gen_len": w.gen_len,
            "dtype": w.dtype,
            "kv_cache": w.kv_cache,
            "kv_reads": w.kv_reads,
            "framework": w.framework,
            "prefill_s": prefill_s,
            "decode_s": decode_s,
            "total_s": total_s,
            # The paper's metric: batch * generated tokens / (prefill + decode).
            "tokens_per_s": w.batch * w.gen_len / total_s,
            "ttft_s": prefill_s,
            # None with gen_len 1: the prefill made the only token, there is no decode step.
            "tpot_s": decode_s / n_decode if n_decode else None,
            "decode_step_s": decode_s / n_decode if n_decode else None,
            "compute_s": float(both[1]),
            "overhead_s": float(both[2]),
            "comm_s": float(both[3]),
            "exposed_comm_s": float(both[4]),
            "memory_per_gpu_gib": self.memory.total_bytes / 2**30,
        }
        if self.decode_half_width_s is not None:
            summary.update(self._intervals(summary))
        return summary

    def _intervals(self, summary: dict) -> dict:
        """95% intervals of the sampled estimates (what simulating every step would give)."""
        half = float(self.decode_half_width_s[0])
        tokens = self.scenario.workload.batch * self.scenario.workload.gen_len
        n_decode = len(self.decode_metrics)
        decode = (summary["decode_s"] - half, summary["decode_s"] + half)
        total = (summary["prefill_s"] + decode[0], summary["prefill_s"] + decode[1])
        return {
            "sampled_steps": self.simulated_steps - 1,
            "decode_s_ci95": list(decode),
            "total_s_ci95": list(total),
            "tokens_per_s_ci95": [tokens / total[1], tokens / max(total[0], 1e-300)],
            "tpot_s_ci95": [decode[0] / n_decode, decode[1] / n_decode],
        }

    def timeline(self, steps: str | list[int] = "all", ranks: list[int] | None = None) -> "pd.DataFrame":
        """Spans as rows: phase, step, rank, stream, layer, op, kind, start_s, end_s (absolute).

        ``steps``: "all", "prefill" (prefill only), or a list of decode step indices. Under rank
        symmetry every requested rank gets the simulated rank's spans.
        """
        tp = self.scenario.tp
        ranks = list(range(tp)) if ranks is None else ranks
        def rows(arr: np.ndarray) -> np.ndarray:
            return arr[[r if self.sim_ranks > 1 else 0 for r in ranks]]
        frames = []
        if steps in ("all", "prefill"):
            frames.append(timeline_frame(self.program, rows(self.prefill.start_s), rows(self.prefill.end_s),
                                         ranks, -1, "prefill", 0.0))
        wanted = range(len(self.decode_metrics)) if steps == "all" else ([] if steps == "prefill" else steps)
        offsets = float(self.prefill_metrics[0]) + np.concatenate([[0.0], np.cumsum(self.decode_metrics[:, 0])])
        for step in wanted:
            start, end = self.decode_spans(step)
            frames.append(timeline_frame(self.program, rows(start), rows(end), ranks, step, "decode",
                                         float(offsets[step])))
        import pandas as pd

        return pd.concat(frames, ignore_index=True)


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
    rng = np.random.default_rng(options.seed)
    stochastic = options.jitter > 0.0
    n_ranks = tp if (stochastic or options.all_ranks) else 1
    links = {0: tuple(f"node{i}" for i in range(nodes)) + (("network",) if nodes > 1 else ())}

    def interference(phase: Phase) -> tuple[np.ndarray, np.ndarray]:
        """Per-op (compute, comm) slowdowns; only the collectives' entries are read."""
        by_kind = {kind: slowdowns(hw, tp, size)
                   for kind, size in collective_message_bytes(model, work, tp, phase).items()}
        pairs = np.array([by_kind.get(kind, (0.0, 0.0)) for kind in kind_names], dtype=float).reshape(-1, 2)
        return pairs[kind_of_op, 0], pairs[kind_of_op, 1]

    cached = options.replay and not stochastic  # jittered runs rarely share an event order

    def run(durations: np.ndarray, slowdowns: tuple[np.ndarray, np.ndarray], family: str) -> EngineResult:
        works = _rank_works(streams, deps, durations, n_ranks, rng, options.jitter)
        if cached:
            return run_cached(works, slowdowns[0], slowdowns[1], group_links=links, family=family)
        return run_engine(works, slowdowns[0], slowdowns[1], group_links=links)

    # Prefill.
    prefill_phase = Phase("prefill", work.batch, work.prompt_len)
    prefill_costs = op_times_s(model, hw, work, tp, prefill_phase, np.array([work.prompt_len]))
    prefill = run(op_durations(np.array([prefill_costs[k][0] for k in kind_names])), interference(prefill_phase),
                  "prefill")
    prefill_metrics = step_metrics(prefill, masks)

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

    metrics_of: dict[int, np.ndarray] = {}  # id(result) -> its metrics (a run repeated is one result)

    def anchor(step: int) -> EngineResult:
        if step not in anchors:
            result = anchors[step] = run(op_durations(by_kind[step]), decode_slowdowns, "decode")
            if id(result) not in metrics_of:
                metrics_of[id(result)] = step_metrics(result, masks)
            metrics[step] = metrics_of[id(result)]
        return anchors[step]

    half_width = None
    n_sample = n_steps if options.exact_steps else (options.sample_steps or sample_size(n_steps, n_ranks, ops_per_pass))
    if n_steps and stochastic:
        steps = np.arange(n_steps) if n_sample >= n_steps else choose_steps(n_steps, n_sample, options.seed)
        for done, step in enumerate(steps):
            if progress:
                progress(done + 1, len(steps) + 1, n_ranks * ops_per_pass)
            anchor(int(step))
        if progress:
            progress(len(steps) + 1, len(steps) + 1, n_ranks * ops_per_pass)
        if len(steps) < n_steps:
            control = simulate(scenario, SimOptions(replay=options.replay)).decode_metrics
            sampled = estimate(control, steps, metrics[steps])
            metrics[:], half_width = sampled.metrics, sampled.half_width_s
            nearest = steps[np.clip(np.searchsorted(steps, np.arange(n_steps)), 0, len(steps) - 1)]
            step_lo[:], step_hi[:] = nearest, nearest  # a step not simulated shows a simulated one's spans
    elif n_steps and options.exact_steps:
        for step in range(n_steps):
            anchor(step)
    elif n_steps:
        stack = [(0, n_steps - 1)]
        while stack:
            lo, hi = stack.pop()
            a, b = anchor(lo), anchor(hi)
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
    return SimResult(scenario, nodes, program, memory, n_ranks, prefill, prefill_metrics, metrics,
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
        work = Workload(batch=batch, prompt_len=prompt_len, gen_len=gen_len, dtype=dtype,
                        kv_cache=kv_cache or fw.kv_cache.value, kv_reads=kv_reads or fw.kv_reads.value,
                        framework=framework)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UserInputError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    parse_schedule(schedule, shape.n_layers)
    profile.gpu.peak_flops_per_s_for(work.dtype)  # a dtype this GPU cannot run is one error line now
    shape.check_window(work.prompt_len, work.gen_len)
    return Scenario(shape, profile, work, tp, schedule)
