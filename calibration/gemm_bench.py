"""GEMM sweep: Y[m, n] = X[m, k] @ W[n, k]^T (a linear layer), on every rank at once, cold.

Shapes: the ones laddersim's model programs run (``--models``, ``--tp``, ``--batch``,
``--prompt-len``) plus a generic grid (laddersim.measure.grid). CUDA events on GPU (eager, and
GRAPH_INNER calls captured in a CUDA graph); ``time.perf_counter`` on CPU with the rank's share
of the cores.

Measured as a decode step runs them (``bench_timing.cold_copies``): a step reads each weight once, after
the rest of the rank's weights went through the caches, so a weight that fits in a cache is not
there when it is used again. Each point rotates over copies of its weight whose total is the
rank's weight bytes per decode step (``laddersim.measure.grid.step_weight_bytes``; without
``--models`` twice the device's last-level cache), and every rank runs the point at the same
time, as the ranks of a run do: ranks sharing a host share its memory bandwidth. A sample is one
pass over the copies, per call; the point's value is the slowest rank's median. Alone, through the launcher:

    python calibration/calibrate_all.py --benchmarks gemm --backend gloo --world-size 2 --out runs/cpu
    torchrun --nproc-per-node 1 calibration/calibrate_all.py --benchmarks gemm --out runs/h100 --models llama-3.1-70b
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from calibration.bench_timing import (  # noqa: E402
    DTYPES, cold_copies, run_group, runner, slowest_summary, timer, working_set_bytes)

MAX_COPIES = 512  # rotation length cap (tiny weights: their dispatch dominates anyway)


def measure(ctx, point: dict) -> dict | None:
    m, n, k = point["m"], point["n"], point["k"]
    dtype = DTYPES[point["dtype"]]
    gen = torch.Generator(device=ctx.device).manual_seed(0)
    x = torch.randn(m, k, dtype=dtype, device=ctx.device, generator=gen)
    copies = cold_copies(n * k * x.element_size(), working_set_bytes(ctx, dtype), MAX_COPIES)
    weights = [torch.randn(n, k, dtype=dtype, device=ctx.device, generator=gen) for _ in range(copies)]
    y = torch.empty(m, n, dtype=dtype, device=ctx.device)

    def one_pass():
        for w in weights:
            torch.mm(x, w.t(), out=y)

    run, calls = runner(one_pass, point["mode"])
    time_s = timer(ctx.is_cuda)
    for _ in range(ctx.opts.warmup_count):
        run()
    ctx.sync()
    group = run_group(ctx)
    samples = []
    for _ in range(ctx.opts.repeat_count):
        if group is not None:
            dist.barrier(group=group)  # every rank streams at once, as in a run
        samples.append(time_s(run) / (calls * copies))
    values = slowest_summary(ctx, samples)
    if values is None:
        return None
    values["tflops"] = 2.0 * m * n * k / (values["time_us"] * 1e-6) / 1e12
    values["origin"] = point.get("origin", "generic")
    return values


def describe(point: dict) -> str:
    return f"m={point['m']} n={point['n']} k={point['k']} {point['dtype']} {point['mode']}"


def result(values: dict) -> str:
    return f"median {values['time_us']:.1f} us, {values['tflops']:.3f} TFLOP/s"

