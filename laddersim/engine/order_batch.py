"""Many runs of one program replayed along its event-order tree at once, in numpy.

``OrderTree.replay`` walks the tree for one run with Python floats; here the runs of a batch walk
it together, each number a column of arrays: the same floating-point operations, elementwise, so
every run's spans are bit for bit what the scalar replay (and the engine) gives. At a completion
the runs whose outcome differs from the first child's continue on the child of their own
outcome (a group of their own), or stop where the tree has none (None: the caller runs the
engine). Per run the work is a few array operations per completion shared by the whole batch,
so a batch of a few dozen runs costs little more than one.
"""

from __future__ import annotations

import numpy as np

from laddersim.engine.fluid import EPS_S
from laddersim.engine.order_tree import OrderTree, _Node
from laddersim.engine.simulator import EngineResult


class _Group:
    """Runs at one node of the tree: their columns in the walk, each running activity's remaining
    work (a row per activity, in start order), the clock readings so far, and (one rank) the
    durations by op."""

    def __init__(self, node: _Node, cols: np.ndarray, remaining: np.ndarray, now: np.ndarray,
                 times: list[np.ndarray], durations_s: np.ndarray):
        self.node, self.cols, self.remaining, self.now, self.times = node, cols, remaining, now, times
        self.by_op = durations_s[cols, 0, :].T.copy() if durations_s.shape[1] == 1 else None
        self.rates: dict[int, np.ndarray] = {}  # rate class -> (activities, runs of this group)

    def part(self, child: _Node, keep: np.ndarray, finished: tuple, durations_s: np.ndarray) -> "_Group":
        """The runs ``keep`` (a mask over the columns) after they completed ``finished``: at ``child``."""
        rows = [i for i, s in enumerate(self.node.serials) if s not in finished]
        now = self.now[keep]
        return _Group(child, self.cols[keep], self.remaining[rows][:, keep], now,
                      [t[keep] for t in self.times] + [now], durations_s)


def _arrays(node: _Node, one_rank: bool) -> tuple:
    """What a batch needs of ``node``: the ops it starts (one rank), which running activities its
    first child's outcome completes (a column) and the rows of those that go on."""
    if node.batch is None:
        ops = np.array([op for op, *_ in node.starts], dtype=np.intp) if one_rank else None
        completed = node.outcome[0] if node.outcome is not None else ()
        expected = np.array([s in completed for s in node.serials], dtype=bool)
        node.batch = (ops, expected[:, None], np.flatnonzero(~expected), bool(node.outcome and node.outcome[1]))
    return node.batch


def replay_many(tree: OrderTree, durations_s: np.ndarray, compute_by_op: np.ndarray,
                comm_by_op: np.ndarray) -> list[EngineResult | None]:
    """Replay runs (``durations_s``: runs x ranks x ops; slowdowns: runs x ops) along ``tree``:
    each run's result, or None where it leaves the kept orders."""
    results: list[EngineResult | None] = [None] * len(durations_s)
    if tree.root.starts is None or durations_s.shape[1:] != (tree.n_ranks, tree.n_ops):
        return results
    partitions: dict[int, tuple] = {}  # runs with one partition of the ops by slowdowns share rate classes
    for run in range(len(durations_s)):
        classes = tree._rate_class_of(compute_by_op[run], comm_by_op[run])
        partitions.setdefault(id(classes[0]), (classes, []))[1].append(run)
    for (class_of_set, representative), runs in partitions.values():
        cols = np.array(runs)
        _walk(tree, durations_s[cols], compute_by_op[cols], comm_by_op[cols], class_of_set, representative,
              cols, results)
    return results


def _walk(tree: OrderTree, durations_s, compute_by_op, comm_by_op, class_of_set, representative, runs,
          results) -> None:
    n = len(runs)
    one_rank = tree.n_ranks == 1
    slowdowns = [(compute_by_op[j].tolist(), comm_by_op[j].tolist()) for j in range(n)]
    rates_by_class: dict[int, np.ndarray] = {}  # (activities, runs) of every run of the walk

    def rates_of(g: _Group, rate_class: int) -> np.ndarray:
        rates = g.rates.get(rate_class)
        if rates is None:
            if rate_class not in rates_by_class:
                rates_by_class[rate_class] = np.array(
                    [tree._rates_of(representative[rate_class], *slowdowns[j]) for j in range(n)]).T
            rates = g.rates[rate_class] = rates_by_class[rate_class][:, g.cols]
        return rates

    zero = np.zeros(n)
    groups = [_Group(tree.root, np.arange(n), np.empty((0, n)), zero, [zero], durations_s)]
    while groups:
        g = groups.pop()
        node = g.node
        while True:
            ops, expected, going_on, expected_same = _arrays(node, one_rank)
            if node.starts:
                if one_rank:
                    started = g.by_op[ops]
                else:
                    started = np.array([durations_s[g.cols, ranks[0], op] if len(ranks) == 1 or not is_comm
                                        else durations_s[g.cols][:, list(ranks), op].max(axis=1)
                                        for op, ranks, _links, is_comm in node.starts])
                g.remaining = np.concatenate((g.remaining, started))
            if node.end is not None:
                _finish(node, g, runs, results)
                break
            if not node.serials:
                break  # (a tape cannot complete with nothing running)
            rates = rates_of(g, class_of_set[node.running_id])
            ratio = np.maximum(g.remaining, 0.0) / rates
            later = g.now + (ratio[0] if len(ratio) == 1 else ratio.min(axis=0))
            same_time = later == g.now
            dt = later - g.now  # 0 where at the same reading: the update below then changes nothing
            g.now = later
            g.remaining = g.remaining - rates * dt
            finished = g.remaining <= (EPS_S + 8.0 * np.spacing(later)) * rates
            if (finished != expected).any() or (same_time != expected_same).any():
                held = (finished == expected).all(axis=0) & (same_time == expected_same)
                _branch(node, g, finished, same_time, ~held, groups, durations_s)
                if not held.any():
                    break
                g.node = node  # the runs that follow the first child go on here
                g = _Group(node, g.cols[held], g.remaining[:, held], g.now[held], [t[held] for t in g.times],
                           durations_s)
            g.remaining = g.remaining[going_on]
            g.times.append(g.now)
            node = g.node = node.child


def _branch(node: _Node, g: _Group, finished: np.ndarray, same_time: np.ndarray, other: np.ndarray,
            groups: list, durations_s: np.ndarray) -> None:
    """Runs whose outcome at ``node`` is not its first child's: a group per other outcome kept."""
    outcomes: dict[tuple, list[int]] = {}
    for j in np.flatnonzero(other).tolist():
        done = tuple(s for s, f in zip(node.serials, finished[:, j].tolist()) if f)
        outcomes.setdefault((done, bool(same_time[j])), []).append(j)
    for outcome, cols in outcomes.items():
        child = node.more.get(outcome) if node.more else None
        if child is not None:
            keep = np.zeros(len(g.cols), dtype=bool)
            keep[cols] = True
            groups.append(g.part(child, keep, outcome[0], durations_s))
def _finish(node: _Node, g: _Group, runs: np.ndarray, results: list) -> None:
    moments, signature, events = node.end
    at = np.stack(g.times)  # (completions + 1, runs)
    for j, col in enumerate(g.cols.tolist()):
        times = at[:, j]
        results[int(runs[col])] = EngineResult(times[moments[1]], times[moments[2]], times[moments[0]], signature,
                                               events, None)
