"""A simulation's result (``SimResult``), and from engine spans to per-step metrics, the summary, and
the timeline DataFrame."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from laddersim.costs.op_costs import OVERHEAD_KINDS
from laddersim.engine.work import EngineResult
from laddersim.schedules.program import Program

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.costs.memory_fit import MemoryUse
    from laddersim.simulation.scenario import Scenario

METRICS = ("makespan_s", "compute_s", "overhead_s", "comm_s", "exposed_comm_s")


def _overlap_pairs(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray,
                   b_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) index pairs of intervals that overlap, of two sets of intervals, each set
    disjoint and sorted (one stream each), in (a, b) order: the order a merge of the two sets
    meets them in. Found by binary search (the ends of a disjoint sorted set are sorted too); only
    comparisons decide them, so any increasing function of the times gives the same pairs."""
    none = np.zeros(0, dtype=np.int64)
    if not len(a_start) or not len(b_start):
        return none, none
    first = np.searchsorted(b_end, a_start, side="right")  # the first b ending after a starts
    stop = np.searchsorted(b_start, a_end, side="left")  # the first b starting at or after a's end
    counts = np.maximum(stop - first, 0)
    if not counts.any():
        return none, none
    a = np.repeat(np.arange(len(a_start)), counts)
    b = np.arange(len(a)) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    positive = np.minimum(a_end[a], b_end[b]) > np.maximum(a_start[a], b_start[b])
    return a[positive], b[positive]


def _overlap_s(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray) -> float:
    """Total overlap of two sets of intervals, each set disjoint and sorted (one stream each):
    every pair that overlaps (``_overlap_pairs``) summed one after the other in (a, b) order, so
    the same sum to the last bit as a merge of the two sets."""
    a, b = _overlap_pairs(a_start, a_end, b_start, b_end)
    if not len(a):
        return 0.0
    hi = np.minimum(a_end[a], b_end[b])
    lo = np.maximum(a_start[a], b_start[b])
    return float(np.cumsum(hi - lo)[-1])  # cumsum adds in order (sum would pair up)


@dataclass(frozen=True)
class StreamMasks:
    """Which ops of a program are compute, framework overhead, or communication."""

    compute: np.ndarray
    overhead: np.ndarray
    comm: np.ndarray

    @classmethod
    def of(cls, program: Program) -> "StreamMasks":
        comm = np.array([op.is_collective for op in program.ops])
        overhead = np.array([op.kind in OVERHEAD_KINDS for op in program.ops])
        return cls(~comm & ~overhead, overhead, comm)


def step_metrics(result: EngineResult, masks: StreamMasks, rank: int = 0) -> np.ndarray:
    """Seconds of one forward pass: makespan, compute, overhead, comm, exposed comm (rank ``rank``)."""
    start, end = result.start_s[rank], result.end_s[rank]
    dur = end - start
    on_compute = ~masks.comm
    order_c = np.argsort(start[on_compute], kind="stable")
    order_m = np.argsort(start[masks.comm], kind="stable")
    overlap = _overlap_s(start[on_compute][order_c], end[on_compute][order_c],
                         start[masks.comm][order_m], end[masks.comm][order_m])
    comm = float(dur[masks.comm].sum())
    return np.array([
        float(result.end_s.max()),
        float(dur[masks.compute].sum()),
        float(dur[masks.overhead].sum()),
        comm,
        comm - overlap,
    ])


def step_metrics_many(results: list[EngineResult], masks: StreamMasks) -> np.ndarray:
    """``step_metrics`` of each result (one rank), as rows. The results of a replay of many runs
    that share their moments (``laddersim.engine.tree_batch``) are read together: their spans
    are their readings at the same moments, and readings equal within one run are equal in every
    run of the leaf (the tree's outcomes say where), so the sort orders and overlapping pairs are
    found once (on the classes of equal readings) and only the sums are per run, each the same
    numpy reduction over the same elements in the same order as ``step_metrics``'s."""
    out = np.empty((len(results), len(METRICS)))
    groups: dict[int, list[int]] = {}
    for i, result in enumerate(results):
        if result.moments is None or result.moments.shape[1] != 1:
            out[i] = step_metrics(result, masks)
        else:
            groups.setdefault(id(result.moments), []).append(i)
    for rows in groups.values():
        moments = results[rows[0]].moments[:, 0]
        out[rows] = _metrics_of_readings(np.stack([results[i].times_s for i in rows]), moments[1], moments[2], masks)
    return out


