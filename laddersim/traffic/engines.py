"""Serving engines' schedulers as data: how vLLM, SGLang and TensorRT-LLM form an iteration under
their default server settings on an 80-141 GB GPU (H100, H200), each default cited from its source.

A record names the token budget of one iteration, the most sequences running at once, and how a
prompt shares an iteration with the running decodes; ``engine_options`` turns it into the
``ServingOptions`` the continuous-batching scheduler (``laddersim.traffic.scheduler``) takes.
Adding an engine is a new record, not a new branch.
"""

from __future__ import annotations

from dataclasses import dataclass

from laddersim.errors import UserInputError
from laddersim.traffic.options import KvAdmission, ServingOptions


@dataclass(frozen=True)
class EngineScheduler:
    """One engine's default scheduler.

    ``token_budget``: new tokens per iteration (decode tokens plus prompt tokens);
    ``max_running``: sequences in the running batch; ``split_prompts``: a prompt is prefilled in
    chunks (chunked prefill), or admitted whole; ``mix_decodes``: prompt tokens share an iteration
    with the running decodes (filling what they leave of the budget), or run in iterations of
    their own ahead of them; ``kv_admission``: the KV-cache blocks a request must find free to be
    admitted (``ServingOptions.kv_admission``); ``source``: where each default is read."""

    name: str
    token_budget: int
    max_running: int
    split_prompts: bool
    mix_decodes: bool
    source: str
    kv_admission: KvAdmission = "on_demand"

    def describe(self) -> str:
        prompts = "prompts in chunks" if self.split_prompts else "whole prompts"
        where = "beside the decodes" if self.mix_decodes else "in iterations of their own, ahead of the decodes"
        kv = "; KV blocks reserved for each request's whole length" if self.kv_admission == "whole_request" else ""
        return (f"{self.name} scheduler: {self.token_budget} tokens per iteration, up to {self.max_running} "
                f"running, {prompts} {where}{kv}")


ENGINES: dict[str, EngineScheduler] = {
    "vllm": EngineScheduler(
        "vllm", token_budget=8192, max_running=1024, split_prompts=True, mix_decodes=True,
        source="vllm-project/vllm vllm/engine/arg_utils.py @ 001999d2f360c2c5da23a916510c273b1a73d06c: "
               "the V1 engine always chunks prefills; EngineArgs._override_v1_engine_args sets "
               "max_num_batched_tokens 8192 for the OpenAI API server on H100 and H200; __post_init__ sets "
               "max_num_seqs 1024 under V1"),
    "sglang": EngineScheduler(
        "sglang", token_budget=8192, max_running=1024, split_prompts=True, mix_decodes=False,
        source="sgl-project/sglang python/sglang/srt/server_args.py, ServerArgs.__post_init__: "
               "chunked_prefill_size 8192 on GPUs from 35 to 160 GB of memory (H100, H200; the 0.4-0.5 "
               "releases); enable_mixed_chunk False (@ 001067fffe33427bee0ed2f007fb7551a1d76b44), so a prefill "
               "batch runs apart from the decode batch, ahead of it; max_running_requests is derived from the KV "
               "pool, which the KV-cache blocks bound here, so the running batch is capped as vLLM's"),
    "trtllm": EngineScheduler(
        "trtllm", token_budget=8192, max_running=2048, split_prompts=False, mix_decodes=True,
        source="NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py @ 00209af149e7774406881a37283dce303571eb11: "
               "trtllm-serve takes BuildConfig's max_num_tokens (8192) and max_batch_size (2048) and "
               "enable_chunked_prefill=False, so a context is admitted whole beside the generation requests "
               "(inflight batching); the capacity scheduler's policy defaults to GUARANTEED_NO_EVICT "
               "(tensorrt_llm/llmapi/llm_args.py SchedulerConfig.capacity_scheduler_policy @ "
               "0004396720054fd8e205cbf616f21f0b57c6b412), which admits a request only when the KV-cache blocks "
               "of its prompt and its maximum new tokens are free and reserves them, so it never evicts "
               "(cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp GuaranteedNoEvictScheduler)",
        kv_admission="whole_request"),
}


def engine_scheduler(name: str) -> EngineScheduler:
    """The record of ``name``, or one line naming the ones there are."""
    try:
        return ENGINES[name]
    except KeyError:
        raise UserInputError(f"scheduler: {name!r}; allowed: {', '.join(ENGINES)}") from None


