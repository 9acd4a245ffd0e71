"""``laddersim serving``: one replica under a stream of requests (continuous batching), per
schedule: TTFT/TPOT/E2E percentiles, throughput, goodput at the SLOs; optionally its capacity
(the highest rate within the SLOs) and the GPUs and cost of a target rate
(``laddersim.api.serving_run`` does the work)."""

from __future__ import annotations

import argparse
import json
import sys

from laddersim.api.serving_params import ServingParams
from laddersim.api.serving_task import DEFAULT_PRICES, LENGTH_FORMS, serving, serving_run, slo_rule
from laddersim.cli.args import add_model_args, add_parallel_args, add_quant_args, choices_metavar, default_of, integer, real
from laddersim.api.serving_task import ENGINES, overload_line, prefill_policy
from laddersim.support.choices import DTYPES, FRAMEWORKS, KV_READS
from laddersim.support.limits import MAX_SEED
from laddersim.support.text_tables import format_table

TABLE = [
    ("schedule", "schedule", "{}"), ("ttft_p50_s", "TTFT p50 ms", "{:.1f}", 1e3), ("ttft_p99_s", "p99", "{:.1f}", 1e3),
    ("tpot_p50_s", "TPOT p50 ms", "{:.2f}", 1e3), ("tpot_p99_s", "p99", "{:.2f}", 1e3),
    ("e2e_p50_s", "E2E p50 s", "{:.2f}"), ("e2e_p99_s", "p99", "{:.2f}"),
    ("throughput_tokens_per_s", "tok/s", "{:.0f}"), ("goodput_req_per_s", "goodput req/s", "{:.2f}"),
    ("slo_attainment", "in SLO", "{:.1%}"), ("preemptions", "preempted", "{}"),
]


