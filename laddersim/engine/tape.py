"""One engine run's event order (``Tape``): recorded by the engines (``simulator``, ``direct``),
walked by ``order_tree``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np



@dataclass(frozen=True)
class Tape:
    """One engine run's event order. ``entries``: a start is (op, ranks, links, is_comm); a
    completion is (serials completed, whether at the previous completion's clock reading)."""

    entries: tuple
    moments: np.ndarray  # (3, ranks, ops): the completion count at each op's ready, start, end
    signature: tuple
    events: int
    n_ranks: int
    n_ops: int

    @classmethod
    def of(cls, log: list, moments: np.ndarray, signature: tuple, events: int) -> "Tape":
        """From the engine's log (the (op, ranks, links, is_comm) entry of each activity started,
        and (serials completed, clock reading) pairs, in order)."""
        entries = []
        previous_s = 0.0  # the clock reading of the previous completion (the start: 0)
        for item in log:
            if len(item) == 4:
                entries.append(item)
            else:
                serials, now_s = item
                entries.append((serials, now_s == previous_s))
                previous_s = now_s
        return cls(tuple(entries), moments, signature, events, moments.shape[1], moments.shape[2])
