"""Time to simulate 10,000 requests on one replica, per schedule: Llama-3.1-70B on
h100-sxm-p2p-off at TP 8, Poisson arrivals at 4 requests/s, prompts uniform on [256, 2048],
outputs uniform on [64, 512], at most 64 running sequences (each schedule starts with no engine
run cached). Prints, per schedule, wall and CPU seconds, iterations, engine runs and the
iteration-time error bound. The machine may be shared: CPU seconds are the process's own.

    python benchmarks/bench_serving.py [--requests N] [--chunked-prefill]
"""

from __future__ import annotations

import argparse
import time

from laddersim.traffic.arrivals import draw_requests, parse_length
from laddersim.traffic.options import serving_options
from laddersim.traffic.run import serve, serving_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--chunked-prefill", action="store_true")
    args = parser.parse_args()
    requests = draw_requests(args.requests, 4.0, parse_length("uniform:256:2048", "prompt"),
                             parse_length("uniform:64:512", "output"), seed=0)
    options = serving_options(max_running=64, chunked_prefill=args.chunked_prefill, ttft_slo_s=1.0, tpot_slo_s=0.05)
    for schedule in ("standard", "ladder"):
        scenario = serving_scenario("llama-3.1-70b", "h100-sxm-p2p-off", 8, schedule)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        result = serve(scenario, requests, options)
        wall_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
        m = result.metrics
        print(f"{schedule:9s} {len(requests)} requests: wall {wall_s:.1f} s, CPU {cpu_s:.1f} s; "
              f"{result.run.iterations} iterations, {result.run.engine_runs} engine runs, "
              f"iteration error bound {m['iteration_error_bound']:.2%}; TTFT p99 {m['ttft_p99_s'] * 1e3:.0f} ms, "
              f"TPOT p99 {m['tpot_p99_s'] * 1e3:.1f} ms, goodput {m['goodput_req_per_s']:.2f} req/s")


if __name__ == "__main__":
    main()
