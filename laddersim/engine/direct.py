"""The SimPy engine's run without SimPy: the same events in the same order, the same arithmetic.

``laddersim.engine.simulator`` runs each stream as a SimPy process and the fluid
(``laddersim.engine.fluid``) on numpy arrays. ``run_direct`` runs the same stream processes on a
minimal event loop that keeps SimPy's order of events, and the fluid in Python floats
(``laddersim.engine.lazy_fluid``), so its results are the SimPy engine's bit for bit
(tests/test_fast_path.py holds it to the engine on random programs) at a fraction of the cost.
SimPy's order, as the simulator uses it:

* every process takes its first step before any event is processed (SimPy's ``Initialize``
  events are urgent), in the order the processes were made;
* an event succeeded at the current reading is processed after every event succeeded before it
  (first in, first out), and processing it resumes the processes waiting on it in the order they
  began to wait; a process that waits on an event already processed continues at once;
* the clock schedules a timeout at each change of the running set and only the latest counts (an
  earlier one fires to no effect). A timeout due at the current reading joins the events in line;
  a later one fires once no event is left at the current reading, so its reading is computed only
  then (the fluid says whether it is due at once).
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np

from laddersim.engine.lazy_fluid import LazyFluid, Running
from laddersim.engine.tape import Tape
from laddersim.engine.work import EngineResult, RankWork


class _Event:
    """A SimPy event: the processes waiting on it (None once processed), and its value."""

    __slots__ = ("waiting", "triggered", "value")

    def __init__(self):
        self.waiting: list | None = []
        self.triggered = False
        self.value = None


_ENDED = _Event()  # the end of an op nobody waited on: triggered and processed
_ENDED.triggered, _ENDED.waiting = True, None


class _Fire:
    """The clock's timeout in the line of events at the current reading."""

    __slots__ = ("token",)

    def __init__(self, token: int):
        self.token = token


class _Collective:
    __slots__ = ("size", "arrived", "started")

    def __init__(self, size: int):
        self.size, self.arrived, self.started = size, [], _Event()


