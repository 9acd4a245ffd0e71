"""AllReduce sweep: sizes x dtypes x group sizes 2..N, eager and (on GPUs) CUDA-graph captured.

Per point: ``warmup`` untimed calls, then ``repeats`` timed calls, each after a barrier of the
group; a call's time is the slowest rank's (a collective ends when its last rank does). In graph
mode one sample is a replay of GRAPH_INNER captured all_reduces divided by GRAPH_INNER.

Where the collectives progress on the cores that compute (gloo on CPU ranks) and ``--models``
names the run's model, a timed call is what a standard decode step pays for its AllReduce: per
repetition, every rank runs the model's own attention and MLP modules
(``decode_modules.decode_modules``, at the first ``--batch``, every layer built) in a row,
each followed by the blocking AllReduce, as a standard step does, and, back to back, the modules
alone; a sample is the difference of the slowest ranks' times over the number of modules
(``chain_allreduce_s``); the point's value is their mean (``stat`` = mean: a step pays the sum of
its AllReduces). It holds what a call after a barrier does not see: the wait for the slower rank,
gloo's threads and the caches as the module left them (on 2 shared cores such a call measured 2-3x
a call after a barrier). Alone, through the launcher:

    python calibration/calibrate_all.py --benchmarks allreduce --backend gloo --world-size 2 --out runs/cpu
    torchrun --nproc-per-node 8 calibration/calibrate_all.py --benchmarks allreduce --out runs/h100
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from calibration.bench_timing import DTYPES, element_count, runner, summarize, time_host_s, timer  # noqa: E402
from laddersim.measure.grid import compute_dtype, human_bytes  # noqa: E402


def measure(ctx, point: dict) -> dict | None:
    group = ctx.group_of(point)
    if group is None:
        return None
    dtype = DTYPES[point["dtype"]]
    buf = torch.zeros(element_count(point["size_bytes"], dtype), dtype=dtype, device=ctx.device)
    dist.all_reduce(buf, group=group)  # communicator set-up outside any timing or capture
    if not ctx.is_cuda and ctx.opts.models and point["mode"] == "eager":
        from calibration.decode_modules import decode_modules

        modules = decode_modules(ctx, ctx.opts.models[0], point["group_size"], (ctx.opts.batch or (1,))[0],
                                 compute_dtype(ctx.world))
        reduce = lambda: dist.all_reduce(buf, group=group)  # noqa: E731
        for module in modules:  # warm-up
            module()
            reduce()
        samples = [chain_allreduce_s(ctx, reduce, modules, group) for _ in range(ctx.opts.chain_repeat_count)]
        return chain_mean(samples) if ctx.rank == 0 else None
    return time_per_call(ctx, lambda: dist.all_reduce(buf, group=group), point["mode"], group)


FLOOR_US = 1.0  # a measured collective is at least this (a mean below it is noise around nothing)


def chain_mean(samples_s: list[float]) -> dict:
    """The values of a point timed as a step pays it (``chain_allreduce_s`` samples): their mean.
    A step pays the sum of its collectives, i.e. their mean: on shared cores gloo's thread
    wake-ups give a long tail (p90 ~3x the median measured here) that a median drops. A sample may
    come out below zero (the two chains' compute differ by noise); the mean keeps it, unbiased; the
    spread columns (times > 0) show samples floored at FLOOR_US."""
    floored = [max(s, FLOOR_US * 1e-6) for s in samples_s]
    return {**summarize(floored), "stat": "mean", "time_us": max(float(np.mean(samples_s)) * 1e6, FLOOR_US)}


def time_per_call(ctx, collective, mode: str, group) -> dict | None:
    """``summarize`` of one ``collective`` call (eager, or a graph replay over its calls) after a
    barrier of ``group``, the slowest rank's time; rank 0 only (None elsewhere)."""
    run, calls = runner(collective, mode)
    time_s = timer(ctx.is_cuda)
    for _ in range(ctx.opts.warmup_count):
        run()
    ctx.sync()
    samples = []
    for _ in range(ctx.opts.repeat_count):
        dist.barrier(group=group)
        ctx.sync()
        samples.append(ctx.max_over(time_s(run) / calls, group))
    return summarize(samples) if ctx.rank == 0 else None


def chain_allreduce_s(ctx, all_reduce, modules, group) -> float:
    """Seconds a step pays per ``all_reduce``, once: the slowest rank's time of ``modules`` in a
    row, each followed by the AllReduce (a standard step's segments), minus the slowest rank's time
    of the modules alone right after, over the number of modules. The chain keeps what a barrier
    before every call would reset: a rank that left one AllReduce late enters the next one late,
    and the other waits for it."""
    def with_reduce():
        for module in modules:
            module()
            all_reduce()

    def alone():
        for module in modules:
            module()

    dist.barrier(group=group)
    with_s = ctx.max_over(time_host_s(with_reduce), group)
    dist.barrier(group=group)
    alone_s = ctx.max_over(time_host_s(alone), group)
    return (with_s - alone_s) / len(modules)


def describe(point: dict) -> str:
    return (f"{point['group_size']} ranks/{point['nodes']} node(s) {point['dtype']} {point['mode']} "
            f"{human_bytes(point['size_bytes'])}")


def result(values: dict) -> str:
    return f"median {values['time_us']:.1f} us"

