"""``laddersim serving``: one replica under a stream of requests (continuous batching), per
schedule: TTFT/TPOT/E2E percentiles, throughput, goodput at the SLOs; optionally its capacity
(the highest rate within the SLOs) and the GPUs and cost of a target rate."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from laddersim.cli.args import framework_arg, positive_float, positive_int
from laddersim.errors import UserInputError
from laddersim.limits import (
    DEFAULT_GEN_LEN,
    DEFAULT_PROMPT_LEN,
    MAX_BATCH,
    MAX_BLOCK_SIZE,
    MAX_GAMMA_SHAPE,
    MAX_RATE,
    MAX_REQUESTS,
    MAX_SEED,
    MAX_SLO_S,
    MAX_TOKENS,
    MIN_GAMMA_SHAPE,
)
from laddersim.plan.planner import fewest_replicas
from laddersim.plan.prices import DEFAULT_PRICES, load_prices
from laddersim.serving.arrivals import LENGTH_FORMS, check_load, draw_requests, parse_length, read_trace
from laddersim.serving.capacity import OfferedLoad, max_sustainable_rate
from laddersim.serving.options import serving_options
from laddersim.serving.run import serve, serving_scenario
from laddersim.tables import format_table

TABLE = [
    ("schedule", "schedule", "{}"), ("ttft_p50_s", "TTFT p50 ms", "{:.1f}", 1e3), ("ttft_p99_s", "p99", "{:.1f}", 1e3),
    ("tpot_p50_s", "TPOT p50 ms", "{:.2f}", 1e3), ("tpot_p99_s", "p99", "{:.2f}", 1e3),
    ("e2e_p50_s", "E2E p50 s", "{:.2f}"), ("e2e_p99_s", "p99", "{:.2f}"),
    ("throughput_tokens_per_s", "tok/s", "{:.0f}"), ("goodput_req_per_s", "goodput req/s", "{:.2f}"),
    ("slo_attainment", "in SLO", "{:.1%}"), ("preemptions", "preempted", "{}"),
]


def _ranged(name: str, cast, low, high):
    """An argparse type: ``cast(text)`` from ``low`` to ``high``, else one line naming the flag."""
    def parse(text: str):
        try:
            value = cast(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} must be a number from {low} to {high}, got '{text}'")
        return value
    return parse


def slo_rule(options) -> str:
    """How a rate is judged: '>= 90% of requests meet TTFT <= 0.5 s and TPOT <= 30 ms'."""
    slos = [f"{name} <= {value * 1e3:g} ms" if value < 1 else f"{name} <= {value:g} s"
            for name, value in (("TTFT", options.ttft_slo_s), ("TPOT", options.tpot_slo_s)) if value is not None]
    return (f">= {options.slo_attainment:.0%} of requests meet {' and '.join(slos)}" if slos
            else "no SLO set: every request counts as within")


def register(sub) -> None:
    p = sub.add_parser(
        "serving", help="one replica under load: continuous batching, TTFT/TPOT percentiles, goodput, capacity",
        description="Simulate requests arriving at a replica (Poisson or gamma arrivals, or a trace) served "
                    "by a vLLM-style continuous-batching scheduler; every iteration's time comes from the "
                    "step simulator. One result per --schedule.")
    p.add_argument("--model", required=True, help="preset (llama-3.1-8b/70b/405b) or path to a HF config.json")
    p.add_argument("--hardware", required=True, help="profile name (laddersim profiles list) or path")
    p.add_argument("--tp", type=positive_int("tp"), required=True, help="tensor-parallel degree")
    p.add_argument("--schedule", action="append", help="repeatable (default: standard and ladder)")
    p.add_argument("--rate", type=positive_float("rate", MAX_RATE), help="mean request arrivals per second")
    p.add_argument("--requests", type=positive_int("requests", MAX_REQUESTS), default=1000,
                   help="requests to simulate (default 1000; plan --rate defaults to 200 per rate tried, as it "
                        "searches every candidate's capacity)")
    p.add_argument("--prompt-len", default=str(DEFAULT_PROMPT_LEN),
                   help=f"prompt tokens: {LENGTH_FORMS} (default {DEFAULT_PROMPT_LEN})")
    p.add_argument("--gen-len", default=str(DEFAULT_GEN_LEN),
                   help=f"output tokens: {LENGTH_FORMS} (default {DEFAULT_GEN_LEN}, as simulate and plan)")
    p.add_argument("--gamma-shape", type=_ranged("gamma-shape", float, MIN_GAMMA_SHAPE, MAX_GAMMA_SHAPE), default=1.0,
                   help="shape of the gamma arrival gaps: 1 = Poisson (default), < 1 burstier")
    p.add_argument("--trace", metavar="FILE.csv", help="requests from a CSV arrival_s,prompt_len,output_len "
                                                       "(instead of --rate/--requests/--prompt-len/--gen-len)")
    p.add_argument("--max-running", type=positive_int("max-running", MAX_BATCH), default=64,
                   help="sequences in the running batch (vLLM max_num_seqs; default 64)")
    p.add_argument("--max-batched-tokens", type=positive_int("max-batched-tokens", MAX_TOKENS), default=8192,
                   help="new tokens per iteration (vLLM max_num_batched_tokens; default 8192)")
    p.add_argument("--chunked-prefill", action="store_true", help="mix decode tokens and prompt chunks per iteration")
    p.add_argument("--block-size", type=positive_int("block-size", MAX_BLOCK_SIZE), default=16,
                   help="tokens per KV-cache block")
    p.add_argument("--ttft-slo-s", type=positive_float("ttft-slo-s", MAX_SLO_S), help="time-to-first-token target, s")
    p.add_argument("--tpot-slo-s", type=positive_float("tpot-slo-s", MAX_SLO_S), help="time-per-output-token target, s")
    p.add_argument("--slo-attainment", type=positive_float("slo-attainment", 1.0), default=0.9,
                   help="share of requests that must meet the SLOs for a rate to count as sustained (default 0.9)")
    p.add_argument("--capacity", action="store_true",
                   help="also search the highest rate within the SLOs (needs --ttft-slo-s)")
    p.add_argument("--target-rate", type=positive_float("target-rate", MAX_RATE),
                   help="with --capacity: replicas, GPUs and cost to serve this many requests/s")
    p.add_argument("--prices", metavar="FILE", help=f"GPU-hour prices (default {DEFAULT_PRICES.name})")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32", "fp8"], default="bfloat16")
    p.add_argument("--kv-reads", choices=["repeat_interleave", "per_kv_head"], default="per_kv_head",
                   help="per_kv_head (default): a GQA-aware paged-attention kernel")
    p.add_argument("--framework", type=framework_arg, default="gpt-fast",
                   help="whose kernels run on the paged cache: gpt-fast (default; math SDPA, LM head over every "
                        "prompt token), vllm (FlashAttention, last-position logits, custom AllReduce), gpt-fast-flash")
    p.add_argument("--seed", type=_ranged("seed", int, 0, MAX_SEED), default=0,
                   help=f"random seed of the arrivals and lengths, 0 to {MAX_SEED} (default 0)")
    p.add_argument("--json", action="store_true", help="print a JSON array, one object per schedule")
    p.add_argument("--out", metavar="DIR", help="write per-request rows to DIR/requests.parquet and .csv")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def _requests(args: argparse.Namespace):
    if args.trace:
        given = [f for f, v in (("--rate", args.rate), ("--gamma-shape", args.gamma_shape != 1.0)) if v]
        if given:
            raise UserInputError(f"trace: give --trace or {', '.join(given)}, not both")
        return read_trace(args.trace), None
    if args.rate is None:
        raise UserInputError("rate: give --rate REQ_PER_S or --trace FILE")
    prompt, output = parse_length(args.prompt_len, "prompt-len"), parse_length(args.gen_len, "gen-len")
    return draw_requests(args.requests, args.rate, prompt, output, args.seed, args.gamma_shape), (prompt, output)


def serving_rows(args: argparse.Namespace) -> tuple[list[dict], pd.DataFrame, dict]:
    """What ``laddersim serving`` computes, printed or not: one row per schedule (the ``--json``
    objects), every request's row (a ``schedule`` column first), and the context the text answer
    prints (``model``, ``hardware``, ``requests``, ``options``). Every input is checked first."""
    options = serving_options(
        max_running=args.max_running, max_batched_tokens=args.max_batched_tokens,
        chunked_prefill=args.chunked_prefill, block_size=args.block_size, ttft_slo_s=args.ttft_slo_s,
        tpot_slo_s=args.tpot_slo_s, slo_attainment=args.slo_attainment)
    if args.target_rate and not args.capacity:
        raise UserInputError("target-rate: needs --capacity (the cost follows from the replica's capacity)")
    if args.capacity and args.trace:
        raise UserInputError("capacity: searches over --rate with drawn requests; not available with --trace")
    if args.capacity and args.ttft_slo_s is None:
        raise UserInputError("ttft-slo-s: --capacity needs a time-to-first-token SLO")
    check_load(args.requests, None, args.seed, args.gamma_shape)
    prices = load_prices(args.prices) if args.target_rate else None
    requests, lengths = _requests(args)
    scenarios = [serving_scenario(args.model, args.hardware, args.tp, s, args.dtype, args.kv_reads, args.framework)
                 for s in args.schedule or ["standard", "ladder"]]
    for scenario in scenarios:
        scenario.model.check_tp(args.tp)
    usd_per_gpu_hour = prices.usd_per_gpu_hour(scenarios[0].hardware.name) if prices else None
    workload = {"prompt_len": args.prompt_len, "gen_len": args.gen_len} if lengths else \
        {"prompt_len": "trace", "gen_len": "trace"}
    rows, frames = [], []
    for scenario in scenarios:
        result = serve(scenario, requests, options, progress=not args.no_progress)
        row = {**result.summary(args.rate), **workload, "slo_attainment_required": options.slo_attainment}
        if args.capacity:
            load = OfferedLoad(args.requests, *lengths, args.seed, args.gamma_shape)
            cap = max_sustainable_rate(scenario, options, load, start_rate=args.rate)
            row.update(capacity_req_per_s=cap.rate, capacity_at_least=cap.at_least,
                       capacity_bracket_req_per_s=list(cap.bracket) if cap.bracket else None,
                       saturation_req_per_s=cap.saturation_req_per_s, capacity=cap.describe())
            if args.target_rate:
                replicas = fewest_replicas(args.target_rate, cap.rate) if cap.rate else None
                row.update(target_rate=args.target_rate, replicas=replicas,
                           gpus=replicas * args.tp if replicas else None,
                           usd_per_hour=replicas * args.tp * usd_per_gpu_hour if replicas else None)
        rows.append(row)
        frames.append(result.frame.assign(schedule=scenario.schedule))
    frame = pd.concat(frames, ignore_index=True)
    frame = frame[["schedule"] + [c for c in frame.columns if c != "schedule"]]
    s = scenarios[0]
    context = {"model": s.model.name, "hardware": s.hardware.name, "requests": len(requests), "options": options}
    return rows, frame, context


def run(args: argparse.Namespace) -> int:
    rows, frame, context = serving_rows(args)
    options = context["options"]
    if args.out:
        _write_requests(frame, Path(args.out))
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    offered = f"{args.rate:g} req/s" if args.rate else f"trace {args.trace}"
    lengths = "" if args.trace else f" (prompt-len {args.prompt_len}, gen-len {args.gen_len} tokens)"
    print(f"{context['model']} on {context['hardware']}, TP {args.tp}, {args.framework} kernels on a paged KV cache: "
          f"{context['requests']} requests at "
          f"{offered}{lengths}; max {options.max_running} running, {options.max_batched_tokens} tokens per "
          f"iteration{', chunked prefill' if options.chunked_prefill else ''}; {rows[0]['kv_blocks']} KV blocks")
    print(format_table(rows, TABLE))
    print(f"in SLO: the share of requests within the SLOs; a rate is sustained when {slo_rule(options)}")
    if args.capacity:
        for row in rows:
            line = f"{row['schedule']}: {row['capacity']}"
            if args.target_rate and row["capacity_req_per_s"]:
                noun = "replica" if row["replicas"] == 1 else "replicas"
                line += (f"; {args.target_rate:g} req/s needs {row['replicas']} {noun} = {row['gpus']} GPUs, "
                         f"${row['usd_per_hour']:.2f}/h")
            print(line)
    return 0


def _write_requests(frame: pd.DataFrame, out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"out: cannot create {out_dir}: {exc.strerror}") from None
    for path, write in ((out_dir / "requests.parquet", lambda p: frame.to_parquet(p, index=False)),
                        (out_dir / "requests.csv", lambda p: frame.to_csv(p, index=False, lineterminator="\n"))):
        tmp = path.with_name(path.name + ".tmp")
        write(tmp)
        tmp.replace(path)
