"""GEMM sweep: Y[m, n] = X[m, k] @ W[n, k]^T (a linear layer) on rank 0's device.

Shapes: the ones laddersim's model programs run (``--models``, ``--tp``, ``--batch``,
``--prompt-len``) plus a generic grid (laddersim.calibrate.grid). CUDA events on GPU (eager, and
GRAPH_INNER calls captured in a CUDA graph); ``time.perf_counter`` on CPU with the rank's share
of the cores. Other ranks wait: GEMMs are per-device, one device stands for all. Standalone:

    python calibration/gemm_bench.py --backend gloo --world-size 1 --out runs/cpu
    torchrun --nproc-per-node 1 calibration/gemm_bench.py --out runs/h100 --models llama-3.1-70b
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

from calibration.bench_timing import DTYPES, time_alone  # noqa: E402


def measure(ctx, point: dict) -> dict | None:
    if ctx.rank != 0:
        return None
    m, n, k = point["m"], point["n"], point["k"]
    dtype = DTYPES[point["dtype"]]
    gen = torch.Generator(device=ctx.device).manual_seed(0)
    x = torch.randn(m, k, dtype=dtype, device=ctx.device, generator=gen)
    w = torch.randn(n, k, dtype=dtype, device=ctx.device, generator=gen)
    y = torch.empty(m, n, dtype=dtype, device=ctx.device)
    values = time_alone(lambda: torch.mm(x, w.t(), out=y), point["mode"], ctx)
    values["tflops"] = 2.0 * m * n * k / (values["time_us"] * 1e-6) / 1e12
    values["origin"] = point.get("origin", "generic")
    return values


def describe(point: dict) -> str:
    return f"m={point['m']} n={point['n']} k={point['k']} {point['dtype']} {point['mode']}"


def result(values: dict) -> str:
    return f"median {values['time_us']:.1f} us, {values['tflops']:.3f} TFLOP/s"


if __name__ == "__main__":
    from calibration.calibrate_all import main

    sys.exit(main(benchmarks=("gemm",)))
