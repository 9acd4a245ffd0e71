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
from laddersim.serving.arrivals import LengthSpec
from laddersim.serving.capacity import OfferedLoad
from laddersim.serving.options import serving_options
from laddersim.tables import format_table

DEFINITIONS = ("Capacity: the highest request rate one replica serves with 90% of requests within the SLOs "
               "(continuous batching, laddersim serving); replicas = fewest reaching --rate; $/h = GPUs x price "
               "per GPU-hour.")


def run_serving_plan(args: argparse.Namespace) -> int:
    if args.rate is None or args.ttft_slo_s is None:
        raise UserInputError("rate: planning for a request rate needs --rate and --ttft-slo-s (and optionally "
                             "--tpot-slo-s)")
    shape = checked_shape(args)
    options = serving_options(ttft_slo_s=args.ttft_slo_s, tpot_slo_s=args.tpot_slo_s)
    prices = load_prices(args.prices)
    profiles, _ = candidate_profiles(args.profiles, prices)
    candidates = serving_candidates(shape, profiles, args.schedule, args.tp, args.max_nodes)
    if not candidates:
        raise UserInputError("tp: no (profile, TP) to simulate; check --tp, --max-nodes and --profiles")
    usd = gpu_hour_prices(prices, profiles)
    load = OfferedLoad(args.requests, LengthSpec("fixed", args.prompt_len), LengthSpec("fixed", args.gen_len))
    with tqdm(total=len(candidates), desc="plan", unit="config", file=sys.stderr, disable=args.no_progress) as bar:
        options_ranked = plan_for_rate(shape, candidates, usd, args.rate, options, load, args.dtype,
                                       done=lambda: bar.update(1))
    if args.json:
        json.dump([asdict(o) for o in options_ranked[:args.top]], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if options_ranked else 1
    print(f"{shape.name}: {len(candidates)} configurations, {len(options_ranked)} sustain a rate within the SLOs; "
          f"cheapest for {args.rate:g} requests/s")
    if not options_ranked:
        print("no configuration meets the SLOs at any rate")
        return 1
    print(format_table([{"rank": i + 1, **asdict(o)} for i, o in enumerate(options_ranked[:args.top])], [
        ("rank", "#", "{}"), ("hardware", "profile", "{}"), ("schedule", "schedule", "{}"), ("tp", "tp", "{}"),
        ("capacity_req_per_s", "req/s per replica", "{:.2f}"), ("replicas", "replicas", "{}"),
        ("gpus", "GPUs", "{}"), ("ttft_p99_s", "TTFT p99 ms", "{:.0f}", 1e3),
        ("tpot_p99_s", "TPOT p99 ms", "{:.1f}", 1e3), ("usd_per_hour", "$/h", "{:.2f}"),
    ]))
    print(DEFINITIONS)
    return 0
