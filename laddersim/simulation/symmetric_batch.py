"""Symmetric simulations of many scenarios at once: the sweep's fast path.

Without jitter ``laddersim.simulation.passes.pass_simulation`` simulates one rank (rank symmetry): the prefill
and the first and last decode steps, then the steps between by interpolation where the two took
the same order of events and every step's durations lie on the line joining theirs (else it
bisects). ``simulate_symmetric`` does the same for many scenarios together:

* their op costs in parts (``laddersim.costs.op_costs.op_times_parts_s``): the kinds but the
  collectives are one shared table per machine, model, workload and TP, whatever the interconnect
  what-ifs, so whether a scenario's steps lie on a line is decided once per table (the collectives
  are the same at every step: on any line);
* every run of every scenario in one call (``laddersim.engine.entry.run_by_kind``: the runs
  of one program in one walk of its event-order tree), the metrics of the runs of one leaf read
  together (``laddersim.simulation.results.step_metrics_many``);
* the interpolated steps of all scenarios of one generation length as one array operation.

Each number is computed by the same float operations in the same order as ``simulation``'s, so
each result is ``simulate``'s bit for bit (tests/test_fast_path.py). A scenario the first and last
steps cannot settle (it would bisect) is left to ``simulate`` (None in its place).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from laddersim.costs.memory_fit import check_fits
from laddersim.costs.op_costs import Phase, collective_message_bytes, op_times_parts_s
from laddersim.costs.rank_skew import skew_wait_per_compute
from laddersim.engine.entry import run_by_kind
from laddersim.model.framework import load_framework
from laddersim.support.memo import IdentityMemo
from laddersim.simulation.results import METRICS, step_metrics_many, summary_or_error
from laddersim.schedules.plan import parse_schedule
from laddersim.simulation.compiled_program import compile_program
from laddersim.simulation.engine_inputs import collective_slowdowns, group_links, slowdown_pairs
from laddersim.simulation.results import SimResult
from laddersim.simulation.scenario import Scenario

# Per shared decode table and program kinds: (largest distance of a step from the line joining
# the first and the last, largest magnitude), as simulate's _affine_between computes them.
_lines = IdentityMemo(256)


class _Point:
    """One scenario, prepared as ``simulation`` prepares it, up to its engine runs."""

    __slots__ = ("index", "scenario", "nodes", "memory", "program", "masks", "streams", "deps", "kind_of_op", "links",
                 "passes", "n_steps", "kinds", "decode_shared", "decode_collectives", "results", "metrics")


def simulate_symmetric(scenarios: Sequence[Scenario], summaries: bool = False) -> list:
    """``simulate(scenario)`` (default options) of each scenario: its SimResult (``summaries``:
    its ``summary()``), the exception its checks raise, or None where ``simulate`` must do it (its
    decode would bisect)."""
    out: list[SimResult | Exception | None] = [None] * len(scenarios)
    points: list[_Point] = []
    for i, scenario in enumerate(scenarios):
        try:
            point = _prepare(i, scenario)
        except Exception as exc:  # noqa: BLE001 - the scenario's own error, as simulate raises it
            out[i] = exc
            continue
        if point is not None:
            points.append(point)
    _run_all(points)
    _read_metrics(points)
    by_length: dict[int, list[_Point]] = {}
    for p in points:
        if _settled(p):
            by_length.setdefault(p.n_steps, []).append(p)
    for n_steps, group in by_length.items():
        for p, result in zip(group, _finish(group, n_steps, summaries)):
            out[p.index] = result
    return out


class _Costs:
    """A scenario's op costs and interference by kind (the same for every schedule)."""

    __slots__ = ("prefill", "prefill_slowdowns", "decode_shared", "decode_collectives", "decode_slowdowns",
                 "decode_ends", "passes")


def _costs(model, hw, work, tp: int, n_steps: int) -> _Costs:
    """``simulation``'s op costs (``op_times_s`` in parts) and interference by kind."""
    c = _Costs()
    c.passes = {}  # by program kinds: the passes (_passes)

    def interference(phase: Phase) -> dict[str, tuple[float, float]]:
        return collective_slowdowns(hw, tp, collective_message_bytes(model, work, tp, phase), work)

    prefill_phase = Phase("prefill", work.batch, work.prompt_len)
    _, shared, collectives = op_times_parts_s(model, hw, work, tp, prefill_phase, np.array([work.prompt_len]))
    c.prefill = {**{k: float(v[0]) for k, v in shared.items()}, **collectives}
    c.prefill_slowdowns = interference(prefill_phase)
    c.decode_shared, c.decode_collectives, c.decode_slowdowns, c.decode_ends = {}, {}, {}, ()
    if n_steps:
        kv_lens = np.broadcast_to(work.kv_len_at_decode_step(np.arange(n_steps)), (n_steps,))
        decode_phase = Phase("decode", work.batch, 1)
        c.decode_slowdowns = interference(decode_phase)
        _, c.decode_shared, c.decode_collectives = op_times_parts_s(model, hw, work, tp, decode_phase, kv_lens)
        # The first and the last step's seconds per kind (the anchors simulated).
        c.decode_ends = tuple({**{k: float(v[step]) for k, v in c.decode_shared.items()}, **c.decode_collectives}
                              for step in (0, n_steps - 1))
    return c


