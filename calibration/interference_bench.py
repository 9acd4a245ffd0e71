"""Interference: compute beside an AllReduce on another stream/thread; both slowdowns measured.

This decides how much of Ladder Residual's overlap is real: NCCL kernels occupy SMs and HBM, and
gloo's worker threads run on the CPU cores the compute uses (shared cores), so an overlapped
compute runs slower, and so does the collective. Per point, on every rank of the world, each
repetition times back to back (so a load drifting over the run cancels out of its ratios):

1. the compute alone, and the AllReduce alone (slowest rank's time);
2. both together:
   * with ``model`` (CPU): the model's own modules (ladder_bench's code, this rank's shard,
     decode at m tokens) in ladder order, each one's async AllReduce waited on before the module
     after next, as a ladder step runs them; "alone" for the AllReduce is what a standard step
     pays for it (``allreduce_bench.chain_allreduce_s``); the slowdowns are the engine's rates
     that run that chain as measured (``calibration/ladder_overlap.py``);
   * else a batch of GEMMs m x n x k while COMM_BATCH AllReduces run on a side CUDA stream (GPU)
     or in the main thread while a second thread runs the GEMMs (CPU: torch releases the GIL);
3. ``compute_slowdown`` = median over repetitions of ``overlap / alone - 1`` of rank 0's
   compute, ``comm_slowdown`` the same of the AllReduce, with their p10 and p90. A negative
   median is a measurement problem (``calibrate fit`` reports it), not a speed-up.
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

import numpy as np  # noqa: E402

from calibration.bench_timing import DTYPES, element_count, time_host_s, timer  # noqa: E402
from calibration.decode_modules import decode_modules  # noqa: E402
from laddersim.measure.grid import human_bytes  # noqa: E402

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


def _gemm_compute(ctx, point: dict):
    dtype = DTYPES[point["dtype"]]
    m, n, k = point["m"], point["n"], point["k"]
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.rank)
    x = torch.randn(m, k, dtype=dtype, device=ctx.device, generator=gen)
    w = torch.randn(n, k, dtype=dtype, device=ctx.device, generator=gen)
    y = torch.empty(m, n, dtype=dtype, device=ctx.device)
    return lambda: torch.mm(x, w.t(), out=y)


def _spread(ratios: list[float]) -> tuple[float, float, float]:
    """(median, p10, p90) of per-repetition ratios, minus 1: slowdown fractions."""
    r = np.asarray(ratios, dtype=float) - 1.0
    return float(np.median(r)), float(np.percentile(r, 10)), float(np.percentile(r, 90))


def measure(ctx, point: dict) -> dict | None:
    """Per repetition, back to back: compute alone, AllReduce alone, both together; the
    slowdowns are medians of the per-repetition ratios, so a load that drifts during the run
    (other processes on a shared machine) cancels out of each ratio."""
    group = ctx.group_of(point)
    if group is None:
        return None
    if point.get("model", "-") != "-" and not ctx.is_cuda:
        return _measure_async_cpu(ctx, point, group)
    return _measure_batches(ctx, point, group)


def _measure_async_cpu(ctx, point: dict, group) -> dict | None:
    """The ladder's overlap as the ladder runs it (``calibration.ladder_overlap``): per repetition,
    back to back, a collective's issue (as the ``overhead`` benchmark times it), the model's
    modules alone, the same modules in ladder order with an async AllReduce of the point's size
    after each, and the AllReduce as a standard step pays it (``allreduce_bench.chain_allreduce_s``,
    the ``allreduce`` table's own measure; less the issue, it is what the engine simulates after
    the collective launch). Slowest ranks' times. The slowdowns are the engine's rates that run the mean ladder chain as measured (its
    end and its time in the modules); the spread columns: per repetition, the modules' slowdown and
    the comm rate that ends that repetition's chain, the compute rate held."""
    from calibration.allreduce_bench import FLOOR_US, chain_allreduce_s
    from calibration.ladder_overlap import ladder_chain_s
    from calibration.overhead_bench import collective_issue_s

    modules = decode_modules(ctx, point["model"], point["group_size"], point["m"], point["dtype"])
    dtype = DTYPES[point["dtype"]]
    bufs = [torch.zeros(element_count(point["size_bytes"], dtype), dtype=dtype, device=ctx.device)
            for _ in modules]

    def alone():
        for module in modules:
            module()

    ladder_chain_s(ctx, modules, bufs, group)  # warm-up
    n, rows = len(modules), []
    for _ in range(ctx.opts.chain_repeat_count):
        issue_s = collective_issue_s(ctx, group)
        dist.barrier(group=group)
        alone_s = ctx.max_over(time_host_s(alone), group)
        ladder_s, modules_s, issues_s = ladder_chain_s(ctx, modules, bufs, group)
        in_compute_s = ctx.max_over(modules_s + max(issues_s - n * issue_s, 0.0), group)
        step_s = chain_allreduce_s(ctx, lambda: dist.all_reduce(bufs[0], group=group), modules, group)
        rows.append((alone_s, ctx.max_over(ladder_s, group), in_compute_s, issue_s, step_s))
    if ctx.rank != 0:
        return None
    issue_s, step_s = float(np.mean([r[3] for r in rows])), float(np.mean([r[4] for r in rows]))
    return ladder_row(n, rows, max(step_s - issue_s, FLOOR_US * 1e-6))


