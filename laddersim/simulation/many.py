"""Many scenarios simulated together, bit for bit as ``laddersim.simulation.simulate.simulate`` one by one.

Each scenario's simulation (``laddersim.simulation.simulate.simulation``) asks for its engine runs in
batches. Here every scenario's batch of a round is gathered, and the single-rank runs that may be
replayed (the symmetric simulation, without jitter) are answered together: the runs of one
program and family in one walk of its event-order tree (``laddersim.engine.entry.run_many``)
and their metrics read together (``laddersim.simulation.results.step_metrics_many``). Other runs (every rank
simulated, ``replay=False``) are answered one by one, as ``simulate`` does. A sweep's points share
a handful of programs, so a few walks answer thousands of runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from laddersim.engine.entry import run_many
from laddersim.simulation.results import step_metrics_many
from laddersim.simulation.passes import RunBatch, answer
from laddersim.simulation.results import SimResult, summary_or_error
from laddersim.simulation.scenario import Scenario, SimOptions
from laddersim.simulation.simulate import simulate, simulation
from laddersim.simulation.symmetric_batch import simulate_symmetric


def simulate_many(scenarios: Sequence[Scenario], options: SimOptions | None = None) -> list[SimResult | Exception]:
    """``simulate(scenario, options)`` of each scenario, in order; a scenario whose simulation
    raises (an infeasible TP, a model that does not fit) gives its exception in its place. With
    the default options the symmetric simulations go through ``laddersim.simulation.symmetric_batch`` first."""
    options = options or SimOptions()
    out: list[SimResult | Exception | None] = [None] * len(scenarios)
    if options == SimOptions():
        out = simulate_symmetric(scenarios)
    rest = [i for i, result in enumerate(out) if result is None]
    for i, result in zip(rest, _simulate_together([scenarios[i] for i in rest], options)):
        out[i] = result
    return out


def summaries_many(scenarios: Sequence[Scenario]) -> list[dict | Exception]:
    """``simulate(scenario).summary()`` of each scenario (default options), or the exception that
    stopped it: ``simulate_many`` without keeping every result's arrays (a sweep's rows)."""
    out = simulate_symmetric(scenarios, summaries=True)
    rest = [i for i, result in enumerate(out) if result is None]
    for i, result in zip(rest, _simulate_together([scenarios[i] for i in rest], SimOptions())):
        out[i] = result if isinstance(result, Exception) else summary_or_error(result)
    return out


def _simulate_together(scenarios: Sequence[Scenario], options: SimOptions) -> list[SimResult | Exception]:
    """Every scenario's simulation advanced batch by batch, the batches of a round answered together."""
    out: list[SimResult | Exception | None] = [None] * len(scenarios)
    running: dict[int, tuple] = {}  # scenario index -> (its simulation, the batch it asks for)

    def advance(i: int, steps, reply) -> None:
        try:
            running[i] = (steps, next(steps) if reply is None else steps.send(reply))
        except StopIteration as stop:
            out[i] = stop.value
        except Exception as exc:  # noqa: BLE001 - the caller decides what a failed scenario is
            out[i] = exc

    for i, scenario in enumerate(scenarios):
        if scenario.pp > 1 or scenario.microbatches > 1:  # a pipeline: its stages composed, one by one
            try:
                out[i] = simulate(scenario, options)
            except Exception as exc:  # noqa: BLE001 - the caller decides what a failed scenario is
                out[i] = exc
            continue
        advance(i, simulation(scenario, options), None)
    while running:
        asked = dict(running)
        running.clear()
        for i, reply in zip(asked, _answers([batch for _, batch in asked.values()])):
            advance(i, asked[i][0], reply)
    return out


def _answers(batches: list[RunBatch]) -> list[list]:
    """The answer to each batch: the cached ones' single-rank runs all together, the rest one by one."""
    answers: list[list | None] = [None] * len(batches)
    together = [b for b, batch in enumerate(batches) if batch.cached and all(len(r.ranks) == 1 for r in batch.runs)]
    runs = [(b, run, masks) for b in together for run, masks in zip(batches[b].runs, batches[b].masks)]
    results = run_many([run for _, run, _ in runs])
    by_masks: dict[int, list[int]] = {}  # metrics of the runs of one program read together
    for k, (_, _, masks) in enumerate(runs):
        by_masks.setdefault(id(masks), []).append(k)
    metrics = [None] * len(runs)
    for ks in by_masks.values():
        for k, row in zip(ks, step_metrics_many([results[k] for k in ks], runs[ks[0]][2])):
            metrics[k] = row
    for b in together:
        answers[b] = []
    for k, (b, _, _) in enumerate(runs):
        answers[b].append((results[k], metrics[k]))
    for b, batch in enumerate(batches):
        if answers[b] is None:
            answers[b] = [answer(run, masks, batch) for run, masks in zip(batch.runs, batch.masks)]
    return answers
