"""Wall time of a 1,000-point sweep: Llama-3.1-70B on h100-sxm-nvswitch, TP 4/8, batch 1-16,
standard and ladder, 10 intra-node bandwidth scales x 5 latency scales (prompt 1024, 512 tokens).

Every point is a full simulation (none infeasible, nothing reused: the output directory starts
empty), run twice: in this process through ``run_sweep`` and as a user would, through
``python -m laddersim sweep GRID.yaml --workers N`` (goal: within ~10 s at 2 workers, 75x the
reference process). Prints wall seconds and points/s of each, the reference process timed in
the same run (see benchmarks/_common.py) and the ratios to it, and the closed-form floor: the
numpy evaluation of the same 1,000 points without the engine.

    python benchmarks/bench_sweep.py [--workers N] [--out DIR] [--skip-cli]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import closed_form_floor_s, cpu_s, reference_s  # noqa: E402

from laddersim.hardware.overrides import with_overrides  # noqa: E402
from laddersim.hardware.profile import load_profile  # noqa: E402
from laddersim.simulation.simulate import make_scenario  # noqa: E402
from laddersim.sweeps import run_sweep  # noqa: E402
from laddersim.sweeps.grid import parse_grid  # noqa: E402
from laddersim.sweeps.overrides import override_scales  # noqa: E402
from laddersim.sweeps.points import expand_grid  # noqa: E402

GRID = {
    "models": ["llama-3.1-70b"], "hardware": ["h100-sxm-nvswitch"], "tp": [4, 8],
    "batch": [1, 2, 4, 8, 16], "prompt_len": [1024], "gen_len": [512], "schedules": ["standard", "ladder"],
    "overrides": {"intra_bandwidth_scale": [0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0],
                  "intra_latency_scale": [0.25, 0.5, 1.0, 2.0, 4.0]},
}


def floor_s() -> float:
    """CPU seconds of the closed-form floor over the grid's points (profiles loaded once)."""
    points = expand_grid(parse_grid(GRID))
    base = load_profile(points[0].hardware_ref)
    t0 = time.process_time()
    for p in points:
        scales = override_scales(base, dict(p.overrides), p.tp)
        profile = with_overrides(base, **scales) if scales else base
        closed_form_floor_s(make_scenario(model=p.model_ref, hardware=profile, tp=p.tp, batch=p.batch,
                                          prompt_len=p.prompt_len, gen_len=p.gen_len, schedule=p.schedule,
                                          dtype=p.dtype, kv_cache=p.kv_cache, kv_reads=p.kv_reads))
    return time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", help="keep the in-process results here (must not hold a previous run)")
    parser.add_argument("--skip-cli", action="store_true", help="do not time the laddersim sweep command")
    args = parser.parse_args()
    ref = reference_s()
    print(f"reference process (405B TP 16 symmetric, plain engine): {ref:.3f} s CPU")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or str(Path(tmp) / "in_process")
        t0, c0 = time.perf_counter(), cpu_s()
        report = run_sweep(parse_grid(GRID), out, workers=args.workers, progress=False)
        wall_s, used_s = time.perf_counter() - t0, cpu_s() - c0
        assert report.points == 1000, report.points
        print(f"points {report.points} (computed {report.computed}, reused {report.reused}), "
              f"status {report.status_counts()}")
        print(f"run_sweep, workers {args.workers} on {os.cpu_count()} cores: wall {wall_s:.2f} s, "
              f"{report.computed / wall_s:.1f} points/s; CPU {used_s:.1f} s, per worker {used_s / args.workers:.2f} s "
              f"({used_s / args.workers / ref:.0f}x ref)")
        if not args.skip_cli:
            grid_path = Path(tmp) / "grid.yaml"
            grid_path.write_text(yaml.safe_dump(GRID))
            command = [sys.executable, "-m", "laddersim", "sweep", str(grid_path), "--out", str(Path(tmp) / "cli"),
                       "--workers", str(args.workers), "--no-progress"]
            t0, c0 = time.perf_counter(), cpu_s()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            cli_s, used_s = time.perf_counter() - t0, cpu_s() - c0
            print(f"laddersim sweep --workers {args.workers}: wall {cli_s:.2f} s, {1000 / cli_s:.1f} points/s; "
                  f"CPU {used_s:.1f} s, per worker {used_s / args.workers:.2f} s ({used_s / args.workers / ref:.0f}x ref; "
                  f"goal ~10 s wall on {args.workers} free cores, 75x)")
    floor = floor_s()
    print(f"closed-form floor (numpy costs and stream-sum bound of the 1,000 points, one process): "
          f"{floor:.2f} s CPU ({floor / ref:.0f}x ref)")


if __name__ == "__main__":
    main()
