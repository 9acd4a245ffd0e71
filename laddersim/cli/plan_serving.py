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
from laddersim.plan.serving_plan import RatePlan, plan_for_rate, serving_candidates
from laddersim.serving.options import slo_rule
from laddersim.serving.arrivals import LengthSpec, check_load
from laddersim.serving.capacity import OfferedLoad
from laddersim.serving.options import ServingOptions, serving_options
from laddersim.tables import format_table

DEFINITIONS = ("Capacity: the highest request rate one replica serves within the SLOs (continuous batching, "
               "laddersim serving; '>=' where every rate tried passed, up to the replica's saturation throughput); "
               "replicas = fewest reaching --rate; $/h = GPUs x price per GPU-hour.")


def _options(args: argparse.Namespace):
    """The engine and SLOs each candidate is simulated with (serving's defaults where not given)."""
    budget = {} if args.max_batched_tokens is None else {"max_batched_tokens": args.max_batched_tokens}
    return serving_options(ttft_slo_s=args.ttft_slo_s, tpot_slo_s=args.tpot_slo_s,
                           chunked_prefill=args.chunked_prefill, **budget)


def serving_plan_options(args: argparse.Namespace) -> tuple[RatePlan, int, str, ServingOptions]:
    """(options cheapest first and the candidates skipped, configurations tried, the model's name,
    the engine and SLOs simulated) of ``plan --rate``; every input checked first, the workload
    included (plan_for_rate)."""
    if args.rate is None or args.ttft_slo_s is None:
        raise UserInputError("rate: planning for a request rate needs --rate and --ttft-slo-s (and optionally "
                             "--tpot-slo-s)")
    check_load(args.requests, args.rate)
    shape = checked_shape(args)
    options = _options(args)
    prices = load_prices(args.prices)
    profiles, _ = candidate_profiles(args.profiles, prices)
    candidates = serving_candidates(shape, profiles, args.schedule, args.tp, args.max_nodes)
    if not candidates:
        raise UserInputError("tp: no (profile, TP) to simulate; check --tp, --max-nodes and --profiles")
    usd = gpu_hour_prices(prices, profiles)
    load = OfferedLoad(args.requests, LengthSpec("fixed", args.prompt_len), LengthSpec("fixed", args.gen_len))
    with tqdm(total=len(candidates), desc="plan", unit="config", file=sys.stderr, disable=args.no_progress) as bar:
        plan = plan_for_rate(shape, candidates, usd, args.rate, options, load, args.dtype,
                             done=lambda: bar.update(1))
    return plan, len(candidates), shape.name, options


def _none_line(plan: RatePlan, rule: str) -> str:
    """The one line of an answer with no option (exit 1)."""
    if all(s.reason.startswith("no rate found") for s in plan.skipped):
        return f"no configuration meets the SLOs at any rate (a rate is sustained when {rule})"
    return (f"no configuration can serve this workload: all {len(plan.skipped)} candidates skipped "
            "(a request beyond their KV cache or memory, or no rate within the SLOs)")


def run_serving_plan(args: argparse.Namespace) -> int:
    plan, tried, shape_name, options = serving_plan_options(args)
    options_ranked = plan.options
    rule = slo_rule(options)
    if args.json:  # the options on stdout; a skipped candidate is one stderr line
        for skipped in plan.skipped:
            print(f"plan: skipped {skipped.line()}", file=sys.stderr)
        if not options_ranked:
            print(f"plan: {_none_line(plan, rule)}", file=sys.stderr)
        json.dump([asdict(o) for o in options_ranked[:args.top]], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if options_ranked else 1
    engine = f"{options.max_batched_tokens} tokens per iteration" + (", chunked prefill" if options.chunked_prefill
                                                                      else "")
    print(f"{shape_name}: {tried} configurations, {len(options_ranked)} sustain a rate within the SLOs, "
          f"{len(plan.skipped)} skipped; cheapest for {args.rate:g} requests/s of prompt-len {args.prompt_len}, "
          f"gen-len {args.gen_len} tokens ({args.requests} requests per rate tried; {engine})")
    if plan.skipped:
        print("skipped (cannot serve this workload, or no rate within the SLOs):")
        for skipped in plan.skipped:
            print(f"  {skipped.line()}")
    if not options_ranked:
        print(_none_line(plan, rule))
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
