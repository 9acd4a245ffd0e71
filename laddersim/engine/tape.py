"""One engine run's event order (``Tape``), and the rates of a running set of activities as a
replay computes them (``running_rates``: ``laddersim.engine.fluid``'s formulas, the same floating-point
operations in the same order). Recorded by ``simulator``, walked by ``order_tree``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from laddersim.engine.fluid import Activity, comm_rate, compute_rate


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
        """From the engine's log (activities started, or their (op, ranks, links, is_comm) entries,
        and (serials completed, clock reading) pairs, in order)."""
        entries = []
        previous_s = 0.0  # the clock reading of the previous completion (the start: 0)
        for item in log:
            if isinstance(item, Activity):
                entries.append((item.op, item.ranks, item.links, item.is_comm))
            elif len(item) == 4:
                entries.append(item)
            else:
                serials, now_s = item
                entries.append((serials, now_s == previous_s))
                previous_s = now_s
        return cls(tuple(entries), moments, signature, events, moments.shape[1], moments.shape[2])


# A running activity in a replay: [serial, remaining_s, rate, is_comm, ranks, links,
# compute_slowdown, comm_slowdown].
SERIAL, REMAINING, RATE, IS_COMM, RANKS, LINKS, COMPUTE_SLOWDOWN, COMM_SLOWDOWN = range(8)


def running_rates(acts: list[list], one_rank: bool) -> None:
    """Every running activity's rate from scratch (``laddersim.engine.fluid``'s formulas)."""
    if one_rank:  # one rank (one group, one set of links): no bookkeeping of who is where
        disturbing = [a[COMPUTE_SLOWDOWN] for a in acts if a[IS_COMM]]
        computes = len(disturbing) < len(acts)
        for a in acts:
            if a[IS_COMM]:
                a[RATE] = comm_rate(a[COMM_SLOWDOWN], computes, [len(disturbing)] * len(a[LINKS]))
            else:
                a[RATE] = compute_rate(disturbing)
        return
    computing = {a[RANKS][0] for a in acts if not a[IS_COMM]}
    on_rank: dict[int, list[float]] = {}
    link_load: dict[str, int] = {}
    for a in acts:
        if a[IS_COMM]:
            for rank in a[RANKS]:
                on_rank.setdefault(rank, []).append(a[COMPUTE_SLOWDOWN])
            for link in a[LINKS]:
                link_load[link] = link_load.get(link, 0) + 1
    for a in acts:
        if a[IS_COMM]:
            a[RATE] = comm_rate(a[COMM_SLOWDOWN], any(r in computing for r in a[RANKS]),
                                [link_load[link] for link in a[LINKS]])
        else:
            a[RATE] = compute_rate(on_rank.get(a[RANKS][0], []))
