"""``laddersim plot``: a figure (PNG and SVG) from a results table, or a decode-step timeline.

    laddersim plot RESULTS.parquet --kind bandwidth|latency|heatmap|throughput|breakdown [--where COL=VAL]
    laddersim plot --kind timeline --model M --hardware H --tp N [--batch B] --schedule standard --schedule ladder --step K
"""

from __future__ import annotations

import argparse
from pathlib import Path

from laddersim.api import plot, plot_timeline
from laddersim.api.plotting import SCHEDULE_KINDS, TIMELINE_DIR
from laddersim.cli.args import add_parallel_args, call_api, default_of, integer
from laddersim.errors import UserInputError
from laddersim.support.choices import DTYPES

KINDS = ("bandwidth", "latency", "heatmap", "throughput", "breakdown", "timeline")
_SCENARIO_FLAGS = ("model", "hardware", "tp")


def register(sub) -> None:
    p = sub.add_parser("plot", help="plot a results table (PNG and SVG), or a decode-step timeline",
                       description="Plot a results table (PNG and SVG beside it), or one decode step's timeline "
                                   f"(PNG and SVG in {TIMELINE_DIR}/ unless --out).")
    p.add_argument("results", nargs="?", metavar="RESULTS",
                   help="results table (.parquet or .csv, e.g. from laddersim sweep); not for --kind timeline")
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--out", metavar="BASE",
                   help="output path without extension (default: <RESULTS stem>-<kind> beside RESULTS, or "
                        f"{TIMELINE_DIR}/timeline-<model>-tp<N>)")
    p.add_argument("--title", help="figure title")
    p.add_argument("--where", action="append", metavar="COL=VAL",
                   help="keep rows with COL equal to VAL; repeatable: one column repeated means any of its "
                        "values (--where tp=4 --where tp=8), different columns must all match")
    p.add_argument("--x", metavar="COLUMN",
                   help="bandwidth/latency: the column on the x axis, a numeric input (an override column, "
                        "tp, batch, prompt_len, gen_len)")
    p.add_argument("--schedule", action="append",
                   help="bandwidth/latency/heatmap: schedule compared with standard (default ladder); "
                        "timeline: schedules shown, repeatable (default standard and ladder)")
    timeline = p.add_argument_group("timeline scenario (with --kind timeline)")
    timeline.add_argument("--model", help="preset (llama-3.1-8b/70b/405b) or path to a HF config.json")
    timeline.add_argument("--hardware", help="profile name (laddersim profiles list) or path")
    add_parallel_args(timeline, plot_timeline, required=False)
    timeline.add_argument("--batch", type=integer, default=default_of(plot_timeline, "batch"))
    timeline.add_argument("--prompt-len", type=integer, default=default_of(plot_timeline, "prompt_len"))
    timeline.add_argument("--gen-len", type=integer, default=default_of(plot_timeline, "gen_len"))
    timeline.add_argument("--dtype", default=default_of(plot_timeline, "dtype"), help=", ".join(DTYPES))
    timeline.add_argument("--kv-cache", default=default_of(plot_timeline, "kv_cache"), help="static or dynamic")
    timeline.add_argument("--step", type=integer, default=default_of(plot_timeline, "step"),
                          help="decode step to draw (0 = first after prefill)")
    timeline.add_argument("--ranks", type=integer,
                          help="draw ranks 0..N-1 (default 2, or all of them when TP is smaller)")
    timeline.add_argument("--zoom-layers", type=integer, default=default_of(plot_timeline, "zoom_layers"),
                          help="zoom panel on layers 0..N-1 (0: no zoom panel; default 2)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    paths = _timeline(args) if args.kind == "timeline" else _table_plot(args)
    for path in paths:
        print(path)
    return 0


def _table_plot(args: argparse.Namespace) -> list[Path]:
    if not args.results:
        raise UserInputError(f"results: --kind {args.kind} needs a RESULTS table (.parquet or .csv)")
    given = [f"--{f.replace('_', '-')}" for f in _SCENARIO_FLAGS if getattr(args, f) is not None]
    if given:
        raise UserInputError(f"{given[0][2:]}: scenario flags are for --kind timeline; "
                             f"--kind {args.kind} reads everything from RESULTS")
    schedules = args.schedule or []
    if len(schedules) > 1 and args.kind in SCHEDULE_KINDS:
        raise UserInputError(f"schedule: --kind {args.kind} compares one schedule with standard, got {len(schedules)}")
    return call_api(plot, args, schedule=schedules[0] if schedules else None)


def _timeline(args: argparse.Namespace) -> list[Path]:
    if args.results:
        raise UserInputError("results: --kind timeline simulates a scenario; give --model --hardware --tp, not a table")
    missing = [f"--{f}" for f in _SCENARIO_FLAGS if getattr(args, f) is None]
    if missing:
        raise UserInputError(f"{missing[0][2:]}: --kind timeline needs {', '.join(missing)}")
    if args.where or args.x:
        raise UserInputError(f"{'where' if args.where else 'x'}: not used by --kind timeline")
    return call_api(plot_timeline, args, schedules=args.schedule or list(default_of(plot_timeline, "schedules")))
