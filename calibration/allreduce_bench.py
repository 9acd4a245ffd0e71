"""AllReduce sweep: sizes x dtypes x group sizes 2..N, eager and (on GPUs) CUDA-graph captured.

Per point: ``warmup`` untimed calls, then ``repeats`` timed calls, each after a barrier of the
group; a call's time is the slowest rank's (a collective ends when its last rank does). In graph
mode one sample is a replay of GRAPH_INNER captured all_reduces divided by GRAPH_INNER.

Where the collectives progress on the cores that compute (gloo on CPU ranks) and ``--models``
names the run's model, each timed call is issued as a decode step issues it: right after the
rank's own attention + MLP modules (``interference_bench.decode_modules``, at the first
``--batch``) with no barrier in between. A call after a barrier finds gloo's threads and the
caches of an idle rank; one in a step finds them after the module's compute and weight reads,
and measured 2-3x longer on 2 shared cores. Standalone:

    python calibration/allreduce_bench.py --backend gloo --world-size 2 --out runs/cpu
    torchrun --nproc-per-node 8 calibration/allreduce_bench.py --out runs/h100
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from calibration.bench_timing import DTYPES, element_count, runner, summarize, timer  # noqa: E402
from laddersim.calibrate.grid import compute_dtype, human_bytes  # noqa: E402


def measure(ctx, point: dict) -> dict | None:
    group = ctx.group_of(point)
    if group is None:
        return None
    dtype = DTYPES[point["dtype"]]
    buf = torch.zeros(element_count(point["size_bytes"], dtype), dtype=dtype, device=ctx.device)
    dist.all_reduce(buf, group=group)  # communicator set-up outside any timing or capture
    run, calls = runner(lambda: dist.all_reduce(buf, group=group), point["mode"])
    time_s = timer(ctx.is_cuda)
    before = step_compute(ctx, point)
    for _ in range(ctx.opts.warmup_count):
        before()
        run()
    ctx.sync()
    samples = []
    for _ in range(ctx.opts.repeat_count):
        dist.barrier(group=group)
        before()
        ctx.sync()
        samples.append(ctx.max_over(time_s(run) / calls, group))
    return summarize(samples) if ctx.rank == 0 else None


def step_compute(ctx, point: dict):
    """What runs before each timed call: the rank's decode modules where the collective shares the
    compute's cores (CPU ranks) and the run's model is known, else nothing."""
    if ctx.is_cuda or not ctx.opts.models or point["mode"] != "eager":
        return lambda: None
    from calibration.interference_bench import decode_modules

    return decode_modules(ctx, ctx.opts.models[0], point["group_size"], (ctx.opts.batch or (1,))[0],
                          compute_dtype(ctx.world))


def describe(point: dict) -> str:
    return (f"{point['group_size']} ranks/{point['nodes']} node(s) {point['dtype']} {point['mode']} "
            f"{human_bytes(point['size_bytes'])}")


def result(values: dict) -> str:
    return f"median {values['time_us']:.1f} us"


if __name__ == "__main__":
    from calibration.calibrate_all import main

    sys.exit(main(benchmarks=("allreduce",)))
