"""Simulate one scenario: a TP group's prefill and decode steps (``laddersim.simulation.passes``), or a
pipeline's stages composed (``laddersim.simulation.pipeline``); the scenario made from names and checked."""

from __future__ import annotations

from collections.abc import Generator
from functools import lru_cache

from pydantic import ValidationError

from laddersim.costs.memory_fit import MemoryUse, check_fits
from laddersim.errors import UserInputError
from laddersim.model.framework import load_framework
from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.model.shape import ModelShape, load_model_shape
from laddersim.simulation.passes import PassSetup, RunBatch, Scenario, SimOptions, SimResult, drive, pass_simulation
from laddersim.hardware.placement import place
from laddersim.simulation.pipeline import PipelineResult, simulate_pipeline, stage_memories
from laddersim.schedules.plan import parse_schedule
from laddersim.schedules.stages import split_layers
from laddersim.model.workload import Workload

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
    memory = check_fits(model, hw, work, tp)
    return (yield from pass_simulation(scenario, PassSetup(nodes, tuple(range(nodes))), memory, options, progress))


def check_memory(scenario: Scenario) -> MemoryUse:
    """Memory per GPU of ``scenario`` (a pipeline's: its fullest stage), or one line saying what
    does not fit (``DoesNotFitError``)."""
    if scenario.pp > 1 or scenario.microbatches > 1:
        return max(stage_memories(scenario), key=lambda use: use.total_bytes)
    return check_fits(scenario.model, scenario.hardware, scenario.workload, scenario.tp)


def scenario_nodes(scenario: Scenario) -> int:
    """Nodes ``scenario`` runs on (its TP group's, or every stage's), or one line saying why it cannot."""
    if scenario.pp > 1:
        return place(scenario.hardware, scenario.tp, scenario.pp).nodes
    return scenario.hardware.nodes_for(scenario.tp)


def make_scenario(model, hardware, tp: int, batch: int, prompt_len: int, gen_len: int, schedule: str,
                  dtype: str = "bfloat16", kv_cache: str | None = None, kv_reads: str | None = None,
                  framework: str = "gpt-fast", pp: int = 1, microbatches: int = 1, ep: int = 1) -> Scenario:
    """A Scenario from names or objects (model preset / config.json path, profile name / path);
    ``kv_cache`` and ``kv_reads`` default to the ``framework``'s (laddersim/data/frameworks). ``pp``
    stages of ``tp`` GPUs each, ``microbatches`` batches of ``batch / microbatches`` in flight
    through them (``laddersim.pipeline``); a mixture-of-experts model's experts placed ``ep`` ways
    over each TP group (``ModelShape.with_ep``)."""
    shape = model if isinstance(model, ModelShape) else load_model_shape(model)
    shape = shape.with_ep(ep)
    profile = hardware if isinstance(hardware, HardwareProfile) else load_profile(hardware)
    fw = load_framework(framework)
    try:
        work = _workload(batch, prompt_len, gen_len, dtype, kv_cache or fw.kv_cache.value,
                         kv_reads or fw.kv_reads.value, framework)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UserInputError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    parse_schedule(schedule, shape.n_layers)
    profile.gpu.peak_flops_per_s_for(work.dtype)  # a dtype this GPU cannot run is one error line now
    shape.check_window(work.prompt_len, work.gen_len)
    check_pipeline(shape, batch, pp, microbatches)
    return Scenario(shape, profile, work, tp, schedule, pp, microbatches)


@lru_cache(maxsize=4096)
def _workload(batch: int, prompt_len: int, gen_len: int, dtype: str, kv_cache: str, kv_reads: str,
              framework: str) -> Workload:
    """One (frozen) Workload per distinct set of values: a sweep's points share them, and the
    costs remembered by workload find them by identity."""
    return Workload(batch=batch, prompt_len=prompt_len, gen_len=gen_len, dtype=dtype, kv_cache=kv_cache,
                    kv_reads=kv_reads, framework=framework)


def check_pipeline(model: ModelShape, batch: int, pp: int, microbatches: int) -> None:
    """One line naming ``pp`` or ``pp_microbatches`` where they cannot split this model and batch."""
    if isinstance(pp, bool) or not isinstance(pp, int) or pp < 1:
        raise UserInputError(f"pp: must be a positive whole number of pipeline stages, got {pp!r}")
    split_layers(model.n_layers, pp)  # at most one stage per layer
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
        raise UserInputError(f"pp-microbatches: must be a positive whole number, got {microbatches!r}")
    if microbatches > 1 and pp == 1:
        raise UserInputError("pp-microbatches: micro-batches need a pipeline; allowed: 1 at pp=1, or pp >= 2")
    if batch % microbatches:
        divisors = ", ".join(str(m) for m in range(1, batch + 1) if batch % m == 0)
        raise UserInputError(f"pp-microbatches: {microbatches} does not divide batch {batch}; allowed: {divisors}")
