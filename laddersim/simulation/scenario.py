"""The scenario types: what is simulated (``Scenario``, made from names or objects and checked by
``make_scenario``) and how (``SimOptions``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from pydantic import ValidationError

from laddersim.costs.allreduce_impls import require_runs
from laddersim.errors import UserInputError
from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.model.dp_attention import DpAttentionLayout
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
    # Data-parallel attention (None: not): ``tp`` is then the attention's TP of each replica, the
    # experts spread over all ``layout.ep`` GPUs, ``workload.batch`` the sequences of all replicas.
    layout: DpAttentionLayout | None = None


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
                  ep: int = 1, dp_attention: bool = False) -> Scenario:
    """A Scenario from names or objects (model preset / config.json path, profile name / path);
    ``kv_cache`` and ``kv_reads`` default to the ``framework``'s (laddersim/data/frameworks). ``pp``
    stages of ``tp`` GPUs each, ``microbatches`` batches of ``batch / microbatches`` in flight
    through them (``laddersim.simulation.pipeline``). ``allreduce``: the AllReduce implementation
    forced over the framework's rule (one line where this group, machine or dtype cannot run it).
    ``quant`` and ``kv_cache_dtype``: the linear layers' quantization and the KV cache's element
    type (``laddersim.model.quantization``); a mixture-of-experts model's experts placed ``ep`` ways
    over each TP group (``ModelShape.with_ep``). ``dp_attention``: instead, ``ep / tp`` replicas of
    the attention at TP ``tp``, each over its share of the ``batch`` sequences, the experts placed
    ``ep`` ways over all their GPUs (``laddersim.model.dp_attention``; ``check_dp_attention``)."""
    shape = model if isinstance(model, ModelShape) else load_model_shape(model)
    profile = hardware if isinstance(hardware, HardwareProfile) else load_profile(hardware)
    layout = check_dp_attention(shape, profile, tp, ep, pp, schedule) if dp_attention else None
    shape = shape.with_ep(1 if dp_attention else ep)
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
    return Scenario(shape, profile, work, tp, schedule, pp, microbatches, layout)


def check_dp_attention(model: ModelShape, profile: HardwareProfile, tp: int, ep: int, pp: int,
                       schedule: str) -> DpAttentionLayout:
    """The layout of ``ep / tp`` attention replicas of TP ``tp`` with the experts over all ``ep``
    GPUs, or one line naming what cannot run it: a dense model, an ``ep`` that is not a multiple of
    ``tp`` or does not divide the experts, an expert group larger than a node (its all-to-all is
    priced within one), a pipeline, the ``parallel`` schedule."""
    if model.moe is None:
        raise UserInputError(f"dp-attention: {model.name} has no experts to spread over the replicas; "
                             "allowed: a mixture-of-experts model")
    model.moe.placed(ep, model.name)  # ep divides the experts, or one line naming the counts allowed
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or ep % tp:
        raise UserInputError(f"ep: {ep} is not a multiple of tp {tp} (with dp-attention, ep is every GPU's "
                             f"count and tp each attention replica's); allowed: ep = tp x replicas, e.g. {tp * 2}")
    if ep > profile.node.gpus_per_node:
        raise UserInputError(f"ep: {ep} spans nodes of {profile.name}; with dp-attention the all-to-all is priced "
                             f"within one node; allowed: up to {profile.node.gpus_per_node}")
    if pp != 1:
        raise UserInputError(f"pp: {pp} with dp-attention is not simulated; allowed: 1")
    if schedule == "parallel":
        raise UserInputError("schedule: parallel fuses the attention's and the MLP's GEMMs, which a "
                             "mixture-of-experts layer does not have; allowed: standard, ladder, hybrid:N, "
                             "upper_bound, desync_half")
    return DpAttentionLayout(tp, ep // tp)


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
    peak: Hopper, Ada, Blackwell; not Ampere; NVFP4 an FP4 one: Blackwell, not Hopper or Ampere), or
    where the framework's attention path cannot read an FP8 KV cache (only fused attention kernels,
    as vLLM's and TensorRT-LLM's, are priced so)."""
    gpu, cores = profile.gpu, work.quantization.tensor_cores
    fp8 = "fp8, fp8-block, " if gpu.peak_tflops_fp8 is not None else ""
    if cores == "fp8" and gpu.peak_tflops_fp8 is None:
        raise UserInputError(f"quant: {gpu.name} has no FP8 tensor cores (no peak_tflops_fp8 in {profile.name}); "
                             "allowed: none, int8-weight, int4-weight")
    if cores == "fp4" and gpu.peak_tflops_fp4 is None:
        raise UserInputError(f"quant: {work.quant} runs FP4 tensor-core GEMMs and {gpu.name} has none (no "
                             f"peak_tflops_fp4 in {profile.name}); allowed: none, {fp8}int8-weight, int4-weight")
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
