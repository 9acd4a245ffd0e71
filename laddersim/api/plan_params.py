"""``PlanParams``: what ``laddersim.plan`` searches and for which target (a decode steady state, or
a request rate within SLOs); ``BreakEvenParams``: what ``laddersim.break_even`` compares. Each
range checked once (the field rules of ``laddersim.api.params``)."""

from __future__ import annotations

from typing import Annotated

from laddersim.api.params import (
    MAX_COUNT,
    WORKERS,
    Batch,
    Dtype,
    Model,
    Names,
    OptionalPath,
    Params,
    Switch,
    Tokens,
    Tp,
    count,
    counts,
    number,
    one_of,
)
from laddersim.api.serving_params import ENGINE, Rate, Slo
from laddersim.traffic.closed_loop import MAX_CONCURRENCY
from laddersim.traffic.engines import ENGINES
from laddersim.planning.break_even import VARY
from laddersim.planning.planner import RANK_KEYS
from laddersim.planning.prices import MAX_USD_PER_GPU_HOUR
from laddersim.support.choices import DEFAULT_PLAN_BATCHES, DEFAULT_SCHEDULES, KV_CACHES
from laddersim.support.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN, MAX_BATCH, MAX_REQUESTS, MAX_TOKENS, MAX_TP

MAX_TARGET = 1e15  # a tokens/s or latency target beyond any machine: refused as a typo
Target = Annotated[float | None, number(0.0, MAX_TARGET, above=True, optional=True)]
KvCache = Annotated[str, one_of(KV_CACHES)]

PLAN_REQUESTS = 200  # plan with a rate: requests per rate tried (serving's default is 1000; see plan())


class PlanParams(Params):
    """``laddersim.plan``'s parameters (see there for each one's meaning and units);
    ``price_per_gpu_hour``: USD per GPU-hour of every candidate profile the price file does not
    price (None: such a profile is skipped, or refused when named)."""

    SHOWN = {"tps": "tp", "pps": "pp", "eps": "ep", "batches": "batch", "schedules": "schedule"}  # as the flags

    model: Model
    profiles: Names = None
    prices: OptionalPath = None
    price_per_gpu_hour: Annotated[float | None, number(0.0, MAX_USD_PER_GPU_HOUR, above=True, optional=True)] = None
    schedules: Names = list(DEFAULT_SCHEDULES)
    batches: Annotated[list[int], counts(1, MAX_BATCH)] = list(DEFAULT_PLAN_BATCHES)
    tps: Annotated[list[int] | None, counts(1, MAX_TP, optional=True)] = None
    pps: Annotated[list[int] | None, counts(1, MAX_TP, optional=True)] = None
    eps: Annotated[list[int] | None, counts(1, MAX_TP, optional=True)] = None
    max_nodes: Annotated[int, count(1, MAX_COUNT)] = 4
    prompt_len: Tokens = DEFAULT_PROMPT_LEN
    gen_len: Tokens = DEFAULT_GEN_LEN
    dtype: Dtype = "bfloat16"
    kv_cache: KvCache = "static"
    min_user_tokens_per_s: Target = None
    min_total_tokens_per_s: Target = None
    max_token_latency_ms: Target = None
    rate: Rate = None
    concurrency: Annotated[int | None, count(1, MAX_CONCURRENCY, optional=True)] = None
    scheduler: Annotated[str | None, one_of(tuple(ENGINES), optional=True)] = None
    ttft_slo_s: Slo = None
    tpot_slo_s: Slo = None
    slo_attainment: Annotated[float, number(0.0, 1.0, above=True)] = ENGINE.slo_attainment  # as serving's
    requests: Annotated[int, count(1, MAX_REQUESTS)] = PLAN_REQUESTS
    max_batched_tokens: Annotated[int | None, count(1, MAX_TOKENS, optional=True)] = None
    chunked_prefill: Switch = False
    rank_by: Annotated[str | None, one_of(RANK_KEYS, optional=True)] = None
    top: Annotated[int, count(1, MAX_COUNT)] = 10
    workers: Annotated[int | None, WORKERS] = None

    @property
    def for_rate(self) -> bool:
        """A plan for a request rate or a concurrency (``rate``, ``concurrency``, ``ttft_slo_s`` or
        ``tpot_slo_s`` given)."""
        return (self.rate is not None or self.concurrency is not None or self.ttft_slo_s is not None
                or self.tpot_slo_s is not None)


class BreakEvenParams(Params):
    """``laddersim.break_even``'s parameters (see there)."""

    model: Model
    tp: Tp
    a: str
    b: str
    batch: Batch = 1
    prompt_len: Tokens = DEFAULT_PROMPT_LEN
    gen_len: Tokens = DEFAULT_GEN_LEN
    dtype: Dtype = "bfloat16"
    kv_cache: KvCache = "static"
    vary: Annotated[str, one_of(tuple(VARY))] = "intra_bandwidth"
    lo: Annotated[float, number(0.0, MAX_TARGET, above=True)] = 0.01
    hi: Annotated[float, number(0.0, MAX_TARGET, above=True)] = 100.0


PLAN = PlanParams.defaults()
BREAK_EVEN = BreakEvenParams.defaults()
