"""The SimPy engine's run without SimPy: the same events in the same order, the same arithmetic.

``laddersim.engine.simulator`` runs each stream (``laddersim.engine.streams``) as a SimPy process
and the fluid (``laddersim.engine.fluid``) on numpy arrays. ``run_direct`` runs the same stream
processes on a minimal event loop that keeps SimPy's order of events, and the fluid in Python floats
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

from laddersim.engine.lazy_fluid import LazyFluid, Running
from laddersim.engine.streams import StreamRun
from laddersim.engine.work import EngineResult, RankWork


class _Event:
    """A SimPy event: the processes waiting on it (None once processed), and its value."""

    __slots__ = ("waiting", "triggered", "value")

    def __init__(self):
        self.waiting: list | None = []
        self.triggered = False
        self.value = None


class _Fire:
    """The clock's timeout in the line of events at the current reading."""

    __slots__ = ("token",)

    def __init__(self, token: int):
        self.token = token


def run_direct(
    ranks: Sequence[RankWork],
    compute_slowdown: float | Sequence[float] = 0.0,
    comm_slowdown: float | Sequence[float] = 0.0,
    group_links: dict[int, tuple[str, ...]] | None = None,
    record_signature: bool = True,
    record_tape: bool = False,
) -> EngineResult:
    """``laddersim.engine.simulator.run_engine``, bit for bit, without SimPy."""
    tape: list | None = [] if record_tape else None
    fluid = LazyFluid()
    line: deque = deque()  # events (and a timeout) due at the current reading, in SimPy's order
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

    run = StreamRun(ranks, compute_slowdown, comm_slowdown, group_links, record_signature, _Event, succeed, Running,
                    start)

    def fire(now: float, finished: list[Running]) -> None:
        run.completed(now)
        if tape is not None:
            tape.append((tuple(act.serial for act in finished), now))
        for act in finished:
            fluid.finish(act)
            act.triggered = True  # the activity is its own completion event
            line.append(act)
        replan()

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

    for rank in range(len(ranks)):
        for which in ("compute", "comm"):
            resume(run.stream(rank, which), None)
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
    return run.result(timeouts, tape)
