"""Serving options: the scheduler's limits, the KV-cache paging, the SLOs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from laddersim.errors import UserInputError
from laddersim.support.limits import MAX_BATCH, MAX_BLOCK_SIZE, MAX_SLO_S, MAX_TOKENS


KvAdmission = Literal["on_demand", "whole_request"]  # ServingOptions.kv_admission's choices


class ServingOptions(BaseModel):
    """A vLLM-style engine's limits and the latency targets requests are judged by.

    ``max_running``: sequences in the running batch (vLLM ``max_num_seqs``);
    ``max_batched_tokens``: new tokens per iteration (``max_num_batched_tokens``); without
    ``chunked_prefill`` a prompt is prefilled whole, in an iteration of prefills only (vLLM V0),
    so every request's prompt plus output must fit in it (vLLM's rule for the model length); with
    it, an iteration takes the running sequences' decode tokens first and fills the rest of the
    budget with prompt chunks (vLLM V1, Sarathi-Serve); ``split_prompts`` off admits each prompt
    whole beside the decodes, never split across iterations (TensorRT-LLM's inflight batching
    without chunked context); ``mix_decodes`` off runs the prompt chunks in iterations of their
    own, ahead of the decodes, which wait (SGLang without ``--enable-mixed-chunk``).
    ``block_size``: tokens per KV-cache block. ``kv_admission``: ``on_demand`` admits a prompt when
    the blocks for the tokens it computes now are free and gives a running sequence blocks as it
    grows, preempting the newest when none are left (vLLM, SGLang, TensorRT-LLM's
    ``MAX_UTILIZATION``); ``whole_request`` admits a request only when the blocks for its prompt
    and its whole output are free and reserves them at once, so nothing is ever preempted
    (TensorRT-LLM's default ``GUARANTEED_NO_EVICT``).
    A request meets its SLOs when its time to first token is at most ``ttft_slo_s`` and its mean
    time per output token at most ``tpot_slo_s`` (an unset SLO always holds); a rate is
    sustained when at least ``slo_attainment`` of the requests meet them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_running: int = Field(default=64, gt=0, le=MAX_BATCH)
    max_batched_tokens: int = Field(default=8192, gt=0, le=MAX_TOKENS)
    chunked_prefill: bool = False
    split_prompts: bool = True
    mix_decodes: bool = True
    block_size: int = Field(default=16, gt=0, le=MAX_BLOCK_SIZE)
    kv_admission: KvAdmission = "on_demand"
    ttft_slo_s: float | None = Field(default=None, gt=0, le=MAX_SLO_S, allow_inf_nan=False)
    tpot_slo_s: float | None = Field(default=None, gt=0, le=MAX_SLO_S, allow_inf_nan=False)
    slo_attainment: float = Field(default=0.9, gt=0, le=1, allow_inf_nan=False)
    points_per_octave: int = Field(default=8, gt=0, le=64)  # token grid of the iteration-time model


def serving_options(**values) -> ServingOptions:
    """ServingOptions, a bad value raised as one UserInputError line naming the field."""
    try:
        return ServingOptions(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(map(str, err["loc"])).replace("_", "-")
        shown = repr(err.get("input"))
        shown = shown if len(shown) <= 40 else shown[:40] + "..."
        raise UserInputError(f"{field}: {err['msg']}, got {shown}") from None


def slo_rule(options: ServingOptions) -> str:
    """How a rate is judged: '>= 90% of requests meet TTFT <= 0.5 s and TPOT <= 30 ms'."""
    slos = [f"{name} <= {value * 1e3:g} ms" if value < 1 else f"{name} <= {value:g} s"
            for name, value in (("TTFT", options.ttft_slo_s), ("TPOT", options.tpot_slo_s)) if value is not None]
    return (f">= {options.slo_attainment:.0%} of requests meet {' and '.join(slos)}" if slos
            else "no SLO set: every request counts as within")


def prefill_policy(options: ServingOptions) -> str:
    """How prompts share the iterations, as a phrase ('' for vLLM V0's whole prefills first)."""
    if not options.chunked_prefill:
        return ""
    if not options.mix_decodes:
        return "prompt chunks in iterations of their own, ahead of the decodes"
    return "chunked prefill" if options.split_prompts else "whole prompts beside the decodes"
