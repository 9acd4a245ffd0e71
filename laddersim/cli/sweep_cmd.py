"""``laddersim sweep``: a grid of what-if scenarios into one resumable results table."""

from __future__ import annotations

import argparse

from laddersim.api import sweep
from laddersim.cli.args import RESUMABLE_NOTE, add_what_if_args, call_api, integer
from laddersim.support.limits import OVERRIDE_COLUMNS

# Simple-grid flags: (flag, grid key = the API's parameter, type, help). The types check syntax
# only; the grid (laddersim.sweeps.grid) checks ranges, as it does for a GRID.yaml and for the API.
_GRID_FLAGS = (
    ("--model", "models", str, "presets or config.json paths"),
    ("--hardware", "hardware", str, "profile names or paths"),
    ("--tp", "tp", integer, "tensor-parallel degrees"),
    ("--pp", "pp", integer, "pipeline stages, each a TP group (default 1)"),
    ("--pp-microbatches", "pp_microbatches", integer,
     "batches in flight through the stages (default 1: one batch, the stages in turn)"),
    ("--batch", "batch", integer, "batch sizes (default 1)"),
    ("--prompt-len", "prompt_len", integer, "prompt lengths (default 1024)"),
    ("--gen-len", "gen_len", integer, "generated lengths (default 512)"),
    ("--schedule", "schedules", str, "schedules (default standard ladder)"),
    ("--dtype", "dtype", str, "dtypes (default bfloat16)"),
    ("--kv-cache", "kv_cache", str, "static and/or dynamic (default static)"),
    ("--kv-reads", "kv_reads", str, "repeat_interleave and/or per_kv_head (default repeat_interleave)"),
    ("--ep", "ep", integer, "a mixture-of-experts model's expert-parallel ranks in each TP group (default 1)"),
)


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="what-if sweep over a grid; resumable Parquet/CSV table",
        description="Simulate the cross product of a grid (GRID.yaml, or the flags for a simple grid) "
                    "into DIR/results.parquet and DIR/results.csv. Re-running resumes: stored points "
                    "are not recomputed.")
    p.add_argument("grid", nargs="?", metavar="GRID.yaml", help="grid file (see examples/sweep_*.yaml)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created; reused to resume)")
    for flag, key, kind, text in _GRID_FLAGS:
        p.add_argument(flag, nargs="+", type=kind, help=text, dest=key, metavar=flag[2:].upper().replace("-", "_"))
    p.add_argument("--dp-attention", action="store_true",
                   help="every point with data-parallel attention: ep/tp attention replicas of --tp GPUs, experts "
                        "over all --ep GPUs (vLLM --data-parallel-size ep/tp --enable-expert-parallel; SGLang "
                        "--enable-dp-attention)")
    add_what_if_args(p, many=True)
    p.add_argument("--workers", type=integer, default=None,
                   help="local worker processes (default: all cores)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on a Dask distributed scheduler (e.g. tcp://host:8786) instead of local cores")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run, interrupted_note=RESUMABLE_NOTE)


def run(args: argparse.Namespace) -> int:
    overrides = {k: getattr(args, k) for k in OVERRIDE_COLUMNS if getattr(args, k) is not None}
    frame = call_api(sweep, args, overrides=overrides, progress=not args.no_progress)
    info = frame.attrs
    counts = ", ".join(f"{status} {n}" for status, n in info["status_counts"].items())
    print(f"sweep: {info['points']} points ({info['computed']} computed, {info['reused']} reused): {counts}")
    print(f"results: {info['parquet']} {info['csv']}")
    return 0
