"""The engine's one entry: the runs asked of it answered by the strategy their inputs allow, each
result bit for bit the SimPy engine's.

Strategies, chosen in this order:

* ``reference``: the SimPy engine itself (``simulator``), the reference every other strategy is
  held to by the tests;
* ``replay`` allowed (runs without jitter, which mostly repeat an order of events seen before):
  many single-rank runs of one program together, along its tree of kept event orders in one walk
  (``tree_batch`` through ``cached``); a run alone replayed along the tree (``order_tree``) where
  its order is kept, else run on the direct loop and its order kept (``cached``);
* otherwise (every rank simulated with jitter: orders rarely repeat): the direct loop
  (``direct``: SimPy's order of events on a minimal loop).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from laddersim.engine.cached import run_cached, run_cached_kinds, run_cached_many
from laddersim.engine.direct import run_direct
from laddersim.engine.work import EngineResult, EngineRun


def run(asked: EngineRun, *, replay: bool = True, reference: bool = False, orders: bool = True) -> EngineResult:
    """One run. ``orders``: record its order of events (``EngineResult.signature``; a replayed run
    always has it)."""
    if reference:
        from laddersim.engine.simulator import run_engine  # (SimPy loads only for the reference)

        return run_engine(asked.ranks, asked.compute_slowdown, asked.comm_slowdown, asked.group_links, orders)
    if replay:
        return run_cached(asked.ranks, asked.compute_slowdown, asked.comm_slowdown, asked.group_links, asked.family)
    return run_direct(asked.ranks, asked.compute_slowdown, asked.comm_slowdown, asked.group_links, orders)


def run_many(runs: Sequence[EngineRun], *, replay: bool = True, reference: bool = False,
             orders: bool = True) -> list[EngineResult]:
    """Each run's result, in order; with ``replay`` the single-rank runs of one program and family
    together (one walk of its event-order tree)."""
    if replay and not reference:
        return run_cached_many(runs)
    return [run(asked, replay=replay, reference=reference, orders=orders) for asked in runs]


def run_by_kind(streams: Sequence[str], deps: Sequence[tuple], group_links: dict | None, family: str,
                kind_of_op: np.ndarray, durations_s: np.ndarray, compute_slowdown: np.ndarray,
                comm_slowdown: np.ndarray) -> list[EngineResult]:
    """Single-rank runs of one program and family given by op kind: one per row of
    ``durations_s`` and of the slowdowns (runs x kinds each: an op's are its kind's,
    ``kind_of_op``), replayed together (a sweep's points)."""
    return run_cached_kinds(streams, deps, group_links, family, kind_of_op, durations_s, compute_slowdown,
                            comm_slowdown)
