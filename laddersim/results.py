"""From engine spans to per-step metrics, the summary, and the timeline DataFrame."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from laddersim.costs.op_costs import OVERHEAD_KINDS
from laddersim.engine.simulator import EngineResult
from laddersim.schedules.program import Program

if TYPE_CHECKING:
    import pandas as pd

METRICS = ("makespan_s", "compute_s", "overhead_s", "comm_s", "exposed_comm_s")


def _overlap_s(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray) -> float:
    """Total overlap of two sets of intervals, each set disjoint and sorted (one stream each).

    Every pair of intervals that overlaps, found by binary search (the ends of a disjoint sorted
    set are sorted too), summed one after the other in (a, b) order: the order a merge of the two
    sets meets them in, so the same sum to the last bit as that merge."""
    if not len(a_start) or not len(b_start):
        return 0.0
    first = np.searchsorted(b_end, a_start, side="right")  # the first b ending after a starts
    stop = np.searchsorted(b_start, a_end, side="left")  # the first b starting at or after a's end
    counts = np.maximum(stop - first, 0)
    if not counts.any():
        return 0.0
    a = np.repeat(np.arange(len(a_start)), counts)
    b = np.arange(len(a)) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    hi = np.minimum(a_end[a], b_end[b])
    lo = np.maximum(a_start[a], b_start[b])
    positive = hi > lo
    if not positive.any():
        return 0.0
    return float(np.cumsum(hi[positive] - lo[positive])[-1])  # cumsum adds in order (sum would pair up)


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