def _metrics_of_readings(times: np.ndarray, start_at: np.ndarray, end_at: np.ndarray, masks: StreamMasks) -> np.ndarray:
    """``step_metrics`` of runs (rows of ``times``: clock readings) whose ops start and end at
    the readings ``start_at`` and ``end_at``. ``np.take`` along the rows keeps each row's
    selection contiguous, as the boolean selection of one run is (numpy's pairwise sums follow
    the memory layout)."""
    start, end = np.take(times, start_at, axis=1), np.take(times, end_at, axis=1)
    dur = end - start
    classes = np.concatenate([[0], np.cumsum(np.diff(times[0]) != 0.0)])  # equal readings, one class
    first, last = classes[start_at], classes[end_at]
    compute_side, comm_side = np.flatnonzero(~masks.comm), np.flatnonzero(masks.comm)
    order_c = compute_side[np.argsort(first[compute_side], kind="stable")]
    order_m = comm_side[np.argsort(first[comm_side], kind="stable")]
    a, b = _overlap_pairs(first[order_c], last[order_c], first[order_m], last[order_m])
    overlap = 0.0
    if len(a):
        a, b = order_c[a], order_m[b]
        hi = np.minimum(np.take(end, a, axis=1), np.take(end, b, axis=1))
        lo = np.maximum(np.take(start, a, axis=1), np.take(start, b, axis=1))
        overlap = np.cumsum(hi - lo, axis=1)[:, -1]
    comm = np.take(dur, comm_side, axis=1).sum(axis=1)
    return np.column_stack([end.max(axis=1), np.take(dur, np.flatnonzero(masks.compute), axis=1).sum(axis=1),
                            np.take(dur, np.flatnonzero(masks.overhead), axis=1).sum(axis=1), comm, comm - overlap])


def timeline_frame(program: Program, start_s: np.ndarray, end_s: np.ndarray, ranks: list[int],
                   step: int, phase: str, offset_s: float) -> "pd.DataFrame":
    """Spans of one forward pass as rows (rank, stream, layer, op, kind, start_s, end_s)."""
    import pandas as pd

    n_ops = len(program)
    frame = pd.DataFrame({
        "phase": phase,
        "step": step,
        "rank": np.repeat(ranks, n_ops),
        "stream": np.tile([op.stream for op in program.ops], len(ranks)),
        "layer": np.tile([op.layer for op in program.ops], len(ranks)),
        "op": np.tile([op.name for op in program.ops], len(ranks)),
        "kind": np.tile([op.kind for op in program.ops], len(ranks)),
        "start_s": start_s.reshape(-1) + offset_s,
        "end_s": end_s.reshape(-1) + offset_s,
    })
    return frame


def summarize(result) -> dict:
    """``simulate --json``'s row of a result (a SimResult, or a pipeline's with the same fields)."""
    s = result.scenario
    w = s.workload
    prefill_s = float(result.prefill_metrics[0])
    decode_s = float(result.decode_metrics[:, 0].sum())
    total_s = prefill_s + decode_s
    both = result.prefill_metrics + result.decode_metrics.sum(axis=0)
    n_decode = len(result.decode_metrics)
    summary = {
        "schedule": s.schedule,
        "model": s.model.name,
        "hardware": s.hardware.name,
        "tp": s.tp,
        "pp": s.pp,
        "nodes": result.nodes,
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
        "memory_per_gpu_gib": result.memory.total_bytes / 2**30,
    }
    if s.layout is not None:  # data-parallel attention: tp is each replica's, batch all replicas'
        summary.update(dp_attention=True, ep=s.layout.ep, attention_replicas=s.layout.dp)
    if result.decode_half_width_s is not None:
        summary.update(_intervals(result, summary))
    return summary


def _intervals(result, summary: dict) -> dict:
    """95% intervals of the sampled estimates (what simulating every step would give)."""
    half = float(result.decode_half_width_s[0])
    tokens = result.scenario.workload.batch * result.scenario.workload.gen_len
    n_decode = len(result.decode_metrics)
    decode = (summary["decode_s"] - half, summary["decode_s"] + half)
    total = (summary["prefill_s"] + decode[0], summary["prefill_s"] + decode[1])
    return {
        "sampled_steps": result.simulated_steps - 1,
        "decode_s_ci95": list(decode),
        "total_s_ci95": list(total),
        "tokens_per_s_ci95": [tokens / total[1], tokens / max(total[0], 1e-300)],
        "tpot_s_ci95": [decode[0] / n_decode, decode[1] / n_decode],
    }


@dataclass
class SimResult:
    """One TP group's simulated passes: the prefill, every decode step's metrics (simulated anchors,
    the steps between interpolated), the program and memory."""

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


def summary_or_error(result: SimResult) -> dict | Exception:
    """``result.summary()``, or the exception that stopped it (the caller decides what a failed
    scenario is: a sweep's row says so)."""
    try:
        return result.summary()
    except Exception as exc:  # noqa: BLE001 - the caller decides what a failed scenario is
        return exc
