"""Wall time of a 1,000-point sweep: Llama-3.1-70B on h100-sxm-nvswitch, TP 4/8, batch 1-16,
standard and ladder, 10 intra-node bandwidth scales x 5 latency scales (prompt 1024, 512 tokens).

Every point is a full simulation (none infeasible, nothing reused: the output directory starts
empty). Prints points, workers, wall time and points/s.

    python benchmarks/bench_sweep.py [--workers N] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from laddersim.sweep import run_sweep
from laddersim.sweep.grid import parse_grid

GRID = {
    "models": ["llama-3.1-70b"], "hardware": ["h100-sxm-nvswitch"], "tp": [4, 8],
    "batch": [1, 2, 4, 8, 16], "prompt_len": [1024], "gen_len": [512], "schedules": ["standard", "ladder"],
    "overrides": {"intra_bandwidth_scale": [0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0],
                  "intra_latency_scale": [0.25, 0.5, 1.0, 2.0, 4.0]},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", help="keep the results here (must not hold a previous run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or tmp
        t0 = time.perf_counter()
        report = run_sweep(parse_grid(GRID), out, workers=args.workers, progress=False)
        wall_s = time.perf_counter() - t0
    assert report.points == 1000, report.points
    print(f"points {report.points} (computed {report.computed}, reused {report.reused}), "
          f"status {report.status_counts()}")
    print(f"workers {args.workers} on {os.cpu_count()} cores: wall {wall_s:.2f} s, "
          f"{report.computed / wall_s:.1f} points/s")


if __name__ == "__main__":
    main()