def engine_options(name: str, options: ServingOptions, **given) -> ServingOptions:
    """``options`` under engine ``name``'s scheduler: its budget, running limit and prompt policy
    (chunked prefill on) unless ``given`` sets them (keyword: ``max_batched_tokens``,
    ``max_running``)."""
    engine = engine_scheduler(name)
    limits = {"max_batched_tokens": engine.token_budget, "max_running": engine.max_running, **given}
    return options.model_copy(update={**limits, "chunked_prefill": True, "split_prompts": engine.split_prompts,
                                      "mix_decodes": engine.mix_decodes, "kv_admission": engine.kv_admission})


# ---- the limits a benchmark deployment sets --------------------------------------------------

@dataclass(frozen=True)
class BenchmarkLimits:
    """The engine limits a deployment generator writes for a closed-loop benchmark at concurrency C
    with prompts of P tokens: the running batch capped at C, and a token budget of C + P +
    ``headroom_tokens`` (a full batch's decode tokens beside one whole prompt) rounded up to a
    multiple of ``round_tokens``; where ``counts_decodes`` is False the budget bounds a prefill
    batch alone (SGLang's max_prefill_tokens): P + ``headroom_tokens``. ``split_prompts`` False: the
    generator turns chunked prefill off, so prompts are admitted whole (None: the engine's own)."""

    headroom_tokens: int
    counts_decodes: bool
    round_tokens: int
    split_prompts: bool | None
    source: str

    def budget(self, concurrency: int, prompt_len: int) -> int:
        tokens = prompt_len + self.headroom_tokens + (concurrency if self.counts_decodes else 0)
        return -(-tokens // self.round_tokens) * self.round_tokens


_AIC = "ai-dynamo/aiconfigurator @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce src/aiconfigurator/generator/"
# AIConfigurator's generated benchmark deployments (its silicon sample's rows record batch_size =
# the concurrency, the max_batch_size its generator writes).
AICONFIGURATOR_LIMITS: dict[str, BenchmarkLimits] = {
    "vllm": BenchmarkLimits(
        1500, True, 1, None,
        _AIC + "rule_plugin/benchmark/vllm.rule: agg max_num_tokens = max_batch_size + isl + 1500 "
               "(config/backend_config_mapping.yaml: max_batch_size -> --max-num-seqs, max_num_tokens -> "
               "--max-num-batched-tokens)"),
    "trtllm": BenchmarkLimits(
        1500, True, 32, None,
        _AIC + "rule_plugin/benchmark/trtllm.rule: agg max_num_tokens = max_batch_size + isl + 1500 rounded up "
               "to tokens_per_block (32); enable_chunked_prefill false (config/backend_templates/trtllm/"
               "extra_engine_args.1.0.0rc3.yaml.j2)"),
    "sglang": BenchmarkLimits(
        1500, False, 1, False,
        _AIC + "rule_plugin/benchmark/sglang.rule: max_prefill_tokens = isl + 1500, max-running-requests = "
               "max_batch_size; config/backend_config_mapping.yaml: chunked-prefill-size -1 when max_num_tokens is "
               "unset (SGLang: -1 disables chunked prefill, and mixed chunks need it, so enable_mixed_chunk has "
               "no effect)"),
}
LIMITS = ("engine-defaults", "aiconfigurator")


def check_limits(limits: str) -> str:
    """``limits`` if it names a deployment's limits (``LIMITS``), else one line naming them."""
    if limits not in LIMITS:
        raise UserInputError(f"limits: {limits!r}; allowed: {', '.join(LIMITS)}")
    return limits


def benchmark_options(name: str, options: ServingOptions, concurrency: int, prompt_len: int,
                      limits: str = "engine-defaults") -> ServingOptions:
    """``options`` under engine ``name``'s scheduler (``engine_options``) with the limits a
    ``limits`` deployment sets for a closed loop of ``concurrency`` requests with ``prompt_len``-token
    prompts: ``engine-defaults`` the engine's own, ``aiconfigurator`` AICONFIGURATOR_LIMITS; one
    line naming the choices for any other."""
    if check_limits(limits) == "engine-defaults":
        return engine_options(name, options)
    rule = AICONFIGURATOR_LIMITS[engine_scheduler(name).name]
    tuned = engine_options(name, options, max_running=concurrency,
                           max_batched_tokens=rule.budget(concurrency, prompt_len))
    return tuned if rule.split_prompts is None else tuned.model_copy(update={"split_prompts": rule.split_prompts})
