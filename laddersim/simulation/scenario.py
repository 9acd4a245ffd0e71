"""The scenario types: what is simulated (``Scenario``, made from names or objects and checked by
``make_scenario``) and how (``SimOptions``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from pydantic import ValidationError

from laddersim.costs.allreduce_impls import require_runs
from laddersim.errors import UserInputError
from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.model.framework import load_framework
from laddersim.model.shape import ModelShape, load_model_shape
from laddersim.model.workload import Workload
from laddersim.schedules.plan import parse_schedule
from laddersim.schedules.stages import split_layers


@dataclass(frozen=True)
class Scenario:
    """What is simulated: a model on a machine running a workload, split ``tp`` ways (and over
    ``pp`` pipeline stages), on a schedule. Made and checked by ``make_scenario``."""

    model: ModelShape
    hardware: HardwareProfile
    workload: Workload
    tp: int
    schedule: str
    pp: int = 1  # pipeline stages, each a TP group of ``tp`` GPUs (laddersim.simulation.pipeline)
    microbatches: int = 1  # batches in flight through the pipeline, ``workload.batch`` split evenly


@dataclass(frozen=True)
class SimOptions:
    """How a scenario is simulated (the result does not depend on ``replay`` and ``reference``)."""

    jitter: float = 0.0  # sigma of a per-rank, per-op lognormal duration multiplier
    seed: int = 0
    all_ranks: bool = False  # simulate every rank even when they are symmetric
    exact_steps: bool = False  # simulate every decode step (no interpolation; with jitter: no sample)
    sample_steps: int | None = None  # with jitter: decode steps to simulate (None: step_sampling's rule)
    replay: bool = True  # replay a recorded event order where it holds (bit for bit the engine's)
    # Every run on the SimPy engine itself (no replay, no direct event loop): the reference the
    # fast paths are checked against (laddersim.engine.direct, laddersim.engine.tree_batch).
    reference: bool = False



def make_scenario(*, model, hardware, tp: int, batch: int, prompt_len: int, gen_len: int, schedule: str,
                  dtype: str = "bfloat16", kv_cache: str | None = None, kv_reads: str | None = None,
                  framework: str = "gpt-fast", pp: int = 1, microbatches: int = 1,
                  allreduce: str | None = None, quant: str = "none", kv_cache_dtype: str = "auto",
                  ep: int = 1) -> Scenario:
    """A Scenario from names or objects (model preset / config.json path, profile name / path);
    ``kv_cache`` and ``kv_reads`` default to the ``framework``'s (laddersim/data/frameworks). ``pp``
    stages of ``tp`` GPUs each, ``microbatches`` batches of ``batch / microbatches`` in flight
    through them (``laddersim.simulation.pipeline``). ``allreduce``: the AllReduce implementation
    forced over the framework's rule (one line where this group, machine or dtype cannot run it).
    ``quant`` and ``kv_cache_dtype``: the linear layers' quantization and the KV cache's element
    type (``laddersim.model.quantization``); a mixture-of-experts model's experts placed ``ep`` ways
    over each TP group (``ModelShape.with_ep``)."""
    shape = model if isinstance(model, ModelShape) else load_model_shape(model)
    shape = shape.with_ep(ep)
    profile = hardware if isinstance(hardware, HardwareProfile) else load_profile(hardware)
    fw = load_framework(framework)
    try:
        work = _workload(batch, prompt_len, gen_len, dtype, kv_cache or fw.kv_cache.value,
                         kv_reads or fw.kv_reads.value, framework, allreduce, quant, kv_cache_dtype)
    except ValidationError as exc:
        err = exc.errors()[0]
        message = str(err["msg"]).removeprefix("Value error, ")
        raise UserInputError(f"{'.'.join(map(str, err['loc']))}: {message}") from None
    parse_schedule(schedule, shape.n_layers)
    profile.gpu.peak_flops_per_s_for(work.dtype)  # a dtype this GPU cannot run is one error line now
    if allreduce is not None:
        require_runs(allreduce, profile, tp, work.dtype)
    check_quantization(work, profile, fw)
    shape.check_window(work.prompt_len, work.gen_len)
    check_pipeline(shape, batch, pp, microbatches)
    return Scenario(shape, profile, work, tp, schedule, pp, microbatches)


@lru_cache(maxsize=4096)
def _workload(batch: int, prompt_len: int, gen_len: int, dtype: str, kv_cache: str, kv_reads: str,
              framework: str, allreduce: str | None = None, quant: str = "none",
              kv_cache_dtype: str = "auto") -> Workload:
    """One (frozen) Workload per distinct set of values: a sweep's points share them, and the
    costs remembered by workload find them by identity."""
    return Workload(batch=batch, prompt_len=prompt_len, gen_len=gen_len, dtype=dtype, kv_cache=kv_cache,
                    kv_reads=kv_reads, framework=framework, allreduce=allreduce, quant=quant,
                    kv_cache_dtype=kv_cache_dtype)


def check_quantization(work: Workload, profile: HardwareProfile, fw) -> None:
    """One line where the GPU cannot run the quantization's GEMMs (FP8 needs an FP8 tensor-core
    peak: Hopper, Ada, Blackwell; not Ampere), or where the framework's attention path cannot read
    an FP8 KV cache (only fused attention kernels, as vLLM's and TensorRT-LLM's, are priced so)."""
    if work.quantization.needs_fp8 and profile.gpu.peak_tflops_fp8 is None:
        raise UserInputError(f"quant: {profile.gpu.name} has no FP8 tensor cores (no peak_tflops_fp8 in {profile.name}); "
                             "allowed: none, int8-weight, int4-weight")
    paths = {"prefill": fw.prefill_attention_path, "decode": fw.decode_attention_path}
    other = {phase: path for phase, path in paths.items() if path != "fused"}
    if work.kv_cache_dtype == "fp8" and other:
        phase, path = next(iter(other.items()))
        raise UserInputError(f"kv-cache-dtype: fp8 is priced on fused attention kernels only; framework "
                             f"{work.framework} runs {phase} attention as {path}; allowed: auto, or --framework vllm")


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
