"""Chrome-trace JSON (opens in Perfetto / chrome://tracing): one process per rank, one thread per stream."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

_TID = {"compute": 0, "comm": 1}


def chrome_trace(timeline: pd.DataFrame, title: str = "laddersim", collectives: dict | None = None) -> dict:
    """Trace events for a timeline DataFrame (times in microseconds, as the format wants);
    ``collectives``: {(phase, op kind): args} added to each collective's event (NCCL algorithm
    and protocol, see laddersim.costs.collective_labels)."""
    collectives = collectives or {}
    events: list[dict] = []
    for rank in sorted(timeline["rank"].unique()):
        events.append({"ph": "M", "name": "process_name", "pid": int(rank), "tid": 0,
                       "args": {"name": f"rank {rank}"}})
        for stream, tid in _TID.items():
            events.append({"ph": "M", "name": "thread_name", "pid": int(rank), "tid": tid,
                           "args": {"name": stream}})
    for row in timeline.itertuples(index=False):
        events.append({
            "ph": "X", "name": row.op, "cat": row.kind, "pid": int(row.rank), "tid": _TID[row.stream],
            "ts": row.start_s * 1e6, "dur": (row.end_s - row.start_s) * 1e6,
            "args": {"phase": row.phase, "step": int(row.step), "layer": int(row.layer),
                     **collectives.get((row.phase, row.kind), {})},
        })
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"title": title}}


def write_chrome_trace(timeline: pd.DataFrame, path: str | Path, title: str = "laddersim",
                       collectives: dict | None = None) -> None:
    Path(path).write_text(json.dumps(chrome_trace(timeline, title, collectives)))
