"""Rebuild nccl-tests ``all_reduce_perf`` stdout from the published tables in
../shared/reference_data/nccl_tests/ (see its PROVENANCE.md), as test fixtures for
``laddersim calibrate import-nccl-tests``. The numbers are the table's, row for row; the layout
is nccl-tests 2.17's; host names, PIDs and bus ids are placeholders. Run from the repo root:

    python tests/data/nccl_tests_logs/rebuild.py [REFERENCE_DIR]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# table -> (device name, ranks per node, iters, version line or "", source as in PROVENANCE.md)
LOGS = {
    "aws_p5_h100_1node_nvswitch.csv": ("NVIDIA H100 80GB HBM3", 8, 20, "",
        "aws-samples/awsome-distributed-training @ 7217859f : micro-benchmarks/nccl-tests/aws-batch/README.md"),
    "aws_p5_h100_2node_efa3200.csv": ("NVIDIA H100 80GB HBM3", 8, 20, "",
        "aws-samples/awsome-distributed-training @ 7217859f : micro-benchmarks/nccl-tests/README.md"),
    "h100_cluster_10node_8gpn_net400.csv": ("NVIDIA H100 80GB HBM3", 8, 20, "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902",
        "xxrjun/nccl-tests-cluster @ 455de4f8 : .../multi-node/runs/20260129-180219/without-debug/logs/nccl_N10_G8.log"),
}


def _fmt_time(us: float) -> str:
    return f"{us:8.2f}" if us < 1e4 else f"{us:8.1f}" if us < 1e5 else f"{us:8.0f}"


def rebuild(table: Path, device: str, per_node: int, iters: int, version: str, source: str) -> str:
    rows = list(csv.DictReader(table.open()))
    ranks, nodes = int(rows[0]["ngpus"]), int(rows[0]["nnodes"])
    lines = [
        f"# laddersim test fixture rebuilt from ../shared/reference_data/nccl_tests/{table.name} "
        f"(published all_reduce_perf output: {source}); numbers as in the table",
        *([version] if version else []),
        f"# nThread 1 nGpus 1 minBytes {rows[0]['size_bytes']} maxBytes {rows[-1]['size_bytes']} "
        f"step: 2(factor) warmup iters: 5 iters: {iters} agg iters: 1 validation: 1 graph: 0",
        "#", "# Using devices",
    ]
    for rank in range(ranks):
        host = f"node{rank // per_node:02d}"
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {10000 + rank:6d} on {host:>10} device "
                     f"{rank % per_node:2d} [0x{rank % per_node:02x}] {device}")
    lines += [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    for r in rows:
        lines.append(
            f"{int(r['size_bytes']):12d}  {int(r['count']):12d}  {r['type']:>8}  {r['redop']:>6}  {-1:6d}  "
            f"{_fmt_time(float(r['time_us']))}  {float(r['algbw_GBps']):6.2f}  {float(r['busbw_GBps']):6.2f}  "
            f"{0:5d}  {_fmt_time(float(r['time_us_inplace']))}  {float(r['algbw_GBps_inplace']):6.2f}  "
            f"{float(r['busbw_GBps_inplace']):6.2f}  {0:5d}")
    avg = sum(float(r["busbw_GBps"]) for r in rows) / len(rows)
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:.4f} ", "#", ""]
    assert nodes == ranks // per_node, table
    return "\n".join(lines)


def main(reference: Path) -> None:
    for name, (device, per_node, iters, version, source) in LOGS.items():
        text = rebuild(reference / name, device, per_node, iters, version, source)
        (HERE / name.replace(".csv", ".log")).write_text(text)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[3] / "shared" / "reference_data" / "nccl_tests")
