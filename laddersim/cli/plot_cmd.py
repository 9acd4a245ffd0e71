"""``laddersim plot``: a figure (PNG and SVG) from a results table, or a decode-step timeline.

    laddersim plot RESULTS.parquet --kind bandwidth|latency|heatmap|throughput|breakdown [--where COL=VAL]
    laddersim plot --kind timeline --model M --hardware H --tp N [--batch B] --schedule standard --schedule ladder --step K
"""

from __future__ import annotations

import argparse
from pathlib import Path

from laddersim.cli.args import positive_int
from laddersim.errors import UserInputError
from laddersim.io_write import check_output

KINDS = ("bandwidth", "latency", "heatmap", "throughput", "breakdown", "timeline")
# Which extra flags each results-table kind takes (all of them take --title).
_SCHEDULE_KINDS = ("bandwidth", "latency", "heatmap")
_X_KINDS = ("bandwidth", "latency")
_SCENARIO_FLAGS = ("model", "hardware", "tp")
DEFAULT_RANKS = 2  # timeline lanes drawn without --ranks (fewer when TP is smaller)
TIMELINE_DIR = "runs/plots"  # where a timeline goes without --out (never the folder's root)


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
    timeline.add_argument("--tp", type=positive_int("tp"), help="tensor-parallel degree")
    timeline.add_argument("--batch", type=positive_int("batch"), default=1)
    timeline.add_argument("--prompt-len", type=positive_int("prompt-len"), default=1024)
    timeline.add_argument("--gen-len", type=positive_int("gen-len"), default=512)
    timeline.add_argument("--dtype", default="bfloat16", help="bfloat16, float16, float32 or fp8")
    timeline.add_argument("--kv-cache", default="static", help="static or dynamic")
    timeline.add_argument("--step", type=int, default=0, help="decode step to draw (0 = first after prefill)")
    timeline.add_argument("--ranks", type=positive_int("ranks"),
                          help="draw ranks 0..N-1 (default 2, or all of them when TP is smaller)")
    timeline.add_argument("--zoom-layers", type=int, default=2,
                          help="zoom panel on layers 0..N-1 (0: no zoom panel; default 2)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from laddersim.plots import PLOT_KINDS

    if args.kind == "timeline":
        paths = _timeline(args)
    else:
        paths = _table_plot(args, PLOT_KINDS[args.kind].function)
    for path in paths:
        print(path)
    return 0


def _table_plot(args: argparse.Namespace, function) -> list[Path]:
    from laddersim.plots.frames import parse_where, read_results, select

    if not args.results:
        raise UserInputError(f"results: --kind {args.kind} needs a RESULTS table (.parquet or .csv)")
    given = [f"--{f.replace('_', '-')}" for f in _SCENARIO_FLAGS if getattr(args, f) is not None]
    if given:
        raise UserInputError(f"{given[0][2:]}: scenario flags are for --kind timeline; "
                             f"--kind {args.kind} reads everything from RESULTS")
    options: dict = {"title": args.title}
    if args.schedule:
        if args.kind not in _SCHEDULE_KINDS:
            raise UserInputError(f"schedule: not used by --kind {args.kind}; allowed with: {', '.join(_SCHEDULE_KINDS)}")
        if len(args.schedule) > 1:
            raise UserInputError(f"schedule: --kind {args.kind} compares one schedule with standard, got {len(args.schedule)}")
        options["schedule"] = args.schedule[0]
    if args.x:
        if args.kind not in _X_KINDS:
            raise UserInputError(f"x: not used by --kind {args.kind}; allowed with: {', '.join(_X_KINDS)}")
        options["x"] = args.x
    if args.out:
        check_output(f"{args.out}.png", "out", "file")
    frame = select(read_results(args.results), parse_where(args.where))
    if frame.empty:
        if not args.where:
            raise UserInputError(f"results: {args.results} has no ok rows to plot")
        raise UserInputError(f"where: no rows of {args.results} match {' '.join(args.where)}")
    results = Path(args.results)
    out = args.out or str(results.with_name(f"{results.stem}-{args.kind}"))
    check_output(f"{out}.png", "out", "file")
    return function(frame, out, **options)


def _timeline(args: argparse.Namespace) -> list[Path]:
    from laddersim.costs.collective_labels import collective_args, label
    from laddersim.plots import plot_timeline
    from laddersim.plots.step_spans import decode_step_spans

    if args.results:
        raise UserInputError("results: --kind timeline simulates a scenario; give --model --hardware --tp, not a table")
    missing = [f"--{f}" for f in _SCENARIO_FLAGS if getattr(args, f) is None]
    if missing:
        raise UserInputError(f"{missing[0][2:]}: --kind timeline needs {', '.join(missing)}")
    if args.where or args.x:
        raise UserInputError(f"{'where' if args.where else 'x'}: not used by --kind timeline")
    if args.zoom_layers < 0:
        raise UserInputError(f"zoom-layers: must be >= 0, got {args.zoom_layers}")
    if args.out:
        check_output(f"{args.out}.png", "out", "file")
    if args.step < 0:
        raise UserInputError(f"step: must be >= 0, got {args.step}")
    ranks = args.ranks if args.ranks is not None else min(DEFAULT_RANKS, args.tp)
    spans, results = decode_step_spans(args.model, args.hardware, args.tp, args.batch, args.prompt_len,
                                       args.gen_len, args.schedule or ["standard", "ladder"], args.step,
                                       ranks, args.dtype, args.kv_cache)
    scenario = next(iter(results.values())).scenario
    title = args.title or (f"Decode step {args.step}: {scenario.model.name}, TP {args.tp}, batch {args.batch}, "
                           f"{scenario.hardware.name}")
    out = args.out or f"{TIMELINE_DIR}/timeline-{scenario.model.name}-tp{args.tp}"
    check_output(f"{out}.png", "out", "file")
    decode = collective_args(scenario.model, scenario.hardware, scenario.workload, scenario.tp)[("decode", "allreduce")]
    return plot_timeline(spans, out, zoom_layers=args.zoom_layers, title=title, comm_label=label(decode))
