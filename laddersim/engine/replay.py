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

import numpy as np

from laddersim.engine.order_tree import OrderTree
from laddersim.engine.tape import Tape  # noqa: F401  (re-exported: a tape is what replay takes)
from laddersim.engine.work import EngineResult


def replay(tape: Tape, durations_s: np.ndarray, compute_slowdown, comm_slowdown) -> EngineResult | None:
    """The engine's result for ``durations_s`` (ranks x ops) and slowdowns (a number or one per
    op), or None where the run would take another path than the tape's."""
    return OrderTree.of(tape).replay(durations_s, compute_slowdown, comm_slowdown)
