"""``ServingParams``: one replica under a stream of requests (``laddersim.serving``): the scenario,
the offered load, the engine's limits, the SLOs and the capacity search, each checked once (the
field rules of ``laddersim.api.params``; the engine's defaults are ``ServingOptions``')."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, model_validator

from laddersim.api.params import (
    Batch,
    Dtype,
    Framework,
    KvCacheDtype,
    Hardware,
    Model,
    OptionalPath,
    Params,
    Quant,
    Seed,
    Switch,
    Tokens,
    Tp,
    count,
    number,
    one_of,
)
from laddersim.support.choices import KV_READS
from laddersim.support.limits import (
    DEFAULT_GEN_LEN,
    DEFAULT_PROMPT_LEN,
    MAX_BLOCK_SIZE,
    MAX_GAMMA_SHAPE,
    MAX_RATE,
    MAX_REQUESTS,
    MAX_SLO_S,
    MIN_GAMMA_SHAPE,
    MIN_RATE,
)
from laddersim.traffic.closed_loop import MAX_CONCURRENCY
from laddersim.traffic.engines import ENGINES, engine_options
from laddersim.traffic.options import ServingOptions

ENGINE = ServingOptions()  # the engine's and the SLO rule's defaults, stated once in ServingOptions


def _length(field: str):
    """A token count, or a length distribution (``uniform:LO:HI``, ``exponential:MEAN``), as
    ``laddersim.traffic.arrivals.parse_length`` reads it; kept as given (text or an int)."""
    def check(value):
        from laddersim.errors import UserInputError
        from laddersim.traffic.arrivals import parse_length

        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"must be a token count or a length distribution, got {value!r}")
        try:
            parse_length(str(value), field)
        except UserInputError as exc:
            raise ValueError(str(exc).removeprefix(f"{field}: ")) from None
        return value
    return BeforeValidator(check)


Rate = Annotated[float | None, number(MIN_RATE, MAX_RATE, optional=True)]  # requests/s
Slo = Annotated[float | None, number(0.0, MAX_SLO_S, above=True, optional=True)]  # seconds


class ServingParams(Params):
    """``laddersim.serving``'s parameters (see there for each one's meaning and units)."""

    model: Model
    hardware: Hardware
    tp: Tp
    pp: Tp = 1
    ep: Tp = 1  # a mixture-of-experts model's expert-parallel ranks within each TP group
    dtype: Dtype = "bfloat16"
    quant: Quant = "none"
    kv_cache_dtype: KvCacheDtype = "auto"
    kv_reads: Annotated[str, one_of(KV_READS)] = "per_kv_head"  # a GQA-aware paged-attention kernel
    framework: Framework = "gpt-fast"
    rate: Rate = None
    concurrency: Annotated[int | None, count(1, MAX_CONCURRENCY, optional=True)] = None
    warmup: Annotated[int | None, count(0, MAX_REQUESTS, optional=True)] = None
    scheduler: Annotated[str | None, one_of(tuple(ENGINES), optional=True)] = None
    requests: Annotated[int, count(1, MAX_REQUESTS)] = 1000
    prompt_len: Annotated[Any, _length("prompt-len")] = DEFAULT_PROMPT_LEN
    gen_len: Annotated[Any, _length("gen-len")] = DEFAULT_GEN_LEN
    gamma_shape: Annotated[float, number(MIN_GAMMA_SHAPE, MAX_GAMMA_SHAPE)] = 1.0
    trace: OptionalPath = None
    max_running: Batch = ENGINE.max_running
    max_batched_tokens: Tokens = ENGINE.max_batched_tokens
    chunked_prefill: Switch = ENGINE.chunked_prefill
    block_size: Annotated[int, count(1, MAX_BLOCK_SIZE)] = ENGINE.block_size
    ttft_slo_s: Slo = ENGINE.ttft_slo_s
    tpot_slo_s: Slo = ENGINE.tpot_slo_s
    slo_attainment: Annotated[float, number(0.0, 1.0, above=True)] = ENGINE.slo_attainment
    capacity: Switch = False
    target_rate: Rate = None
    prices: OptionalPath = None
    seed: Seed = 0

    @model_validator(mode="after")
    def _together(self) -> "ServingParams":
        """The options that need or exclude one another."""
        if self.concurrency is not None:
            given = [f for f, v in (("--rate", self.rate is not None), ("--trace", self.trace),
                                    ("--capacity", self.capacity), ("--gamma-shape", self.gamma_shape != 1.0)) if v]
            if given:
                raise ValueError(f"concurrency: a closed loop of --concurrency requests in flight; give it or "
                                 f"{', '.join(given)}, not both")
            return self
        if self.warmup is not None:
            raise ValueError("warmup: the requests left out of a closed loop; needs --concurrency")
        if self.target_rate and not self.capacity:
            raise ValueError("target-rate: needs --capacity (the cost follows from the replica's capacity)")
        if self.capacity and self.trace:
            raise ValueError("capacity: searches over --rate with drawn requests; not available with --trace")
        if self.capacity and self.ttft_slo_s is None:
            raise ValueError("ttft-slo-s: --capacity needs a time-to-first-token SLO")
        if self.trace:
            given = [f for f, v in (("--rate", self.rate), ("--gamma-shape", self.gamma_shape != 1.0)) if v]
            if given:
                raise ValueError(f"trace: give --trace or {', '.join(given)}, not both")
        elif self.rate is None:
            raise ValueError("rate: give --rate REQ_PER_S, --concurrency C or --trace FILE")
        return self

    @property
    def scheduler_name(self) -> str | None:
        """The engine whose scheduler forms the iterations: ``scheduler``, or vLLM's for a closed
        loop (the benchmarks' engine); None: the limits as given."""
        return self.scheduler or ("vllm" if self.concurrency is not None else None)

    def engine(self) -> ServingOptions:
        """The engine's limits and the SLOs, as the simulator takes them (by keyword). Under a
        named scheduler (``laddersim.traffic.engines``) its token budget and running limit replace
        the defaults; a ``max_running`` or ``max_batched_tokens`` other than the default overrides
        them."""
        options = ServingOptions(max_running=self.max_running, max_batched_tokens=self.max_batched_tokens,
                                 chunked_prefill=self.chunked_prefill, block_size=self.block_size,
                                 ttft_slo_s=self.ttft_slo_s, tpot_slo_s=self.tpot_slo_s,
                                 slo_attainment=self.slo_attainment)
        if self.scheduler_name is None:
            return options
        given = {name: getattr(self, name) for name in ("max_running", "max_batched_tokens")
                 if getattr(self, name) != getattr(ENGINE, name)}
        return engine_options(self.scheduler_name, options, **given)


SERVING = ServingParams.defaults()
