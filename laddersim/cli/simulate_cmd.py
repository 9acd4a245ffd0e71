"""``laddersim simulate``: one scenario under one or more schedules; a table or JSON
(``laddersim.api.simulate_schedules`` does the work)."""

from __future__ import annotations

import argparse
import json
import sys

from laddersim.api import simulate, simulate_schedules, time_sources
from laddersim.support.choices import DEFAULT_SCHEDULES, SCHEDULE_FORMS
from laddersim.cli.args import _number, add_scenario_args, call_api, default_of, positive_int
from laddersim.support.text_tables import format_table

# Largest per-op noise sigma accepted: a lognormal multiplier of exp(2) at one sigma.
MAX_JITTER = 2.0


def register(sub) -> None:
    p = sub.add_parser("simulate", help="simulate one scenario under one or more schedules")
    add_scenario_args(p, simulate)
    p.add_argument("--schedule", action="append", default=None,
                   help=f"{SCHEDULE_FORMS} (repeatable; default {' and '.join(DEFAULT_SCHEDULES)})")
    p.add_argument("--json", action="store_true", help="print a JSON array, one object per schedule")
    p.add_argument("--jitter", type=_number("jitter", float, f"a number from 0 to {MAX_JITTER:g}",
                                            lambda v: 0.0 <= v <= MAX_JITTER), default=default_of(simulate, "jitter"),
                   help="sigma of per-rank lognormal op-time noise (simulates every rank and step); "
                        f"at most {MAX_JITTER:g}, where one op in six already runs 7x its time")
    p.add_argument("--exact-steps", action="store_true",
                   help="with --jitter: simulate every decode step instead of a random sample of them")
    p.add_argument("--sample-steps", type=positive_int("sample-steps"), default=None,
                   help="with --jitter: decode steps to simulate (default: about 120,000 op-rank runs, "
                        "4 to 64 steps); the output carries the 95%% interval of the estimate")
    p.add_argument("--seed", type=_number("seed", int, "an integer from 0 to 2**63-1", lambda v: 0 <= v < 2**63),
                   default=default_of(simulate, "seed"),
                   help=f"with --jitter: seed of the noise, 0 to 2**63-1 (default {default_of(simulate, 'seed')})")
    p.add_argument("--out", metavar="FILE", help="also write the rows to FILE.csv, FILE.parquet or FILE.json")
    p.add_argument("--trace", metavar="OUT.json",
                   help="write a Chrome/Perfetto trace: every schedule, each its own process")
    p.add_argument("--trace-steps", default=str(default_of(simulate, "trace_steps")), type=_trace_steps,
                   help="decode steps in the trace after the prefill: a count or 'all' "
                        f"(default {default_of(simulate, 'trace_steps')})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows, results = call_api(simulate_schedules, args, schedules=args.schedule or DEFAULT_SCHEDULES, progress=True)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(_time_sources(results[0]), file=sys.stderr)  # stdout stays the table
    pipeline = any(row["pp"] > 1 for row in rows)
    print(format_table(rows, [
        ("schedule", "schedule", "{}"), ("tp", "tp", "{}"), *([("pp", "pp", "{}")] if pipeline else []),
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
