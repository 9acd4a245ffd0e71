"""``laddersim.engine.fluid.Fluid`` in Python floats, its remaining work brought up to date lazily.

The fluid subtracts ``rate * dt`` from every running activity's remaining work at each completion
and then looks for the activities left with no more than the done tolerance, and for the next
completion. With many ranks (every rank simulated, ``--jitter``) a completion of one rank's op
would touch every other rank's running op. Here each activity keeps its remaining work as of the
advance it was last brought to (``synced``), and the advances since are applied only when it is
read: the same subtractions with the same rate in the same order, so the same floats. Rates
change only after an activity is brought up to date, so every advance it missed ran at the rate it
holds. Which activities to read is found from a heap of their approximate completion readings
(``reading + remaining / rate`` as of their last update): an activity that completes, or completes
first, is within a margin of the earliest one (the margin, 1e-7 of the reading, is far above the
rounding of the readings and of the subtractions of any run), and only those are read exactly.

It also keeps which running activities would complete at once at the current reading (``zero``:
``now + max(remaining, 0) / rate == now``), so the clock knows whether its timeout is due now
without computing the next completion at every change of the running set. After a completion
none is left (each had more than the done tolerance, which is above the clock's resolution, at its
rate); an activity becomes one only when it starts or its rate changes, and each is checked then.
"""

from __future__ import annotations

import heapq

from laddersim.engine.fluid import RunningSets
from laddersim.engine.rates import comm_rate, compute_rate, done_tolerance_s

RELATIVE_MARGIN = 1e-7  # of the reading: completions this close to the earliest are read exactly
ABSOLUTE_MARGIN_S = 1e-12


class Running:
    """A running activity (``laddersim.engine.fluid.Activity``) with its remaining work as of
    advance ``synced``, its rate, and its heap entry's version. It is also its own completion
    event for ``laddersim.engine.direct`` (``waiting``, ``triggered``, ``value``)."""

    __slots__ = ("work_s", "ranks", "is_comm", "links", "compute_slowdown", "comm_slowdown", "op", "serial",
                 "remaining_s", "rate", "synced", "version", "computing", "waiting", "triggered", "value")

    def __init__(self, work_s, ranks, is_comm, links, compute_slowdown, comm_slowdown, op):
        self.work_s, self.ranks, self.is_comm, self.links = work_s, ranks, is_comm, links
        self.compute_slowdown, self.comm_slowdown, self.op = compute_slowdown, comm_slowdown, op
        self.waiting, self.triggered, self.value = [], False, None
        self.serial = -1
        self.remaining_s = work_s
        self.rate = 1.0
        self.synced = 0
        self.version = 0
        self.computing = 0  # collectives: their ranks now computing


