"""How long one continuous-batching iteration takes: the step simulator run on the iteration's shape.

An iteration of a vLLM-style engine is one forward pass over ``tokens`` new tokens: one per
decoding sequence plus the prompt tokens (whole prompts or chunks) of prefilling ones. Every op
but attention and the logits tail depends only on ``tokens`` (GEMM M, norms, the AllReduce
message and its start-up, the framework's AllReduce kernel and transport); attention depends on
the KV positions read; the logits tail (final norm, LM head, logits AllGather, sampling) on the
sequences that sample (``logits``) and on the LM head's rows (``logits_rows``: those sequences,
or every new token of an iteration with prompt tokens where the framework's prefill computes
every position's logits, gpt-fast's ``prefill_logits: all``). Every duration is the cost model's
own (laddersim.costs.op_costs: ``op_times_s`` on the iteration's shape for every op but
attention; attention from laddersim.traffic.attention_cost, which prices the decoding sequences
and the prompt chunks with ``attention_time_s`` / ``prefill_attention_time_s`` on the framework's
paths); the SimPy engine (laddersim.engine) turns them into the iteration's makespan on the
chosen schedule, exactly as laddersim.simulation does for one static batch. So an iteration of one
request's prompt is ``simulate``'s batch-1 prefill, one of B decoding sequences of one length its
batch-B decode step.

Engine runs are the cost, so they are shared between shapes, and only two of the shape's
dimensions need them:

* **attention (exact)**: at a fixed ``tokens``, only the attention ops' durations (all equal,
  ``a`` seconds per layer) vary, so by the engine's linearity (laddersim.engine.simulator: every
  event time is linear in the durations for a fixed event order) the makespan is piecewise
  linear in ``a`` with breaks only where the event order (signature) changes. Anchors sit on a
  geometric grid of ``a`` (ratio 8); two anchors with the same signature interpolate exactly, otherwise the
  interval is bisected until the signatures agree or the two ends' times differ by at most 0.1%
  (the time is non-decreasing in ``a``, so that difference bounds the interpolation error; it
  joins ``max_error_bound``).
* **logits tail (exact)**: the tail runs after the last AllReduce has finished and alone (the
  compute stream waits for the AllGather), so it adds its durations' sum; runs use one reference
  count and the tail's sum is corrected to the iteration's count.
* **tokens (bounded)**: runs sit on a grid of ``tokens`` (every integer up to 16, then
  ``points_per_octave`` per doubling; where a kernel path changes between two grid points, a
  split-K reduce or NCCL's algorithm, the interval is bisected down to the change, so both of
  its sides are grid points). Off the grid, the time is the serial sum of the
  iteration's own durations (exact, no engine) minus the time overlap saves, interpolated
  linearly between the two grid points. Under the standard schedule nothing overlaps, so the
  saving is 0 and the result exact; under ladder the saving is the hidden communication, which
  grows with the tokens (messages and compute both do), so the error is at most the difference
  of the savings at the two grid points. :class:`IterationTimer` keeps the largest such bound,
  relative to the iteration's time, in ``max_error_bound``.

``seconds`` is that makespan (``gpu_seconds``) with the framework's host side where it prices one
(laddersim.costs.host_bound: eager launches past its CUDA graphs, per-sequence host work).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from laddersim.costs.collectives import collective_choice
from laddersim.costs.host_bound import HostSide
from laddersim.costs.op_costs import collective_message_bytes, logits_rows
from laddersim.costs.pass_shapes import linear_shapes, splitk_reduce
from laddersim.costs.rank_skew import skew_wait_per_compute
from laddersim.engine.entry import run as run_engine
from laddersim.model.framework import load_framework
from laddersim.traffic.attention_cost import AttentionCost
from laddersim.traffic.attention_intervals import Intervals, interpolate
from laddersim.traffic.iteration_shape import MixedPhase, phase_of, shared_op_times_s, token_bracket
from laddersim.simulation.compiled_program import CompiledProgram, compile_program
from laddersim.simulation.engine_inputs import engine_run, group_links, kind_slowdowns, op_seconds
from laddersim.simulation.simulate import Scenario
from laddersim.schedules.stages import Stage

# Ops after the last hidden-state AllReduce whose durations depend on the sampling sequences.
TAIL_KINDS = frozenset({"final_norm", "lm_head", "allgather_logits", "sampling"})
ROW_KINDS = frozenset({"final_norm", "lm_head"})  # of them, those that run on the LM head's rows
A_GRID_BASE_S = 1e-6  # attention anchors at 1 us * A_GRID_FACTOR**k
A_GRID_FACTOR = 8.0
A_TOLERANCE = 1e-3  # stop bisecting an attention interval once its ends differ by this share


@dataclass(frozen=True)
class StageTiming:
    """A pipeline stage an iteration timer prices: its layers, the nodes its TP group spans, and
    the seconds of its receive for an iteration of ``tokens`` new tokens and ``logits`` sampled
    ones (``laddersim.simulation.pipeline.stage_receive_s``)."""

    stage: Stage
    nodes: tuple[int, ...]
    receive_s: Callable[[int, int], dict[str, float]]


def _reduced_program(schedule: str, layers: int, tp: int, stage: StageTiming | None,
                     kind_names: tuple[str, ...], mlp_kind: str | None) -> CompiledProgram:
    """The program of ``layers`` layers standing for the whole model, or for a stage: a stage of
    ``layers`` layers in the same place of its pipeline (after one layer when it is not the first,
    whose pending outputs cross into it). ``mlp_kind``: every layer's MLP module kind (a
    mixture-of-experts model whose layers are all alike; None: dense)."""
    if stage is None:
        layout = None if mlp_kind is None else (mlp_kind,) * layers
        return compile_program(schedule, layers, tp, kind_names=kind_names, mlp_layout=layout)
    s = stage.stage
    first = 0 if s.first else 1
    n = first + layers + (0 if s.last else 1)
    return compile_program(schedule, n, tp, Stage(s.index, s.count, first, first + layers), "decode", kind_names,
                           None if mlp_kind is None else (mlp_kind,) * n)


class IterationTimer:
    """Makespan of an iteration on one scenario (model, hardware, TP, schedule, dtype, framework, KV
    reads; a paged cache: its workload's batch and lengths are not read), with every engine run cached.

    Layers repeat, so a run of the whole model is replaced, when it is exact, by runs of
    ``REDUCED_LAYERS``, twice and three times as many layers: their makespans are checked to grow
    by the same amount per block of layers (to 1e-9 relative; the engine is periodic once the
    streams' offset settles) and extrapolated to the model's layers; otherwise the whole model
    runs. Tests check the extrapolation against whole-model runs.
    """

    REDUCED_LAYERS = 2

    def __init__(self, scenario: Scenario, points_per_octave: int = 8, stage: StageTiming | None = None):
        self.scenario = scenario
        self.points_per_octave = points_per_octave
        self.stage = stage
        model, tp = scenario.model, scenario.tp
        # A mixture-of-experts model's layers run their own MLP module kinds (ModelShape.mlp_layout);
        # its MoE ops are priced at the iteration's tokens like every other op (the experts a pass
        # hits follow its tokens: laddersim.costs.moe_routing), so the grid below holds for it too.
        layout = model.mlp_layout()
        whole = compile_program(scenario.schedule, model.n_layers, tp, stage and stage.stage, "decode",
                                mlp_layout=layout)
        self._kind_names = tuple(sorted(whole.kind_names))
        self._full = compile_program(scenario.schedule, model.n_layers, tp, stage and stage.stage, "decode",
                                     self._kind_names, layout)
        self.program = self._full.program
        self._reduced: list[CompiledProgram] = []
        self._layers = stage.stage.n_layers if stage else model.n_layers
        k = self.REDUCED_LAYERS
        # Reduced runs stand for the model only where every layer is alike (interleaved dense and
        # MoE layers, or a few dense layers first, run the whole model).
        uniform = layout is None or len(set(layout)) == 1
        if self._layers > 3 * k and not scenario.schedule.startswith("hybrid") and uniform:
            self._reduced = [_reduced_program(scenario.schedule, n, tp, stage, self._kind_names,
                                              None if layout is None else layout[0]) for n in (k, 2 * k, 3 * k)]
        self._tail_kinds = np.array([name in TAIL_KINDS for name in self._kind_names])
        self._row_kinds = np.array([name in ROW_KINDS for name in self._kind_names])
        self._sample_kinds = self._tail_kinds & ~self._row_kinds
        self._serial_kinds = np.array([name not in TAIL_KINDS and name != "attention" for name in self._kind_names])
        self._kind_counts = np.bincount(self._full.kind_of_op, minlength=len(self._kind_names))
        self._skew = skew_wait_per_compute(scenario.hardware, tp)
        group = stage.nodes if stage else tuple(range(scenario.hardware.nodes_for(tp)))
        self._links = group_links(group)
        self.attention = AttentionCost(scenario)
        self._base: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, float]] = {}
        self._framework = load_framework(scenario.workload.framework)
        self._host = HostSide(scenario.model, scenario.hardware, scenario.workload, scenario.tp, self._framework,
                              dict(zip(self._kind_names, self._kind_counts.tolist()))) \
            if self._framework.prices_host_side() else None
        self._rows_s: dict[tuple[bool, int], float] = {}  # (one token, rows) -> final norm + LM head
        self._samples_s: dict[tuple[bool, int], float] = {}  # (one token, samples) -> gather + sampling
        self._serial_s: dict[int, float] = {}
        self._paths: dict[int, tuple] = {}  # tokens -> the pass's kernel paths (``_path``)
        self._kinds_s: dict[tuple[int, int], np.ndarray] = {}
        self._n_attention = int(self._full.is_kind("attention").sum())
        self._attention_kind = self._kind_names.index("attention") if "attention" in self._kind_names else None
        self._anchors: dict[tuple[int, float], tuple[float, tuple]] = {}  # (tokens, a) -> body s, signature ids
        self._signatures: dict[tuple, int] = {}
        # tokens -> sorted starts and (lo, hi, body at lo, body at hi, error bound) of ``a`` intervals
        self._segments: dict[int, Intervals] = {}  # tokens -> resolved intervals of ``a``
        self._brackets: dict[int, tuple[int, int]] = {}  # tokens -> ``_bracket``
        self._tails_s: dict[tuple[int, int, bool], float] = {}  # (tokens, logits, prefill) -> ``_tail_seconds``
        self.engine_runs = 0
        self.whole_model_runs = 0
        self.max_error_bound = 0.0

    def _kind_seconds(self, tokens: int, logits: int) -> np.ndarray:
        """Seconds of one op of each kind (``_kind_names`` order) in a pass of ``tokens`` whose LM
        head runs on ``logits`` rows, as many sequences sampling; attention is not used."""
        key = (tokens, logits)
        if key not in self._kinds_s:
            s = self.scenario
            times = shared_op_times_s(s, tokens, logits)
            if self.stage:  # what the stage receives: the new tokens' hidden states, or the sampled ids
                times = {**times, **self.stage.receive_s(tokens, logits)}
            self._kinds_s[key] = np.array([float(np.asarray(times[k]).reshape(-1)[0]) for k in self._kind_names])
        return self._kinds_s[key]

    def _tail_seconds(self, tokens: int, logits: int, prefill: bool = False) -> float:
        # The tail's durations depend on the LM head's rows (logits_rows: the sampling sequences, or
        # every new token of a prefill under ``prefill_logits: all``), on the sampling sequences (the
        # logits gathered, the sampling) and on tokens only through the single-token kernel floor.
        # Priced in two parts so that an iteration's LM head over all its tokens reuses the pass
        # priced at those tokens (the body's, whose LM head runs on every token): no new op_times_s.
        key = (tokens, logits, prefill)
        if key not in self._tails_s:
            rows = logits_rows(self._framework, phase_of(tokens, logits, prefill))
            self._tails_s[key] = self._tail_part(self._rows_s, self._row_kinds, tokens, rows) + \
                self._tail_part(self._samples_s, self._sample_kinds, tokens, logits) + \
                logits * self._framework.server_host_per_sequence_s()  # the online server's host work
        return self._tails_s[key]

    def _tail_part(self, cache: dict, kinds: np.ndarray, tokens: int, count: int) -> float:
        key = (tokens == 1, count)
        if key not in cache:
            cache[key] = float((self._kind_seconds(tokens, count) * self._kind_counts)[kinds].sum())
        return cache[key]

    def _base_at(self, tokens: int):
        """Per-kind seconds, per-kind (compute, comm) slowdowns and the tail sum at a grid point;
        the reference logits count is ``tokens`` (a decode-only iteration)."""
        if tokens not in self._base:
            s = self.scenario
            phase = MixedPhase("decode", tokens, 1, tokens)
            seconds = self._kind_seconds(tokens, tokens)
            compute, comm = kind_slowdowns(s.hardware, s.tp, collective_message_bytes(s.model, s.workload, s.tp, phase),
                                           self._kind_names, s.workload)
            tail_s = float((seconds * self._kind_counts)[self._tail_kinds].sum())
            self._base[tokens] = (seconds, compute, comm, tail_s)
        return self._base[tokens]

    def _run(self, compiled: CompiledProgram, seconds: np.ndarray, compute: np.ndarray, comm: np.ndarray,
             a_s: float) -> tuple[float, int]:
        per_kind = seconds.copy()
        if self._attention_kind is not None:
            per_kind[self._attention_kind] = a_s
        # (each collective waits for the slowest rank: laddersim.costs.rank_skew)
        run = engine_run(compiled, op_seconds(compiled, per_kind, self._skew), (compute, comm), self._links)
        result = run_engine(run)
        self.engine_runs += 1
        return float(result.end_s.max()), self._signatures.setdefault(result.signature, len(self._signatures))

    def _anchor(self, tokens: int, a_s: float) -> tuple[float, tuple]:
        """(makespan without the tail, engine signature ids) at a grid point with attention ``a_s``."""
        key = (tokens, a_s)
        if key not in self._anchors:
            seconds, compute, comm, tail_s = self._base_at(tokens)
            anchor = None
            if self._reduced:
                (t1, s1), (t2, s2), (t3, s3) = (self._run(lay, seconds, compute, comm, a_s) for lay in self._reduced)
                if abs((t3 - t2) - (t2 - t1)) <= 1e-9 * t3:
                    k, n = self.REDUCED_LAYERS, self._layers
                    anchor = (t1 + (n - k) / k * (t2 - t1) - tail_s, (s1, s2, s3))
            if anchor is None:
                t, sig = self._run(self._full, seconds, compute, comm, a_s)
                self.whole_model_runs += 1
                anchor = (t - tail_s, (sig,))
            self._anchors[key] = anchor
        return self._anchors[key]

    def _intervals(self, tokens: int) -> Intervals:
        if tokens not in self._segments:
            self._segments[tokens] = Intervals()
        return self._segments[tokens]

    def body_seconds(self, tokens: int, a_s: float) -> float:
        """Makespan without the logits tail at a grid point: exact in ``a_s`` within one event
        order, else within the bound it adds to ``max_error_bound``."""
        intervals = self._intervals(tokens)
        interval = intervals.find(a_s)
        if interval is None:
            k = math.floor(math.log(a_s / A_GRID_BASE_S, A_GRID_FACTOR)) if a_s > 0 else 0
            lo, hi = A_GRID_BASE_S * A_GRID_FACTOR ** k, A_GRID_BASE_S * A_GRID_FACTOR ** (k + 1)
            if a_s <= 0:
                lo, hi = 0.0, A_GRID_BASE_S
            while True:
                (t_lo, sig_lo), (t_hi, sig_hi) = self._anchor(tokens, lo), self._anchor(tokens, hi)
                if sig_lo == sig_hi or t_hi - t_lo <= A_TOLERANCE * t_lo:
                    break
                mid = 0.5 * (lo + hi)
                lo, hi = (lo, mid) if a_s <= mid else (mid, hi)
            interval = (lo, hi, t_lo, t_hi, 0.0 if sig_lo == sig_hi else (t_hi - t_lo) / t_lo)
            intervals.insert(interval)
        if interval[4] > self.max_error_bound:
            self.max_error_bound = interval[4]
        return interpolate(interval, a_s)

    def _serial_seconds(self, tokens: int) -> float:
        """Sum of the durations of every op but attention and the tail, at ``tokens``."""
        if tokens not in self._serial_s:
            seconds = self._kind_seconds(tokens, tokens)
            self._serial_s[tokens] = float((seconds * self._kind_counts)[self._serial_kinds].sum())
        return self._serial_s[tokens]

    def _saved_seconds(self, tokens: int, attention_s: float) -> float:
        """Serial sum minus the simulated makespan (body only) at a grid point."""
        serial = self._serial_seconds(tokens) + self._n_attention * attention_s
        return serial - self.body_seconds(tokens, attention_s)

    def _path(self, tokens: int) -> tuple:
        """What changes a pass's costs by a step as its tokens grow, not smoothly: whether the
        library splits each linear's K (a reduce kernel more: laddersim.costs.pass_shapes.splitk_reduce)
        and each collective's (algorithm, protocol), NCCL's tuner choice by message size."""
        if tokens not in self._paths:
            s = self.scenario
            phase = phase_of(tokens, tokens, False)
            splits = tuple(splitk_reduce(self._framework, s.hardware.gpu, m, n)
                           for m, n, _, _ in linear_shapes(s.model, s.tp, phase).values())
            choices = tuple(collective_choice(s.hardware, s.tp, float(size)) for size in
                            collective_message_bytes(s.model, s.workload, s.tp, phase).values())
            self._paths[tokens] = splits + choices
        return self._paths[tokens]

    def _bracket(self, tokens: int) -> tuple[int, int]:
        """The grid points around ``tokens`` (``token_bracket``), narrowed by bisection while a
        kernel path changes between them (``_path``): the overlap saved is interpolated only
        where it varies smoothly, so the bound below holds."""
        if tokens in self._brackets:
            return self._brackets[tokens]
        lo, hi = token_bracket(tokens, self.points_per_octave)
        while hi - lo > 1 and self._path(lo) != self._path(hi):
            mid = (lo + hi) // 2
            if tokens == mid:
                lo = hi = mid
                break
            lo, hi = (lo, mid) if tokens < mid else (mid, hi)
        self._brackets[tokens] = (tokens, tokens) if tokens in (lo, hi) else (lo, hi)
        return self._brackets[tokens]

    def seconds(self, tokens: int, logits: int, attention_s: float, prefill: bool = False) -> float:
        """Duration of an iteration of ``tokens`` new tokens, ``logits`` sampling sequences and
        ``attention_s`` per-layer attention (AttentionCost.seconds); ``prefill``: it has prompt
        tokens (the LM head's rows then follow the framework's ``prefill_logits``): its GPU
        makespan (``gpu_seconds``) with the framework's host side (laddersim.costs.host_bound)."""
        return self._host_bound(self.gpu_seconds(tokens, logits, attention_s, prefill), tokens, max(1, logits), prefill)

    def gpu_seconds(self, tokens: int, logits: int, attention_s: float, prefill: bool = False) -> float:
        """The GPU makespan of that iteration (``seconds`` without the host side)."""
        lo, hi = self._bracket(tokens)
        if hi == lo:
            body = self.body_seconds(lo, attention_s)
        else:
            saved_lo, saved_hi = self._saved_seconds(lo, attention_s), self._saved_seconds(hi, attention_s)
            saved = saved_lo + (saved_hi - saved_lo) * (tokens - lo) / (hi - lo)
            body = self._serial_seconds(tokens) + self._n_attention * attention_s - saved
            self.max_error_bound = max(self.max_error_bound, abs(saved_hi - saved_lo) / body)
        return body + self._tail_seconds(tokens, max(1, logits), prefill)

    def _host_bound(self, gpu_s, tokens: int, logits: int, prefill: bool):
        """``gpu_s`` with the step's host side (laddersim.costs.host_bound.HostSide), where priced."""
        if self._host is None:
            return gpu_s
        return self._host.step_s(gpu_s, phase_of(tokens, logits, prefill), logits, prefill)

    def decode_steps(self, tokens: int, attention_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``seconds(tokens, tokens, a)`` for each ``a`` of ``attention_s`` (iterations of ``tokens``
        decoding sequences, one sampling each) and the error bound each adds, for the leading
        values within attention intervals already resolved: the next one needs engine runs
        (``seconds`` prices it). The same arithmetic on arrays (equal floats); nothing is
        recorded, so the caller adds the bounds of the iterations it keeps to max_error_bound."""
        lo, hi = self._bracket(tokens)
        if hi == lo:
            body, bound = self._intervals(lo).interpolate_many(attention_s)
        else:
            body_lo, bound_lo = self._intervals(lo).interpolate_many(attention_s)
            body_hi, bound_hi = self._intervals(hi).interpolate_many(attention_s[:len(body_lo)])
            m = len(body_hi)
            a, body_lo, bound_lo = attention_s[:m], body_lo[:m], bound_lo[:m]
            saved_lo = self._serial_seconds(lo) + self._n_attention * a - body_lo
            saved_hi = self._serial_seconds(hi) + self._n_attention * a - body_hi
            saved = saved_lo + (saved_hi - saved_lo) * (tokens - lo) / (hi - lo)
            body = self._serial_seconds(tokens) + self._n_attention * a - saved
            bound = np.maximum(np.maximum(bound_lo, bound_hi), np.abs(saved_hi - saved_lo) / body)
        return self._host_bound(body + self._tail_seconds(tokens, max(1, tokens), False), tokens, max(1, tokens),
                                False), bound
