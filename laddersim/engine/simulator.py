"""The SimPy engine: streams, collectives, shared links and overlap interference.

It knows ops, streams, dependencies, collectives and links; it knows nothing of schedules.

* Each rank has a ``compute`` and a ``comm`` stream, each a SimPy process that runs its ops in
  program order, waiting first for the ops on the other stream listed in ``deps``.
* A collective starts when the last rank of its group reaches it (earlier ranks wait: that wait is
  how a straggler delays everyone) and ends for all ranks at once.
* Work is fluid: an op has a standalone duration and progresses at a rate that changes whenever
  the set of running ops changes. A compute op runs at 1/(1 + compute_slowdown) while a
  collective of its rank runs; a collective at 1/(1 + comm_slowdown) while any of its ranks
  computes, and at 1/k of its speed on a link shared with k-1 other running collectives. Both
  slowdowns may be given per collective op (a large message disturbs compute more than a small
  one): a compute op then runs at the rate set by the most disturbing collective of its rank.
  ``laddersim.engine.fluid`` keeps the remaining work and the rates (incrementally).

Because rates only change at events, every event time is a linear function of the op durations
for a fixed order of events; ``EngineResult.signature`` records that order so callers can
interpolate between two runs that share it (see ``laddersim.simulation.passes``), and a recorded tape of
it lets ``laddersim.engine.replay`` redo the run for new durations without SimPy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import simpy

from laddersim.engine.fluid import Activity, Fluid
from laddersim.engine.rates import done_tolerance_s
from laddersim.engine.tape import Tape
from laddersim.engine.work import EngineResult, RankWork  # noqa: F401  (re-exported: the engine's API)


class _Clock:
    """Drives the fluid with SimPy: one timeout per change of the running set (a later change
    supersedes it), and a tape of what happened for ``laddersim.engine.replay``."""

    def __init__(self, env: simpy.Environment, tape: list | None):
        self.env = env
        self.fluid = Fluid()
        self.last_t = 0.0
        self.token = 0
        self.timeouts = 0
        self.instant = 0  # completions so far: the index of the current clock reading in times
        self.times = [0.0]
        self.tape = tape

    def start(self, act: Activity) -> None:
        self._advance()
        self.fluid.start(act)
        if self.tape is not None:
            self.tape.append(act)
        self._replan()

    def _advance(self) -> None:
        self.fluid.advance(self.env.now - self.last_t)
        self.last_t = self.env.now

    def _replan(self) -> None:
        self.token += 1
        if not self.fluid.count:
            return
        delay = self.fluid.next_delay_s()
        token = self.token
        timeout = self.env.timeout(delay)
        timeout.callbacks.append(lambda _ev: self._fire(token))
        self.timeouts += 1

    def _fire(self, token: int) -> None:
        if token != self.token:
            return  # superseded by a later start
        self._advance()
        finished = self.fluid.due(done_tolerance_s(self.env.now))
        self.instant += 1
        self.times.append(self.env.now)
        if self.tape is not None:
            self.tape.append((tuple(act.serial for act in finished), self.env.now))
        for act in finished:
            self.fluid.finish(act)
            act.done.succeed()
        self._replan()


@dataclass
class _Collective:
    size: int
    arrived: list[int] = field(default_factory=list)
    started: simpy.Event | None = None


def run_engine(
    ranks: Sequence[RankWork],
    compute_slowdown: float | Sequence[float] = 0.0,
    comm_slowdown: float | Sequence[float] = 0.0,
    group_links: dict[int, tuple[str, ...]] | None = None,
    record_signature: bool = True,
    record_tape: bool = False,
) -> EngineResult:
    """Simulate one forward pass of every rank from an idle start at t = 0.

    The slowdowns are one number for every collective or an array over op indices (read at the
    collective ops). ``record_tape``: also return the order of events, for replaying the same
    program with other durations (``laddersim.engine.replay``)."""
    env = simpy.Environment()
    clock = _Clock(env, [] if record_tape else None)
    group_links = group_links or {}
    n_ranks = len(ranks)
    n_ops = len(ranks[0].streams)
    compute_by_op = np.broadcast_to(np.asarray(compute_slowdown, dtype=float), (n_ops,))
    comm_by_op = np.broadcast_to(np.asarray(comm_slowdown, dtype=float), (n_ops,))
    # Every ready, start and end happens at the clock reading of the latest completion (or 0):
    # record its index, and read the times at the end.
    ready_at, start_at, end_at = ([[0] * n_ops for _ in range(n_ranks)] for _ in range(3))
    done = [[env.event() for _ in range(n_ops)] for _ in range(n_ranks)]
    group_size: dict[int, int] = {}
    for work in ranks:
        group_size[work.group] = group_size.get(work.group, 0) + 1
    collectives: dict[tuple[int, int], _Collective] = {}
    signature: list[tuple[int, int, int]] = []
    log = signature.append if record_signature else (lambda _item: None)

    def stream(rank: int, which: str):
        work = ranks[rank]
        for i in range(n_ops):
            if work.streams[i] != which:
                continue
            for dep in work.deps[i]:
                event = done[rank][dep]
                if not event.triggered:
                    yield event
            ready_at[rank][i] = clock.instant
            if which == "compute":
                act = Activity(float(work.durations_s[i]), (rank,), False, done=env.event(), op=i)
                start_at[rank][i] = clock.instant
                log((rank, i, 0))
                clock.start(act)
                yield act.done
            else:
                key = (work.group, i)
                coll = collectives.get(key)
                if coll is None:
                    coll = collectives[key] = _Collective(group_size[work.group], started=env.event())
                coll.arrived.append(rank)
                if len(coll.arrived) == coll.size:
                    work_s = max(float(ranks[r].durations_s[i]) for r in coll.arrived)
                    act = Activity(work_s, tuple(sorted(coll.arrived)), True,
                                   group_links.get(work.group, ()), float(compute_by_op[i]),
                                   float(comm_by_op[i]), env.event(), op=i)
                    coll.started.succeed(act)
                    clock.start(act)
                act = yield coll.started
                start_at[rank][i] = clock.instant
                log((rank, i, 0))
                yield act.done
            end_at[rank][i] = clock.instant
            log((rank, i, 1))
            done[rank][i].succeed()

    for rank in range(n_ranks):
        env.process(stream(rank, "compute"))
        env.process(stream(rank, "comm"))
    env.run()
    if not all(event.triggered for row in done for event in row):
        raise RuntimeError("engine deadlock: some ops never ran (a dependency cycle in the program)")
    moments = np.array([ready_at, start_at, end_at], dtype=np.int64).reshape(3, n_ranks, n_ops)
    at = np.array(clock.times)
    tape = None
    if record_tape:
        tape = Tape.of(clock.tape, moments, tuple(signature), clock.timeouts)
    return EngineResult(at[moments[1]], at[moments[2]], at[moments[0]], tuple(signature), clock.timeouts, tape)
