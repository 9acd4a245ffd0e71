"""``run_engine`` with a memory: a program run again with other durations is replayed.

Keeps the event orders (tapes, ``laddersim.engine.replay``) of the engine runs of each program in
this process, as a tree of shared prefixes (``laddersim.engine.order_tree``). A run whose event
order is one kept is replayed along it (bit for bit the engine's result, ~50x cheaper);
otherwise the engine runs and its order joins the tree. A sweep's points share a handful of
programs with a handful of orders each, and the decode steps of one scenario share one or a few
orders, so most runs are replays.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Sequence

import numpy as np

from laddersim.engine.order_tree import OrderTree
from laddersim.engine.simulator import EngineResult, RankWork, run_engine

NODES_KEPT = 400_000  # tree nodes (one per completion of a kept order) of all programs together
PROGRAMS_KEPT = 64
RUNS_KEPT = 16  # results of recent runs, by their inputs (a run asked for again is not redone)
RUN_BYTES_KEPT = 64 * 2**20  # and at most this much of their spans

_trees: OrderedDict[tuple, OrderTree] = OrderedDict()
_last: OrderedDict[tuple, EngineResult] = OrderedDict()  # recent runs, by their inputs
_last_bytes = 0


_program_numbers: dict[tuple, int] = {}  # (streams, deps) -> a number standing for them in keys
_numbers_by_identity: dict[tuple[int, int], tuple] = {}  # of tuples (unchangeable): no re-hashing
_next_number = itertools.count()


def _program_number(streams: Sequence[str], deps: Sequence[tuple]) -> int:
    """A number per distinct program: keys hold it instead of two tuples as long as the program,
    which Python would hash again at every look-up."""
    if isinstance(streams, tuple) and isinstance(deps, tuple):
        known = _numbers_by_identity.get((id(streams), id(deps)))
        if known is not None and known[0] is streams and known[1] is deps:
            return known[2]
    if len(_program_numbers) >= PROGRAMS_KEPT:
        _program_numbers.clear()  # a program seen again gets a new number (and a new tree)
        _numbers_by_identity.clear()
    number = _program_numbers.setdefault((tuple(streams), tuple(deps)), next(_next_number))
    if isinstance(streams, tuple) and isinstance(deps, tuple):
        if len(_numbers_by_identity) >= 4 * PROGRAMS_KEPT:
            _numbers_by_identity.clear()
        _numbers_by_identity[(id(streams), id(deps))] = (streams, deps, number)  # kept, so ids stay theirs
    return number


def _program_key(ranks: Sequence[RankWork], group_links: dict) -> tuple | None:
    first = ranks[0]
    if any(w.streams is not first.streams or w.deps is not first.deps for w in ranks):
        return None  # ranks with programs of their own: not cached
    return (_program_number(first.streams, first.deps), tuple(w.group for w in ranks),
            tuple(sorted((g, tuple(links)) for g, links in (group_links or {}).items())))


def _inputs(ranks, compute_slowdown, comm_slowdown, group_links, family) -> tuple:
    """(tree key or None where not cached, durations (ranks x ops), the memo key of the run)."""
    key = _program_key(ranks, group_links)
    if key is not None:
        key = key + (family,)
    durations = np.stack([np.asarray(w.durations_s, dtype=float) for w in ranks])
    inputs = (key, durations.tobytes(), np.asarray(compute_slowdown, dtype=float).tobytes(),
              np.asarray(comm_slowdown, dtype=float).tobytes())
    return key, durations, inputs


def _remember(inputs: tuple, result: EngineResult) -> EngineResult:
    global _last_bytes
    if inputs not in _last:
        _last_bytes += 3 * result.start_s.nbytes
    _last[inputs] = result
    _last.move_to_end(inputs)
    while len(_last) > 1 and (len(_last) > RUNS_KEPT or _last_bytes > RUN_BYTES_KEPT):
        _last_bytes -= 3 * _last.popitem(last=False)[1].start_s.nbytes
    return result


def run_cached(ranks: Sequence[RankWork], compute_slowdown=0.0, comm_slowdown=0.0,
               group_links: dict[int, tuple[str, ...]] | None = None, family: str = "") -> EngineResult:
    """``run_engine(ranks, compute_slowdown, comm_slowdown, group_links)``, replayed where it can.

    ``family`` keeps apart the orders of runs unlikely to share one (a prefill and a decode step
    of one program)."""
    key, durations, inputs = _inputs(ranks, compute_slowdown, comm_slowdown, group_links, family)
    if key is None:
        return run_engine(ranks, compute_slowdown, comm_slowdown, group_links)
    if inputs in _last:
        return _remember(inputs, _last[inputs])  # the same run again (a static KV cache's decode steps)
    tree = _trees.get(key)
    result = None
    if tree is not None:
        _trees.move_to_end(key)  # recently used: evicted last
        result = tree.replay(durations, compute_slowdown, comm_slowdown)
    if result is None:
        result = _run_and_keep(key, ranks, durations, compute_slowdown, comm_slowdown, group_links)
    return _remember(inputs, result)


def _run_and_keep(key, ranks, durations, compute_slowdown, comm_slowdown, group_links) -> EngineResult:
    """The engine, its order joining the program's tree."""
    result = run_engine(ranks, compute_slowdown, comm_slowdown, group_links, record_tape=True)
    tree = _trees.get(key)
    if tree is None:
        tree = _trees[key] = OrderTree(*durations.shape)
    _trees.move_to_end(key)
    tree.insert(result.tape)
    while len(_trees) > 1 and (len(_trees) > PROGRAMS_KEPT or sum(t.nodes for t in _trees.values()) > NODES_KEPT):
        _trees.popitem(last=False)  # the least recently used program's orders
    if tree.nodes > NODES_KEPT:  # one program alone outgrew the bound: start its tree afresh
        _trees[key] = OrderTree(*durations.shape)
        _trees[key].insert(result.tape)
    return result


def forget() -> None:
    """Drop every kept tape (tests; a long-lived process that wants its memory back)."""
    global _last_bytes
    _trees.clear()
    _last.clear()
    _last_bytes = 0