class LazyFluid(RunningSets):
    """The running activities (``count``), the clock reading of the last completion (``now``)."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.serial = 0
        self.now = 0.0
        self.steps: list[float] = []  # dt of every advance, in order
        self.heap: list[tuple] = []  # (approximate completion reading, serial, version, activity)
        self.zero: set[Running] = set()
        self.rank_rate: dict[int, float] = {}  # compute_rate of each rank's running collectives

    # -- the remaining work ------------------------------------------------------------------
    def _sync(self, act: Running) -> None:
        """Apply the advances ``act`` missed (Fluid.advance: remaining -= rate * dt, in order)."""
        steps = self.steps
        if act.synced < len(steps):
            remaining, rate = act.remaining_s, act.rate
            for dt_s in steps[act.synced:]:
                remaining -= rate * dt_s
            act.remaining_s = remaining
            act.synced = len(steps)

    def _sync_all(self, acts: list[Running]) -> None:
        """``_sync`` of each (in one call: it runs at every completion)."""
        steps, n = self.steps, len(self.steps)
        for act in acts:
            if act.synced < n:
                remaining, rate = act.remaining_s, act.rate
                for dt_s in steps[act.synced:]:
                    remaining -= rate * dt_s
                act.remaining_s, act.synced = remaining, n

    def _delay_s(self, act: Running) -> float:
        remaining = act.remaining_s
        return (remaining if remaining > 0.0 else 0.0) / act.rate

    def _schedule(self, act: Running) -> None:
        """Put ``act`` (up to date) in the heap, and note whether it completes at once."""
        act.version += 1
        delay = self._delay_s(act)
        heapq.heappush(self.heap, (self.now + delay, act.serial, act.version, act))
        if self.now + delay == self.now:
            self.zero.add(act)
        else:
            self.zero.discard(act)

    def _set_rate(self, act: Running, rate: float) -> None:
        if rate != act.rate or act.version == 0:  # (a rate set again: nothing changes)
            self._sync(act)
            act.rate = rate
            self._schedule(act)

    # -- rates (Fluid's, kept the same way) --------------------------------------------------
    def _rank_changed(self, rank: int) -> None:
        self.rank_rate[rank] = compute_rate([c.compute_slowdown for c in self.comm_on_rank.get(rank, ())])
        op = self.computing.get(rank)
        if op is not None:
            self._set_rate(op, self.rank_rate[rank])

    def _set_comm_rate(self, act: Running) -> None:
        loads = [len(self.comm_on_link[link]) for link in act.links]
        self._set_rate(act, comm_rate(act.comm_slowdown, act.computing > 0, loads))

    def start(self, act: Running) -> None:
        act.serial = self.serial
        self.serial += 1
        self.count += 1
        act.synced = len(self.steps)
        if act.is_comm:
            act.computing = sum(r in self.computing for r in act.ranks)
            self._enter(act)
            self._comm_changed(act)
            self._set_comm_rate(act)
        else:  # (the usual start, spelled out: _set_rate of a new activity, then _schedule)
            rank = act.ranks[0]
            self.computing[rank] = act
            rate = act.rate = self.rank_rate.get(rank, 1.0)  # compute_rate([]) is 1.0
            act.version = 1
            remaining, now = act.remaining_s, self.now
            at = now + (remaining if remaining > 0.0 else 0.0) / rate
            heapq.heappush(self.heap, (at, act.serial, 1, act))
            if at == now:
                self.zero.add(act)
            for coll in self.comm_on_rank.get(rank, ()):
                coll.computing += 1
                if coll.computing == 1:  # its rate reads only whether any of its ranks computes
                    self._set_comm_rate(coll)

    def finish(self, act: Running) -> None:
        self.count -= 1
        act.version += 1  # its heap entry is stale
        self.zero.discard(act)
        self._stop(act)

    def _one_less_computing(self, coll: Running) -> None:
        coll.computing -= 1
        if not coll.computing:  # its rate reads only whether any of its ranks computes
            self._set_comm_rate(coll)

    def _comm_changed(self, act: Running) -> None:
        """A collective started or finished: its ranks' compute and its links' collectives."""
        for rank in act.ranks:
            self._rank_changed(rank)
        for other in self._link_peers(act):
            self._set_comm_rate(other)

    # -- the clock ---------------------------------------------------------------------------
    def _near(self, limit_s: float) -> list[Running]:
        """The running activities whose approximate completion is at most ``limit_s``, in no
        particular order: the heap's entries up to it, found by walking down from the top (stale
        entries on top are dropped first; those below are skipped)."""
        heap = self.heap
        while heap and heap[0][2] != heap[0][3].version:
            heapq.heappop(heap)
        out, todo, n = [], [0], len(heap)
        while todo:
            i = todo.pop()
            if i < n and heap[i][0] <= limit_s:
                _, _, version, act = heap[i]
                if version == act.version:
                    out.append(act)
                todo += (2 * i + 1, 2 * i + 2)
        return out

    def complete_next(self) -> tuple[float, list[Running]]:
        """Advance to the next completion (Fluid.next_delay_s, then Fluid.advance) and return its
        reading and the activities done there (Fluid.due), in start order. The activities near the
        earliest approximate completion are read exactly: the one completing first is among them,
        and so is every one done at its reading (the window is wider than the margin of both and
        the done tolerance)."""
        heap = self.heap
        while heap[0][2] != heap[0][3].version:
            heapq.heappop(heap)
        earliest = heap[0][0]
        near = self._near(earliest + 3.0 * (ABSOLUTE_MARGIN_S + RELATIVE_MARGIN * abs(earliest)))
        self._sync_all(near)
        delay = None
        for act in near:
            remaining = act.remaining_s
            d = (remaining if remaining > 0.0 else 0.0) / act.rate
            if delay is None or d < delay:
                delay = d
        return self._advance(self.now + delay, near)

    def complete(self, now_s: float) -> list[Running]:
        """The activities done at the current reading ``now_s`` (a completion due at once)."""
        return self._advance(now_s, self._near(now_s + 1e-13 + ABSOLUTE_MARGIN_S + RELATIVE_MARGIN * abs(now_s)))[1]

    def _advance(self, now_s: float, near: list[Running]) -> tuple[float, list[Running]]:
        dt_s = now_s - self.now
        if dt_s > 0.0:
            self.steps.append(dt_s)
        self.now = now_s
        tolerance_s = done_tolerance_s(now_s)
        self.zero.clear()
        self._sync_all(near)
        finished = [act for act in near if act.remaining_s <= tolerance_s * act.rate]
        if len(finished) > 1:
            finished.sort(key=_serial)
        return now_s, finished


def _serial(act: Running) -> int:
    return act.serial
