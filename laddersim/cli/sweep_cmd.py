"""``laddersim sweep``: a grid of what-if scenarios into one resumable results table."""

from __future__ import annotations

import argparse

from laddersim.api import sweep
from laddersim.cli.args import RESUMABLE_NOTE, call_api, non_negative_float, positive_int
from laddersim.support.limits import MAX_BATCH, MAX_TOKENS, MAX_TP, override_maximum
from laddersim.sweeps.grid import OVERRIDE_COLUMNS

# Simple-grid flags: (flag, grid key = the API's parameter, type, help).
_GRID_FLAGS = (
    ("--model", "models", str, "presets or config.json paths"),
    ("--hardware", "hardware", str, "profile names or paths"),
    ("--tp", "tp", positive_int("tp", MAX_TP), "tensor-parallel degrees"),
    ("--pp", "pp", positive_int("pp", MAX_TP), "pipeline stages, each a TP group (default 1)"),
    ("--pp-microbatches", "pp_microbatches", positive_int("pp-microbatches", MAX_BATCH),
     "batches in flight through the stages (default 1: one batch, the stages in turn)"),
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
    for flag, key, kind, text in _GRID_FLAGS:
        p.add_argument(flag, nargs="+", type=kind, help=text, dest=key, metavar=flag[2:].upper().replace("-", "_"))
    for key in OVERRIDE_COLUMNS:
        p.add_argument("--" + key.replace("_", "-"), nargs="+", help=_OVERRIDE_HELP[key],
                       type=non_negative_float(key.replace("_", "-"), override_maximum(key)))
    p.add_argument("--workers", type=positive_int("workers"), default=None,
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