def register(sub) -> None:
    p = sub.add_parser(
        "serving", help="one replica under load: continuous batching, TTFT/TPOT percentiles, goodput, capacity",
        description="Simulate requests arriving at a replica (Poisson or gamma arrivals, or a trace) served "
                    "by a vLLM-style continuous-batching scheduler; every iteration's time comes from the "
                    "step simulator. One result per --schedule.")
    add_model_args(p)
    add_parallel_args(p, serving)
    p.add_argument("--schedule", action="append", help="repeatable (default: standard and ladder)")
    p.add_argument("--rate", type=real, help="mean request arrivals per second")
    p.add_argument("--concurrency", type=integer, metavar="C",
                   help="instead of --rate: a closed loop as serving benchmarks run (aiperf --concurrency, vLLM "
                        "--max-concurrency): C requests in flight, a finished one replaced at once; TTFT includes "
                        "the wait for a slot and the chunked prefill")
    p.add_argument("--warmup", type=integer,
                   help="with --concurrency: requests run first and left out of every figure (default: C)")
    p.add_argument("--scheduler", metavar=choices_metavar(tuple(ENGINES)),
                   help="whose scheduler forms the iterations, with its default token budget and running limit "
                        "(default: vllm with --concurrency, else --max-running/--max-batched-tokens as given)")
    p.add_argument("--requests", type=integer, default=default_of(serving, "requests"),
                   help=f"requests to simulate (default {default_of(serving, 'requests')}; plan --rate defaults to 200 "
                        "per rate tried, as it searches every candidate's capacity)")
    p.add_argument("--prompt-len", default=str(default_of(serving, "prompt_len")),
                   help=f"prompt tokens: {LENGTH_FORMS} (default {default_of(serving, 'prompt_len')})")
    p.add_argument("--gen-len", default=str(default_of(serving, "gen_len")),
                   help=f"output tokens: {LENGTH_FORMS} (default {default_of(serving, 'gen_len')}, as simulate and plan)")
    p.add_argument("--gamma-shape", type=real,
                   default=default_of(serving, "gamma_shape"),
                   help="shape of the gamma arrival gaps: 1 = Poisson (default), < 1 burstier")
    p.add_argument("--trace", metavar="FILE.csv", help="requests from a CSV arrival_s,prompt_len,output_len "
                                                       "(instead of --rate/--requests/--prompt-len/--gen-len)")
    p.add_argument("--max-running", type=integer,
                   default=default_of(serving, "max_running"),
                   help=f"sequences in the running batch (vLLM max_num_seqs; default {default_of(serving, 'max_running')})")
    p.add_argument("--max-batched-tokens", type=integer,
                   default=default_of(serving, "max_batched_tokens"),
                   help="new tokens per iteration (vLLM max_num_batched_tokens; "
                        f"default {default_of(serving, 'max_batched_tokens')})")
    p.add_argument("--chunked-prefill", action="store_true", help="mix decode tokens and prompt chunks per iteration")
    p.add_argument("--block-size", type=integer,
                   default=default_of(serving, "block_size"),
                   help="tokens per KV-cache block")
    p.add_argument("--ttft-slo-s", type=real, help="time-to-first-token target, s")
    p.add_argument("--tpot-slo-s", type=real, help="time-per-output-token target, s")
    p.add_argument("--slo-attainment", type=real,
                   default=default_of(serving, "slo_attainment"),
                   help="share of requests that must meet the SLOs for a rate to count as sustained "
                        f"(default {default_of(serving, 'slo_attainment')})")
    p.add_argument("--capacity", action="store_true",
                   help="also search the highest rate within the SLOs (needs --ttft-slo-s)")
    p.add_argument("--target-rate", type=real,
                   help="with --capacity: replicas, GPUs and cost to serve this many requests/s")
    p.add_argument("--prices", metavar="FILE", help=f"GPU-hour prices (default {DEFAULT_PRICES.name})")
    p.add_argument("--dtype", metavar=choices_metavar(DTYPES), default=default_of(serving, "dtype"))
    add_quant_args(p)
    p.add_argument("--kv-reads", metavar=choices_metavar(KV_READS), default=default_of(serving, "kv_reads"),
                   help="per_kv_head (default): a GQA-aware paged-attention kernel")
    p.add_argument("--framework", default=default_of(serving, "framework"),
                   help=f"whose kernels run on the paged cache: {', '.join(FRAMEWORKS)} (default "
                        f"{default_of(serving, 'framework')}: math SDPA, LM head over every prompt token; vllm: "
                        "FlashAttention, last-position logits, custom AllReduce; gpt-fast-graph is refused: its "
                        "attention kernel is priced over one static batch)")
    p.add_argument("--seed", type=integer, default=default_of(serving, "seed"),
                   help=f"random seed of the arrivals and lengths, 0 to {MAX_SEED} (default {default_of(serving, 'seed')})")
    p.add_argument("--json", action="store_true", help="print a JSON array, one object per schedule")
    p.add_argument("--out", metavar="DIR", help="write per-request rows to DIR/requests.parquet and .csv")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    answer = serving_run(ServingParams.pick(vars(args)), args.schedule or list(default_of(serving, "schedules")),
                         out=args.out, progress=not args.no_progress)
    rows, options = answer.rows, answer.options
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if args.concurrency:
        offered = (f"concurrency {args.concurrency} (closed loop, after {rows[0]['warmup_requests']} warm-up "
                   "requests left out)")
    else:
        offered = f"{args.rate:g} req/s" if args.rate else f"trace {args.trace}"
    lengths = "" if args.trace else f" (prompt-len {args.prompt_len}, gen-len {args.gen_len} tokens)"
    split = f"TP {args.tp}" + (f" x PP {args.pp}" if args.pp > 1 else "") + (f", EP {args.ep}" if args.ep > 1 else "")
    scheduler = f"{rows[0]['scheduler']} scheduler, " if rows[0]["scheduler"] else ""
    prefill = f", {prefill_policy(options)}" if prefill_policy(options) else ""
    print(f"{answer.model} on {answer.hardware}, {split}, {args.framework} kernels on a paged KV cache: "
          f"{answer.request_count} requests at "
          f"{offered}{lengths}; {scheduler}max {options.max_running} running, {options.max_batched_tokens} tokens "
          f"per iteration{prefill}; {rows[0]['kv_blocks']} KV blocks")
    print(format_table(rows, TABLE))
    print(f"in SLO: the share of requests within the SLOs at attainment {options.slo_attainment:g}; a rate is "
          f"sustained when {slo_rule(options)}; goodput: the rate of requests served within the SLOs")
    for row in rows:
        line = overload_line(row)
        if line:
            print(line)
    if args.capacity:
        for row in rows:
            line = f"{row['schedule']}: {row['capacity']}"
            if args.target_rate and row["capacity_req_per_s"]:
                noun = "replica" if row["replicas"] == 1 else "replicas"
                line += (f"; {args.target_rate:g} req/s needs {row['replicas']} {noun} = {row['gpus']} GPUs, "
                         f"${row['usd_per_hour']:.2f}/h")
            print(line)
    return 0
