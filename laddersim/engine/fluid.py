"""Fluid work of the running activities: remaining work, rates, the next completion. No clock.

An activity (the engine's: ``laddersim.engine.simulator``) has its standalone work ``work_s``,
its ``ranks`` (a compute op: its one rank), ``is_comm``, its ``links``, its ``compute_slowdown``
and ``comm_slowdown`` (collectives), its index in the program ``op``, and the ``serial`` (start
order: completions at one instant are reported in it) and ``slot`` the fluid gives it.

Rates follow ``laddersim.engine.rates`` (the engine's rate law). They are kept up to date
incrementally: a start or a completion recomputes only the rates it can change (the compute ops
of a collective's ranks, the collectives of a compute op's rank or of a collective's links), so an
event costs the same at TP 2 and TP 64. Remaining work and rates live in numpy arrays, one slot per
running activity, so advancing the clock and finding the next completion are a few array
operations. Every number is computed with the same floating-point operations in the same order as
a full recomputation (``rates.running_rates``), so results do not depend on the bookkeeping.
"""

from __future__ import annotations

import numpy as np

from laddersim.engine.rates import comm_rate, compute_rate


class RunningSets:
    """Who runs where (what the rates read): each rank's running compute op, and the running
    collectives on each rank and on each link, in start order. Shared by ``Fluid`` and
    ``laddersim.engine.lazy_fluid.LazyFluid``."""

    def __init__(self):
        self.computing: dict[int, object] = {}  # rank -> its running compute op
        self.comm_on_rank: dict[int, list] = {}
        self.comm_on_link: dict[str, list] = {}

    def _enter(self, act) -> None:
        """A collective starts on its ranks and links."""
        for rank in act.ranks:
            self.comm_on_rank.setdefault(rank, []).append(act)
        for link in act.links:
            self.comm_on_link.setdefault(link, []).append(act)

    def _leave(self, act) -> None:
        for rank in act.ranks:
            self.comm_on_rank[rank].remove(act)
        for link in act.links:
            self.comm_on_link[link].remove(act)

    def _stop(self, act) -> None:
        """``act`` stops running: a collective leaves its ranks and links (their rates change); a
        compute op leaves its rank, one rank fewer computing for each collective there
        (``_one_less_computing``)."""
        if act.is_comm:
            self._leave(act)
            self._comm_changed(act)
        else:
            rank = act.ranks[0]
            del self.computing[rank]
            for coll in self.comm_on_rank.get(rank, ()):
                self._one_less_computing(coll)

    def _link_peers(self, act):
        """The other collectives on ``act``'s links, each once, in the order of its links."""
        seen = set()
        for link in act.links:
            for other in self.comm_on_link[link]:
                if other is not act and id(other) not in seen:
                    seen.add(id(other))
                    yield other


class Fluid(RunningSets):
    """The running activities. ``start``/``finish`` keep rates current; ``advance``, ``due`` and
    ``next_delay_s`` work on all of them at once."""

    def __init__(self, capacity: int = 8):
        super().__init__()
        self.remaining_s = np.full(capacity, np.inf)  # free slots: never due, never next
        self.rate = np.ones(capacity)
        self._scratch = np.empty(capacity)
        self.acts: list[object] = [None] * capacity
        self.free = list(range(capacity - 1, -1, -1))
        self.count = 0
        self.serial = 0
        self.computing_ranks: dict[int, int] = {}  # id(collective) -> its ranks now computing

    # -- rates -------------------------------------------------------------------------------
    def _set_compute_rate(self, act) -> None:
        self.rate[act.slot] = compute_rate([c.compute_slowdown for c in self.comm_on_rank.get(act.ranks[0], ())])

    def _set_comm_rate(self, act) -> None:
        loads = [len(self.comm_on_link[link]) for link in act.links]
        self.rate[act.slot] = comm_rate(act.comm_slowdown, self.computing_ranks[id(act)] > 0, loads)

    # -- membership --------------------------------------------------------------------------
    def _take_slot(self, act) -> None:
        if not self.free:
            n = len(self.acts)
            self.remaining_s = np.concatenate([self.remaining_s, np.full(n, np.inf)])
            self.rate = np.concatenate([self.rate, np.ones(n)])
            self._scratch = np.empty(2 * n)
            self.acts.extend([None] * n)
            self.free = list(range(2 * n - 1, n - 1, -1))
        act.slot = self.free.pop()
        act.serial = self.serial
        self.serial += 1
        self.acts[act.slot] = act
        self.remaining_s[act.slot] = act.work_s
        self.count += 1

    def start(self, act) -> None:
        if len(act.ranks) != 1 and not act.is_comm:
            raise ValueError("a compute activity runs on one rank")
        self._take_slot(act)
        if act.is_comm:
            self.computing_ranks[id(act)] = sum(r in self.computing for r in act.ranks)
            self._enter(act)
            self._comm_changed(act)
            self._set_comm_rate(act)
        else:
            rank = act.ranks[0]
            self.computing[rank] = act
            self._set_compute_rate(act)
            for coll in self.comm_on_rank.get(rank, ()):
                self.computing_ranks[id(coll)] += 1
                self._set_comm_rate(coll)

    def finish(self, act) -> None:
        self.acts[act.slot] = None
        self.remaining_s[act.slot] = np.inf
        self.rate[act.slot] = 1.0
        self.free.append(act.slot)
        self.count -= 1
        if act.is_comm:
            del self.computing_ranks[id(act)]
        self._stop(act)

    def _one_less_computing(self, coll) -> None:
        self.computing_ranks[id(coll)] -= 1
        self._set_comm_rate(coll)

    def _comm_changed(self, act) -> None:
        """A collective started or finished: its ranks' compute and its links' collectives."""
        for rank in act.ranks:
            op = self.computing.get(rank)
            if op is not None:
                self._set_compute_rate(op)
        for other in self._link_peers(act):
            self._set_comm_rate(other)

    # -- progress ----------------------------------------------------------------------------
    def advance(self, dt_s: float) -> None:
        if dt_s > 0.0:
            self.remaining_s -= np.multiply(self.rate, dt_s, out=self._scratch)

    def next_delay_s(self) -> float:
        """Time until the first running activity completes at the current rates."""
        ratio = np.maximum(self.remaining_s, 0.0)
        np.divide(ratio, self.rate, out=ratio)
        return float(ratio.min())

    def due(self, tolerance_s: float) -> list:
        """Activities with no more than ``tolerance_s`` of standalone work left, in start order."""
        slots = (self.remaining_s <= tolerance_s * self.rate).nonzero()[0].tolist()
        if len(slots) == 1:
            return [self.acts[slots[0]]]
        return sorted((self.acts[s] for s in slots), key=lambda a: a.serial)
