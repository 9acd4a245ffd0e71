"""One replica's discrete-event simulation, as a direct event loop: SimPy's semantics, without its
per-event objects, and with decode runs advanced many iterations at a time.

Two processes share a clock, as they would under SimPy (tests/reference_serving.py runs the same
replica on SimPy, and tests hold this loop to it bit for bit):

* **arrivals** hands each request to the scheduler when it lands (``arrivals.arrival_events``),
  with every request landing at the same instant in one go, waking an idle engine;
* **engine** plans an iteration, waits its makespan (the iteration-time model), then completes
  it; with nothing to run it sleeps until an arrival wakes it.

**Closed loop** (``concurrency`` C): the first C requests land at time 0 and each request that
finishes is replaced at once by the next one, landing at its finish (a benchmark client keeping C
requests in flight); the landing times are then written as the run goes (``lands_s``, infinite
until known), so the loop never waits on one.

Events run in SimPy's order: by time, then by the order they were scheduled in (``_eid``, SimPy's
event id; it only decides between an arrival and the engine due at the same instant). Before each
arrival and each iteration's end, the integral of the requests in the system is brought up to
date (until the last arrival; Little's law's ``mean_in_system``).

**Decode runs**: where the next iterations only decode the running batch
(``ContinuousBatcher.steady_decode``), the loop keeps a ``DecodeRun`` and an iteration is O(1)
bookkeeping. Where a stretch of them is long (the batch is full, or the next arrival is many
iterations away), their attention and makespans are priced as arrays (``decode_steps``, the same
arithmetic as one by one), their end times are one cumulative sum (the clock's own sums), and the
arrivals they span are merged in by time: the run stops at the first iteration whose plan an
arrival could change, or whose end meets an arrival at the same instant (then the event order
decides, and the loop takes that iteration one event at a time).
"""

from __future__ import annotations

import numpy as np

from laddersim.traffic.arrivals import Requests, arrival_events
from laddersim.traffic.decode_run import DecodeRun
from laddersim.traffic.iteration_time import IterationTimer
from laddersim.traffic.options import ServingOptions
from laddersim.traffic.scheduler import ContinuousBatcher, Iteration

# The engine's states: sleeping (nothing to run), woken (an arrival's wake-up due), busy (an
# iteration's end due), starting (before its first plan, at time 0), stopped (every request done).
IDLE, WOKEN, BUSY, STARTING, STOPPED = range(5)
STRETCH_MIN = 8  # decode iterations from which a run is priced as arrays rather than one by one


