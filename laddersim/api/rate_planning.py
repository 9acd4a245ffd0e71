"""``plan`` with a request rate (``rate``, ``ttft_slo_s``, optionally ``tpot_slo_s``): rank
deployments by what serving that many requests/s within the SLOs costs (laddersim.planning.serving_plan)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from laddersim.api.plan_inputs import checked_shape, note_unmeasured_candidates, priced_candidates

if TYPE_CHECKING:
    from laddersim.api.plan_params import PlanParams
    from laddersim.planning.serving_plan import RatePlan
    from laddersim.traffic.options import ServingOptions


@dataclass(frozen=True)
class RatePlanAnswer:
    """The options cheapest first and the candidates skipped, the configurations tried, the
    model's name, and the engine and SLOs simulated."""

    plan: RatePlan
    tried: int
    model: str
    options: ServingOptions


def serving_plan(params: PlanParams, *, progress: bool = False) -> RatePlanAnswer:
    """``plan`` of ``params`` with a rate (see ``laddersim.api.plan``); every input checked first,
    the workload included (plan_for_rate); ``params.workers`` processes (default all cores)
    evaluate the candidates."""
    from laddersim.errors import UserInputError
    from laddersim.planning.serving_plan import plan_for_rate, serving_candidates
    from laddersim.planning.task_pool import default_workers
    from laddersim.support.progress import progress_bar
    from laddersim.traffic.arrivals import LengthSpec
    from laddersim.traffic.capacity import OfferedLoad
    from laddersim.traffic.options import serving_options

    p = params
    if p.rate is not None and p.concurrency is not None:
        raise UserInputError("concurrency: plan for --rate or for --concurrency, not both")
    if (p.rate is None and p.concurrency is None) or p.ttft_slo_s is None:
        raise UserInputError("rate: planning for a request rate needs --rate (or --concurrency) and --ttft-slo-s "
                             "(and optionally --tpot-slo-s)")
    if p.scheduler is not None and p.concurrency is None:
        raise UserInputError("scheduler: with --concurrency (a closed loop under that engine's scheduler)")
    shape = checked_shape(p.model, p.schedules, p.tps)
    # The engine and SLOs each candidate is simulated with (serving's defaults where not given).
    budget = {} if p.max_batched_tokens is None else {"max_batched_tokens": p.max_batched_tokens}
    options = serving_options(ttft_slo_s=p.ttft_slo_s, tpot_slo_s=p.tpot_slo_s, chunked_prefill=p.chunked_prefill,
                              slo_attainment=p.slo_attainment, **budget)
    found = priced_candidates(p.profiles, p.prices, p.price_per_gpu_hour)
    candidates = serving_candidates(shape, found.profiles, p.schedules, p.tps, p.max_nodes, p.pps)
    if not candidates:
        raise UserInputError("tp: no (profile, TP) to simulate; check --tp, --max-nodes and --profiles")
    load = OfferedLoad(p.requests, LengthSpec("fixed", p.prompt_len), LengthSpec("fixed", p.gen_len))
    with progress_bar(len(candidates), "plan", "config", enabled=progress) as bar:
        if p.concurrency is not None:
            from laddersim.planning.concurrency_plan import ConcurrencyLoad, plan_for_concurrency
            from laddersim.traffic.engines import engine_options

            options = engine_options(p.scheduler or "vllm", options, **budget)
            plan = plan_for_concurrency(shape, candidates, found.usd_per_gpu_hour, p.concurrency, options,
                                        ConcurrencyLoad(p.prompt_len, p.gen_len, p.requests), p.dtype,
                                        done=lambda: bar.update(1), workers=p.workers or default_workers())
        else:
            plan = plan_for_rate(shape, candidates, found.usd_per_gpu_hour, p.rate, options, load, p.dtype,
                                 done=lambda: bar.update(1), workers=p.workers or default_workers())
    for line in found.notes(p.price_per_gpu_hour, skipped=False):
        print(line, file=sys.stderr)
    note_unmeasured_candidates(found.profiles)
    return RatePlanAnswer(plan, len(candidates), shape.name, options)
