"""Timing primitives shared by the calibration benchmarks.

CPU: ``time.perf_counter`` around the call (the call is synchronous). GPU: CUDA events recorded
on the current stream around the work, so host launch cost shows up only where the GPU waited
for it (eager); ``capture`` records ``inner`` calls into a CUDA graph, the regime compiled decode
(``torch.compile(mode="reduce-overhead")``) runs in, and a replay is timed as one unit.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from calibration.spawn import progress

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
GRAPH_INNER = 10  # calls captured per CUDA graph; a replay's time / GRAPH_INNER is one call


def time_host_s(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    progress()  # a timed step done: the launcher's hang watch (calibration.spawn)
    return elapsed


def time_cuda_s(fn: Callable[[], object]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    progress()
    return start.elapsed_time(end) * 1e-3  # elapsed_time is in milliseconds


def timer(is_cuda: bool) -> Callable[[Callable[[], object]], float]:
    return time_cuda_s if is_cuda else time_host_s


def capture(fn: Callable[[], object], inner: int = GRAPH_INNER) -> "torch.cuda.CUDAGraph":
    """A CUDA graph of ``inner`` back-to-back calls (warmed up on a side stream first, as
    torch.cuda.graphs requires for lazily initialised kernels and NCCL communicators)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    torch.cuda.synchronize()
    return graph


def runner(fn: Callable[[], object], mode: str) -> tuple[Callable[[], object], int]:
    """(callable to time, calls it makes): the call itself (eager) or a graph replay."""
    if mode == "graph":
        return capture(fn).replay, GRAPH_INNER
    return fn, 1


def time_alone(fn: Callable[[], object], mode: str, ctx) -> dict:
    """``summarize`` of one rank's ``fn`` per call, no peer involved: ``ctx.opts.warmup_count``
    untimed runs, then ``ctx.opts.repeat_count`` timed ones (each an eager call or a graph replay)."""
    run, calls = runner(fn, mode)
    time_s = timer(ctx.is_cuda)
    for _ in range(ctx.opts.warmup_count):
        run()
    ctx.sync()
    return summarize([time_s(run) / calls for _ in range(ctx.opts.repeat_count)])


def summarize(samples_s: list[float]) -> dict:
    """Median and spread of per-call times, in microseconds."""
    us = np.asarray(samples_s, dtype=float) * 1e6
    return {
        "reps": len(us), "stat": "median", "time_us": float(np.median(us)),
        "p10_us": float(np.percentile(us, 10)), "p90_us": float(np.percentile(us, 90)),
        "min_us": float(us.min()), "max_us": float(us.max()),
    }


def element_count(size_bytes: int, dtype: torch.dtype) -> int:
    """Elements of ``dtype`` in ``size_bytes``, which must be a positive whole number of them
    (the grid rounds AllReduce sizes up; a recorded size is always the bytes really moved)."""
    elements, rest = divmod(size_bytes, torch.tensor([], dtype=dtype).element_size())
    if elements < 1 or rest:
        raise ValueError(f"{size_bytes} B is not a whole number of {dtype} elements")
    return elements


# ---- the run's cache state ------------------------------------------------------------------
# A decode step reads each weight once, after the rest of the rank's weights went through the
# caches: its GEMMs find their weights in memory, not in a cache, and its small ops find the
# framework's code and data evicted. The benchmarks measure in that state (gemm_bench rotates
# over weight copies; overhead_bench streams the working set before each chain), on every rank at
# once, as the ranks of a run compute at once (ranks on one host share its memory bandwidth and,
# on SMT cores, the cores' units).

FALLBACK_CACHE_BYTES = 32 * 1024 * 1024


def last_level_cache_bytes(device: torch.device) -> int:
    """The device's last-level cache: the GPU's L2 (CUDA properties), or the largest CPU cache
    in sysfs (Linux); FALLBACK_CACHE_BYTES where neither says."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or FALLBACK_CACHE_BYTES)
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1))
    return max(sizes, default=FALLBACK_CACHE_BYTES)


def working_set_bytes(ctx, dtype: torch.dtype) -> int:
    """The weight bytes a rank streams per decode step of the run's models
    (``laddersim.measure.grid.step_weight_bytes``; twice the last-level cache without models), at
    most 4 x the last-level cache: beyond that nothing is left in it anyway."""
    from laddersim.measure.grid import step_weight_bytes

    cache = last_level_cache_bytes(ctx.device)
    step = step_weight_bytes(ctx.opts, torch.tensor([], dtype=dtype).element_size())
    return min(step or 2 * cache, 4 * cache)


def cold_copies(item_bytes: int, working_set: int, max_copies: int) -> int:
    """Copies of an item to rotate over so each is evicted by the others before its next use:
    ceil(working set / item), at least 1 and at most ``max_copies``."""
    return int(min(max_copies, max(1, math.ceil(working_set / max(1, item_bytes)))))


def run_group(ctx):
    """The group of every rank (None with one rank): the benchmarks that run on all ranks at once."""
    return ctx.groups.get(ctx.world.world_size) if ctx.world.world_size > 1 else None


def slowest_summary(ctx, samples_s: list[float]) -> dict | None:
    """``summarize`` of this rank's samples scaled to the slowest rank's median (rank 0; None on
    the others): ranks that compute at once finish when the last does."""
    median = float(np.median(samples_s))
    group = run_group(ctx)
    slowest = ctx.max_over(median, group) if group is not None else median
    if ctx.rank != 0:
        return None
    return summarize([s * slowest / median for s in samples_s])
