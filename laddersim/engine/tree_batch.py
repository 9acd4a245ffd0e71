"""Many runs of one single-rank program replayed along its event-order tree at once.

``OrderTree.replay`` walks the tree for one run, doing the engine's arithmetic in Python floats.
Runs of one program with other durations and slowdowns (a sweep's points: other batches, machines
and bandwidths) mostly follow the same branches, so ``replay_many`` walks the tree once for all of
them: each number of ``OrderTree.replay`` becomes an array with one entry per run, and each
operation the same IEEE float64 operation elementwise (numpy's ``+ - * /`` on float64 are
Python's), so every run's readings are bit for bit those of its own replay, hence the engine's.
At a completion whose outcome (which activities finished, whether at the previous reading) differs
between runs, the runs split and each part follows its own child; runs whose outcome the tree has
never seen are declined (None): the caller runs the engine for them.

Only a single rank (the symmetric simulation) is replayed so: there one compute and one collective
run at most, and a collective's links carry only itself.

The runs' inputs are taken by op kind (``replay_kinds``): a sweep's ops of one kind share their
seconds and slowdowns, so each input is a (kinds x runs) array, a kind's row contiguous, and an
op's column of the walk is its kind's row (the same floats, never written to), instead of three
(runs x ops) arrays a thousand columns wide copied, hashed and gathered column by column.
"""

from __future__ import annotations

import numpy as np

from laddersim.engine.rates import done_tolerances_s, one_rank_rates
from laddersim.engine.order_tree import OrderTree
from laddersim.engine.work import EngineResult

FEW = 8  # runs at most that walk on one by one (numpy's cost per operation exceeds theirs)


def _rates(acts: tuple, kind_of: list, compute: np.ndarray, comm: np.ndarray) -> list:
    """Rates of a running set (start entries, in start order) of one rank, one array (a float for
    all runs; None for exactly 1.0) per activity: ``laddersim.engine.rates.one_rank_rates`` over
    the runs' slowdowns (``compute``, ``comm``: kinds x runs; ``kind_of``: each op's kind)."""
    rates = one_rank_rates([(is_comm, compute[kind_of[op]], comm[kind_of[op]], len(links)) if is_comm
                            else (False, 0.0, 0.0, 0) for op, _ranks, links, is_comm in acts])
    return [None if isinstance(rate, float) and rate == 1.0 else rate for rate in rates]


class _Runs:
    """Runs that took the same path so far: their columns of the inputs (kinds x runs), the
    remaining work of the running activities, the clock, and the readings since ``base`` (the
    readings before a split)."""

    __slots__ = ("node", "index", "durations", "compute", "comm", "remaining", "now", "base", "readings", "classes",
                 "rates")

    def __init__(self, node, index, durations, compute, comm, remaining, now, base, classes):
        self.node, self.index, self.durations = node, index, durations
        self.compute, self.comm = compute, comm
        self.remaining, self.now, self.base = remaining, now, base
        self.readings: list[np.ndarray] = []
        self.classes = classes  # (rate class of each running set, a set of each class), or None
        self.rates: dict[int, list] = {}

    def part(self, take: np.ndarray, node) -> "_Runs":
        """The runs ``take`` (a mask), continuing at ``node``."""
        base = self.times()
        return _Runs(node, self.index[take], self.durations[:, take], self.compute[:, take], self.comm[:, take],
                     [r[take] for r in self.remaining], self.now[take], base[take], self.classes)

    def rates_of(self, tree: OrderTree, running_id: int, kind_of: list) -> list:
        """The rates of a running set for these runs; sets of one rate class share them."""
        key, shown = running_id, running_id
        if self.classes is not None:
            key = self.classes[0][running_id]
            shown = self.classes[1][key]
        rates = self.rates.get(key)
        if rates is None:
            rates = self.rates[key] = _rates(tree.running_sets[shown], kind_of, self.compute, self.comm)
        return rates

    def times(self) -> np.ndarray:
        """(runs, readings): every clock reading of each run, from 0 (``readings``: one per run,
        or a block of several per run)."""
        if not self.readings:
            return self.base
        return np.concatenate([self.base, *(r if r.ndim == 2 else r[:, None] for r in self.readings)], axis=1)


