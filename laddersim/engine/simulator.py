"""The SimPy engine: streams, collectives, shared links and overlap interference.

It knows ops, streams, dependencies, collectives and links; it knows nothing of schedules.

* Each rank's ``compute`` and ``comm`` streams are SimPy processes (``laddersim.engine.streams``:
  ops in program order, waiting for their ``deps``; a collective starts when the last rank of its
  group reaches it and ends for all ranks at once).
* Work is fluid: an op has a standalone duration and progresses at a rate that changes whenever
  the set of running ops changes (``laddersim.engine.rates``: a compute op slowed by its rank's
  running collectives, a collective by its ranks' compute and by the other collectives on its
  links). ``laddersim.engine.fluid`` keeps the remaining work and the rates (incrementally).

Because rates only change at events, every event time is a linear function of the op durations
for a fixed order of events; ``EngineResult.signature`` records that order so callers can
interpolate between two runs that share it (see ``laddersim.simulation.passes``), and a recorded tape of
it lets ``laddersim.engine.order_tree`` redo the run for new durations without SimPy.

This engine is the reference: the direct loop (``laddersim.engine.direct``) and the replays
(``laddersim.engine.order_tree``, ``laddersim.engine.tree_batch``) are held to it bit for bit.
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

import simpy

from laddersim.engine.fluid import Fluid
from laddersim.engine.rates import done_tolerance_s
from laddersim.engine.streams import StreamRun
from laddersim.engine.work import EngineResult, RankWork  # noqa: F401  (re-exported: the engine's API)


class _Activity(simpy.Event):
    """A running activity (what ``laddersim.engine.fluid.Fluid`` reads), its own completion event."""

    def __init__(self, env: simpy.Environment, work_s: float, ranks: tuple[int, ...], is_comm: bool,
                 links: tuple[str, ...], compute_slowdown: float, comm_slowdown: float, op: int):
        super().__init__(env)
        self.work_s, self.ranks, self.is_comm, self.links = work_s, ranks, is_comm, links
        self.compute_slowdown, self.comm_slowdown, self.op = compute_slowdown, comm_slowdown, op
        self.serial = self.slot = -1


class _Clock:
    """Drives the fluid with SimPy: one timeout per change of the running set (a later change
    supersedes it), and a tape of what happened for ``laddersim.engine.order_tree``."""

    def __init__(self, env: simpy.Environment, tape: list | None):
        self.env = env
        self.fluid = Fluid()
        self.last_t = 0.0
        self.token = 0
        self.timeouts = 0
        self.tape = tape
        self.run: StreamRun | None = None

    def start(self, act: _Activity) -> None:
        self._advance()
        self.fluid.start(act)
        if self.tape is not None:
            self.tape.append((act.op, act.ranks, act.links, act.is_comm))
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
        self.run.completed(self.env.now)
        if self.tape is not None:
            self.tape.append((tuple(act.serial for act in finished), self.env.now))
        for act in finished:
            self.fluid.finish(act)
            act.succeed()
        self._replan()


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
    program with other durations (``laddersim.engine.order_tree``)."""
    env = simpy.Environment()
    clock = _Clock(env, [] if record_tape else None)
    run = clock.run = StreamRun(ranks, compute_slowdown, comm_slowdown, group_links, record_signature, env.event,
                                lambda event, value=None: event.succeed(value), partial(_Activity, env), clock.start)
    for rank in range(len(ranks)):
        env.process(run.stream(rank, "compute"))
        env.process(run.stream(rank, "comm"))
    env.run()
    return run.result(clock.timeouts, clock.tape)
