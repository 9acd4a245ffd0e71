"""The stream process, written once: what every rank's compute and comm streams do, and what a run
records (the clock reading's index at each op's ready, start and end; the order of events).

* Each rank has a ``compute`` and a ``comm`` stream, each a process that runs its ops in program
  order, waiting first for the ops on the other stream listed in ``deps``.
* A collective starts when the last rank of its group reaches it (earlier ranks wait: that wait is
  how a straggler delays everyone), with the largest of its ranks' durations, and ends for all
  ranks at once.

Both engines drive these processes: the SimPy engine (``simulator``) as SimPy processes, the
direct loop (``direct``) on its own minimal event loop that keeps SimPy's order of events. An
engine gives the four things that differ between them: how an event is made (``new_event``) and
succeeded (``succeed``), how an activity is made (``new_activity``: an activity is its own
completion event) and how it starts running (``start``: the engine's fluid and clock).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from laddersim.engine.tape import Tape
from laddersim.engine.work import EngineResult, RankWork


class _Ended:
    """The end of an op nobody waited on: triggered (a stream waits on an end only while it is
    not), so no event is made for it."""

    __slots__ = ()
    triggered = True


ENDED = _Ended()


class _Collective:
    __slots__ = ("size", "arrived", "started")

    def __init__(self, size: int, started):
        self.size, self.arrived, self.started = size, [], started


class StreamRun:
    """One run's stream processes (``stream(rank, which)``) and what they record; ``completed``
    is called by the engine's clock at each completion, ``result`` at the end."""

    def __init__(self, ranks: Sequence[RankWork], compute_slowdown, comm_slowdown,
                 group_links: dict[int, tuple[str, ...]] | None, record_signature: bool,
                 new_event: Callable, succeed: Callable, new_activity: Callable, start: Callable):
        self.ranks = ranks
        self.group_links = group_links or {}
        self.n_ranks, self.n_ops = len(ranks), len(ranks[0].streams)
        n_ops = self.n_ops
        self.compute_by_op = np.broadcast_to(np.asarray(compute_slowdown, dtype=float), (n_ops,)).tolist()
        self.comm_by_op = np.broadcast_to(np.asarray(comm_slowdown, dtype=float), (n_ops,)).tolist()
        self.durations = [np.asarray(w.durations_s, dtype=float).tolist() for w in ranks]
        # Every ready, start and end happens at the clock reading of the latest completion (or 0):
        # the index of that reading is recorded, and the times read at the end.
        self.ready_at, self.start_at, self.end_at = ([[0] * n_ops for _ in range(self.n_ranks)] for _ in range(3))
        # Each op's end: None until someone waits on it or it ends (most ends nobody waits on).
        self.ends: list[list] = [[None] * n_ops for _ in range(self.n_ranks)]
        self.group_size: dict[int, int] = {}
        for work in ranks:
            self.group_size[work.group] = self.group_size.get(work.group, 0) + 1
        self.collectives: dict[tuple[int, int], _Collective] = {}
        self.signature: list[tuple[int, int, int]] = []
        self.log = self.signature.append if record_signature else (lambda _item: None)
        self.instant = 0  # completions so far: the index of the current reading in ``times``
        self.times = [0.0]
        self.ended_ops = 0
        self.new_event, self.succeed, self.new_activity, self.start = new_event, succeed, new_activity, start

    def completed(self, now_s: float) -> None:
        """A completion at clock reading ``now_s``."""
        self.instant += 1
        self.times.append(now_s)

    def stream(self, rank: int, which: str):
        """The process of ``rank``'s ``which`` stream ("compute" or "comm"): yields the events it
        waits on, is sent their values."""
        work = self.ranks[rank]
        deps, mine, own_ends = work.deps, self.durations[rank], self.ends[rank]
        ready_row, start_row, end_row = self.ready_at[rank], self.start_at[rank], self.end_at[rank]
        links = tuple(self.group_links.get(work.group, ()))
        new_event, succeed, new_activity, start, log = self.new_event, self.succeed, self.new_activity, self.start, self.log
        compute = which == "compute"
        only = (rank,)
        for i in [i for i, s in enumerate(work.streams) if s == which]:
            for dep in deps[i]:
                event = own_ends[dep]
                if event is None:
                    event = own_ends[dep] = new_event()
                if not event.triggered:
                    yield event
            ready_row[i] = self.instant
            if compute:
                act = new_activity(mine[i], only, False, (), 0.0, 0.0, i)
                start_row[i] = self.instant
                log((rank, i, 0))
                start(act)
                yield act
            else:
                key = (work.group, i)
                coll = self.collectives.get(key)
                if coll is None:
                    coll = self.collectives[key] = _Collective(self.group_size[work.group], new_event())
                coll.arrived.append(rank)
                if len(coll.arrived) == coll.size:
                    durations = self.durations
                    work_s = max(durations[r][i] for r in coll.arrived)
                    act = new_activity(work_s, tuple(sorted(coll.arrived)), True, links, self.compute_by_op[i],
                                       self.comm_by_op[i], i)
                    succeed(coll.started, act)
                    start(act)
                act = yield coll.started
                start_row[i] = self.instant
                log((rank, i, 0))
                yield act
            end_row[i] = self.instant
            log((rank, i, 1))
            self.ended_ops += 1
            # Nobody starts waiting on an end once it is triggered (a dependency is waited on only
            # while untriggered), so an end nobody waits on would be processed to no effect: no
            # event is made for it.
            event = own_ends[i]
            if event is None:
                own_ends[i] = ENDED
            else:
                succeed(event)

    def result(self, timeouts: int, tape: list | None) -> EngineResult:
        """The run's spans (and its tape, where recorded: the starts and completions in order)."""
        if self.ended_ops != self.n_ranks * self.n_ops:
            raise RuntimeError("engine deadlock: some ops never ran (a dependency cycle in the program)")
        moments = np.array([self.ready_at, self.start_at, self.end_at], dtype=np.int64).reshape(3, self.n_ranks,
                                                                                               self.n_ops)
        at = np.array(self.times)
        recorded = Tape.of(tape, moments, tuple(self.signature), timeouts) if tape is not None else None
        return EngineResult(at[moments[1]], at[moments[2]], at[moments[0]], tuple(self.signature), timeouts, recorded)
