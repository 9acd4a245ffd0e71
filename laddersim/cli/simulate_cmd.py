"""``laddersim simulate``: one scenario under one or more schedules; a table or JSON
(``laddersim.api.simulate_schedules`` does the work)."""

from __future__ import annotations

import argparse
import json
import sys

from laddersim.api import allreduce_used, simulate, simulate_schedules, time_sources
from laddersim.api.params import RunOptions, ScenarioParams
from laddersim.cli.args import add_run_options, add_scenario_args, add_what_if_args, default_of
from laddersim.support.choices import DEFAULT_SCHEDULES, SCHEDULE_FORMS
from laddersim.support.text_tables import format_table


def register(sub) -> None:
    p = sub.add_parser("simulate", help="simulate one scenario under one or more schedules")
    add_scenario_args(p, simulate)
    p.add_argument("--schedule", action="append", default=None,
                   help=f"{SCHEDULE_FORMS} (repeatable; default {' and '.join(DEFAULT_SCHEDULES)})")
    p.add_argument("--json", action="store_true", help="print a JSON array, one object per schedule")
    add_run_options(p)
    p.add_argument("--out", metavar="FILE", help="also write the rows to FILE.csv, FILE.parquet or FILE.json")
    p.add_argument("--trace", metavar="OUT.json",
                   help="write a Chrome/Perfetto trace: every schedule, each its own process")
    p.add_argument("--trace-steps", default=str(default_of(simulate, "trace_steps")), type=_trace_steps,
                   help="decode steps in the trace after the prefill: a count or 'all' "
                        f"(default {default_of(simulate, 'trace_steps')})")
    add_what_if_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    given = vars(args)
    rows, results = simulate_schedules(ScenarioParams.pick(given), args.schedule or DEFAULT_SCHEDULES,
                                       RunOptions.pick(given), out=args.out, trace=args.trace,
                                       trace_steps=args.trace_steps, progress=True)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(_time_sources(results[0]), file=sys.stderr)  # stdout stays the table
    used = allreduce_used(results[0])
    print(f"AllReduce: prefill {used['prefill']}, decode {used['decode']}", file=sys.stderr)
    pipeline = any(row["pp"] > 1 for row in rows)
    dp = any(row.get("dp_attention") for row in rows)  # tp each replica's, ep all GPUs'
    print(format_table(rows, [
        ("schedule", "schedule", "{}"), ("tp", "tp", "{}"), *([("pp", "pp", "{}")] if pipeline else []),
        *([("ep", "ep", "{}"), ("attention_replicas", "replicas", "{}")] if dp else []),
        ("nodes", "nodes", "{}"), ("batch", "batch", "{}"), ("prefill_s", "prefill s", "{:.3f}"),
        ("decode_s", "decode s", "{:.3f}"), ("tpot_s", "ms/token", "{:.3f}", 1e3), ("tokens_per_s", "tokens/s", "{:.1f}"),
        ("speedup_vs_standard", "vs standard", "{:.3f}x"),
        ("exposed_comm_s", "exposed comm s", "{:.3f}"),
        *([("pipeline_bubble", "bubble", "{:.0%}"), ("pp_boundary_transport", "stage link", "{}")] if pipeline else []),
    ]))
    for row in rows:
        if "decode_s_ci95" in row:
            lo, hi = row["decode_s_ci95"]
            print(f"{row['schedule']}: decode from {row['sampled_steps']} sampled steps of "
                  f"{row['gen_len'] - 1}; 95% interval {lo:.4f}-{hi:.4f} s (--exact-steps: all)")
    return 0


def _time_sources(result) -> str:
    """Where each op's time came from (laddersim.api.time_sources), one line per phase."""
    lines = ["op time sources (SILICON: measured table; HYBRID: table extended by the roofline; SOL: roofline model):"]
    for phase, sources in time_sources(result).items():
        lines.append(f"  {phase}: " + ", ".join(f"{kind} {source}" for kind, source in sources.items()))
    return "\n".join(lines)


def _trace_steps(text: str) -> str | int:
    """``--trace-steps``: 'all' or a count of ASCII digits (str.isdigit() alone takes '\u00b3')."""
    if text == "all":
        return text
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"trace-steps must be a count (0, 1, 2, ...) or 'all', got {text[:40]!r}")
    return int(text) if len(text.lstrip("0")) <= 12 else 10**12  # beyond any run's decode steps
