"""``run_engine`` with a memory: a program run again with other durations is replayed.

Runs it cannot replay go to the direct event loop (``laddersim.engine.direct``: the SimPy engine's
run, bit for bit, without SimPy).

Keeps the event orders (tapes, ``laddersim.engine.tape``) of the engine runs of each program in
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

from laddersim.engine.direct import run_direct
from laddersim.engine.order_tree import OrderTree
from laddersim.engine.work import EngineResult, RankWork
from laddersim.engine.work import EngineRun

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
    return (_program_number(first.streams, first.deps), tuple(w.group for w in ranks), _links_key(group_links))


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
        return run_direct(ranks, compute_slowdown, comm_slowdown, group_links)
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


def run_cached_many(runs: Sequence[EngineRun]) -> list[EngineResult]:
    """``run_cached`` of each run; the single-rank runs of one program and family together
    (``run_cached_rows``)."""
    results: list[EngineResult | None] = [None] * len(runs)
    groups: dict[tuple, list[int]] = {}
    for i, run in enumerate(runs):
        if len(run.ranks) != 1 or _program_key(run.ranks, run.group_links) is None:
            results[i] = run_cached(run.ranks, run.compute_slowdown, run.comm_slowdown, run.group_links, run.family)
            continue
        work = run.ranks[0]
        groups.setdefault((id(work.streams), id(work.deps), _links_key(run.group_links), run.family), []).append(i)
    for asked in groups.values():
        first = runs[asked[0]]
        n_ops = len(first.ranks[0].streams)
        rows = [np.stack([np.broadcast_to(np.asarray(value, dtype=float), (n_ops,)) for value in values])
                for values in zip(*[(runs[i].ranks[0].durations_s, runs[i].compute_slowdown, runs[i].comm_slowdown)
                                    for i in asked])]
        for i, result in zip(asked, run_cached_rows(first.ranks[0].streams, first.ranks[0].deps, first.group_links,
                                                    first.family, *rows)):
            results[i] = result
    return results


def _links_key(group_links: dict | None) -> tuple:
    return tuple(sorted((g, tuple(links)) for g, links in (group_links or {}).items()))


def run_cached_rows(streams: Sequence[str], deps: Sequence[tuple], group_links: dict | None, family: str,
                    durations_s: np.ndarray, compute_slowdown: np.ndarray, comm_slowdown: np.ndarray) -> list[EngineResult]:
    """``run_cached`` of single-rank runs of one program and family, one per row of
    ``durations_s`` and of the slowdowns (runs x ops each): ``run_cached_kinds`` with each op a
    kind of its own."""
    return run_cached_kinds(streams, deps, group_links, family, np.arange(len(streams)), durations_s,
                            compute_slowdown, comm_slowdown)


def run_cached_kinds(streams: Sequence[str], deps: Sequence[tuple], group_links: dict | None, family: str,
                     kind_of_op: np.ndarray, durations_s: np.ndarray, compute_slowdown: np.ndarray,
                     comm_slowdown: np.ndarray) -> list[EngineResult]:
    """``run_cached`` of single-rank runs of one program and family, one per row of
    ``durations_s`` and of the slowdowns (runs x kinds each: an op's are its kind's,
    ``kind_of_op``), replayed together (``laddersim.engine.tree_batch.replay_kinds``: one walk of
    the program's tree for all of them). Where runs leave the kept orders the engine runs the first
    of them, its order joins the tree, and the rest are replayed again. A run asked for twice (a
    static KV cache's decode steps, a point whose what-ifs change nothing it runs) is done once;
    results are bit for bit the engine's."""
    key = _program_key([RankWork(streams, deps, ())], group_links) + (family,)
    rows = np.ascontiguousarray(np.concatenate([durations_s, compute_slowdown, comm_slowdown], axis=1), dtype=float)
    firsts: dict[bytes, int] = {}
    same = [firsts.setdefault(row.tobytes(), i) for i, row in enumerate(rows)]
    unique = list(firsts.values())
    columns = [np.ascontiguousarray(np.asarray(m, dtype=float)[unique].T)
               for m in (durations_s, compute_slowdown, comm_slowdown)]
    done = dict(zip(unique, _replay_or_run(key, streams, deps, group_links, kind_of_op, *columns)))
    return [done[i] for i in same]


def _replay_or_run(key: tuple, streams, deps, group_links, kind_of_op: np.ndarray, durations: np.ndarray,
                   compute: np.ndarray, comm: np.ndarray) -> list[EngineResult]:
    """Single-rank runs of one program and family (``key``), the columns of ``durations`` and
    the slowdowns (kinds x runs), replayed along its tree together; those that leave it: the
    engine for the first, its order kept, the others replayed again."""
    from laddersim.engine.tree_batch import replay_kinds  # (many runs at once: sweeps, not one simulation)

    n_runs = durations.shape[1]
    results: list[EngineResult | None] = [None] * n_runs
    todo = list(range(n_runs))
    while todo:
        tree = _trees.get(key)
        if tree is not None:
            _trees.move_to_end(key)
            for i, result in zip(todo, replay_kinds(tree, kind_of_op, durations[:, todo], compute[:, todo],
                                                    comm[:, todo])):
                results[i] = result
            todo = [i for i in todo if results[i] is None]
            if not todo:
                break
        first, todo = todo[0], todo[1:]
        row = durations[kind_of_op, first]  # (each op its kind's seconds)
        results[first] = _run_and_keep(key, [RankWork(streams, deps, row)], row[None], compute[kind_of_op, first],
                                       comm[kind_of_op, first], group_links)
    return results


def _run_and_keep(key, ranks, durations, compute_slowdown, comm_slowdown, group_links) -> EngineResult:
    """The engine, its order joining the program's tree."""
    result = run_direct(ranks, compute_slowdown, comm_slowdown, group_links, record_tape=True)
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
