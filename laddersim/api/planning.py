"""``plan``: the cheapest deployments meeting a target (laddersim.planning.planner; with a request
rate, laddersim.api.rate_planning); ``break_even``: the fabric at which one schedule on one machine
matches another (laddersim.planning.break_even)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.api.common import note_unmeasured, with_choices
from laddersim.api.plan_inputs import checked_shape, note_unmeasured_candidates, priced_candidates
from laddersim.api.plan_params import BREAK_EVEN, PLAN, BreakEvenParams, PlanParams
# What the command line names beside the parameters: the default price file, the SLO rule in words.
from laddersim.planning.prices import DEFAULT_PRICES  # noqa: F401
from laddersim.traffic.options import slo_rule  # noqa: F401

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.api.rate_planning import RatePlanAnswer
    from laddersim.planning.break_even import BreakEven
    from laddersim.planning.planner import PlanOption
    from laddersim.planning.splits import SplitVerdict


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


def plan_run(params: PlanParams, *, progress: bool = False) -> PlanAnswer | RatePlanAnswer:
    """``plan`` of ``params`` (see there), every option rather than the first ``top``; a plan for
    a request rate when ``rate``, ``ttft_slo_s`` or ``tpot_slo_s`` is given."""
    from laddersim.errors import UserInputError
    from laddersim.planning.planner import (Target, candidate_points, candidate_splits, ep_choices, named_allreduce,
                                            rank_options)
    from laddersim.planning.splits import split_verdicts
    from laddersim.support.progress import progress_bar
    from laddersim.sweeps.runner import run_points

    p = params
    if p.for_rate:
        from laddersim.api.rate_planning import serving_plan

        return serving_plan(p, progress=progress)
    for flag, given in (("max-batched-tokens", p.max_batched_tokens is not None),
                        ("chunked-prefill", p.chunked_prefill)):
        if given:
            raise UserInputError(f"{flag}: only with --rate (a serving plan); the batch plan simulates decode "
                                 "steps, not requests")
    target = Target(p.min_user_tokens_per_s, p.min_total_tokens_per_s, p.max_token_latency_ms)
    if p.gen_len < 2:
        raise UserInputError("gen-len: must be >= 2 (throughput is measured over decode steps)")
    # Check every input before anything is printed, so a bad one is one error line.
    shape = checked_shape(p.model, p.schedules, p.tps)
    found = priced_candidates(p.profiles, p.prices, p.price_per_gpu_hour)
    candidates = found.profiles
    no_dtype = [name for name, (_, profile) in candidates.items() if p.dtype not in profile.gpu.dtypes()]
    candidates = {name: entry for name, entry in candidates.items() if name not in no_dtype}
    if not candidates:
        raise UserInputError(f"dtype: no candidate profile has a {p.dtype} peak "
                             f"({', '.join(no_dtype)}); allowed: another --dtype or --profiles")
    points = candidate_points(str(p.model), shape, candidates, p.schedules, p.batches, p.tps, p.prompt_len, p.gen_len,
                              p.dtype, p.kv_cache, p.max_nodes, p.pps, p.eps)
    for line in found.notes(p.price_per_gpu_hour):  # only once the inputs are known good: one error line
        print(line, file=sys.stderr)
    if no_dtype:
        print(f"plan: not considered (no {p.dtype} peak): {', '.join(no_dtype)}", file=sys.stderr)
    note_unmeasured_candidates(candidates)
    rows = []
    with progress_bar(len(points), "plan", "config", enabled=progress) as bar:
        for done in run_points(points, p.workers or os.cpu_count() or 1):
            rows.extend(done)
            bar.update(len(done))
    errors = [r for r in rows if r["status"] == "error"]
    if errors:
        raise UserInputError(f"plan: {len(errors)} configurations failed to simulate, e.g. {errors[0]['error']}")
    options = rank_options(rows, {name: found.usd_per_gpu_hour[name] for name in candidates}, target, p.rank_by)
    options = named_allreduce(options, shape, candidates, p.dtype, p.kv_cache)
    feasible = sum(r["status"] == "ok" for r in rows)
    refused = [(name, tp, pp, ep, why) for name, (_, profile) in candidates.items()
               for tp, pp in candidate_splits(shape, profile, p.tps, p.pps, p.max_nodes)
               for ep, why in ep_choices(shape, tp, p.eps) if why is not None]
    if shape.moe is not None and not feasible:  # the expert-parallel layout that would fit, not simulated
        from laddersim.planning.ep_step import layout_verdicts

        refused += layout_verdicts(str(p.model), shape, candidates, p.tps, max(p.batches), p.prompt_len, p.gen_len,
                                   p.dtype, p.kv_cache)
    return PlanAnswer(options, shape.name, len(points), feasible, p.rank_by or target.default_rank_by,
                      split_verdicts(rows, options, refused))


@with_choices
def plan(model: str | Path, *, profiles: Sequence[str] | None = PLAN.profiles, prices: str | Path | None = PLAN.prices,
         price_per_gpu_hour: float | None = PLAN.price_per_gpu_hour, schedules: Sequence[str] = PLAN.schedules,
         batches: Sequence[int] = PLAN.batches, tps: Sequence[int] | None = PLAN.tps, max_nodes: int = PLAN.max_nodes,
         prompt_len: int = PLAN.prompt_len, gen_len: int = PLAN.gen_len, dtype: str = PLAN.dtype,
         kv_cache: str = PLAN.kv_cache, min_user_tokens_per_s: float | None = PLAN.min_user_tokens_per_s,
         min_total_tokens_per_s: float | None = PLAN.min_total_tokens_per_s,
         max_token_latency_ms: float | None = PLAN.max_token_latency_ms, rate: float | None = PLAN.rate,
         concurrency: int | None = PLAN.concurrency, scheduler: str | None = PLAN.scheduler,
         ttft_slo_s: float | None = PLAN.ttft_slo_s, tpot_slo_s: float | None = PLAN.tpot_slo_s,
         slo_attainment: float = PLAN.slo_attainment, requests: int = PLAN.requests, max_batched_tokens: int | None = PLAN.max_batched_tokens,
         chunked_prefill: bool = PLAN.chunked_prefill, rank_by: str | None = PLAN.rank_by, top: int = PLAN.top,
         workers: int | None = PLAN.workers, progress: bool = False, pps: Sequence[int] | None = PLAN.pps,
         eps: Sequence[int] | None = PLAN.eps) -> pd.DataFrame:
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
    and ``chunked_prefill`` as ``serving``'s); ``slo_attainment``: the share of requests that must
    meet both SLOs (default 0.9, as ``serving``'s), and each option's replicas are checked by a
    serving run of their share of the rate at it (more replicas where that run falls short).
    ``concurrency``: instead of ``rate``, ``concurrency`` requests in flight in all (a closed
    loop per replica, as ``serving``'s, under ``scheduler``'s defaults, default vllm): each
    candidate's capacity is the most it keeps in flight within the SLOs. ``profiles``: candidate profiles (default every
    shipped one with a price in ``prices``, a GPU-hour price file, default
    laddersim/data/prices.yaml); ``price_per_gpu_hour``: USD per GPU-hour of every candidate the
    price file does not price (default none: a named one is refused, a default one skipped);
    ``schedules``: default standard and ladder; ``batches``: batch sizes (concurrent users per
    replica; default 1, 2, 4, ..., 256); ``tps``: TP degrees (default all valid), spanning at most
    ``max_nodes`` nodes (default 4); ``prompt_len``, ``gen_len``: tokens per request (default 1024
    and 512); ``dtype``: {DTYPES} (default bfloat16); ``kv_cache``: {KV_CACHES} (default static);
    ``rank_by``: usd_per_hour or usd_per_million_tokens (default: usd_per_hour with a total
    target, else per million tokens); ``top``: options returned (default 10); ``workers``:
    processes (default all cores); ``progress``: a bar on stderr (a terminal). ``pps``: pipeline
    stages to split the GPUs into (default 1: TP groups alone); every (TP, PP) split of each
    profile whose stages fit ``max_nodes`` nodes per replica is simulated, a pipeline with as many
    micro-batches in flight as stages where the batch splits evenly (``gcd(batch, PP)``), GPUs per
    replica TP x PP. ``frame.attrs["splits"]`` (the decode plan): per (profile, TP, PP) whether it
    meets the target, with which schedule and batch, and why (weights do not fit, misses the
    target, the stage link and bubbles). ``eps``: a mixture-of-experts model's expert-parallel
    degrees to consider in each TP group (default every one its experts allow at each TP:
    ``laddersim.planning.planner.candidate_eps``); each (TP, EP) split gets its verdict. A
    mixture-of-experts model's data-parallel-attention layouts of one node are ranked beside them
    (``laddersim.planning.planner.candidate_layouts``: EP/TP attention replicas of TP ``tps``, each
    serving ``batches`` sequences, the experts over all EP GPUs, as ``simulate(dp_attention=True)``;
    the option's ``dp_attention`` is True, its ``batch`` every replica's sequences, its GPUs EP)."""
    from dataclasses import asdict

    import pandas as pd

    params = PlanParams.pick(locals())
    answer = plan_run(params, progress=progress)
    options = answer.options if isinstance(answer, PlanAnswer) else answer.plan.options
    frame = pd.DataFrame([asdict(o) for o in options[:params.top]])
    if isinstance(answer, PlanAnswer):
        frame.attrs["splits"] = pd.DataFrame([asdict(v) for v in answer.splits])
    return frame


