"""What the engine takes and gives: one rank's work (``RankWork``) and a run's result
(``EngineResult``). Plain data, shared by the SimPy engine (``simulator``), the replays
(``replay``, ``order_tree``, ``tree_batch``) and their callers, so none of them imports another
for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass
class RankWork:
    """What one rank runs: streams and deps per op, standalone durations, its collective group."""

    streams: Sequence[str]  # "compute" or "comm" per op
    deps: Sequence[tuple[int, ...]]  # cross-stream dependencies per op
    durations_s: np.ndarray  # standalone seconds per op
    group: int = 0  # collectives are matched by (group, op index)


class EngineResult:
    """One forward pass: ``start_s``, ``end_s``, ``ready_s`` (ranks x ops: when each op began
    running (collectives: all ranks arrived), ended, and was reached by its stream with its deps
    met), ``signature`` (the order of events), ``events`` (timeouts the clock scheduled) and
    ``tape`` (``laddersim.engine.tape.Tape`` when recorded).

    Every span begins and ends at the clock reading of a completion, so a run is also its readings
    ``times_s`` and the index of the reading at each op's ready, start and end (``moments``, 3 x
    ranks x ops); ``at_moments`` keeps those and reads the spans when asked (a replay of many runs
    keeps one row of readings per run instead of three arrays of spans)."""

    __slots__ = ("_start_s", "_end_s", "_ready_s", "signature", "events", "tape", "times_s", "moments")

    def __init__(self, start_s: np.ndarray, end_s: np.ndarray, ready_s: np.ndarray, signature: tuple = (),
                 events: int = 0, tape: object = None):
        self._start_s, self._end_s, self._ready_s = start_s, end_s, ready_s
        self.signature, self.events, self.tape = signature, events, tape
        self.times_s = self.moments = None

    @classmethod
    def at_moments(cls, times_s: np.ndarray, moments: np.ndarray, signature: tuple, events: int) -> "EngineResult":
        result = cls(None, None, None, signature, events)
        result.times_s, result.moments = times_s, moments
        return result

    @property
    def start_s(self) -> np.ndarray:
        if self._start_s is None:
            self._start_s = self.times_s[self.moments[1]]
        return self._start_s

    @property
    def end_s(self) -> np.ndarray:
        if self._end_s is None:
            self._end_s = self.times_s[self.moments[2]]
        return self._end_s

    @property
    def ready_s(self) -> np.ndarray:
        if self._ready_s is None:
            self._ready_s = self.times_s[self.moments[0]]
        return self._ready_s


@dataclass(frozen=True)
class EngineRun:
    """One run asked of the engine: ``run_engine``'s arguments, and the family of runs it belongs
    to (``laddersim.engine.cached`` keeps the orders of families apart: a prefill, a decode step)."""

    ranks: Sequence[RankWork]
    compute_slowdown: float | np.ndarray  # one number, or one per op
    comm_slowdown: float | np.ndarray
    group_links: dict[int, tuple[str, ...]] | None = None
    family: str = ""