class _Checked:
    """What ``simulation``'s checks of a scenario find, whatever the schedule: the TP check's
    error or the nodes, the memory check's error or the memory, the rank skew's error or value."""

    __slots__ = ("tp_error", "nodes", "memory_error", "memory", "skew_error", "skew")

    def __init__(self, model, hw, work, tp: int):
        self.tp_error = self.memory_error = self.skew_error = self.nodes = self.memory = self.skew = None
        try:
            model.check_tp(tp)
            self.nodes = hw.nodes_for(tp)
        except Exception as exc:  # noqa: BLE001 - raised for each scenario as simulation raises it
            self.tp_error = exc
            return
        try:
            self.memory = check_fits(model, hw, work, tp)
        except Exception as exc:  # noqa: BLE001
            self.memory_error = exc
            return
        try:
            self.skew = skew_wait_per_compute(hw, tp)
        except Exception as exc:  # noqa: BLE001
            self.skew_error = exc


def _raise(exc: Exception):
    raise exc.with_traceback(None)  # (one exception raised for many scenarios: no growing traceback)


# The checks and costs of recent scenarios, by profile, framework, model, workload and TP (a
# sweep's schedules share them).
_kept_checks = IdentityMemo(16384)
_kept_costs = IdentityMemo(16384)


def _prepare(index: int, scenario: Scenario) -> _Point | None:
    """``simulation``'s checks (raising as it does, in its order), costs and passes of one
    scenario; None where its collectives wait for the slowest rank (a profile's rank skew) or it
    is a pipeline or data-parallel attention: left to ``simulate``."""
    if scenario.pp > 1 or scenario.microbatches > 1 or scenario.layout is not None:
        return None
    model, hw, work, tp = scenario.model, scenario.hardware, scenario.workload, scenario.tp
    fw = load_framework(work.framework)
    checked = _kept_checks.get((hw, fw, model, work), (tp,), lambda: _Checked(model, hw, work, tp))
    if checked.tp_error is not None:
        _raise(checked.tp_error)
    parse_schedule(scenario.schedule, model.n_layers)
    if checked.memory_error is not None:
        _raise(checked.memory_error)
    p = _Point()
    p.index, p.scenario, p.nodes, p.memory = index, scenario, checked.nodes, checked.memory
    compiled = compile_program(scenario.schedule, model.n_layers, tp, mlp_layout=model.mlp_layout())
    p.program, p.masks, p.streams, p.deps, p.kinds = (compiled.program, compiled.masks, compiled.streams, compiled.deps,
                                                      compiled.kind_names)
    if checked.skew_error is not None:
        _raise(checked.skew_error)
    if checked.skew:
        return None  # a collective waits for the slowest rank (rank_skew): left to simulate
    p.links = group_links(tuple(range(p.nodes)))
    p.n_steps = work.gen_len - 1
    costs = _kept_costs.get((hw, fw, model, work), (tp,), lambda: _costs(model, hw, work, tp, p.n_steps))
    p.decode_shared, p.decode_collectives = costs.decode_shared, costs.decode_collectives
    p.kind_of_op = compiled.kind_of_op
    # The passes to simulate: (family, seconds per kind, the costs its slowdowns come from). The
    # last decode step is asked for only where it is not the first (by_kind rows of simulation).
    p.passes = costs.passes.get(p.kinds) or costs.passes.setdefault(p.kinds, _passes(costs, p.kinds, p.n_steps))
    return p


def _passes(costs: "_Costs", kinds: tuple[str, ...], n_steps: int) -> list:
    """A scenario's passes for a program of these kinds (the same for its schedules of one kinds order)."""
    passes = [("prefill", tuple([costs.prefill[k] for k in kinds]), costs)]
    for ends in (costs.decode_ends if n_steps > 1 else costs.decode_ends[:1]):
        passes.append(("decode", tuple([ends[k] for k in kinds]), costs))
    return passes


def _run_all(points: list[_Point]) -> None:
    """Every pass of every point simulated: the passes of one program and family as rows of one
    replay (``run_by_kind``), by op kind: their op durations and slowdowns as ``simulation`` makes them
    (``op_durations`` and ``interference``, row by row at once). Passes with the same seconds and
    slowdowns per kind are the same run (a static KV cache's first and last decode steps): run once."""
    asked: dict[tuple, dict[tuple, list[tuple[_Point, int]]]] = {}
    for p in points:
        p.results = [None] * len(p.passes)
        for j, (family, per_kind, costs) in enumerate(p.passes):
            program = asked.setdefault((id(p.streams), id(p.deps), p.links[0], family), {})
            program.setdefault((id(costs), per_kind), []).append((p, j))
    for (_, _, _, family), alike in asked.items():
        first = next(iter(alike.values()))[0][0]
        kind_of_op = first.kind_of_op
        durations = np.array([per_kind for _, per_kind in alike], dtype=float)
        passes = [same[0][0].passes[same[0][1]] for same in alike.values()]
        slowed = [costs.prefill_slowdowns if family == "prefill" else costs.decode_slowdowns for _, _, costs in passes]
        pairs = np.array([slowdown_pairs(by_kind, first.kinds) for by_kind in slowed], dtype=float).reshape(len(alike), -1, 2)
        results = run_by_kind(first.streams, first.deps, first.links, family, kind_of_op, durations,
                                   pairs[:, :, 0], pairs[:, :, 1])
        for same, result in zip(alike.values(), results):
            for p, j in same:
                p.results[j] = result