def ladder_row(n: int, rows: list[tuple[float, ...]], comm_s: float) -> dict:
    """The interference row from ladder chains of ``n`` modules, per repetition (alone, ladder,
    in the modules, one issue, ...), and the AllReduce the engine simulates (``comm_s``)."""
    from laddersim.fitting.ladder_chain import (
        MAX_COMM_SLOWDOWN, MIN_COMM_SLOWDOWN, bisect_rate, chain_run, chain_work, ladder_rates,
    )

    alone_s, ladder_s, modules_s, issue_s = (float(np.mean(col)) for col in list(zip(*rows))[:4])
    compute, comm = ladder_rates(n, alone_s, ladder_s, modules_s, issue_s, comm_s)
    work = chain_work(n, alone_s / n, issue_s, comm_s)
    held = max(compute, 0.0)
    comm_r = [bisect_rate(lambda x: chain_run(work, held, x)[0], row[1], MAX_COMM_SLOWDOWN, MIN_COMM_SLOWDOWN)
              for row in rows]
    _, compute_p10, compute_p90 = _spread([row[2] / row[0] for row in rows])
    _, comm_p10, comm_p90 = _spread([r + 1.0 for r in comm_r])
    return {
        "reps": len(rows), "gemm_alone_us": alone_s / n * 1e6, "gemm_overlap_us": modules_s / n * 1e6,
        "comm_alone_us": comm_s * 1e6, "comm_overlap_us": (ladder_s - modules_s) / n * 1e6,
        "compute_slowdown": compute, "comm_slowdown": comm, "compute_p10": compute_p10,
        "compute_p90": compute_p90, "comm_p10": comm_p10, "comm_p90": comm_p90,
    }


def _values(rows: list[tuple[float, float, float, float]], n_compute: int, n_comm: int) -> dict:
    alone_c, alone_a, over_c, over_a = (np.asarray(col, dtype=float) for col in zip(*rows))
    compute_r, comm_r = over_c / alone_c, over_a / alone_a
    compute, compute_p10, compute_p90 = _spread(list(compute_r))
    comm, comm_p10, comm_p90 = _spread(list(comm_r))
    return {
        "reps": len(rows),
        "gemm_alone_us": float(np.median(alone_c)) / n_compute * 1e6,
        "gemm_overlap_us": float(np.median(over_c)) / n_compute * 1e6,
        "comm_alone_us": float(np.median(alone_a)) / n_comm * 1e6,
        "comm_overlap_us": float(np.median(over_a)) / n_comm * 1e6,
        "compute_slowdown": compute, "comm_slowdown": comm, "compute_p10": compute_p10,
        "compute_p90": compute_p90, "comm_p10": comm_p10, "comm_p90": comm_p90,
    }


def _measure_batches(ctx, point: dict, group) -> dict | None:
    gemm = _gemm_compute(ctx, point)
    dtype = DTYPES[point["dtype"]]
    buf = torch.zeros(element_count(point["size_bytes"], dtype), dtype=dtype, device=ctx.device)

    def comm():
        for _ in range(COMM_BATCH):
            dist.all_reduce(buf, group=group)

    time_s = timer(ctx.is_cuda)
    for _ in range(ctx.opts.warmup_count):
        gemm()
        comm()
    ctx.sync()

    def comm_alone() -> float:
        dist.barrier(group=group)
        ctx.sync()
        return ctx.max_over(time_s(comm), group)

    comm_alone_s = statistics.median(comm_alone() for _ in range(3))
    gemm_one_s = statistics.median(time_s(gemm) for _ in range(3))
    n_gemm = int(ctx.max_over(float(max(1, math.ceil(comm_alone_s / gemm_one_s))), group))

    def gemms():
        for _ in range(n_gemm):
            gemm()

    comm_stream = torch.cuda.Stream() if ctx.is_cuda else None
    rows = []
    for _ in range(ctx.opts.repeat_count):
        alone_c = time_s(gemms)
        alone_a = comm_alone()
        if ctx.is_cuda:
            over_c, over_a = _overlap_cuda(comm, gemms, group, comm_stream)
        else:
            over_c, over_a = _overlap_cpu(comm, gemms, group)
        rows.append((alone_c, alone_a, over_c, ctx.max_over(over_a, group)))
    if ctx.rank != 0:
        return None
    return _values(rows, n_gemm, COMM_BATCH)


def describe(point: dict) -> str:
    what = (f"{point['model']} attention + MLP at {point['m']} tokens" if point.get("model", "-") != "-"
            else f"GEMM m={point['m']} n={point['n']} k={point['k']}")
    return f"AllReduce {human_bytes(point['size_bytes'])} x {point['group_size']} ranks with {what} {point['dtype']}"


def result(values: dict) -> str:
    return (f"compute slowdown {values['compute_slowdown']:+.1%} (p10 {values['compute_p10']:+.1%}, "
            f"p90 {values['compute_p90']:+.1%}), comm slowdown {values['comm_slowdown']:+.1%} "
            f"(p10 {values['comm_p10']:+.1%}, p90 {values['comm_p90']:+.1%})")

