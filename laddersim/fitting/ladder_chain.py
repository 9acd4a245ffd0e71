"""The engine's rates that run a ladder chain as measured (calibrate's CPU interference rows).

``calibration/ladder_overlap.py`` measures, on CPU ranks whose collectives progress on the compute
cores, the model's modules alone and in ladder order (module i's async AllReduce waited on before
module i+2). The engine runs the same chain with the profile's decomposition: per module a compute
op, a collective launch of the issue's time and the AllReduce less that issue. ``ladder_rates``
finds the (compute, comm) slowdowns with which the engine ends the chain when it ended and spends
in the compute ops what the chain spent in its modules. ``calibrate fit`` solves them against the
AllReduce its own table gives at that size (``laddersim.fitting.step_allreduce``), so that the
simulated ladder reproduces the measured chain with the AllReduce the simulated standard step pays.

The comm rate may come out below 0: on CPU ranks a ladder chain ends sooner than its AllReduces
could one after another at the time a standard step pays for each. A blocking AllReduce pays for
waking its caller (and, on a virtual machine, the idle core) when the peer's data arrives, which
an AllReduce beside compute does not; and gloo runs the two AllReduces a ladder keeps in flight on
its worker threads at once (torch ``ProcessGroupGloo::Options::threads``, default 2), where the
engine's comm stream runs them in turn. On this project's 2-core VM the README's calibration timed
a chain adding 574 us per module beside AllReduces of 1787 us alone (0.3x); a closed loop of
``calibration/closed_loop.py`` (100 repetitions, load average 5-9) 0.25 / 0.28 / 0.38x at batch 1
/ 4 / 16, whose batch-1 chain the engine, holding the comm rate at 0, ran 1.5x longer than
measured (18.7 ms against 12.5 ms). Fitting the same measurements both ways (README's calibrate
then ladder_bench example, 30-repetition chains, load average 7 on the 2 CPUs), the ladder's
speedup missed by -18.2 and -19.3 points held at 0, by +1.3 and -7.1 points with the rate below 0. Held at ``MIN_COMM_SLOWDOWN``: an AllReduce beside
compute at most 10x faster than waited on.
"""

from __future__ import annotations

import numpy as np

from laddersim.engine.simulator import RankWork, run_engine

MAX_COMM_SLOWDOWN = 1000.0
MIN_COMM_SLOWDOWN = -0.9  # the engine's comm rate 1 / (1 + x): at most 10x the AllReduce waited on
MAX_COMPUTE_SLOWDOWN = 10.0


def chain_work(n: int, module_s: float, issue_s: float, comm_s: float) -> RankWork:
    """The engine's program of a ladder chain of ``n`` modules: per module a compute op (after the
    AllReduce two modules back), its collective launch and its AllReduce on the comm stream."""
    streams, deps, durations, reduces = [], [], [], []
    for i in range(n):
        streams.append("compute")
        deps.append((reduces[i - 2],) if i >= 2 else ())
        durations.append(module_s)
        streams.append("compute")
        deps.append(())
        durations.append(issue_s)
        streams.append("comm")
        deps.append((len(streams) - 2,))
        durations.append(comm_s)
        reduces.append(len(streams) - 1)
    streams.append("compute")
    deps.append(tuple(reduces[-2:]))
    durations.append(0.0)
    return RankWork(streams, deps, np.asarray(durations, dtype=float))


def chain_run(work: RankWork, compute_slowdown: float, comm_slowdown: float) -> tuple[float, float]:
    """(the chain's end, the time its module ops took) in the engine."""
    result = run_engine([work], compute_slowdown, comm_slowdown, record_signature=False)
    modules = range(0, len(work.streams) - 1, 3)
    return float(result.end_s.max()), float(sum(result.end_s[0, i] - result.start_s[0, i] for i in modules))


def bisect_rate(measure, target: float, top: float, bottom: float = 0.0) -> float:
    """The x in [bottom, top] (bottom > -1) where the increasing ``measure(x)`` reaches ``target``
    (bisection on log(1 + x); the bounds where it is reached at neither end)."""
    if measure(bottom) >= target:
        return bottom
    if measure(top) <= target:
        return top
    lo, hi = float(np.log1p(bottom)), float(np.log1p(top))
    for _ in range(32):
        mid = (lo + hi) / 2
        if measure(float(np.expm1(mid))) < target:
            lo = mid
        else:
            hi = mid
    return float(np.expm1((lo + hi) / 2))


def ladder_rates(n: int, alone_s: float, ladder_s: float, modules_s: float, issue_s: float,
                 comm_s: float, rounds: int = 6) -> tuple[float, float]:
    """(compute, comm) slowdowns with which the engine runs a ladder chain of ``n`` modules as
    measured: ``alone_s`` the modules alone, ``ladder_s`` the chain, ``modules_s`` its time in the
    modules, ``issue_s`` one issue, ``comm_s`` the AllReduce as the engine simulates it (after its
    issue). Solved in turns (each rate by bisection, the other held) until they settle; the comm
    rate in [MIN_COMM_SLOWDOWN, MAX_COMM_SLOWDOWN] (below 0: see the module's docstring). Modules
    faster in the chain than alone are a measurement problem: that figure is returned as the
    compute slowdown (``calibrate fit`` reports it and holds 0) and the comm rate solved at 0."""
    work = chain_work(n, alone_s / n, issue_s, comm_s)
    compute, comm = modules_s / alone_s - 1.0, 0.0
    if compute < 0.0:
        return compute, bisect_rate(lambda x: chain_run(work, 0.0, x)[0], ladder_s, MAX_COMM_SLOWDOWN,
                                    MIN_COMM_SLOWDOWN)
    for _ in range(rounds):
        comm = bisect_rate(lambda x: chain_run(work, compute, x)[0], ladder_s, MAX_COMM_SLOWDOWN, MIN_COMM_SLOWDOWN)
        settled = bisect_rate(lambda x: chain_run(work, x, comm)[1], modules_s, MAX_COMPUTE_SLOWDOWN)
        if abs(settled - compute) < 1e-3:
            compute = settled
            break
        compute = settled
    return compute, comm
