"""From engine spans to per-step metrics, the summary, and the timeline DataFrame."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from laddersim.costs.op_costs import OVERHEAD_KINDS
from laddersim.engine.work import EngineResult
from laddersim.schedules.program import Program

if TYPE_CHECKING:
    import pandas as pd

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
