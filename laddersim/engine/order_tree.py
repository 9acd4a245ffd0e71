"""The event orders of one program, kept as a tree; a run replayed along it without SimPy.

A ``Tape`` (``laddersim.engine.tape``) is one run's event order: the starts, and at each
completion its outcome (which activities finished, and whether at the previous completion's clock
reading). Everything the engine does up to a completion depends on the durations only through the
outcomes before it, so runs of one program whose outcomes agree up to a completion have started
the same activities by then and hold the same state: their tapes share that prefix. The tree
keeps each prefix once. A node is the stretch between two completions: the activities started
there, then a completion, whose outcome picks the child. A replay walks from the root, doing the
engine's arithmetic (the same floating-point operations in the same order as ``laddersim.engine.rates``
and the engine's fluid) and following at each completion the child of the outcome it computed; so a run
whose order is a branch never taken before still replays up to the point where it leaves the
tree, and one that follows any kept branch replays whole, bit for bit the engine's result. Where
it leaves the tree it returns None: the caller runs the engine and inserts the new tape.

Rates at a completion depend only on the running activities (which the node fixes) and on the
slowdowns of the running collectives: a replay computes them once per distinct combination. The
running sets are numbered; for each partition of the ops by equal slowdowns (a sweep's points
share one: the ops of a kind share their slowdowns) the tree keeps which sets have equal rates.
"""

from __future__ import annotations

import numpy as np

from laddersim.engine.rates import done_tolerance_s, one_rank_rates, running_rates
from laddersim.engine.tape import Tape
from laddersim.engine.work import EngineResult


class _Node:
    """Starts since the previous completion, then (unless ``end``) a completion: the running
    set's number, and the child of each outcome seen (the first one apart, most nodes have one)."""

    __slots__ = ("starts", "ops", "running_id", "serials", "outcome", "child", "more", "end")

    def __init__(self):
        self.starts: tuple | None = None  # (op, ranks, links, is_comm) each; None until filled
        self.ops: tuple = ()  # the ops of the starts
        self.running_id = -1
        self.serials: tuple = ()  # of the running activities at the completion, in start order
        self.outcome: tuple | None = None  # (serials completed, at the previous clock reading)
        self.child: _Node | None = None
        self.more: dict | None = None  # further outcomes -> child
        self.end: tuple | None = None  # (moments, signature, events) where nothing runs any more


