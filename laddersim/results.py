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


def _overlap_s(a_start, a_end, b_start, b_end) -> float:
    """Total overlap of two sets of intervals, each set disjoint and sorted (one stream each)."""
    total = 0.0
    i = j = 0
    while i < len(a_start) and j < len(b_start):
        lo = max(a_start[i], b_start[j])
        hi = min(a_end[i], b_end[j])
        if hi > lo:
            total += hi - lo
        if a_end[i] < b_end[j]:
            i += 1
        else:
            j += 1
    return total


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
    overlap = _overlap_s(  # on lists: the same sums, without numpy's per-element cost
        start[on_compute][order_c].tolist(), end[on_compute][order_c].tolist(),
        start[masks.comm][order_m].tolist(), end[masks.comm][order_m].tolist(),
    )
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