def replay_many(tree: OrderTree, durations_s: np.ndarray, compute_by_op: np.ndarray,
                comm_by_op: np.ndarray) -> list[EngineResult | None]:
    """The engine's result for each run (row) of ``durations_s`` (runs x ops, one rank) and of the
    slowdowns (runs x ops each, or what broadcasts to them), or None where a run leaves the kept
    orders: ``replay_kinds`` with each op a kind of its own."""
    durations_s = np.asarray(durations_s, dtype=float)
    if durations_s.ndim != 2:
        return [None] * len(durations_s)
    shape = durations_s.shape
    compute = np.broadcast_to(np.asarray(compute_by_op, dtype=float), shape)
    comm = np.broadcast_to(np.asarray(comm_by_op, dtype=float), shape)
    return replay_kinds(tree, np.arange(shape[1]), durations_s.T, compute.T, comm.T)


def replay_kinds(tree: OrderTree, kind_of_op, durations_s: np.ndarray, compute: np.ndarray,
                 comm: np.ndarray) -> list[EngineResult | None]:
    """The engine's result for each run (column) of ``durations_s`` (kinds x runs: seconds of an op
    of each kind, one rank) and of the slowdowns (kinds x runs each), each op of the program its
    kind's (``kind_of_op``), or None where a run leaves the kept orders. A result keeps its run's
    clock readings and the leaf's moments (``EngineResult.at_moments``); the runs of one leaf share
    its moments, so ``laddersim.simulation.results.step_metrics_many`` reads them together."""
    kind_of = [int(k) for k in kind_of_op]
    durations_s = np.ascontiguousarray(durations_s, dtype=float)
    n_runs = durations_s.shape[1] if durations_s.ndim == 2 else 0
    results: list[EngineResult | None] = [None] * n_runs
    if tree.n_ranks != 1 or len(kind_of) != tree.n_ops or tree.root.starts is None or not n_runs:
        return results
    compute = np.ascontiguousarray(np.broadcast_to(np.asarray(compute, dtype=float), durations_s.shape))
    comm = np.ascontiguousarray(np.broadcast_to(np.asarray(comm, dtype=float), durations_s.shape))
    pending = [_Runs(tree.root, np.arange(n_runs), durations_s, compute, comm, [], np.zeros(n_runs),
                     np.zeros((n_runs, 1)), _rate_classes(tree, kind_of, compute, comm))]
    while pending:
        runs = pending.pop()
        if len(runs.index) <= FEW:
            _follow_each(tree, runs, kind_of, results)
            continue
        for done in _walk(tree, runs, kind_of, pending):
            moments, signature, events = done.node.end
            times = done.times()
            for row, i in enumerate(done.index.tolist()):
                results[i] = EngineResult.at_moments(times[row], moments, signature, events)
    return results


def _rate_classes(tree: OrderTree, kind_of: list, compute: np.ndarray, comm: np.ndarray) -> tuple | None:
    """The tree's rate classes of the running sets (``OrderTree.rate_class_of``) where every run
    partitions the ops alike (ops with equal slowdowns in the first run have equal slowdowns in
    every run: a sweep's runs, whose slowdowns are per op kind); else None. The ops of a kind have
    their kind's slowdowns in every run, so kinds stand for the ops."""
    _, first, inverse = np.unique(compute[:, 0] + 1j * comm[:, 0], return_index=True, return_inverse=True)
    same = first[inverse]  # each kind's first kind of equal slowdowns
    if not (np.array_equal(compute, compute[same]) and np.array_equal(comm, comm[same])):
        return None
    return tree.rate_class_of(compute[kind_of, 0], comm[kind_of, 0])


def _follow_each(tree: OrderTree, runs: _Runs, kind_of: list, results: list) -> None:
    """A few runs: each walked on alone in Python floats (``OrderTree.follow``, the same
    arithmetic), cheaper than arrays of a few entries."""
    times = runs.times()
    for j, i in enumerate(runs.index.tolist()):
        by_kind = runs.durations[:, j].tolist()
        end = tree.follow(runs.node, [float(r[j]) for r in runs.remaining], times[j].tolist(),
                          [[by_kind[k] for k in kind_of]],
                          tree.rates_for(runs.compute[kind_of, j], runs.comm[kind_of, j]))
        if end is not None:
            node, readings = end
            moments, signature, events = node.end
            results[i] = EngineResult.at_moments(np.array(readings), moments, signature, events)


