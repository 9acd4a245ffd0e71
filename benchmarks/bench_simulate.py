"""Wall time per scenario for llama-3.1-405b, TP 16 over 2 nodes, batch 16, prompt 1024, 512 tokens.

Target (issue 2): under 0.5 s per scenario on a 2-core machine with full per-step fidelity
(every decode step has its own KV length; the interpolation shortcut is exact, see
laddersim/simulate.py). Prints, per schedule: wall time, simulated forward passes, engine events
processed and events per second, and the wall time of the plain step-by-step simulation for
comparison (``--exact`` to include it; it simulates all 511 decode steps).

    python benchmarks/bench_simulate.py [--exact] [--kv-cache static|dynamic] [--repeats N]
"""

from __future__ import annotations

import argparse
import time

from laddersim.simulate import SimOptions, make_scenario, simulate

SCHEDULES = ["standard", "parallel", "ladder", "upper_bound", "desync_half", "hybrid:63"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exact", action="store_true", help="also time the step-by-step simulation")
    parser.add_argument("--kv-cache", default="dynamic", choices=["static", "dynamic"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"llama-3.1-405b tp=16 (2 nodes) batch=16 prompt=1024 gen=512 kv_cache={args.kv_cache} on h100-sxm-nvswitch")
    print(f"{'schedule':>12} {'wall s':>8} {'passes':>7} {'events':>8} {'events/s':>10} {'tokens/s':>9}"
          + (f" {'exact wall s':>13} {'max rel diff':>12}" if args.exact else ""))
    for schedule in SCHEDULES:
        scenario = make_scenario("llama-3.1-405b", "h100-sxm-nvswitch", 16, 16, 1024, 512, schedule,
                                 kv_cache=args.kv_cache)
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            result = simulate(scenario)
            best = min(best, time.perf_counter() - t0)
        line = (f"{schedule:>12} {best:8.3f} {result.simulated_steps:7d} {result.engine_events:8d} "
                f"{result.engine_events / best:10.0f} {result.summary()['tokens_per_s']:9.1f}")
        if args.exact:
            t0 = time.perf_counter()
            exact = simulate(scenario, SimOptions(exact_steps=True))
            wall = time.perf_counter() - t0
            diff = abs(exact.summary()["total_s"] / result.summary()["total_s"] - 1)
            line += f" {wall:13.2f} {diff:12.1e}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
