"""``plan`` with a request rate (``rate``, ``ttft_slo_s``, optionally ``tpot_slo_s``): rank
deployments by what serving that many requests/s within the SLOs costs (laddersim.planning.serving_plan)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from laddersim.api.plan_inputs import candidate_profiles, checked_shape, gpu_hour_prices, note_unmeasured_candidates

if TYPE_CHECKING:
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


def serving_plan(model, *, profiles, prices, schedules, tps, max_nodes: int, prompt_len: int, gen_len: int,
                 dtype: str, rate: float | None, ttft_slo_s: float | None, tpot_slo_s: float | None, requests: int,
                 max_batched_tokens: int | None, chunked_prefill: bool, progress: bool, pps=None,
                 workers: int | None = None) -> RatePlanAnswer:
    """``plan`` with a rate (see ``laddersim.api.plan``); every input checked first, the workload
    included (plan_for_rate); ``workers`` processes (default all cores) evaluate the candidates."""
    from tqdm import tqdm

    from laddersim.errors import UserInputError
    from laddersim.planning.prices import load_prices
    from laddersim.planning.serving_plan import plan_for_rate, serving_candidates
    from laddersim.planning.task_pool import default_workers
    from laddersim.traffic.arrivals import LengthSpec, check_load
    from laddersim.traffic.capacity import OfferedLoad
    from laddersim.traffic.options import serving_options

    if rate is None or ttft_slo_s is None:
        raise UserInputError("rate: planning for a request rate needs --rate and --ttft-slo-s (and optionally "
                             "--tpot-slo-s)")
    check_load(requests, rate)
    shape = checked_shape(model, schedules, tps)
    # The engine and SLOs each candidate is simulated with (serving's defaults where not given).
    budget = {} if max_batched_tokens is None else {"max_batched_tokens": max_batched_tokens}
    options = serving_options(ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, chunked_prefill=chunked_prefill, **budget)
    price_file = load_prices(prices)
    candidates_by_name, _ = candidate_profiles(profiles, price_file)
    candidates = serving_candidates(shape, candidates_by_name, schedules, tps, max_nodes, pps)
    if not candidates:
        raise UserInputError("tp: no (profile, TP) to simulate; check --tp, --max-nodes and --profiles")
    usd = gpu_hour_prices(price_file, candidates_by_name)
    load = OfferedLoad(requests, LengthSpec("fixed", prompt_len), LengthSpec("fixed", gen_len))
    with tqdm(total=len(candidates), desc="plan", unit="config", file=sys.stderr, disable=not progress) as bar:
        plan = plan_for_rate(shape, candidates, usd, rate, options, load, dtype, done=lambda: bar.update(1),
                             workers=workers or default_workers())
    note_unmeasured_candidates(candidates_by_name)
    return RatePlanAnswer(plan, len(candidates), shape.name, options)
