"""Write a profile's NCCL all-to-all table (``<all-reduce table stem>_alltoall.csv``) from
AIConfigurator's nccl-tests ``nccl_perf.csv`` (ai-dynamo/aiconfigurator @ 095f58a51c4c,
``aic-core/src/aiconfigurator_core/systems/data/<system>/comm/nccl/<version>/``): its ``alltoall``
rows in half precision, ``size_bytes`` = 2 x ``message_size`` (elements: the nccl-tests size, the
whole send buffer of one rank), ``time_us`` = ``latency`` (ms) x 1000, the median where a size has
several rows.

    python tools/dev/alltoall_table.py NCCL_PERF_CSV SYSTEM VERSION OUT_CSV
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict


def main(src: str, system: str, version: str, out: str) -> None:
    rows: dict[tuple[int, int], list[float]] = defaultdict(list)
    with open(src, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["op_name"] == "alltoall" and row["nccl_dtype"] == "half":
                rows[(int(row["num_gpus"]), 2 * int(row["message_size"]))].append(float(row["latency"]) * 1e3)
    with open(out, "w", newline="") as handle:
        handle.write(f"# source: ai-dynamo/aiconfigurator @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce : aic-core/src/"
                     f"aiconfigurator_core/systems/data/{system}/comm/nccl/{version}/nccl_perf.csv\n"
                     "# rows: op_name=alltoall, nccl_dtype=half; size_bytes=2*message_size (one rank's whole send "
                     "buffer), us=latency*1e3 (median of repeated rows, source_rows = how many)\n"
                     f"# library: NCCL {version}; mode: eager; timing: loop (nccl-tests alltoall_perf, one node)\n"
                     "# made by: python tools/dev/alltoall_table.py NCCL_PERF_CSV SYSTEM VERSION OUT_CSV\n")
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["gpus", "nodes", "size_bytes", "time_us", "source_rows"])
        for (gpus, size), times in sorted(rows.items()):
            writer.writerow([gpus, 1, size, f"{statistics.median(times):.2f}", len(times)])


if __name__ == "__main__":
    main(*sys.argv[1:5])