class ReplicaLoop:
    """The simulation of one replica (module docstring); ``run()`` runs it to the end."""

    def __init__(self, timer: IterationTimer, requests: Requests, options: ServingOptions, kv_blocks: int, bar,
                 concurrency: int | None = None):
        self.timer = timer
        self.attention = timer.attention
        self.batcher = ContinuousBatcher(requests.prompt_len, requests.output_len, kv_blocks, options)
        self.n = len(requests)
        self.closed = concurrency is not None
        if self.closed:  # C land at 0, the others when a request before them finishes
            self.lands_s = np.full(self.n, np.inf)
            self.lands_s[:concurrency] = 0.0
            self.window_end_s = np.inf
        else:
            self.lands_s = arrival_events(requests.arrival_s)
            self.window_end_s = float(requests.arrival_s[-1])
        self.bar = bar
        self.in_system_area = 0.0  # the integral of requests in the system, up to area_t
        self.area_t = 0.0
        self.done = 0
        self.iterations = 0
        self.next_arrival = 0  # the first request not yet landed
        self._eid = 2  # SimPy's event ids: 0 and 1 start the two processes
        self.arrival_eid = 0  # of the next landing
        self.state = STARTING
        self.engine_s = 0.0  # when the engine's next event is due (woken, busy)
        self.engine_eid = 0
        self.iteration: Iteration | None = None  # the iteration under way (None: a decode run's)
        self.decode_run: DecodeRun | None = None
        self.last_s = 0.0  # the last iteration's makespan (to guess how far the next arrival is)

    def _new_eid(self) -> int:
        self._eid += 1
        return self._eid

    def run(self) -> None:
        lands, n = self.lands_s, self.n
        if lands[0] <= 0.0:  # requests at time 0 land before the engine first plans
            self._land(0.0)
        else:
            self.arrival_eid = self._new_eid()
        self._plan(0.0)
        while self.state != STOPPED:
            if self.state != IDLE and (self.next_arrival >= n or (self.engine_s, self.engine_eid) <
                                       (float(lands[self.next_arrival]), self.arrival_eid)):
                now = self.engine_s
                if self.state == BUSY:
                    self._account(now)
                    self._complete(now)
                    if self.done >= n:
                        break
                self._plan(now)
            elif self.next_arrival < n and lands[self.next_arrival] < np.inf:
                self._land(float(lands[self.next_arrival]))
            else:
                break  # nothing left to happen (a stalled scheduler; ``served`` says so)

    def _account(self, now_s: float) -> None:
        t = min(now_s, self.window_end_s)
        self.in_system_area += self.batcher.in_system * (t - self.area_t)
        self.area_t = t

    def _land(self, now_s: float) -> None:
        """Every request landing at ``now_s`` joins the queue (each landing accounted first: after
        the first, at the same instant, that adds zero)."""
        lands, first = self.lands_s, self.next_arrival
        stop = first + 1
        while stop < self.n and lands[stop] == now_s:
            stop += 1
        self._account(now_s)
        self.batcher.waiting.extend_range(first, stop)
        if self.state == IDLE:
            self.state, self.engine_s, self.engine_eid = WOKEN, now_s, self._new_eid()
        self.next_arrival = stop
        if stop < self.n:
            self.arrival_eid = self._new_eid()

    def _busy(self, now_s: float, seconds: float, iteration: Iteration | None) -> None:
        self.state, self.engine_s, self.engine_eid = BUSY, now_s + seconds, self._new_eid()
        self.iteration = iteration
        self.last_s = seconds

    def _complete(self, now_s: float) -> None:
        """The iteration under way ended at ``now_s``."""
        self.iterations += 1
        run = self.decode_run
        if self.iteration is not None:
            finished = self.batcher.complete(self.iteration, now_s)
        else:
            run.done += 1
            finished = 0
            if run.done == run.until_finish:
                finished = self.batcher.advance(run, now_s)
                self.decode_run = None
        self._finished(finished, now_s)

    def _finished(self, finished: int, now_s: float) -> None:
        if finished:
            self.done += finished
            self.bar.update(finished)
            if self.closed:
                self._replace(finished, now_s)

    def _replace(self, finished: int, now_s: float) -> None:
        """Closed loop: the next ``finished`` requests land at ``now_s`` and join the queue, ahead of
        the plan of the next iteration (the client sends each as soon as one returns)."""
        first = self.next_arrival
        stop = min(first + finished, self.n)
        if stop > first:
            self.lands_s[first:stop] = now_s
            self.batcher.waiting.extend_range(first, stop)
            self.next_arrival = stop

    def _plan(self, now_s: float) -> None:
        """The engine at ``now_s``: plan the next iteration (or stretch of decode iterations)."""
        batcher = self.batcher
        while True:
            run = self.decode_run
            if run is not None and (run.done >= run.limit or (batcher.waiting and not run.blocked)):
                batcher.advance(run, now_s)  # the run ends here: blocks short, or an admission
                run = None
            if run is None:
                run = self.decode_run = batcher.steady_decode()
            if run is None:
                it = batcher.plan()
                if it is None:
                    self.state = IDLE
                    return
                a_s = self.attention.seconds(it.kv_lens, it.decode_kv, it.chunks)
                self._busy(now_s, self.timer.seconds(it.tokens, it.samples, a_s, prefill=bool(it.chunks)), it)
                return
            if self._stretch_worth_it(run, now_s):
                end_s = self._stretch(run, now_s)
                if end_s is not None:
                    if self.done >= self.n:
                        self.state = STOPPED
                        return
                    now_s = end_s
                    continue
            i = run.done
            a_s = self.attention.decode_only_seconds(run.kv_lens(i), run.kv_sum(i))
            self._busy(now_s, self.timer.seconds(run.batch, run.batch, a_s), None)
            return

    def _stretch_worth_it(self, run: DecodeRun, now_s: float) -> bool:
        """Is the run likely to go on for STRETCH_MIN iterations or more?"""
        if run.limit - run.done < STRETCH_MIN:
            return False
        if run.blocked or self.next_arrival >= self.n:
            return True
        return float(self.lands_s[self.next_arrival]) - now_s >= STRETCH_MIN * self.last_s

    def _stretch(self, run: DecodeRun, now_s: float) -> float | None:
        """Advance ``run`` by as many iterations as run before an event could change them (module
        docstring), the landings among them included; their last end (None: not one could be
        priced without engine runs, so the loop takes the next one alone)."""
        first, batch = run.done, run.batch
        a_s = self.attention.decode_steps(run.cached, first, run.limit - first)
        seconds, bounds = self.timer.decode_steps(batch, a_s)
        if not len(seconds):
            return None
        ends = np.cumsum(np.concatenate(([now_s], seconds)))[1:]
        lands, begin = self.lands_s, self.next_arrival
        if run.blocked:  # up to a landing at the same instant as an end, if any
            reach = int(np.searchsorted(lands, ends[-1], side="right"))
            meets = np.isin(ends, lands[begin:reach])
            k = int(np.argmax(meets)) if meets.any() else len(ends)
        elif begin < self.n:  # up to the iteration the next landing falls in
            landing = lands[begin]
            before = int(np.searchsorted(ends, landing, side="left"))
            k = before if before == len(ends) or ends[before] == landing else before + 1
        else:
            k = len(ends)
        if k == 0:
            return None
        end_s = float(ends[k - 1])
        stop = int(np.searchsorted(lands, end_s, side="left"))  # the requests landing before it
        if self.area_t < self.window_end_s:
            self._account_stretch(ends[:k], lands[begin:stop])
        self.batcher.waiting.extend_range(begin, stop)
        if stop > begin:
            self.next_arrival = stop
            if stop < self.n:
                self.arrival_eid = self._new_eid()
        self.timer.max_error_bound = max(self.timer.max_error_bound, float(bounds[:k].max()))
        self.last_s = float(seconds[k - 1])
        self.iterations += k
        run.done += k
        if run.done == run.until_finish:
            self._finished(self.batcher.advance(run, end_s), end_s)
            self.decode_run = None
        return end_s

    def _account_stretch(self, ends: np.ndarray, landings: np.ndarray) -> None:
        """``_account`` at every landing and iteration end of a stretch, in time order (they never
        coincide; landings at one instant keep their order), as one sequential sum."""
        base = self.batcher.in_system
        times = np.concatenate((landings, ends))
        in_system = np.concatenate((base + np.arange(len(landings)), base + np.searchsorted(landings, ends)))
        order = np.argsort(times, kind="stable")
        t = np.minimum(times[order], self.window_end_s)
        steps = in_system[order] * np.diff(t, prepend=self.area_t)
        self.in_system_area = float(np.cumsum(np.concatenate(([self.in_system_area], steps)))[-1])
        self.area_t = float(t[-1])