class OrderTree:
    """The kept event orders of one program (one shape of durations: ranks x ops)."""

    def __init__(self, n_ranks: int, n_ops: int):
        self.n_ranks, self.n_ops = n_ranks, n_ops
        self.root = _Node()
        self.nodes = 1
        self.running_sets: list[tuple] = []  # each: the running activities' start entries, in start order
        self._running_ids: dict[tuple, int] = {}
        self._rate_classes: dict[bytes, tuple[dict, list, list]] = {}  # see rate_class_of

    def rate_class_of(self, compute_by_op: np.ndarray, comm_by_op: np.ndarray) -> tuple[list, list]:
        """For these slowdowns: each running set's rate class (sets with equal rates share one),
        and a running set of each class."""
        # (compute, comm) as one complex number: equal pairs, equal numbers (a sort of pairs is slower)
        _, op_class = np.unique(compute_by_op + 1j * comm_by_op, return_inverse=True)
        key = op_class.astype(np.int64).tobytes()
        if key not in self._rate_classes:
            if len(self._rate_classes) >= 16:
                self._rate_classes.clear()
            self._rate_classes[key] = ({}, [], [])
        ids, class_of_set, representative = self._rate_classes[key]
        classes = op_class.tolist()
        for running_id in range(len(class_of_set), len(self.running_sets)):  # sets added since
            shape = tuple((ranks, links, classes[op]) if is_comm else (ranks, links, -1)
                          for op, ranks, links, is_comm in self.running_sets[running_id])
            if shape not in ids:
                ids[shape] = len(representative)
                representative.append(running_id)
            class_of_set.append(ids[shape])
        return class_of_set, representative

    @classmethod
    def of(cls, tape: Tape) -> "OrderTree":
        tree = cls(tape.n_ranks, tape.n_ops)
        tree.insert(tape)
        return tree

    def insert(self, tape: Tape) -> None:
        """Add a run's order (a prefix it shares with kept orders is kept once)."""
        node = self.root
        running: list[tuple] = []  # (serial, start entry) of the running activities
        starts: list[tuple] = []
        serial = 0
        for entry in tape.entries:
            if len(entry) == 4:
                running.append((serial, entry))
                starts.append(entry)
                serial += 1
                continue
            self._fill(node, tuple(starts), running)
            starts = []
            finished = set(entry[0])
            running = [(s, e) for s, e in running if s not in finished]
            node = self._child(node, entry)
        self._fill(node, tuple(starts), running)
        node.end = (tape.moments, tape.signature, tape.events)

    def _fill(self, node: _Node, starts: tuple, running: list) -> None:
        if node.starts is None:
            node.starts = starts
            node.ops = tuple(entry[0] for entry in starts)
            node.serials = tuple(s for s, _ in running)
            key = tuple(e for _, e in running)
            node.running_id = self._running_ids.setdefault(key, len(self.running_sets))
            if node.running_id == len(self.running_sets):
                self.running_sets.append(key)
        elif node.starts != starts:
            raise RuntimeError("event-order tree: a shared prefix started different activities")

    def _child(self, node: _Node, outcome: tuple) -> _Node:
        if node.outcome == outcome:
            return node.child
        if node.more and outcome in node.more:
            return node.more[outcome]
        child = _Node()
        self.nodes += 1
        if node.outcome is None:
            node.outcome, node.child = outcome, child
        else:
            node.more = node.more or {}
            node.more[outcome] = child
        return child

    def _rates_of(self, running_id: int, compute_by_op: list, comm_by_op: list) -> list[float]:
        """Rates of a running set (in start order), by ``laddersim.engine.rates``."""
        running = self.running_sets[running_id]
        if self.n_ranks == 1:  # one rank (one group, one set of links): no bookkeeping of who is where
            return one_rank_rates([(is_comm, compute_by_op[op] if is_comm else 0.0, comm_by_op[op] if is_comm else 0.0,
                                    len(links)) for op, _ranks, links, is_comm in running])
        return running_rates([(is_comm, ranks, links, compute_by_op[op] if is_comm else 0.0,
                               comm_by_op[op] if is_comm else 0.0) for op, ranks, links, is_comm in running])

    def replay(self, durations_s: np.ndarray, compute_slowdown, comm_slowdown) -> EngineResult | None:
        """The engine's result for ``durations_s`` (ranks x ops) and slowdowns (a number or one
        per op), or None where the run leaves the kept orders (or the tree holds none)."""
        durations_s = np.asarray(durations_s, dtype=float)
        if durations_s.shape != (self.n_ranks, self.n_ops) or self.root.starts is None:
            return None
        end = self.follow(self.root, [], [0.0], durations_s.tolist(), self.rates_for(compute_slowdown, comm_slowdown))
        if end is None:
            return None
        node, times = end
        moments, signature, events = node.end
        at = np.array(times)
        return EngineResult(at[moments[1]], at[moments[2]], at[moments[0]], signature, events, None)

    def rates_for(self, compute_slowdown, comm_slowdown):
        """``rates_of(running_id)`` for these slowdowns (a number or one per op): the rates of a
        running set, computed once per rate class."""
        compute_by_op = np.broadcast_to(np.asarray(compute_slowdown, dtype=float), (self.n_ops,))
        comm_by_op = np.broadcast_to(np.asarray(comm_slowdown, dtype=float), (self.n_ops,))
        class_of_set, representative = self.rate_class_of(compute_by_op, comm_by_op)
        compute_by_op, comm_by_op = compute_by_op.tolist(), comm_by_op.tolist()
        rates_by_class: list = [None] * len(representative)

        def rates_of(running_id: int) -> list[float]:
            rate_class = class_of_set[running_id]
            rates = rates_by_class[rate_class]
            if rates is None:
                rates = rates_by_class[rate_class] = self._rates_of(representative[rate_class], compute_by_op,
                                                                    comm_by_op)
            return rates
        return rates_of

    def follow(self, node: _Node, remaining: list[float], times: list[float], rows: list[list[float]],
               rates_of) -> tuple[_Node, list[float]] | None:
        """Walk one run from ``node`` (its running activities' ``remaining`` work, in start order,
        and its clock ``times`` so far): the engine's arithmetic at each completion, the child of
        the outcome it gives. ``rows``: seconds per rank and op; ``rates_of(running_id)``: the rates
        of a running set, in start order. The leaf and every reading, or None where the run leaves
        the kept orders."""
        row = rows[0] if self.n_ranks == 1 else None
        tolerance_of = done_tolerance_s  # the engine's own rule (fluid), bound locally
        now = times[-1]
        while True:
            if row is not None:
                for op in node.ops:
                    remaining.append(row[op])
            else:
                for op, ranks, _links, is_comm in node.starts:
                    if is_comm and len(ranks) > 1:
                        remaining.append(max(rows[r][op] for r in ranks))
                    else:
                        remaining.append(rows[ranks[0]][op])
            if node.end is not None:
                return node, times
            rates = rates_of(node.running_id)
            # the fluid's arithmetic, spelled out for one and two running activities (the usual cases):
            # max(r, 0.0) is ``0.0 if 0.0 > r else r`` and min([a, b]) is ``b if b < a else a``.
            serials = node.serials
            if len(remaining) == 1:
                r, = remaining
                q, = rates
                later = now + (0.0 if 0.0 > r else r) / q
                dt = later - now
                if dt > 0.0:
                    r = r - q * dt
                now = later
                if r <= tolerance_of(now) * q:
                    finished, remaining = serials, []
                else:
                    finished, remaining = (), [r]
            elif len(remaining) == 2:
                r0, r1 = remaining
                q0, q1 = rates
                d0, d1 = (0.0 if 0.0 > r0 else r0) / q0, (0.0 if 0.0 > r1 else r1) / q1
                later = now + (d1 if d1 < d0 else d0)
                dt = later - now
                if dt > 0.0:
                    r0, r1 = r0 - q0 * dt, r1 - q1 * dt
                now = later
                tolerance = tolerance_of(now)
                f0, f1 = r0 <= tolerance * q0, r1 <= tolerance * q1
                if f0:
                    finished, remaining = (serials if f1 else serials[:1]), ([] if f1 else [r1])
                else:
                    finished, remaining = (serials[1:] if f1 else ()), ([r0] if f1 else [r0, r1])
            elif not remaining:
                return None  # (a tape cannot complete with nothing running)
            else:
                later = now + min([max(r, 0.0) / q for r, q in zip(remaining, rates)])
                dt = later - now
                if dt > 0.0:
                    remaining = [r - q * dt for r, q in zip(remaining, rates)]
                now = later
                tolerance = tolerance_of(now)
                done = [r <= tolerance * q for r, q in zip(remaining, rates)]
                finished = tuple([s for s, d in zip(serials, done) if d])
                remaining = [r for r, d in zip(remaining, done) if not d]
            outcome = (finished, dt == 0.0)  # dt is 0 exactly where later == now
            if node.outcome == outcome:
                node = node.child
            else:
                node = node.more.get(outcome) if node.more else None
                if node is None:
                    return None
            times.append(now)
