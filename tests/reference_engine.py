"""The SimPy engine as it was before issue 18 (a full rate recomputation over every running
activity at every event, span times read from the clock): the oracle that
tests/test_engine_paths.py holds the engine and its fast paths to, bit for bit. Semantics: see
laddersim/engine/simulator.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import simpy

from laddersim.engine.simulator import EngineResult, RankWork  # the data, not the engine

_EPS_S = 1e-13  # work left below this (seconds) counts as done: float round-off only


@dataclass(eq=False)
class _Activity:
    work_s: float
    ranks: tuple[int, ...]
    is_comm: bool
    links: tuple[str, ...]
    done: simpy.Event
    compute_slowdown: float = 0.0  # collectives: what this one does to its ranks' compute
    comm_slowdown: float = 0.0  # collectives: how much compute slows this one
    remaining_s: float = 0.0
    rate: float = 1.0


class _Fluid:
    """Progresses all running activities at their current rates; fires their ``done`` events."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.active: list[_Activity] = []
        self.last_t = 0.0
        self.token = 0
        self.timeouts = 0

    def start(self, act: _Activity) -> None:
        self._advance()
        act.remaining_s = act.work_s
        self.active.append(act)
        self._replan()

    def _advance(self) -> None:
        dt = self.env.now - self.last_t
        if dt > 0.0:
            for act in self.active:
                act.remaining_s -= act.rate * dt
        self.last_t = self.env.now

    def _rates(self) -> None:
        disturbed: dict[int, float] = {}  # rank -> compute slowdown from its running collectives
        compute_ranks: set[int] = set()
        link_load: dict[str, int] = {}
        for act in self.active:
            if act.is_comm:
                for rank in act.ranks:
                    disturbed[rank] = max(disturbed.get(rank, 0.0), act.compute_slowdown)
                for link in act.links:
                    link_load[link] = link_load.get(link, 0) + 1
            else:
                compute_ranks.update(act.ranks)
        for act in self.active:
            if act.is_comm:
                rate = 1.0 / (1.0 + act.comm_slowdown) if compute_ranks.intersection(act.ranks) else 1.0
                if act.links:
                    rate /= max(link_load[link] for link in act.links)
            else:
                slowdown = max((disturbed[r] for r in act.ranks if r in disturbed), default=None)
                rate = 1.0 if slowdown is None else 1.0 / (1.0 + slowdown)
            act.rate = rate

    def _replan(self) -> None:
        self.token += 1
        if not self.active:
            return
        self._rates()
        delay = min(max(act.remaining_s, 0.0) / act.rate for act in self.active)
        token = self.token
        timeout = self.env.timeout(delay)
        timeout.callbacks.append(lambda _ev: self._fire(token))
        self.timeouts += 1

    def _fire(self, token: int) -> None:
        if token != self.token:
            return  # superseded by a later start
        self._advance()
        # Work below the clock's own resolution at this time counts as done too: far along a
        # long run a tiny remainder would otherwise schedule a timeout that cannot advance time.
        tolerance_s = _EPS_S + 8.0 * np.spacing(self.env.now)
        still = []
        for act in self.active:
            if act.remaining_s <= tolerance_s * act.rate:
                act.done.succeed()
            else:
                still.append(act)
        self.active = still
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
) -> EngineResult:
    """Simulate one forward pass of every rank from an idle start at t = 0.

    The slowdowns are one number for every collective or an array over op indices (read at the
    collective ops)."""
    env = simpy.Environment()
    fluid = _Fluid(env)
    group_links = group_links or {}
    n_ranks = len(ranks)
    n_ops = len(ranks[0].streams)
    compute_by_op = np.broadcast_to(np.asarray(compute_slowdown, dtype=float), (n_ops,))
    comm_by_op = np.broadcast_to(np.asarray(comm_slowdown, dtype=float), (n_ops,))
    start = np.zeros((n_ranks, n_ops))
    end = np.zeros((n_ranks, n_ops))
    ready = np.zeros((n_ranks, n_ops))
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
            ready[rank, i] = env.now
            if which == "compute":
                act = _Activity(float(work.durations_s[i]), (rank,), False, (), env.event())
                start[rank, i] = env.now
                log((rank, i, 0))
                fluid.start(act)
                yield act.done
            else:
                key = (work.group, i)
                coll = collectives.get(key)
                if coll is None:
                    coll = collectives[key] = _Collective(group_size[work.group], started=env.event())
                coll.arrived.append(rank)
                if len(coll.arrived) == coll.size:
                    work_s = max(float(ranks[r].durations_s[i]) for r in coll.arrived)
                    act = _Activity(work_s, tuple(sorted(coll.arrived)), True,
                                    group_links.get(work.group, ()), env.event(),
                                    float(compute_by_op[i]), float(comm_by_op[i]))
                    coll.started.succeed(act)
                    fluid.start(act)
                act = yield coll.started
                start[rank, i] = env.now
                log((rank, i, 0))
                yield act.done
            end[rank, i] = env.now
            log((rank, i, 1))
            done[rank][i].succeed()

    for rank in range(n_ranks):
        env.process(stream(rank, "compute"))
        env.process(stream(rank, "comm"))
    env.run()
    if not all(event.triggered for row in done for event in row):
        raise RuntimeError("engine deadlock: some ops never ran (a dependency cycle in the program)")
    return EngineResult(start, end, ready, tuple(signature), fluid.timeouts)
