"""``laddersim plan``: the cheapest configurations meeting a target; ``plan break-even``: the
fabric at which one schedule on one machine matches another."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from tqdm import tqdm

from laddersim.cli.args import positive_float, positive_int
from laddersim.cli.plan_inputs import candidate_profiles, checked_shape, gpu_hour_prices
from laddersim.cli.plan_serving import run_serving_plan
from laddersim.errors import UserInputError
from laddersim.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN, MAX_RATE, MAX_REQUESTS, MAX_SLO_S, MAX_TOKENS
from laddersim.plan.break_even import VARY, Scenario, break_even, parse_side
from laddersim.plan.planner import (
    DEFAULT_BATCHES,
    RANK_KEYS,
    Target,
    candidate_points,
    rank_options,
)
from laddersim.plan.prices import DEFAULT_PRICES, load_prices
from laddersim.sweep.runner import run_points
from laddersim.tables import format_table

PLAN_REQUESTS = 200  # plan --rate's requests per rate tried (serving's default is 1000; see --requests)
DEFINITIONS = (
    "Decode steady state: user tok/s = 1 / time per output token; total tok/s = replicas x batch / "
    "time per token; replicas = fewest meeting --min-total-tokens-per-s; $/h = GPUs x price per "
    "GPU-hour; $/Mtok = $/h / (total tok/s x 3600) x 1e6."
)


def _workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt-len", type=positive_int("prompt-len", MAX_TOKENS), default=DEFAULT_PROMPT_LEN,
                   help=f"prompt tokens per request (default {DEFAULT_PROMPT_LEN})")
    p.add_argument("--gen-len", type=positive_int("gen-len", MAX_TOKENS), default=DEFAULT_GEN_LEN,
                   help=f"generated tokens per request (default {DEFAULT_GEN_LEN}, as serving and simulate)")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32", "fp8"], default="bfloat16")
    p.add_argument("--kv-cache", choices=["static", "dynamic"], default="static")


def register(sub) -> None:
    p = sub.add_parser(
        "plan", help="cheapest configurations meeting a throughput/latency target; break-even fabrics",
        description="Rank (profile, TP, nodes, replicas, schedule, batch) by cost for a target. "
                    + DEFINITIONS + " Subcommand: plan break-even.")
    p.add_argument("--model", help="preset or config.json path")
    p.add_argument("--profiles", nargs="+", metavar="PROFILE",
                   help="candidate profiles (default: every shipped profile with a price)")
    p.add_argument("--prices", metavar="FILE", help=f"GPU-hour prices (default {DEFAULT_PRICES.name}; same format)")
    p.add_argument("--schedule", nargs="+", default=["standard", "ladder"], help="default: standard ladder")
    p.add_argument("--batch", nargs="+", type=positive_int("batch"), default=list(DEFAULT_BATCHES),
                   help="batch sizes (concurrent users per replica) to consider; default 1 2 4 ... 256")
    p.add_argument("--tp", nargs="+", type=positive_int("tp"), help="TP degrees to consider (default: all valid)")
    p.add_argument("--max-nodes", type=positive_int("max-nodes"), default=4,
                   help="largest number of nodes one TP group may span (default 4)")
    _workload_args(p)
    p.add_argument("--min-user-tokens-per-s", type=positive_float("min-user-tokens-per-s"))
    p.add_argument("--min-total-tokens-per-s", type=positive_float("min-total-tokens-per-s"))
    p.add_argument("--max-token-latency-ms", type=positive_float("max-token-latency-ms"))
    p.add_argument("--rate", type=positive_float("rate", MAX_RATE),
                   help="requests/s to serve: rank by the replicas a continuous-batching simulation says meet "
                        "--ttft-slo-s/--tpot-slo-s (laddersim serving --capacity)")
    p.add_argument("--ttft-slo-s", type=positive_float("ttft-slo-s", MAX_SLO_S),
                   help="with --rate: time-to-first-token SLO")
    p.add_argument("--tpot-slo-s", type=positive_float("tpot-slo-s", MAX_SLO_S),
                   help="with --rate: time-per-output-token SLO")
    p.add_argument("--requests", type=positive_int("requests", MAX_REQUESTS), default=PLAN_REQUESTS,
                   help=f"with --rate: requests simulated per rate tried (default {PLAN_REQUESTS}, below serving's "
                        "1000 on purpose: each candidate's capacity search simulates some 10 rates, and plan "
                        "searches every candidate; every answer prints the count, raise it to match serving)")
    p.add_argument("--max-batched-tokens", type=positive_int("max-batched-tokens", MAX_TOKENS),
                   help="with --rate: new tokens per iteration (vLLM max_num_batched_tokens; default 8192, as "
                        "serving); without --chunked-prefill a request's prompt + output must fit in it")
    p.add_argument("--chunked-prefill", action="store_true",
                   help="with --rate: mix decode tokens and prompt chunks per iteration (as serving)")
    p.add_argument("--rank-by", choices=RANK_KEYS,
                   help="default: usd_per_hour with a total target, else usd_per_million_tokens")
    p.add_argument("--top", type=positive_int("top"), default=10, help="options shown (default 10)")
    p.add_argument("--json", action="store_true", help="print the ranked options as JSON")
    p.add_argument("--workers", type=positive_int("workers"), default=os.cpu_count() or 1)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_plan)

    plan_sub = p.add_subparsers(dest="plan_command", parser_class=type(p))
    be = plan_sub.add_parser(
        "break-even", help="bandwidth/latency at which schedule A on fabric A matches B",
        description="Bisect a what-if scale of side A's fabric until its tokens/s (batch x gen_len / "
                    "(prefill + decode)) equals side B's.")
    be.add_argument("--model", required=True)
    be.add_argument("--tp", type=positive_int("tp"), required=True)
    be.add_argument("--batch", type=positive_int("batch"), default=1)
    _workload_args(be)
    be.add_argument("--a", required=True, metavar="SCHEDULE@PROFILE", help="the side whose fabric varies")
    be.add_argument("--b", required=True, metavar="SCHEDULE@PROFILE", help="the reference side")
    be.add_argument("--vary", choices=list(VARY), default="intra_bandwidth")
    be.add_argument("--lo", type=positive_float("lo"), default=0.01, help="smallest scale searched (default 0.01)")
    be.add_argument("--hi", type=positive_float("hi"), default=100.0, help="largest scale searched (default 100)")
    be.add_argument("--json", action="store_true")
    be.set_defaults(func=run_break_even)


def run_plan(args: argparse.Namespace) -> int:
    if not args.model:
        raise UserInputError("plan: --model is required")
    if args.rate is not None or args.ttft_slo_s is not None or args.tpot_slo_s is not None:
        return run_serving_plan(args)
    for flag, given in (("max-batched-tokens", args.max_batched_tokens is not None),
                        ("chunked-prefill", args.chunked_prefill)):
        if given:
            raise UserInputError(f"{flag}: only with --rate (a serving plan); the batch plan simulates decode "
                                 "steps, not requests")
    target = Target(args.min_user_tokens_per_s, args.min_total_tokens_per_s, args.max_token_latency_ms)
    if args.gen_len < 2:
        raise UserInputError("gen-len: must be >= 2 (throughput is measured over decode steps)")
    # Check every input before anything is printed, so a bad one is one error line.
    shape = checked_shape(args)
    prices = load_prices(args.prices)
    profiles, skipped = candidate_profiles(args.profiles, prices)
    no_dtype = [name for name, (_, profile) in profiles.items() if args.dtype not in profile.gpu.dtypes()]
    profiles = {name: entry for name, entry in profiles.items() if name not in no_dtype}
    if not profiles:
        raise UserInputError(f"dtype: no candidate profile has a {args.dtype} peak "
                             f"({', '.join(no_dtype)}); allowed: another --dtype or --profiles")
    points = candidate_points(args.model, shape, profiles, args.schedule, args.batch, args.tp,
                              args.prompt_len, args.gen_len, args.dtype, args.kv_cache, args.max_nodes)
    if skipped:  # only once the inputs are known good: a bad one stays a single error line
        print(f"plan: not considered (no price): {', '.join(skipped)}", file=sys.stderr)
    if no_dtype:
        print(f"plan: not considered (no {args.dtype} peak): {', '.join(no_dtype)}", file=sys.stderr)
    rows = []
    with tqdm(total=len(points), desc="plan", unit="config", file=sys.stderr, disable=args.no_progress) as bar:
        for done in run_points(points, args.workers):
            rows.extend(done)
            bar.update(len(done))
    errors = [r for r in rows if r["status"] == "error"]
    if errors:
        raise UserInputError(f"plan: {len(errors)} configurations failed to simulate, e.g. {errors[0]['error']}")
    options = rank_options(rows, gpu_hour_prices(prices, profiles), target, args.rank_by)
    feasible = sum(r["status"] == "ok" for r in rows)
    if args.json:
        json.dump([asdict(o) for o in options[:args.top]], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if options else 1
    print(f"{shape.name}, prompt-len {args.prompt_len}, gen-len {args.gen_len} tokens: {len(points)} configurations "
          f"simulated, {feasible} fit in memory, {len(options)} meet the target; "
          f"ranked by {args.rank_by or target.default_rank_by}")
    if not options:
        print("no configuration meets the target")
        return 1
    table = [{"rank": i + 1, **asdict(o)} for i, o in enumerate(options[:args.top])]
    print(format_table(table, [
        ("rank", "#", "{}"), ("hardware", "profile", "{}"), ("schedule", "schedule", "{}"), ("tp", "tp", "{}"),
        ("nodes", "nodes", "{}"), ("batch", "batch", "{}"), ("replicas", "replicas", "{}"), ("gpus", "GPUs", "{}"),
        ("tpot_s", "ms/token", "{:.2f}", 1e3), ("user_tokens_per_s", "user tok/s", "{:.1f}"),
        ("total_tokens_per_s", "total tok/s", "{:.0f}"), ("usd_per_hour", "$/h", "{:.2f}"),
        ("usd_per_million_tokens", "$/Mtok", "{:.3f}"),
    ]))
    print(DEFINITIONS)
    return 0


def run_break_even(args: argparse.Namespace) -> int:
    a, b = parse_side(args.a, "a"), parse_side(args.b, "b")
    scenario = Scenario(args.model, args.tp, args.batch, args.prompt_len, args.gen_len, args.dtype, args.kv_cache)
    result = break_even(scenario, a, b, args.vary, args.lo, args.hi)
    if args.json:
        json.dump({**asdict(result), "value": result.value}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"{result.b}: {result.b_tokens_per_s:.1f} tokens/s; {result.a}: {result.a_tokens_per_s_at_lo:.1f} "
          f"tokens/s at {args.vary} x{result.lo:g}, {result.a_tokens_per_s_at_hi:.1f} at x{result.hi:g}")
    if result.scale is None:
        print(f"no crossing in [{result.lo:g}, {result.hi:g}] (scale of {args.vary})")
        return 0
    print(f"break-even: {result.a} matches {result.b} at {args.vary} x{result.scale:.4g} = "
          f"{result.value:.4g} {result.unit} (nominal {result.nominal:.4g} {result.unit}: {result.nominal_is})")
    return 0
