"""Many simulations advanced together, their engine runs of one program replayed in one batch.

``laddersim.simulate.simulation`` yields each engine run a simulation needs; here every
simulation of a list is advanced to its next run, the runs of a round go to
``laddersim.engine.cached.run_cached_many`` (one numpy replay per program), and the results are
sent back. Results are the same as ``simulate`` one by one (a sweep's task of points).
"""

from __future__ import annotations

from laddersim.engine.cached import run_cached_many
from laddersim.simulate import RunRequest, Scenario, SimOptions, SimResult, simulation


def simulate_many(scenarios: list[Scenario], options: SimOptions | None = None) -> list[SimResult | Exception]:
    """``simulate`` of each scenario, or the exception it raised. The simulations advance
    together, and the engine runs they ask for at each round go to ``run_cached_many``, which
    replays the runs of one program in one batch: a sweep's points, with the same results as one
    by one."""
    out: list = [None] * len(scenarios)
    sims = [simulation(s, options) for s in scenarios]
    pending: dict[int, RunRequest] = {}

    def advance(i: int, result=None) -> None:
        try:
            if isinstance(result, Exception):
                pending[i] = sims[i].throw(result)
            else:
                pending[i] = sims[i].send(result)
        except StopIteration as done:
            out[i] = done.value
        except Exception as exc:  # noqa: BLE001 - that simulation's outcome
            out[i] = exc

    for i in range(len(sims)):
        advance(i)
    while pending:
        round_ = list(pending.items())
        pending.clear()
        together = [(i, r) for i, r in round_ if r.cached]
        results = run_cached_many([(r.works, r.compute_slowdown, r.comm_slowdown, r.group_links, r.family)
                                   for _, r in together])
        for (i, _), result in zip(together, results):
            advance(i, result)
        for i, request in round_:
            if not request.cached:
                try:
                    result = request.run()
                except Exception as exc:  # noqa: BLE001 - handed to the simulation that asked
                    result = exc
                advance(i, result)
    return out
