"""``laddersim serving``: one replica under a stream of requests (continuous batching), per
schedule: TTFT/TPOT/E2E percentiles, throughput, goodput at the SLOs; optionally its capacity
(the highest rate within the SLOs) and the GPUs and cost of a target rate
(``laddersim.api.serving_run`` does the work)."""

from __future__ import annotations

import argparse
import json
import sys

from laddersim.api import serving, serving_run
from laddersim.cli.args import add_model_args, add_parallel_args, call_api, default_of, framework_arg
from laddersim.cli.args import positive_float, positive_int
from laddersim.support.choices import DTYPES, KV_READS
from laddersim.support.limits import (
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
from laddersim.planning.prices import DEFAULT_PRICES
from laddersim.traffic.arrivals import LENGTH_FORMS
from laddersim.traffic.options import slo_rule
from laddersim.support.text_tables import format_table

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


def register(sub) -> None:
    p = sub.add_parser(
        "serving", help="one replica under load: continuous batching, TTFT/TPOT percentiles, goodput, capacity",
        description="Simulate requests arriving at a replica (Poisson or gamma arrivals, or a trace) served "
                    "by a vLLM-style continuous-batching scheduler; every iteration's time comes from the "
                    "step simulator. One result per --schedule.")
    add_model_args(p)
    add_parallel_args(p, serving)
    p.add_argument("--schedule", action="append", help="repeatable (default: standard and ladder)")
    p.add_argument("--rate", type=positive_float("rate", MAX_RATE), help="mean request arrivals per second")
    p.add_argument("--requests", type=positive_int("requests", MAX_REQUESTS), default=default_of(serving, "requests"),
                   help=f"requests to simulate (default {default_of(serving, 'requests')}; plan --rate defaults to 200 "
                        "per rate tried, as it searches every candidate's capacity)")
    p.add_argument("--prompt-len", default=str(default_of(serving, "prompt_len")),
                   help=f"prompt tokens: {LENGTH_FORMS} (default {default_of(serving, 'prompt_len')})")
    p.add_argument("--gen-len", default=str(default_of(serving, "gen_len")),
                   help=f"output tokens: {LENGTH_FORMS} (default {default_of(serving, 'gen_len')}, as simulate and plan)")
    p.add_argument("--gamma-shape", type=_ranged("gamma-shape", float, MIN_GAMMA_SHAPE, MAX_GAMMA_SHAPE),
                   default=default_of(serving, "gamma_shape"),
                   help="shape of the gamma arrival gaps: 1 = Poisson (default), < 1 burstier")
    p.add_argument("--trace", metavar="FILE.csv", help="requests from a CSV arrival_s,prompt_len,output_len "
                                                       "(instead of --rate/--requests/--prompt-len/--gen-len)")
    p.add_argument("--max-running", type=positive_int("max-running", MAX_BATCH),
                   default=default_of(serving, "max_running"),
                   help=f"sequences in the running batch (vLLM max_num_seqs; default {default_of(serving, 'max_running')})")
    p.add_argument("--max-batched-tokens", type=positive_int("max-batched-tokens", MAX_TOKENS),
                   default=default_of(serving, "max_batched_tokens"),
                   help="new tokens per iteration (vLLM max_num_batched_tokens; "
                        f"default {default_of(serving, 'max_batched_tokens')})")
    p.add_argument("--chunked-prefill", action="store_true", help="mix decode tokens and prompt chunks per iteration")
    p.add_argument("--block-size", type=positive_int("block-size", MAX_BLOCK_SIZE),
                   default=default_of(serving, "block_size"),
                   help="tokens per KV-cache block")
    p.add_argument("--ttft-slo-s", type=positive_float("ttft-slo-s", MAX_SLO_S), help="time-to-first-token target, s")
    p.add_argument("--tpot-slo-s", type=positive_float("tpot-slo-s", MAX_SLO_S), help="time-per-output-token target, s")
    p.add_argument("--slo-attainment", type=positive_float("slo-attainment", 1.0),
                   default=default_of(serving, "slo_attainment"),
                   help="share of requests that must meet the SLOs for a rate to count as sustained "
                        f"(default {default_of(serving, 'slo_attainment')})")
    p.add_argument("--capacity", action="store_true",
                   help="also search the highest rate within the SLOs (needs --ttft-slo-s)")
    p.add_argument("--target-rate", type=positive_float("target-rate", MAX_RATE),
                   help="with --capacity: replicas, GPUs and cost to serve this many requests/s")
    p.add_argument("--prices", metavar="FILE", help=f"GPU-hour prices (default {DEFAULT_PRICES.name})")
    p.add_argument("--dtype", choices=DTYPES, default=default_of(serving, "dtype"))
    p.add_argument("--kv-reads", choices=KV_READS, default=default_of(serving, "kv_reads"),
                   help="per_kv_head (default): a GQA-aware paged-attention kernel")
    p.add_argument("--framework", type=framework_arg, default=default_of(serving, "framework"),
                   help="whose kernels run on the paged cache: gpt-fast (default; math SDPA, LM head over every "
                        "prompt token), vllm (FlashAttention, last-position logits, custom AllReduce), gpt-fast-flash")
    p.add_argument("--seed", type=_ranged("seed", int, 0, MAX_SEED), default=default_of(serving, "seed"),
                   help=f"random seed of the arrivals and lengths, 0 to {MAX_SEED} (default {default_of(serving, 'seed')})")
    p.add_argument("--json", action="store_true", help="print a JSON array, one object per schedule")
    p.add_argument("--out", metavar="DIR", help="write per-request rows to DIR/requests.parquet and .csv")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    answer = call_api(serving_run, args, schedules=args.schedule or list(default_of(serving, "schedules")),
                      progress=not args.no_progress)
    rows, options = answer.rows, answer.options
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    offered = f"{args.rate:g} req/s" if args.rate else f"trace {args.trace}"
    lengths = "" if args.trace else f" (prompt-len {args.prompt_len}, gen-len {args.gen_len} tokens)"
    split = f"TP {args.tp}" + (f" x PP {args.pp}" if args.pp > 1 else "")
    print(f"{answer.model} on {answer.hardware}, {split}, {args.framework} kernels on a paged KV cache: "
          f"{answer.request_count} requests at "
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
