"""Simulate one scenario: a TP group's prefill and decode steps (``laddersim.simulation.passes``), or a
pipeline's stages composed (``laddersim.simulation.pipeline``). The scenario types and
``make_scenario`` (``laddersim.simulation.scenario``) are re-exported: this is the spine's front."""

from __future__ import annotations

from collections.abc import Generator

from laddersim.costs.dp_attention_costs import dp_attention_memory
from laddersim.costs.memory_fit import MemoryUse, check_fits
from laddersim.hardware.placement import place
from laddersim.schedules.plan import parse_schedule
from laddersim.simulation.passes import PassSetup, RunBatch, drive, pass_simulation
from laddersim.simulation.pipeline import PipelineResult, simulate_pipeline, stage_memories
from laddersim.simulation.results import SimResult
from laddersim.simulation.scenario import Scenario, SimOptions, make_scenario

__all__ = ["PipelineResult", "Scenario", "SimOptions", "SimResult", "check_memory", "make_scenario", "scenario_nodes",
           "simulate", "simulation"]


def simulate(scenario: Scenario, options: SimOptions | None = None, progress=None) -> SimResult | PipelineResult:
    """Prefill and decode of one scenario (a ``SimResult``; a pipeline's, ``pp > 1``, is composed
    of its stages' by ``laddersim.simulation.pipeline``). ``progress(done, total, op_ranks)``, if given,
    is called after each engine run of a jittered simulation (op_ranks: ops x ranks of one run)."""
    if scenario.pp > 1 or scenario.microbatches > 1:
        return simulate_pipeline(scenario, options, progress)
    return drive(simulation(scenario, options, progress))


def simulation(scenario: Scenario, options: SimOptions | None = None,
               progress=None) -> Generator[RunBatch, list, SimResult]:
    """``simulate`` of one TP group (``pp`` 1) as a generator of its engine runs' batches
    (``laddersim.simulation.passes.pass_simulation``; ``laddersim.simulation.many`` answers many at once). The
    scenario's checks raise before the first batch."""
    model, hw, work, tp = scenario.model, scenario.hardware, scenario.workload, scenario.tp
    model.check_tp(tp)
    nodes = hw.nodes_for(tp)
    parse_schedule(scenario.schedule, model.n_layers)
    memory = check_memory(scenario)
    return (yield from pass_simulation(scenario, PassSetup(nodes, tuple(range(nodes))), memory, options, progress))


def check_memory(scenario: Scenario) -> MemoryUse:
    """Memory per GPU of ``scenario`` (a pipeline's: its fullest stage), or one line saying what
    does not fit (``DoesNotFitError``)."""
    if scenario.pp > 1 or scenario.microbatches > 1:
        return max(stage_memories(scenario), key=lambda use: use.total_bytes)
    if scenario.layout is not None:  # data-parallel attention: a replica's share and ep whole experts
        return dp_attention_memory(scenario.model, scenario.hardware, scenario.workload, scenario.layout)
    return check_fits(scenario.model, scenario.hardware, scenario.workload, scenario.tp)


def scenario_nodes(scenario: Scenario) -> int:
    """Nodes ``scenario`` runs on (its TP group's, or every stage's), or one line saying why it cannot."""
    if scenario.pp > 1:
        return place(scenario.hardware, scenario.tp, scenario.pp).nodes
    return scenario.hardware.nodes_for(scenario.tp)
