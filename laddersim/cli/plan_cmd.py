"""``laddersim plan``: the cheapest configurations meeting a target; ``plan break-even``: the
fabric at which one schedule on one machine matches another (``laddersim.api.plan_run`` and
``laddersim.api.break_even`` do the work)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from laddersim.api.plan_params import RANK_KEYS, VARY, PlanParams
from laddersim.api.planning import DEFAULT_PRICES, break_even, plan, plan_run, slo_rule
from laddersim.api.serving_task import ENGINES, prefill_policy
from laddersim.api.rate_planning import RatePlanAnswer
from laddersim.cli.args import add_parallel_args, call_api, choices_metavar, default_of, integer, real
from laddersim.errors import UserInputError
from laddersim.support.choices import DTYPES, KV_CACHES
from laddersim.support.text_tables import format_table

DEFINITIONS = (
    "Decode steady state: user tok/s = 1 / time per output token; total tok/s = replicas x batch / "
    "time per token; replicas = fewest meeting --min-total-tokens-per-s; $/h = GPUs x price per "
    "GPU-hour; $/Mtok = $/h / (total tok/s x 3600) x 1e6; AllReduce = the implementation a decode step's "
    "AllReduce runs (none without TP)."
)
RATE_DEFINITIONS = ("Capacity: the highest request rate one replica serves within the SLOs (continuous batching, "
                    "laddersim serving; '>=' where every rate tried passed, up to the replica's saturation "
                    "throughput); replicas = fewest reaching --rate whose share of it, served by one replica, meets the "
                    "SLOs at the attainment; $/h = GPUs x price per GPU-hour.")

CONCURRENCY_DEFINITIONS = ("Capacity: the most requests one replica keeps in flight within the SLOs (a closed loop, "
                           "laddersim serving --concurrency; '>=' where that reaches --concurrency); replicas = fewest "
                           "reaching --concurrency whose share of it, served by one replica, meets the SLOs at the "
                           "attainment; $/h = GPUs x price per GPU-hour.")


def _workload_args(p: argparse.ArgumentParser, function) -> None:
    prompt_len, gen_len = default_of(function, "prompt_len"), default_of(function, "gen_len")
    p.add_argument("--prompt-len", type=integer, default=prompt_len,
                   help=f"prompt tokens per request (default {prompt_len})")
    p.add_argument("--gen-len", type=integer, default=gen_len,
                   help=f"generated tokens per request (default {gen_len}, as serving and simulate)")
    p.add_argument("--dtype", metavar=choices_metavar(DTYPES), default=default_of(function, "dtype"))
    p.add_argument("--kv-cache", metavar=choices_metavar(KV_CACHES), default=default_of(function, "kv_cache"))


def register(sub) -> None:
    p = sub.add_parser(
        "plan", help="cheapest configurations meeting a throughput/latency target; break-even fabrics",
        description="Rank (profile, TP, PP, nodes, replicas, schedule, batch) by cost for a target. "
                    + DEFINITIONS + " Subcommand: plan break-even.")
    p.add_argument("--model", help="preset or config.json path")
    p.add_argument("--profiles", nargs="+", metavar="PROFILE",
                   help="candidate profiles (default: every shipped profile with a price)")
    p.add_argument("--prices", metavar="FILE", help=f"GPU-hour prices (default {DEFAULT_PRICES.name}; same format)")
    p.add_argument("--price-per-gpu-hour", type=real, metavar="USD",
                   help="price per GPU-hour of every candidate profile the price file does not price (default: "
                        "such a profile is left out, or refused when named in --profiles)")
    p.add_argument("--schedule", nargs="+", dest="schedules", metavar="SCHEDULE",
                   default=list(default_of(plan, "schedules")), help="default: standard ladder")
    p.add_argument("--batch", nargs="+", type=integer, dest="batches", metavar="BATCH",
                   default=list(default_of(plan, "batches")),
                   help="batch sizes (concurrent users per replica) to consider; default 1 2 4 ... 256")
    p.add_argument("--tp", nargs="+", type=integer, dest="tps", metavar="TP",
                   help="TP degrees to consider (default: all valid)")
    p.add_argument("--pp", nargs="+", type=integer, dest="pps", metavar="PP",
                   help="pipeline stages to split the GPUs into, each a TP group (default 1: none); every TP x PP "
                        "split is planned and each one's verdict printed with its reason")
    p.add_argument("--ep", nargs="+", type=integer, dest="eps", metavar="EP",
                   help="a mixture-of-experts model's expert-parallel degrees in each TP group to consider "
                        "(default: every one its experts allow); every TP x EP split's verdict is printed")
    p.add_argument("--max-nodes", type=integer, default=default_of(plan, "max_nodes"),
                   help=f"largest number of nodes one replica (TP group, or TP x PP pipeline) may span "
                        f"(default {default_of(plan, 'max_nodes')})")
    _workload_args(p, plan)
    p.add_argument("--min-user-tokens-per-s", type=real)
    p.add_argument("--min-total-tokens-per-s", type=real)
    p.add_argument("--max-token-latency-ms", type=real)
    p.add_argument("--rate", type=real,
                   help="requests/s to serve: rank by the replicas a continuous-batching simulation says meet "
                        "--ttft-slo-s/--tpot-slo-s (laddersim serving --capacity)")
    p.add_argument("--concurrency", type=integer, metavar="C",
                   help="instead of --rate: C requests in flight in all (a closed loop per replica, as serving "
                        "--concurrency): rank by the replicas keeping them within the SLOs")
    p.add_argument("--scheduler", metavar=choices_metavar(tuple(ENGINES)),
                   help="with --concurrency: whose scheduler forms the iterations (default vllm)")
    p.add_argument("--ttft-slo-s", type=real,
                   help="with --rate: time-to-first-token SLO")
    p.add_argument("--tpot-slo-s", type=real,
                   help="with --rate: time-per-output-token SLO")
    attainment = default_of(plan, "slo_attainment")
    p.add_argument("--slo-attainment", type=real, default=attainment,
                   help=f"with --rate: share of requests that must meet both SLOs (default {attainment:g}, as "
                        "serving's); the replicas of each option are checked by a serving run at it")
    requests = default_of(plan, "requests")
    p.add_argument("--requests", type=integer, default=requests,
                   help=f"with --rate: requests simulated per rate tried (default {requests}, below serving's "
                        "1000 on purpose: each candidate's capacity search simulates some 10 rates, and plan "
                        "searches every candidate; every answer prints the count, raise it to match serving)")
    p.add_argument("--max-batched-tokens", type=integer,
                   help="with --rate: new tokens per iteration (vLLM max_num_batched_tokens; default 8192, as "
                        "serving); without --chunked-prefill a request's prompt + output must fit in it")
    p.add_argument("--chunked-prefill", action="store_true",
                   help="with --rate: mix decode tokens and prompt chunks per iteration (as serving)")
    p.add_argument("--rank-by", metavar=choices_metavar(RANK_KEYS),
                   help="default: usd_per_hour with a total target, else usd_per_million_tokens")
    p.add_argument("--top", type=integer, default=default_of(plan, "top"),
                   help=f"options shown (default {default_of(plan, 'top')})")
    p.add_argument("--json", action="store_true", help="print the ranked options as JSON")
    p.add_argument("--workers", type=integer, default=default_of(plan, "workers"),
                   help="processes simulating the configurations (default: all cores)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_plan)

    plan_sub = p.add_subparsers(dest="plan_command", parser_class=type(p))
    be = plan_sub.add_parser(
        "break-even", help="bandwidth/latency at which schedule A on fabric A matches B",
        description="Bisect a what-if scale of side A's fabric until its tokens/s (batch x gen_len / "
                    "(prefill + decode)) equals side B's.")
    be.add_argument("--model", required=True)
    add_parallel_args(be)
    be.add_argument("--batch", type=integer, default=default_of(break_even, "batch"))
    _workload_args(be, break_even)
    be.add_argument("--a", required=True, metavar="SCHEDULE@PROFILE", help="the side whose fabric varies")
    be.add_argument("--b", required=True, metavar="SCHEDULE@PROFILE", help="the reference side")
    be.add_argument("--vary", metavar=choices_metavar(VARY), default=default_of(break_even, "vary"))
    lo, hi = default_of(break_even, "lo"), default_of(break_even, "hi")
    be.add_argument("--lo", type=real, default=lo, help=f"smallest scale searched (default {lo:g})")
    be.add_argument("--hi", type=real, default=hi, help=f"largest scale searched (default {hi:g})")
    be.add_argument("--json", action="store_true")
    be.set_defaults(func=run_break_even)


def run_plan(args: argparse.Namespace) -> int:
    if not args.model:
        raise UserInputError("plan: --model is required")
    params = PlanParams.pick(vars(args))
    answer = plan_run(params, progress=not args.no_progress)
    if isinstance(answer, RatePlanAnswer):
        return _print_rate_plan(answer, args)
    options = answer.options
    if args.json:
        json.dump([asdict(o) for o in options[:args.top]], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if options else 1
    print(f"{answer.model}, prompt-len {args.prompt_len}, gen-len {args.gen_len} tokens: {answer.configurations} "
          f"configurations simulated, {answer.feasible} fit in memory, {len(options)} meet the target; "
          f"ranked by {answer.rank_by}")
    if not options:
        print("no configuration meets the target")
        _print_splits(answer.splits, args)
        return 1
    table = [{"rank": i + 1, **asdict(o)} for i, o in enumerate(options[:args.top])]
    pipeline = [("pp", "pp", "{}")] if args.pps else []
    if any(o.ep > 1 for o in options):  # a mixture-of-experts model's expert-parallel split
        pipeline.append(("ep", "ep", "{}"))
    if any(o.dp_attention for o in options):  # tp each attention replica's, ep all GPUs'
        pipeline.append(("dp_attention", "dp-attn", "{}"))
    print(format_table(table, [
        ("rank", "#", "{}"), ("hardware", "profile", "{}"), ("schedule", "schedule", "{}"), ("tp", "tp", "{}"),
        *pipeline, ("nodes", "nodes", "{}"), ("batch", "batch", "{}"), ("replicas", "replicas", "{}"),
        ("gpus", "GPUs", "{}"), ("tpot_s", "ms/token", "{:.2f}", 1e3), ("user_tokens_per_s", "user tok/s", "{:.1f}"),
        ("total_tokens_per_s", "total tok/s", "{:.0f}"), ("usd_per_hour", "$/h", "{:.2f}"),
        ("usd_per_million_tokens", "$/Mtok", "{:.3f}"), ("allreduce", "AllReduce", "{}"),
    ]))
    print(DEFINITIONS)
    _print_splits(answer.splits, args)
    return 0


def _print_splits(splits, args: argparse.Namespace) -> None:
    """With --pp, or splits with expert parallelism: every TP x PP (x EP) split planned, one line
    each: what meets the target, or why not."""
    experts = args.eps or any(v.ep > 1 for v in splits)
    if not args.pps and not experts:
        return
    print("TP x PP splits (a pipeline runs gcd(batch, PP) micro-batches in flight):" if not experts else
          "TP x PP x EP splits (EP: the experts placed EP ways in each TP group; with data-parallel attention "
          "over all EP GPUs, EP/TP attention replicas of TP each):")
    for v in splits:
        where = f" ({v.nodes} node{'s' if v.nodes != 1 else ''}, {v.gpus_per_replica} GPUs)" if v.nodes else ""
        verdict = (f"meets it with {v.schedule} at batch {v.batch}, ${v.usd_per_hour:.2f}/h; " if v.meets else "")
        layout = " data-parallel attention" if v.dp_attention else ""
        print(f"  {v.hardware} TP {v.tp} x PP {v.pp}{f' x EP {v.ep}' if experts else ''}{layout}{where}: "
              f"{verdict}{v.reason}")


def _none_line(plan_answer, rule: str) -> str:
    """The one line of a rate plan with no option (exit 1)."""
    if all(s.reason.startswith("no rate found") for s in plan_answer.skipped):
        return f"no configuration meets the SLOs at any rate (a rate is sustained when {rule})"
    return (f"no configuration can serve this workload: all {len(plan_answer.skipped)} candidates skipped "
            "(a request beyond their KV cache or memory, or no rate within the SLOs)")


def _print_rate_plan(answer: RatePlanAnswer, args: argparse.Namespace) -> int:
    found, options = answer.plan, answer.options
    ranked = found.options
    rule = slo_rule(options)
    if args.json:  # the options on stdout; a skipped candidate is one stderr line
        for skipped in found.skipped:
            print(f"plan: skipped {skipped.line()}", file=sys.stderr)
        if not ranked:
            print(f"plan: {_none_line(found, rule)}", file=sys.stderr)
        json.dump([asdict(o) for o in ranked[:args.top]], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if ranked else 1
    engine = f"{options.max_batched_tokens} tokens per iteration" + (f", {prefill_policy(options)}"
                                                                      if prefill_policy(options) else "")
    if args.concurrency:
        engine = f"{args.scheduler or 'vllm'} scheduler, {engine}"
        target = f"{args.concurrency} requests in flight"
    else:
        target = f"{args.rate:g} requests/s"
    print(f"{answer.model}: {answer.tried} configurations, {len(ranked)} sustain a "
          f"{'concurrency' if args.concurrency else 'rate'} within the SLOs, "
          f"{len(found.skipped)} skipped; cheapest for {target} of prompt-len {args.prompt_len}, "
          f"gen-len {args.gen_len} tokens ({args.requests} requests per {'loop' if args.concurrency else 'rate'} "
          f"tried; {engine})")
    if found.skipped:
        print("skipped (cannot serve this workload, or no rate within the SLOs):")
        for skipped in found.skipped:
            print(f"  {skipped.line()}")
    if not ranked:
        print(_none_line(found, rule))
        return 1
    rows = [{"rank": i + 1, **asdict(o), "capacity": (">= " if o.capacity_at_least else "")
             + (f"{o.capacity_concurrency}" if args.concurrency else f"{o.capacity_req_per_s:.2f}")}
            for i, o in enumerate(ranked[:args.top])]
    print(format_table(rows, [
        ("rank", "#", "{}"), ("hardware", "profile", "{}"), ("schedule", "schedule", "{}"), ("tp", "tp", "{}"),
        *([("pp", "pp", "{}")] if args.pps else []),
        ("capacity", "in flight per replica" if args.concurrency else "req/s per replica", "{}"),
        ("replicas", "replicas", "{}"),
        ("gpus", "GPUs", "{}"), ("ttft_p99_s", "TTFT p99 ms", "{:.0f}", 1e3),
        ("tpot_p99_s", "TPOT p99 ms", "{:.1f}", 1e3), ("usd_per_hour", "$/h", "{:.2f}"),
    ]))
    print(f"SLO attainment {options.slo_attainment:g}: p99s are those of one replica serving its share of "
          f"{target}, where a load counts as sustained when {rule}"
          + (": a p99 above an SLO is within that rule." if options.slo_attainment < 0.99 else "."))
    print(CONCURRENCY_DEFINITIONS if args.concurrency else RATE_DEFINITIONS)
    return 0


def run_break_even(args: argparse.Namespace) -> int:
    result = call_api(break_even, args)
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