def break_even(model: str | Path, tp: int, a: str, b: str, *, batch: int = BREAK_EVEN.batch,
               prompt_len: int = BREAK_EVEN.prompt_len, gen_len: int = BREAK_EVEN.gen_len,
               dtype: str = BREAK_EVEN.dtype, kv_cache: str = BREAK_EVEN.kv_cache, vary: str = BREAK_EVEN.vary,
               lo: float = BREAK_EVEN.lo, hi: float = BREAK_EVEN.hi) -> BreakEven:
    """``laddersim plan break-even``: the scale of side ``a``'s fabric at which its tokens/s
    (batch x gen_len / (prefill + decode)) equals side ``b``'s, by bisection.

    ``a``, ``b``: "SCHEDULE@PROFILE" (e.g. "ladder@h100-sxm-p2p-off"; ``a`` is the side whose
    fabric varies); ``model``, ``tp``, ``batch`` (default 1), ``prompt_len``, ``gen_len`` (default
    1024 and 512), ``dtype`` (default bfloat16), ``kv_cache`` (default static): the scenario both
    run. ``vary``: intra_bandwidth (default), intra_latency, inter_bandwidth or inter_latency;
    ``lo``, ``hi``: the scales searched (default 0.01 to 100). The answer's ``scale`` is None when
    the sides do not cross in [lo, hi]; ``value`` is the varied quantity at the crossing."""
    from laddersim.api.common import profile_of
    from laddersim.planning.break_even import SharedRun, break_even as search, parse_side

    p = BreakEvenParams.pick(locals())
    model, tp, batch, prompt_len, gen_len, dtype, kv_cache = (p.model, p.tp, p.batch, p.prompt_len, p.gen_len,
                                                              p.dtype, p.kv_cache)
    side_a, side_b = parse_side(p.a, "a"), parse_side(p.b, "b")
    result = search(SharedRun(str(model), tp, batch, prompt_len, gen_len, dtype, kv_cache), side_a, side_b, p.vary,
                    p.lo, p.hi)
    for name in dict.fromkeys((side_a.hardware, side_b.hardware)):
        note_unmeasured(profile_of(name))
    return result