def _read_metrics(points: list[_Point]) -> None:
    """Every run's metrics, the runs of one program together, each run once: points whose what-ifs
    change nothing they run, and a static KV cache's first and last decode steps, share one result
    (``_run_all``), and its metrics are a function of it."""
    by_program: dict[int, list[_Point]] = {}
    for p in points:
        by_program.setdefault(id(p.masks), []).append(p)
    for group in by_program.values():
        unique: list = []
        row_of: dict[int, int] = {}  # id(result) -> its row (each result is held by its points meanwhile)
        where = []
        for p in group:
            for r in p.results:
                row = row_of.get(id(r))
                if row is None:
                    row = row_of[id(r)] = len(unique)
                    unique.append(r)
                where.append(row)
        rows = step_metrics_many(unique, group[0].masks)[where]
        k = 0
        for p in group:
            p.metrics = rows[k:k + len(p.results)]
            k += len(p.results)


def _settled(p: _Point) -> bool:
    """Do the first and last decode steps settle every step between (simulation's test before it
    interpolates: the same order of events, durations on the line joining theirs)?"""
    if p.n_steps < 3:
        return True  # no step between them
    first, last = p.results[1], p.results[-1]
    if not (first is last or first.signature == last.signature):
        return False
    spread, scale = _lines.get((p.decode_shared,), (p.kinds, p.n_steps), lambda: _line_spread(p))
    for kind, seconds in p.decode_collectives.items():  # a constant column: on any line, its size counts
        if kind in p.kinds:
            scale = max(scale, abs(seconds))
    return bool(spread <= 1e-12 * max(scale, 1e-30))


def _line_spread(p: _Point) -> tuple[float, float]:
    """simulate's _affine_between over the shared columns: (largest distance from the line, largest
    magnitude)."""
    columns = [k for k in p.kinds if k not in p.decode_collectives]
    durations = np.stack([p.decode_shared[k] for k in columns], axis=1) if columns else np.zeros((p.n_steps, 0))
    lo, hi = 0, p.n_steps - 1
    frac = (np.arange(lo, hi + 1) - lo) / (hi - lo)
    line = durations[lo] + np.outer(frac, durations[hi] - durations[lo])
    if not columns:
        return 0.0, 0.0
    return float(np.abs(durations[lo:hi + 1] - line).max()), float(np.abs(durations[lo:hi + 1]).max())


CHUNK = 256  # scenarios whose decode metrics are filled at once when only their summaries are kept


def _finish(group: list[_Point], n_steps: int, summaries: bool) -> list:
    """The SimResults (``summaries``: their summary rows) of settled scenarios of one generation
    length: the decode metrics of every step (the anchors' own, the others interpolated as
    ``simulation`` does). Summaries are read chunk by chunk from one array, filled anew for each."""
    step_lo, step_hi, step_frac = np.arange(n_steps), np.arange(n_steps), np.zeros(n_steps)
    inner = np.arange(1, n_steps - 1) if n_steps >= 3 else np.arange(0)
    frac = (inner - 0) / (n_steps - 1 - 0) if len(inner) else np.zeros(0)
    step_lo[inner], step_hi[inner], step_frac[inner] = 0, n_steps - 1, frac
    out = []
    size = CHUNK if summaries else max(len(group), 1)
    buffer = np.empty((min(size, len(group)), n_steps, len(METRICS)))
    for at in range(0, len(group), size):
        chunk = group[at:at + size]
        metrics = buffer[:len(chunk)] if summaries else np.empty((len(chunk), n_steps, len(METRICS)))
        if n_steps:
            first = np.array([p.metrics[1] for p in chunk])
            last = np.array([p.metrics[-1] for p in chunk])
            metrics[:, 0] = first
            metrics[:, n_steps - 1] = last
            if len(inner):
                metrics[:, 1:n_steps - 1] = first[:, None, :] + frac[None, :, None] * (last - first)[:, None, :]
        for j, p in enumerate(chunk):
            anchors = {0: p.results[1], n_steps - 1: p.results[-1]} if n_steps else {}
            result = SimResult(p.scenario, p.nodes, p.program, p.memory, 1, p.results[0], p.metrics[0], metrics[j],
                               step_lo, step_hi, step_frac, anchors, None, None)
            out.append(summary_or_error(result) if summaries else result)
    return out
