"""What the engine takes and gives: one rank's work (``RankWork``) and a run's result
(``EngineResult``). Plain data, shared by the SimPy engine (``simulator``), the replays
(``replay``, ``order_tree``) and their callers, so none of them imports another for it."""

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


@dataclass
class EngineResult:
    start_s: np.ndarray  # (ranks, ops) when the op began running (collectives: all arrived)
    end_s: np.ndarray  # (ranks, ops)
    ready_s: np.ndarray  # (ranks, ops) when the op's stream reached it with deps met
    signature: tuple = ()
    events: int = 0
    tape: object = None  # laddersim.engine.tape.Tape when recorded