def _walk(tree: OrderTree, runs: _Runs, kind_of: list, pending: list) -> list[_Runs]:
    """Follow ``runs`` down the tree until they end (returned), split (parts put on ``pending``)
    or leave it (dropped: their results stay None)."""
    node, remaining, now = runs.node, runs.remaining, runs.now
    durations, readings = runs.durations, runs.readings
    while True:
        if not remaining:
            node, now = _along_chain(tree, runs, kind_of, node, now)
        for op in node.ops:
            remaining.append(durations[kind_of[op]])  # (a kind's row, shared: never written to)
        if node.end is not None:
            runs.node, runs.remaining, runs.now = node, remaining, now
            return [runs]
        rates = runs.rates_of(tree, node.running_id, kind_of)
        # OrderTree.replay's arithmetic: later = now + min(max(r, 0) / q) (the first smallest),
        # r -= q * (later - now) (a no-op where that is 0), done where r <= tolerance(later) * q.
        # A rate of exactly 1.0 (None here) is left out of the products: x * 1.0 and x / 1.0 are x.
        delay = None
        for r, q in zip(remaining, rates):
            d = np.maximum(r, 0.0)
            if q is not None:
                d = d / q
            delay = d if delay is None else np.where(d < delay, d, delay)
        if delay is None:
            return []  # (a tape cannot complete with nothing running)
        later = now + delay
        dt = later - now
        remaining = [r - dt if q is None else r - q * dt for r, q in zip(remaining, rates)]
        now = later
        tolerance = done_tolerances_s(now)
        # The outcome of each run: bit i where the i-th running activity is done, and a last bit
        # where at the previous reading. Usually every run has the same one: known from each
        # condition's all() and any(), without the codes of the runs.
        flags = [r <= (tolerance if q is None else tolerance * q) for r, q in zip(remaining, rates)]
        flags.append(dt == 0.0)
        first = 0
        for i, flag in enumerate(flags):
            if flag.all():
                first |= 1 << i
            elif flag.any():
                first = -1
                break
        if first >= 0:
            child = _child(node, first, len(remaining))
            if child is None:
                return []
            readings.append(now)
            remaining = [r for i, r in enumerate(remaining) if not first >> i & 1]
            node = child
            continue
        # The runs part ways here: each outcome's runs continue on its own (from the next node).
        code = np.zeros(len(now), dtype=np.int64)
        for i, flag in enumerate(flags):
            code |= flag.astype(np.int64) << i
        runs.remaining, runs.now = remaining, now
        readings.append(now)
        for value in np.unique(code).tolist():
            child = _child(node, value, len(remaining))
            if child is None:
                continue
            part = runs.part(code == value, child)
            part.remaining = [r for i, r in enumerate(part.remaining) if not value >> i & 1]
            pending.append(part)
        return []


def _along_chain(tree: OrderTree, runs: _Runs, kind_of: list, node, now: np.ndarray):
    """Where nothing runs: the nodes on from ``node`` that each start one activity and complete
    it, with one child (a standard schedule's pass, one op at a time), all at once. There the
    activity runs alone at rate 1 and the walk's arithmetic is ``later = now + max(d, 0)`` and
    ``r = d - (later - now)``: the readings are a cumulative sum (numpy's adds in order, as the walk
    does), and each node's outcome (done, at the previous reading or not) is checked for every run
    at once. Returns the node and readings where the walk goes on one node at a time."""
    chain = []
    while (node.end is None and len(node.ops) == 1 and len(node.serials) == 1 and not node.more
           and node.child is not None and node.outcome[0] == node.serials
           and runs.rates_of(tree, node.running_id, kind_of) == [None]):
        chain.append(node)
        node = node.child
    if len(chain) < 2:
        return chain[0] if chain else node, now
    ops = [n.ops[0] for n in chain]
    seconds = np.take(runs.durations, [kind_of[op] for op in ops], axis=0).T  # (runs x nodes)
    readings = np.cumsum(np.concatenate([now[:, None], np.maximum(seconds, 0.0)], axis=1), axis=1)
    dt = np.diff(readings, axis=1)
    done = seconds - dt <= done_tolerances_s(readings[:, 1:])
    same = done & ((dt == 0.0) == np.array([n.outcome[1] for n in chain]))
    agreed = len(chain) if same.all() else int(np.argmin(same.all(axis=0)))  # nodes every run agrees with
    if agreed:
        runs.readings.append(readings[:, 1:agreed + 1])
        now = readings[:, agreed]
    return chain[agreed] if agreed < len(chain) else node, now


def _child(node, code: int, n_running: int):
    """The child of the outcome ``code`` encodes (bit i: the i-th running activity finished; bit
    ``n_running``: at the previous reading), or None where the tree has not seen it."""
    serials = node.serials
    outcome = (tuple(s for i, s in enumerate(serials) if code >> i & 1), bool(code >> n_running & 1))
    if node.outcome == outcome:
        return node.child
    return node.more.get(outcome) if node.more else None