def run_direct(
    ranks: Sequence[RankWork],
    compute_slowdown: float | Sequence[float] = 0.0,
    comm_slowdown: float | Sequence[float] = 0.0,
    group_links: dict[int, tuple[str, ...]] | None = None,
    record_signature: bool = True,
    record_tape: bool = False,
) -> EngineResult:
    """``laddersim.engine.simulator.run_engine``, bit for bit, without SimPy."""
    group_links = group_links or {}
    n_ranks = len(ranks)
    n_ops = len(ranks[0].streams)
    compute_by_op = np.broadcast_to(np.asarray(compute_slowdown, dtype=float), (n_ops,)).tolist()
    comm_by_op = np.broadcast_to(np.asarray(comm_slowdown, dtype=float), (n_ops,)).tolist()
    durations = [np.asarray(w.durations_s, dtype=float).tolist() for w in ranks]
    ready_at, start_at, end_at = ([[0] * n_ops for _ in range(n_ranks)] for _ in range(3))
    # Each op's end: None until someone waits on it or it ends (most ends nobody waits on).
    ends: list[list[_Event | None]] = [[None] * n_ops for _ in range(n_ranks)]
    group_size: dict[int, int] = {}
    for work in ranks:
        group_size[work.group] = group_size.get(work.group, 0) + 1
    collectives: dict[tuple[int, int], _Collective] = {}
    signature: list[tuple[int, int, int]] = []
    log = signature.append if record_signature else (lambda _item: None)
    tape: list | None = [] if record_tape else None

    fluid = LazyFluid()
    line: deque = deque()  # events (and a timeout) due at the current reading, in SimPy's order
    times = [0.0]
    instant = 0  # completions so far: the index of the current reading in ``times``
    token = timeouts = 0
    pending = None  # the token of the clock's live timeout when it is due later than now

    def succeed(event: _Event, value=None) -> None:
        event.triggered, event.value = True, value
        line.append(event)

    def replan() -> None:
        # SimPy's clock: a timeout at each change; its reading is computed when time moves.
        nonlocal token, timeouts, pending
        token += 1
        pending = None
        if not fluid.count:
            return
        timeouts += 1
        if fluid.zero:
            line.append(_Fire(token))
        else:
            pending = token

    def start(act: Running) -> None:
        fluid.start(act)
        if tape is not None:
            tape.append((act.op, act.ranks, act.links, act.is_comm))
        replan()

    def fire(now: float, finished: list[Running]) -> None:
        nonlocal instant
        instant += 1
        times.append(now)
        if tape is not None:
            tape.append((tuple(act.serial for act in finished), now))
        for act in finished:
            fluid.finish(act)
            act.triggered = True  # the activity is its own completion event
            line.append(act)
        replan()

    def stream(rank: int, which: str):
        work = ranks[rank]
        deps, mine, own_ends = work.deps, durations[rank], ends[rank]
        ready_row, start_row, end_row = ready_at[rank], start_at[rank], end_at[rank]
        links = tuple(group_links.get(work.group, ()))
        compute = which == "compute"
        only = (rank,)
        for i in [i for i, s in enumerate(work.streams) if s == which]:
            for dep in deps[i]:
                event = own_ends[dep]
                if event is None:
                    event = own_ends[dep] = _Event()
                if not event.triggered:
                    yield event
            ready_row[i] = instant
            if compute:
                act = Running(mine[i], only, False, (), 0.0, 0.0, i)
                start_row[i] = instant
                log((rank, i, 0))
                start(act)
                yield act
            else:
                key = (work.group, i)
                coll = collectives.get(key)
                if coll is None:
                    coll = collectives[key] = _Collective(group_size[work.group])
                coll.arrived.append(rank)
                if len(coll.arrived) == coll.size:
                    work_s = max(durations[r][i] for r in coll.arrived)
                    act = Running(work_s, tuple(sorted(coll.arrived)), True, links, compute_by_op[i], comm_by_op[i], i)
                    succeed(coll.started, act)
                    start(act)
                act = yield coll.started
                start_row[i] = instant
                log((rank, i, 0))
                yield act
            end_row[i] = instant
            log((rank, i, 1))
            # Nobody starts waiting on an end once it is triggered (a dependency is waited on only
            # while untriggered), so an end nobody waits on would be processed to no effect: it is
            # processed at once instead of in line.
            event = own_ends[i]
            if event is None:
                own_ends[i] = _ENDED
            else:
                succeed(event)

    def resume(process, value) -> None:
        while True:
            try:
                event = process.send(value)
            except StopIteration:
                return
            if event.waiting is None:  # processed already: SimPy continues at once
                value = event.value
                continue
            event.waiting.append(process)
            return

    for rank in range(n_ranks):
        for which in ("compute", "comm"):
            resume(stream(rank, which), None)
    while True:
        if line:
            item = line.popleft()
            if type(item) is _Fire:
                if item.token == token:  # else superseded by a later start
                    fire(fluid.now, fluid.complete(fluid.now))
                continue
            waiting, item.waiting = item.waiting, None
            for process in waiting:
                resume(process, item.value)
        elif pending is not None:
            fire(*fluid.complete_next())
        else:
            break
    if not all(event is not None and event.triggered for row in ends for event in row):
        raise RuntimeError("engine deadlock: some ops never ran (a dependency cycle in the program)")
    moments = np.array([ready_at, start_at, end_at], dtype=np.int64).reshape(3, n_ranks, n_ops)
    at = np.array(times)
    recorded = Tape.of(tape, moments, tuple(signature), timeouts) if tape is not None else None
    return EngineResult(at[moments[1]], at[moments[2]], at[moments[0]], tuple(signature), timeouts, recorded)
