"""CPU time of simulations beside the reference process and the closed-form floor.

Scenario: llama-3.1-405b, TP 16 over 2 nodes, batch 16, prompt 1024, 512 tokens, dynamic KV cache,
on h100-sxm-nvswitch. Prints, per schedule:

* the symmetric simulation (rank symmetry, step interpolation, replay of recorded event orders):
  CPU seconds, simulated passes, tokens/s; and the closed-form floor's CPU seconds (numpy costs
  and a stream-sum bound, no engine; see benchmarks/_common.py);
* ``--jitter 0.05`` with every rank simulated, decode from a sample of steps (goal: within ~5 s,
  40x the reference process): CPU seconds, passes, tokens/s and its 95% interval; ``--exact``
  adds the run over every step (minutes) and whether its decode time lies in the interval.

Then the engine's cost per op per rank with jitter at TP 2, 8, 16 and 64 (goal: flat), and long
generations: gen-len 4096 vs 32768 (goal: within 2x) and the peak memory of gen-len 100000 (goal:
under 500 MB), each in a fresh process. Ratios are to the reference process timed in this run.

    python benchmarks/bench_simulate.py [--exact] [--schedules S ...] [--skip-jitter] [--skip-tokens]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import closed_form_floor_s, reference_s  # noqa: E402

from laddersim.engine.simulator import RankWork, run_engine  # noqa: E402
from laddersim.schedules.program import build_program  # noqa: E402
from laddersim.simulation.simulate import SimOptions, make_scenario, simulate  # noqa: E402

SCHEDULES = ["standard", "parallel", "ladder", "upper_bound", "desync_half", "hybrid:63"]


def cpu(fn):
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def per_op_rank_us(tp: int) -> float:
    """One jittered forward pass of every rank of a 405B ladder program at this TP."""
    program = build_program("ladder", 126, tp)
    rng = np.random.default_rng(0)
    streams, deps = [op.stream for op in program.ops], [op.deps for op in program.ops]
    works = [RankWork(streams, deps, 1e-5 * rng.lognormal(0.0, 0.05, len(program.ops))) for _ in range(tp)]
    nodes = max(1, tp // 8)
    links = {0: tuple(f"node{i}" for i in range(nodes)) + (("network",) if nodes > 1 else ())}
    seconds, _ = cpu(lambda: run_engine(works, 0.1, 0.2, links))
    return 1e6 * seconds / (tp * len(program.ops))


TOKENS_CODE = """
import resource, sys, time
from laddersim.simulation.simulate import make_scenario, simulate
gen = int(sys.argv[1])
scenario = make_scenario(model="llama-3.1-405b", hardware="h100-sxm-nvswitch", tp=16, batch=1, prompt_len=1024,
                         gen_len=gen, schedule="ladder", kv_cache="dynamic")
t0 = time.process_time()
result = simulate(scenario)
print(time.process_time() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, result.simulated_steps)
"""


def tokens_run(gen_len: int) -> tuple[float, float, int]:
    out = subprocess.run([sys.executable, "-c", TOKENS_CODE, str(gen_len)], capture_output=True, text=True, check=True)
    seconds, rss_mb, passes = out.stdout.split()
    return float(seconds), float(rss_mb), int(passes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exact", action="store_true", help="also run jitter over every step (minutes)")
    parser.add_argument("--schedules", nargs="+", default=SCHEDULES)
    parser.add_argument("--skip-jitter", action="store_true")
    parser.add_argument("--skip-tokens", action="store_true")
    args = parser.parse_args()
    ref = reference_s()
    print(f"reference process (405B TP 16 symmetric, plain engine): {ref:.3f} s CPU; ratios below are to it")
    print("llama-3.1-405b tp=16 (2 nodes) batch=16 prompt=1024 gen=512 kv_cache=dynamic on h100-sxm-nvswitch")
    for schedule in args.schedules:
        scenario = make_scenario(model="llama-3.1-405b", hardware="h100-sxm-nvswitch", tp=16, batch=16, prompt_len=1024,
                                 gen_len=512, schedule=schedule, kv_cache="dynamic")
        floor_s, bound = cpu(lambda: closed_form_floor_s(scenario))
        sym_s, sym = cpu(lambda: simulate(scenario))
        summary = sym.summary()
        print(f"{schedule:>12} symmetric: {sym_s:6.3f} s ({sym_s / ref:5.2f}x ref), {sym.simulated_steps} passes, "
              f"{summary['tokens_per_s']:.1f} tokens/s | floor {floor_s:.3f} s ({floor_s / ref:.2f}x ref), "
              f"bound {bound:.3f} s vs simulated {summary['total_s']:.3f} s")
        if args.skip_jitter:
            continue
        jit_s, jit = cpu(lambda: simulate(scenario, SimOptions(jitter=0.05)))
        s = jit.summary()
        lo, hi = s.get("tokens_per_s_ci95", (s["tokens_per_s"],) * 2)
        print(f"{'':>12} jitter 0.05, every rank: {jit_s:6.2f} s ({jit_s / ref:5.1f}x ref; goal 40x), "
              f"{jit.simulated_steps} passes, {s['tokens_per_s']:.1f} tokens/s (95% {lo:.1f}-{hi:.1f})")
        if args.exact:
            ex_s, ex = cpu(lambda: simulate(scenario, SimOptions(jitter=0.05, exact_steps=True)))
            e = ex.summary()
            dlo, dhi = s["decode_s_ci95"]
            print(f"{'':>12} jitter exact: {ex_s:7.1f} s, decode {e['decode_s']:.4f} s "
                  f"{'inside' if dlo <= e['decode_s'] <= dhi else 'OUTSIDE'} the sampled interval {dlo:.4f}-{dhi:.4f}")
    if not args.skip_jitter:
        costs = {tp: per_op_rank_us(tp) for tp in (2, 8, 16, 64)}
        print("engine cost per op per rank with jitter (goal: flat): "
              + ", ".join(f"TP {tp}: {us:.1f} us" for tp, us in costs.items())
              + f"; TP 64 / TP 2 = {costs[64] / costs[2]:.2f}")
    if not args.skip_tokens:
        short, long_, huge = tokens_run(4096), tokens_run(32768), tokens_run(100000)
        print(f"tokens (405B TP 16 batch 1, ladder, dynamic KV, fresh processes): gen 4096 {short[0]:.3f} s "
              f"({short[2]} passes), gen 32768 {long_[0]:.3f} s ({long_[2]} passes): {long_[0] / short[0]:.2f}x "
              f"(goal 2x); gen 100000 peak RSS {huge[1]:.0f} MB (goal < 500 MB)")


if __name__ == "__main__":
    main()
