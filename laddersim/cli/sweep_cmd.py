"""``laddersim sweep``: a grid of what-if scenarios into one resumable results table."""

from __future__ import annotations

import argparse
import os

from laddersim.cli.args import RESUMABLE_NOTE, non_negative_float, positive_int
from laddersim.errors import UserInputError
from laddersim.resources import given_or_shipped
from laddersim.limits import MAX_BATCH, MAX_TOKENS, MAX_TP, override_maximum
from laddersim.sweep.grid import OVERRIDE_COLUMNS, load_grid, parse_grid
from laddersim.sweep.sweep_dir import run_sweep

# Simple-grid flags: (flag, grid key, type, help).
_GRID_FLAGS = (
    ("--model", "models", str, "presets or config.json paths"),
    ("--hardware", "hardware", str, "profile names or paths"),
    ("--tp", "tp", positive_int("tp", MAX_TP), "tensor-parallel degrees"),
    ("--batch", "batch", positive_int("batch", MAX_BATCH), "batch sizes (default 1)"),
    ("--prompt-len", "prompt_len", positive_int("prompt-len", MAX_TOKENS), "prompt lengths (default 1024)"),
    ("--gen-len", "gen_len", positive_int("gen-len", MAX_TOKENS), "generated lengths (default 512)"),
    ("--schedule", "schedules", str, "schedules (default standard ladder)"),
    ("--dtype", "dtype", str, "dtypes (default bfloat16)"),
    ("--kv-cache", "kv_cache", str, "static and/or dynamic (default static)"),
    ("--kv-reads", "kv_reads", str, "repeat_interleave and/or per_kv_head (default repeat_interleave)"),
)
_OVERRIDE_HELP = {
    "intra_bandwidth_scale": "x intra-node AllReduce bandwidth",
    "intra_bandwidth_gbps": "intra-node large-message AllReduce bus bandwidth of the TP group, GB/s",
    "intra_latency_scale": "x intra-node AllReduce latency",
    "intra_latency_us": "intra-node small-message AllReduce time of the TP group, us",
    "inter_bandwidth_scale": "x inter-node AllReduce bandwidth",
    "inter_bandwidth_gbps": "inter-node (network tier) bus bandwidth, GB/s",
    "inter_latency_scale": "x inter-node AllReduce latency",
    "inter_latency_us": "inter-node (network tier) latency across the nodes, us",
    "nics_per_node": "NICs per node (a NIC per GPU at most; fewer share the inter-node traffic)",
    "gpus_per_node": "GPUs per node (whole numbers; a TP group larger than a node spans nodes)",
    "compute_slowdown": "GEMM slowdown while an AllReduce runs (fraction)",
    "comm_slowdown": "AllReduce slowdown while compute runs (fraction of its whole time)",
}


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="what-if sweep over a grid; resumable Parquet/CSV table",
        description="Simulate the cross product of a grid (GRID.yaml, or the flags for a simple grid) "
                    "into DIR/results.parquet and DIR/results.csv. Re-running resumes: stored points "
                    "are not recomputed.")
    p.add_argument("grid", nargs="?", metavar="GRID.yaml", help="grid file (see examples/sweep_*.yaml)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created; reused to resume)")
    for flag, _, kind, text in _GRID_FLAGS:
        p.add_argument(flag, nargs="+", type=kind, help=text)
    for key in OVERRIDE_COLUMNS:
        p.add_argument("--" + key.replace("_", "-"), nargs="+", help=_OVERRIDE_HELP[key],
                       type=non_negative_float(key.replace("_", "-"), override_maximum(key)))
    p.add_argument("--workers", type=positive_int("workers"), default=os.cpu_count() or 1,
                   help="local worker processes (default: all cores)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on a Dask distributed scheduler (e.g. tcp://host:8786) instead of local cores")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run, interrupted_note=RESUMABLE_NOTE)


def grid_from_args(args: argparse.Namespace):
    flags = {key: getattr(args, flag[2:].replace("-", "_")) for flag, key, _, _ in _GRID_FLAGS}
    flags = {k: v for k, v in flags.items() if v is not None}
    overrides = {k: getattr(args, k) for k in OVERRIDE_COLUMNS if getattr(args, k) is not None}
    if args.grid:
        if flags or overrides:
            given = sorted(flags) + sorted(overrides)
            raise UserInputError(f"sweep: give a GRID.yaml or grid flags, not both (flags given: {', '.join(given)})")
        return load_grid(given_or_shipped(args.grid))
    missing = [flag for flag, key, _, _ in _GRID_FLAGS[:3] if key not in flags]
    if missing:
        raise UserInputError(f"sweep: without a GRID.yaml, give {', '.join(missing)}")
    if overrides:
        flags["overrides"] = overrides
    return parse_grid(flags, where="sweep flags")


def run(args: argparse.Namespace) -> int:
    grid = grid_from_args(args)
    report = run_sweep(grid, args.out, workers=args.workers, scheduler=args.scheduler,
                       progress=not args.no_progress)
    counts = ", ".join(f"{status} {n}" for status, n in report.status_counts().items())
    print(f"sweep: {report.points} points ({report.computed} computed, {report.reused} reused): {counts}")
    print(f"results: {report.parquet} {report.csv}")
    return 0
