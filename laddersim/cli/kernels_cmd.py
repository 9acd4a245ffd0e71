"""``laddersim kernels``: what laddersim charges one decode (or prefill) layer, kernel by kernel
(``laddersim.api.kernels`` does the work)."""

from __future__ import annotations

import argparse
import json
import sys

from laddersim.api import kernels
from laddersim.support.choices import FRAMEWORKS, PHASES, SCHEDULE_FORMS
from laddersim.cli.args import add_dtype_arg, add_model_args, add_parallel_args, add_workload_args, call_api, default_of
from laddersim.support.text_tables import format_table


def register(sub) -> None:
    p = sub.add_parser("kernels", help="one layer's kernels as laddersim prices them: class, count, us (beside a profiler trace)")
    add_model_args(p)
    add_parallel_args(p, kernels)
    add_workload_args(p, gen_help="new tokens (a static cache holds prompt + new tokens)")
    p.add_argument("--schedule", default=default_of(kernels, "schedule"),
                   help=f"{SCHEDULE_FORMS} (default {default_of(kernels, 'schedule')})")
    p.add_argument("--framework", default=default_of(kernels, "framework"),
                   help=f"{', '.join(FRAMEWORKS)} or a framework .yaml (laddersim calibrate kernels)")
    add_dtype_arg(p, default_of(kernels, "dtype"))
    p.add_argument("--phase", choices=PHASES, default=default_of(kernels, "phase"))
    p.add_argument("--json", action="store_true", help="print {layer_us, kernels: [{name, class, count, us}]}")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    frame = call_api(kernels, args)
    layer_us = frame.attrs["layer_us"]
    if args.json:
        rows = [{"name": r["kernel"], "class": r["class"], "count": float(r["count"]), "us": float(r["us"])}
                for r in frame.to_dict("records")]
        json.dump({"layer_us": layer_us, "kernels": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    columns = [("kernel", "kernel", "{}"), ("class", "class", "{}"), ("count", "count", "{:g}"), ("us", "us", "{:.2f}")]
    layout = (f" with data-parallel attention ({args.ep // args.tp} replicas, EP {args.ep})"
              if getattr(args, "dp_attention", False) else "")
    sys.stdout.write(f"{args.model} on {args.hardware}, TP {args.tp}{layout}, batch {args.batch}, {args.schedule}, "
                     f"{args.framework}, {args.phase}: one layer on one rank\n")
    sys.stdout.write(format_table(frame.to_dict("records"), columns) + "\n")
    collectives = frame.loc[frame["class"] == "collective", "us"].sum()
    note = f" (+ {collectives:.2f} us of collectives on the communication stream)" if collectives else ""
    sys.stdout.write(f"layer (compute stream): {layer_us:.2f} us{note}\n")
    return 0
