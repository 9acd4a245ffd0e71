"""``laddersim plan --rate R --ttft-slo-s S [--tpot-slo-s T]``: rank deployments by what serving
R requests/s within the SLOs costs (laddersim.plan.serving_plan)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from tqdm import tqdm

from laddersim.errors import UserInputError
from laddersim.cli.plan_inputs import candidate_profiles, checked_shape, gpu_hour_prices
from laddersim.plan.prices import load_prices
from laddersim.plan.serving_plan import plan_for_rate, serving_candidates
from laddersim.cli.serving_cmd import slo_rule
from laddersim.plan.serving_plan import ServingPlanOption
from laddersim.serving.arrivals import LengthSpec, check_load
from laddersim.serving.capacity import OfferedLoad
from laddersim.serving.options import serving_options
from laddersim.tables import format_table

DEFINITIONS = ("Capacity: the highest request rate one replica serves within the SLOs (continuous batching, "
               "laddersim serving; '>=' where every rate tried passed, up to the replica's saturation throughput); "
               "replicas = fewest reaching --rate; $/h = GPUs x price per GPU-hour.")


def serving_plan_options(args: argparse.Namespace, progress: bool = True) -> tuple[list[ServingPlanOption], int]:
    """(options cheapest first, configurations tried) of ``plan --rate``; every input checked first."""
    if args.rate is None or args.ttft_slo_s is None:
        raise UserInputError("rate: planning for a request rate needs --rate and --ttft-slo-s (and optionally "
                             "--tpot-slo-s)")
    check_load(args.requests, args.rate)
    shape = checked_shape(args)
    options = serving_options(ttft_slo_s=args.ttft_slo_s, tpot_slo_s=args.tpot_slo_s)
    prices = load_prices(args.prices)
    profiles, _ = candidate_profiles(args.profiles, prices)
    candidates = serving_candidates(shape, profiles, args.schedule, args.tp, args.max_nodes)
    if not candidates:
        raise UserInputError("tp: no (profile, TP) to simulate; check --tp, --max-nodes and --profiles")
    usd = gpu_hour_prices(prices, profiles)
    load = OfferedLoad(args.requests, LengthSpec("fixed", args.prompt_len), LengthSpec("fixed", args.gen_len))
    with tqdm(total=len(candidates), desc="plan", unit="config", file=sys.stderr,
              disable=args.no_progress or not progress) as bar:
        ranked = plan_for_rate(shape, candidates, usd, args.rate, options, load, args.dtype,
                               done=lambda: bar.update(1))
    return ranked, len(candidates)


def run_serving_plan(args: argparse.Namespace) -> int:
    options_ranked, tried = serving_plan_options(args)
    shape_name = checked_shape(args).name
    rule = slo_rule(serving_options(ttft_slo_s=args.ttft_slo_s, tpot_slo_s=args.tpot_slo_s))
    if args.json:
        json.dump([asdict(o) for o in options_ranked[:args.top]], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if options_ranked else 1
    print(f"{shape_name}: {tried} configurations, {len(options_ranked)} sustain a rate within the SLOs; "
          f"cheapest for {args.rate:g} requests/s of prompt-len {args.prompt_len}, gen-len {args.gen_len} tokens "
          f"({args.requests} requests per rate tried)")
    if not options_ranked:
        print(f"no configuration meets the SLOs at any rate (a rate is sustained when {rule})")
        return 1
    rows = [{"rank": i + 1, **asdict(o), "capacity": (">= " if o.capacity_at_least else "")
             + f"{o.capacity_req_per_s:.2f}"} for i, o in enumerate(options_ranked[:args.top])]
    print(format_table(rows, [
        ("rank", "#", "{}"), ("hardware", "profile", "{}"), ("schedule", "schedule", "{}"), ("tp", "tp", "{}"),
        ("capacity", "req/s per replica", "{}"), ("replicas", "replicas", "{}"),
        ("gpus", "GPUs", "{}"), ("ttft_p99_s", "TTFT p99 ms", "{:.0f}", 1e3),
        ("tpot_p99_s", "TPOT p99 ms", "{:.1f}", 1e3), ("usd_per_hour", "$/h", "{:.2f}"),
    ]))
    print(f"p99s are at the capacity, where a rate counts as sustained when {rule}: "
          "a p99 above an SLO is within that rule.")
    print(DEFINITIONS)
    return 0
