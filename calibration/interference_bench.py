"""Interference: GEMMs on one stream while AllReduces run on another; both slowdowns measured.

This decides how much of Ladder Residual's overlap is real: NCCL kernels occupy SMs and HBM, so
an overlapped GEMM runs slower, and so does the collective. Per point, on every rank of the world:

1. alone: a batch of COMM_BATCH all_reduces (slowest rank's time), and one GEMM; the GEMM batch
   is sized so it lasts about as long as the AllReduce batch (so the two overlap end to end),
   then timed alone too;
2. together: both batches start after a barrier, the AllReduces on a side CUDA stream (GPU) or
   in the main thread while a second thread runs the GEMMs (CPU: torch releases the GIL in both);
3. ``compute_slowdown = gemm_overlap / gemm_alone - 1`` (rank 0's GEMMs),
   ``comm_slowdown = comm_overlap / comm_alone - 1``, medians over ``repeats``.
"""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from calibration.bench_timing import DTYPES, element_count, timer  # noqa: E402
from laddersim.calibrate.grid import human_bytes  # noqa: E402

COMM_BATCH = 4  # all_reduces per batch: long enough to overlap several GEMMs


def _overlap_cpu(comm, gemms, group) -> tuple[float, float]:
    start, out = threading.Event(), {}
    threads = torch.get_num_threads()

    def compute():
        # The intra-op thread count is per OS thread (OpenMP): without this a new thread uses
        # every core, and its spinning workers fight the other ranks (measured 50x slower).
        torch.set_num_threads(threads)
        start.wait()
        t0 = time.perf_counter()
        gemms()
        out["gemm"] = time.perf_counter() - t0

    worker = threading.Thread(target=compute)
    worker.start()
    dist.barrier(group=group)
    start.set()
    t0 = time.perf_counter()
    comm()
    comm_s = time.perf_counter() - t0
    worker.join()
    return out["gemm"], comm_s


def _overlap_cuda(comm, gemms, group, comm_stream) -> tuple[float, float]:
    dist.barrier(group=group)
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    comm_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(comm_stream):
        events[0].record()
        comm()
        events[1].record()
    events[2].record()
    gemms()
    events[3].record()
    torch.cuda.synchronize()
    return events[2].elapsed_time(events[3]) * 1e-3, events[0].elapsed_time(events[1]) * 1e-3


def measure(ctx, point: dict) -> dict | None:
    group = ctx.group_of(point)
    if group is None:
        return None
    dtype = DTYPES[point["dtype"]]
    m, n, k = point["m"], point["n"], point["k"]
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.rank)
    x = torch.randn(m, k, dtype=dtype, device=ctx.device, generator=gen)
    w = torch.randn(n, k, dtype=dtype, device=ctx.device, generator=gen)
    y = torch.empty(m, n, dtype=dtype, device=ctx.device)
    buf = torch.zeros(element_count(point["size_bytes"], dtype), dtype=dtype, device=ctx.device)

    def gemm():
        torch.mm(x, w.t(), out=y)

    def comm():
        for _ in range(COMM_BATCH):
            dist.all_reduce(buf, group=group)

    time_s = timer(ctx.is_cuda)
    reps = ctx.opts.repeat_count
    for _ in range(ctx.opts.warmup_count):
        gemm()
        comm()
    ctx.sync()

    def comm_alone() -> float:
        dist.barrier(group=group)
        ctx.sync()
        return ctx.max_over(time_s(comm), group)

    comm_alone_s = statistics.median(comm_alone() for _ in range(reps))
    gemm_one_s = statistics.median(time_s(gemm) for _ in range(reps))
    n_gemm = max(1, math.ceil(comm_alone_s / gemm_one_s))

    def gemms():
        for _ in range(n_gemm):
            gemm()

    gemm_alone_s = statistics.median(time_s(gemms) for _ in range(reps))
    comm_stream = torch.cuda.Stream() if ctx.is_cuda else None
    gemm_over, comm_over = [], []
    for _ in range(reps):
        if ctx.is_cuda:
            gemm_s, comm_s = _overlap_cuda(comm, gemms, group, comm_stream)
        else:
            gemm_s, comm_s = _overlap_cpu(comm, gemms, group)
        gemm_over.append(gemm_s)
        comm_over.append(ctx.max_over(comm_s, group))
    if ctx.rank != 0:
        return None
    gemm_overlap_s, comm_overlap_s = statistics.median(gemm_over), statistics.median(comm_over)
    return {
        "reps": reps,
        "gemm_alone_us": gemm_alone_s / n_gemm * 1e6, "gemm_overlap_us": gemm_overlap_s / n_gemm * 1e6,
        "comm_alone_us": comm_alone_s / COMM_BATCH * 1e6,
        "comm_overlap_us": comm_overlap_s / COMM_BATCH * 1e6,
        "compute_slowdown": gemm_overlap_s / gemm_alone_s - 1.0,
        "comm_slowdown": comm_overlap_s / comm_alone_s - 1.0,
    }


def describe(point: dict) -> str:
    return (f"AllReduce {human_bytes(point['size_bytes'])} x {point['group_size']} ranks with GEMM "
            f"m={point['m']} n={point['n']} k={point['k']} {point['dtype']}")


def result(values: dict) -> str:
    return (f"compute slowdown {values['compute_slowdown']:+.1%}, "
            f"comm slowdown {values['comm_slowdown']:+.1%}")


if __name__ == "__main__":
    from calibration.calibrate_all import main

    sys.exit(main(benchmarks=("interference",)))
