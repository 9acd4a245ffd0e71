"""``laddersim simulate``: one scenario under one or more schedules; a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from laddersim.cli.args import _number, add_scenario_args
from laddersim.errors import UserInputError
from laddersim.simulate import SimOptions, make_scenario, simulate
from laddersim.tables import format_table

# Largest per-op noise sigma accepted: a lognormal multiplier of exp(2) at one sigma.
MAX_JITTER = 2.0


def register(sub) -> None:
    p = sub.add_parser("simulate", help="simulate one scenario under one or more schedules")
    add_scenario_args(p)
    p.add_argument("--schedule", action="append", default=None,
                   help="standard, parallel, ladder, upper_bound, desync_half, hybrid:N (repeatable; default standard and ladder)")
    p.add_argument("--json", action="store_true", help="print a JSON array, one object per schedule")
    p.add_argument("--jitter", type=_number("jitter", float, f"a number from 0 to {MAX_JITTER:g}",
                                            lambda v: 0.0 <= v <= MAX_JITTER), default=0.0,
                   help="sigma of per-rank lognormal op-time noise (simulates every rank and step); "
                        f"at most {MAX_JITTER:g}, where one op in six already runs 7x its time")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", metavar="OUT.json", help="write a Chrome/Perfetto trace of the first schedule")
    p.add_argument("--trace-steps", default="3",
                   help="decode steps in the trace after the prefill: a count or 'all' (default 3)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    schedules = list(dict.fromkeys(args.schedule or ["standard", "ladder"]))  # each once, in the order given
    rows = []
    first = None
    for schedule in schedules:
        scenario = make_scenario(args.model, args.hardware, args.tp, args.batch, args.prompt_len,
                                 args.gen_len, schedule, args.dtype, args.kv_cache, args.kv_reads,
                                 args.framework)
        result = simulate(scenario, SimOptions(jitter=args.jitter, seed=args.seed))
        first = first or result
        rows.append(result.summary())
    base = next((r["tokens_per_s"] for r in rows if r["schedule"] == "standard"), None)
    for row in rows:
        row["speedup_vs_standard"] = row["tokens_per_s"] / base if base else None
    if args.trace:
        _write_trace(first, args.trace, args.trace_steps)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(_time_sources(first), file=sys.stderr)  # stdout stays the table
        print(format_table(rows, [
            ("schedule", "schedule", "{}"), ("tp", "tp", "{}"), ("nodes", "nodes", "{}"),
            ("batch", "batch", "{}"), ("prefill_s", "prefill s", "{:.3f}"), ("decode_s", "decode s", "{:.3f}"),
            ("tpot_s", "ms/token", "{:.3f}", 1e3), ("tokens_per_s", "tokens/s", "{:.1f}"),
            ("speedup_vs_standard", "vs standard", "{:.3f}x"),
            ("exposed_comm_s", "exposed comm s", "{:.3f}"),
        ]))
    return 0


def _time_sources(result) -> str:
    """Where each op's time came from (as AIConfigurator labels it): SILICON = a measured table,
    HYBRID = a measured table extended by the roofline, SOL = the roofline/bandwidth model."""
    from laddersim.costs.op_costs import Phase, op_time_sources

    s = result.scenario
    w = s.workload
    kinds = list(dict.fromkeys(result.program.kinds))
    lines = ["op time sources (SILICON: measured table; HYBRID: table extended by the roofline; SOL: roofline model):"]
    for phase in (Phase("prefill", w.batch, w.prompt_len), Phase("decode", w.batch, 1)):
        sources = op_time_sources(s.model, s.hardware, w, s.tp, phase)
        lines.append(f"  {phase.name}: " + ", ".join(f"{k} {sources[k]}" for k in kinds if k in sources))
    return "\n".join(lines)


def _write_trace(result, path: str, steps: str) -> None:
    from laddersim.trace import write_chrome_trace

    n = len(result.decode_metrics)
    if steps == "all":
        wanted = list(range(n))
    elif steps.isdigit():
        wanted = list(range(min(int(steps), n)))
    else:
        raise UserInputError(f"trace-steps: '{steps}' is not a count or 'all'")
    frames = result.timeline("prefill")
    if wanted:
        frames = pd.concat([frames, result.timeline(wanted)], ignore_index=True)
    try:
        write_chrome_trace(frames, path, title=f"{result.scenario.model.name} {result.scenario.schedule}")
    except OSError as exc:
        raise UserInputError(f"trace: cannot write {path}: {exc.strerror}") from None
    print(f"trace: {Path(path)} ({len(frames)} spans)", file=sys.stderr)
