"""``plan``: the cheapest deployments meeting a target (laddersim.planning.planner; with a request
rate, laddersim.api.rate_planning); ``break_even``: the fabric at which one schedule on one machine
matches another (laddersim.planning.break_even)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.api.common import listed, note_unmeasured
from laddersim.api.plan_inputs import candidate_profiles, checked_shape, gpu_hour_prices, note_unmeasured_candidates
from laddersim.support.choices import DEFAULT_PLAN_BATCHES, DEFAULT_SCHEDULES
from laddersim.support.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.api.rate_planning import RatePlanAnswer
    from laddersim.planning.break_even import BreakEven
    from laddersim.planning.planner import PlanOption
    from laddersim.planning.splits import SplitVerdict

PLAN_REQUESTS = 200  # plan with a rate: requests per rate tried (serving's default is 1000; see plan())


@dataclass(frozen=True)
class PlanAnswer:
    """A decode steady-state plan: every option meeting the target, cheapest first, and what was
    searched (configurations simulated, how many fit in memory, the key ranked by)."""

    options: list[PlanOption]
    model: str
    configurations: int
    feasible: int
    rank_by: str
    splits: list[SplitVerdict]  # per (profile, TP, PP): meets the target or why not (laddersim.planning.splits)


def plan_run(model, *, profiles, prices, schedules, batches, tps, max_nodes: int, prompt_len: int, gen_len: int,
             dtype: str, kv_cache: str, min_user_tokens_per_s, min_total_tokens_per_s, max_token_latency_ms, rate,
             ttft_slo_s, tpot_slo_s, requests: int, max_batched_tokens, chunked_prefill: bool, rank_by,
             workers, progress: bool, pps=None) -> PlanAnswer | RatePlanAnswer:
    """``plan`` (see there for the parameters), every option rather than the first ``top``; a plan
    for a request rate when ``rate``, ``ttft_slo_s`` or ``tpot_slo_s`` is given."""
    from tqdm import tqdm

    from laddersim.errors import UserInputError
    from laddersim.planning.planner import Target, candidate_points, rank_options
    from laddersim.planning.prices import load_prices
    from laddersim.planning.splits import split_verdicts
    from laddersim.sweeps.runner import run_points

    schedules, batches, tps, profiles = listed(schedules), listed(batches), listed(tps), listed(profiles)
    pps = listed(pps)
    if rate is not None or ttft_slo_s is not None or tpot_slo_s is not None:
        from laddersim.api.rate_planning import serving_plan

        return serving_plan(model, profiles=profiles, prices=prices, schedules=schedules, tps=tps,
                            max_nodes=max_nodes, prompt_len=prompt_len, gen_len=gen_len, dtype=dtype, rate=rate,
                            ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, requests=requests,
                            max_batched_tokens=max_batched_tokens, chunked_prefill=chunked_prefill, progress=progress,
                            pps=pps, workers=workers)
    for flag, given in (("max-batched-tokens", max_batched_tokens is not None), ("chunked-prefill", chunked_prefill)):
        if given:
            raise UserInputError(f"{flag}: only with --rate (a serving plan); the batch plan simulates decode "
                                 "steps, not requests")
    target = Target(min_user_tokens_per_s, min_total_tokens_per_s, max_token_latency_ms)
    if gen_len < 2:
        raise UserInputError("gen-len: must be >= 2 (throughput is measured over decode steps)")
    # Check every input before anything is printed, so a bad one is one error line.
    shape = checked_shape(model, schedules, tps)
    price_file = load_prices(prices)
    candidates, skipped = candidate_profiles(profiles, price_file)
    no_dtype = [name for name, (_, profile) in candidates.items() if dtype not in profile.gpu.dtypes()]
    candidates = {name: entry for name, entry in candidates.items() if name not in no_dtype}
    if not candidates:
        raise UserInputError(f"dtype: no candidate profile has a {dtype} peak "
                             f"({', '.join(no_dtype)}); allowed: another --dtype or --profiles")
    points = candidate_points(str(model), shape, candidates, schedules, batches, tps, prompt_len, gen_len, dtype,
                              kv_cache, max_nodes, pps)
    if skipped:  # only once the inputs are known good: a bad one stays a single error line
        print(f"plan: not considered (no price): {', '.join(skipped)}", file=sys.stderr)
    if no_dtype:
        print(f"plan: not considered (no {dtype} peak): {', '.join(no_dtype)}", file=sys.stderr)
    note_unmeasured_candidates(candidates)
    rows = []
    with tqdm(total=len(points), desc="plan", unit="config", file=sys.stderr, disable=not progress) as bar:
        for done in run_points(points, workers or os.cpu_count() or 1):
            rows.extend(done)
            bar.update(len(done))
    errors = [r for r in rows if r["status"] == "error"]
    if errors:
        raise UserInputError(f"plan: {len(errors)} configurations failed to simulate, e.g. {errors[0]['error']}")
    options = rank_options(rows, gpu_hour_prices(price_file, candidates), target, rank_by)
    feasible = sum(r["status"] == "ok" for r in rows)
    return PlanAnswer(options, shape.name, len(points), feasible, rank_by or target.default_rank_by,
                      split_verdicts(rows, options))


def plan(model: str | Path, *, profiles: Sequence[str] | None = None, prices: str | Path | None = None,
         schedules: Sequence[str] = DEFAULT_SCHEDULES, batches: Sequence[int] = DEFAULT_PLAN_BATCHES,
         tps: Sequence[int] | None = None, max_nodes: int = 4, prompt_len: int = DEFAULT_PROMPT_LEN,
         gen_len: int = DEFAULT_GEN_LEN, dtype: str = "bfloat16", kv_cache: str = "static",
         min_user_tokens_per_s: float | None = None, min_total_tokens_per_s: float | None = None,
         max_token_latency_ms: float | None = None, rate: float | None = None, ttft_slo_s: float | None = None,
         tpot_slo_s: float | None = None, requests: int = PLAN_REQUESTS, max_batched_tokens: int | None = None,
         chunked_prefill: bool = False, rank_by: str | None = None, top: int = 10, workers: int | None = None,
         progress: bool = False, pps: Sequence[int] | None = None) -> pd.DataFrame:
    """``laddersim plan``: the cheapest deployments (profile, TP, nodes, replicas, schedule, batch)
    meeting a target, ranked, one row per option (``plan --json``'s objects: ``usd_per_hour``,
    ``usd_per_million_tokens``, ``tpot_s``, ``user_tokens_per_s``, ``total_tokens_per_s``, ...);
    empty when none meets it. ``model``: a preset or a config.json path.

    Decode steady state: the targets are ``min_user_tokens_per_s`` (per user),
    ``min_total_tokens_per_s`` (all replicas) and ``max_token_latency_ms`` (at least one). With
    ``rate`` (requests per second) and ``ttft_slo_s`` (and optionally ``tpot_slo_s``, seconds),
    deployments are ranked by what serving that rate within the SLOs costs instead (a
    continuous-batching simulation of ``requests`` requests per rate tried, default 200: below
    serving's 1000 on purpose, as every candidate's capacity is searched; ``max_batched_tokens``
    and ``chunked_prefill`` as ``serving``'s). ``profiles``: candidate profiles (default every
    shipped one with a price in ``prices``, a GPU-hour price file, default
    laddersim/data/prices.yaml); ``schedules``: default standard and ladder; ``batches``: batch
    sizes (concurrent users per replica; default 1, 2, 4, ..., 256); ``tps``: TP degrees (default
    all valid), spanning at most ``max_nodes`` nodes (default 4); ``prompt_len``, ``gen_len``:
    tokens per request (default 1024 and 512); ``dtype``: bfloat16 (default), float16, float32,
    fp8; ``kv_cache``: static (default) or dynamic; ``rank_by``: usd_per_hour or
    usd_per_million_tokens (default: usd_per_hour with a total target, else per million tokens);
    ``top``: options returned (default 10); ``workers``: processes (default all cores);
    ``progress``: a bar on stderr. ``pps``: pipeline stages to split the GPUs into (default 1: TP
    groups alone); every (TP, PP) split of each profile whose stages fit ``max_nodes`` nodes per
    replica is simulated, a pipeline with as many micro-batches in flight as stages where the batch
    splits evenly (``gcd(batch, PP)``), GPUs per replica TP x PP. ``frame.attrs["splits"]`` (the
    decode plan): per (profile, TP, PP) whether it meets the target, with which schedule and batch,
    and why (weights do not fit, misses the target, the stage link and bubbles)."""
    from dataclasses import asdict

    import pandas as pd

    answer = plan_run(model, profiles=profiles, prices=prices, schedules=schedules, batches=batches, tps=tps,
                      max_nodes=max_nodes, prompt_len=prompt_len, gen_len=gen_len, dtype=dtype, kv_cache=kv_cache,
                      min_user_tokens_per_s=min_user_tokens_per_s, min_total_tokens_per_s=min_total_tokens_per_s,
                      max_token_latency_ms=max_token_latency_ms, rate=rate, ttft_slo_s=ttft_slo_s,
                      tpot_slo_s=tpot_slo_s, requests=requests, max_batched_tokens=max_batched_tokens,
                      chunked_prefill=chunked_prefill, rank_by=rank_by, workers=workers, progress=progress, pps=pps)
    options = answer.options if isinstance(answer, PlanAnswer) else answer.plan.options
    frame = pd.DataFrame([asdict(o) for o in options[:top]])
    if isinstance(answer, PlanAnswer):
        frame.attrs["splits"] = pd.DataFrame([asdict(v) for v in answer.splits])
    return frame


def break_even(model: str | Path, tp: int, a: str, b: str, *, batch: int = 1, prompt_len: int = DEFAULT_PROMPT_LEN,
               gen_len: int = DEFAULT_GEN_LEN, dtype: str = "bfloat16", kv_cache: str = "static",
               vary: str = "intra_bandwidth", lo: float = 0.01, hi: float = 100.0) -> BreakEven:
    """``laddersim plan break-even``: the scale of side ``a``'s fabric at which its tokens/s
    (batch x gen_len / (prefill + decode)) equals side ``b``'s, by bisection.

    ``a``, ``b``: "SCHEDULE@PROFILE" (e.g. "ladder@h100-sxm-p2p-off"; ``a`` is the side whose
    fabric varies); ``model``, ``tp``, ``batch`` (default 1), ``prompt_len``, ``gen_len`` (default
    1024 and 512), ``dtype`` (default bfloat16), ``kv_cache`` (default static): the scenario both
    run. ``vary``: intra_bandwidth (default), intra_latency, inter_bandwidth or inter_latency;
    ``lo``, ``hi``: the scales searched (default 0.01 to 100). The answer's ``scale`` is None when
    the sides do not cross in [lo, hi]; ``value`` is the varied quantity at the crossing."""
    from laddersim.api.common import profile_of
    from laddersim.planning.break_even import Scenario, break_even as search, parse_side

    side_a, side_b = parse_side(a, "a"), parse_side(b, "b")
    result = search(Scenario(str(model), tp, batch, prompt_len, gen_len, dtype, kv_cache), side_a, side_b, vary, lo, hi)
    for name in dict.fromkeys((side_a.hardware, side_b.hardware)):
        note_unmeasured(profile_of(name))
    return result
