"""Replay a recorded engine run with new durations, without SimPy; or say it cannot.

The engine's control flow (which activity starts when, which ones complete together, the order
SimPy runs same-time events in) depends on the durations only through two kinds of comparison at
each completion: which activities have no work left (``remaining <= tolerance * rate``), and
whether the completion falls at the same clock reading as the previous one (a zero delay puts the
completion among that moment's other events instead of after them). A ``Tape`` records the starts
and completions of one run in order, with the outcome of both comparisons. ``replay`` redoes the
run's arithmetic for new durations (the same floating-point operations in the same order, through
``laddersim.engine.fluid``) and checks every comparison on the way: if all come out as recorded,
the engine would have taken the same path, so the spans are exactly (bit for bit) the engine's;
at the first that does not, it returns None and the caller runs the engine. The walk itself is
``laddersim.engine.order_tree``'s (a tree of one tape), which keeps many tapes of a program.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from laddersim.engine.fluid import Activity, comm_rate, compute_rate
from laddersim.engine.simulator import EngineResult


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
        """From the engine's log (activities started, and tuples of serials completed, in order)."""
        entries = []
        previous_s = 0.0  # the clock reading of the previous completion (the start: 0)
        for item in log:
            if isinstance(item, Activity):
                entries.append((item.op, item.ranks, item.links, item.is_comm))
            else:
                serials, now_s = item
                entries.append((serials, now_s == previous_s))
                previous_s = now_s
        return cls(tuple(entries), moments, signature, events, moments.shape[1], moments.shape[2])


# A running activity in a replay: [serial, remaining_s, rate, is_comm, ranks, links,
# compute_slowdown, comm_slowdown].
SERIAL, REMAINING, RATE, IS_COMM, RANKS, LINKS, COMPUTE_SLOWDOWN, COMM_SLOWDOWN = range(8)


def _rates(acts: list[list], one_rank: bool) -> None:
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


def replay(tape: Tape, durations_s: np.ndarray, compute_slowdown, comm_slowdown) -> EngineResult | None:
    """The engine's result for ``durations_s`` (ranks x ops) and slowdowns (a number or one per
    op), or None where the run would take another path than the tape's."""
    from laddersim.engine.order_tree import OrderTree

    return OrderTree.of(tape).replay(durations_s, compute_slowdown, comm_slowdown)
