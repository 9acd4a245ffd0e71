"""Chrome-trace JSON (opens in Perfetto / chrome://tracing): one process per schedule, named by
it, holding one thread per rank and stream."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

_TID = {"compute": 0, "comm": 1}


def _tid(rank: int, stream: str) -> int:
    return int(rank) * len(_TID) + _TID[stream]


def chrome_trace(timeline: pd.DataFrame, title: str = "laddersim", collectives: dict | None = None) -> dict:
    """Trace events for a timeline DataFrame (times in microseconds, as the format wants).

    Spans of several schedules (a ``schedule`` column, as ``laddersim.timeline`` returns) become
    one process each, pid in order of first appearance; without the column, one process named
    ``title``. ``collectives``: {(phase, op kind): args} added to each collective's event (NCCL
    algorithm and protocol, see laddersim.costs.collective_labels)."""
    collectives = collectives or {}
    groups = timeline["schedule"] if "schedule" in timeline else pd.Series(title, index=timeline.index)
    pids = {name: pid for pid, name in enumerate(dict.fromkeys(groups))}
    events: list[dict] = []
    for name, pid in pids.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for rank in sorted(timeline.loc[groups == name, "rank"].unique()):
            for stream in _TID:
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": _tid(rank, stream),
                               "args": {"name": f"rank {rank} {stream}"}})
    for row, group in zip(timeline.itertuples(index=False), groups):
        events.append({
            "ph": "X", "name": row.op, "cat": row.kind, "pid": pids[group], "tid": _tid(row.rank, row.stream),
            "ts": row.start_s * 1e6, "dur": (row.end_s - row.start_s) * 1e6,
            "args": {"rank": int(row.rank), "phase": row.phase, "step": int(row.step), "layer": int(row.layer),
                     **collectives.get((row.phase, row.kind), {})},
        })
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"title": title}}


def write_chrome_trace(timeline: pd.DataFrame, path: str | Path, title: str = "laddersim",
                       collectives: dict | None = None) -> None:
    Path(path).write_text(json.dumps(chrome_trace(timeline, title, collectives)))


def write_schedules_trace(results, path: str | Path, steps: str | int) -> None:
    """The trace of every schedule's SimResult (``simulate --trace``): the prefill and the first
    ``steps`` decode steps (a count or "all"), one process per schedule; one line on stderr."""
    import sys

    from laddersim.costs.collective_labels import collective_args
    from laddersim.errors import UserInputError

    frames = []
    for result in results:
        n = len(result.decode_metrics)
        wanted = list(range(n)) if steps == "all" else list(range(min(steps, n)))
        frames.append(result.timeline("prefill").assign(schedule=result.scenario.schedule))
        if wanted:
            frames.append(result.timeline(wanted).assign(schedule=result.scenario.schedule))
    spans = pd.concat(frames, ignore_index=True)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        sc = results[0].scenario  # every schedule runs the same collectives (model, hardware, TP)
        write_chrome_trace(spans, path, title=f"{sc.model.name} on {sc.hardware.name}",
                           collectives=collective_args(sc.model, sc.hardware, sc.workload, sc.tp))
    except OSError as exc:
        raise UserInputError(f"trace: cannot write {path}: {exc.strerror}") from None
    print(f"trace: {Path(path)} ({len(spans)} spans, {len(results)} schedules)", file=sys.stderr)
