"""Interference: compute beside an AllReduce on another stream/thread; both slowdowns measured.

This decides how much of Ladder Residual's overlap is real: NCCL kernels occupy SMs and HBM, and
gloo's worker threads run on the CPU cores the compute uses (shared cores), so an overlapped
compute runs slower, and so does the collective. Per point, on every rank of the world, each
repetition times back to back (so a load drifting over the run cancels out of its ratios):

1. the compute alone, and the AllReduce alone (slowest rank's time);
2. both together:
   * with ``model`` (CPU): one of the model's own modules (ladder_bench's code, this rank's
     shard, decode at m tokens, the next of a step's modules each repetition) after an async
     AllReduce of its output size is issued, as a ladder step runs; the AllReduce's end is taken
     by its completion callback; "alone" for the AllReduce is what a standard step pays for it
     (``allreduce_bench.chain_allreduce_s``); the slowdowns are the engine's rates that reproduce
     the repetitions' mean timings (``fluid_slowdowns``);
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


_MODELS: dict = {}  # (model, tp, batch, dtype, rank) -> the built shard, shared by the points
MODULE_LAYERS = 4  # layers built: what runs between two AllReduces is one module of one of them
DECODE_POS = 64  # the position decoded (KV cache length)


def _random_shard(lb, shape, tp: int, batch: int, device, dtype):
    """(shard, input position, dim): a rank's shard of at most MODULE_LAYERS layers with random
    weights (values do not change a module's time), without the embedding and LM head."""
    shape = shape.model_copy(update={"n_layers": min(shape.n_layers, MODULE_LAYERS), "vocab_size": tp})
    built = lb.Transformer(shape, tp, batch, 2 * DECODE_POS, device, dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    for name, buf in built.named_buffers():
        if name.endswith("norm"):
            buf.fill_(1.0)
        elif buf.is_floating_point() and "freqs_cis" not in name:
            buf.normal_(0.0, buf.shape[-1] ** -0.5 if buf.dim() > 1 else 1.0, generator=gen)
    return built, torch.tensor([DECODE_POS], device=device), shape.dim


def decode_modules(ctx, model: str, tp: int, batch: int, dtype: str):
    """The model's own modules (ladder_bench's, this rank's shard) on ``batch`` tokens of decode,
    one callable each in a step's order (attention of layer 0, its MLP, attention of layer 1, ...):
    what a step computes between two AllReduces. Callers cycle over them, so each module finds
    its weights where a step finds them."""
    from calibration import ladder_bench as lb
    from laddersim.model_shape import load_model_shape

    key = (model, tp, batch, dtype, ctx.rank)
    if key not in _MODELS:
        _MODELS.clear()
        _MODELS[key] = _random_shard(lb, load_model_shape(model), tp, batch, ctx.device, DTYPES[dtype])
    built, input_pos, dim = _MODELS[key]
    x = torch.randn(batch, 1, dim, dtype=DTYPES[dtype], device=ctx.device)
    rope = (built.freqs_cis[input_pos], built.causal_mask[None, None, input_pos], input_pos)

    def module(i: int):
        layer = built.layers[i // 2]

        @torch.no_grad()
        def run():
            if i % 2 == 0:
                return layer.attention(lb.attn_norm(x, layer.attention_norm), *rope)
            return layer.feed_forward(lb.mlp_norm(x, layer.ffn_norm))
        return run
    return [module(i) for i in range(2 * len(built.layers))]


def _gemm_compute(ctx, point: dict):
    dtype = DTYPES[point["dtype"]]
    m, n, k = point["m"], point["n"], point["k"]
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.rank)
    x = torch.randn(m, k, dtype=dtype, device=ctx.device, generator=gen)
    w = torch.randn(n, k, dtype=dtype, device=ctx.device, generator=gen)
    y = torch.empty(m, n, dtype=dtype, device=ctx.device)
    return lambda: torch.mm(x, w.t(), out=y)


def _overlap_async_cpu(buf, compute, group) -> tuple[float, float, float]:
    """(issue seconds, compute seconds, AllReduce seconds) with the AllReduce issued async first,
    as a ladder step does: gloo's worker thread progresses it on the same cores while this thread
    computes. The compute and the AllReduce count from the issue's return, as the engine starts
    them after the step's collective launch (which charges the issue). The AllReduce's end is
    taken by a completion callback (on gloo's thread), so it counts even when it ends before the
    compute."""
    done = {}
    dist.barrier(group=group)
    t_call = time.perf_counter()
    work = dist.all_reduce(buf, group=group, async_op=True)
    work.get_future().then(lambda _f: done.setdefault("t", time.perf_counter()))
    t0 = time.perf_counter()
    compute()
    compute_s = time.perf_counter() - t0
    work.wait()
    comm_end = done.get("t") or time.perf_counter()
    return t0 - t_call, compute_s, max(comm_end - t0, 0.0)


def _comm_alone_cpu(buf, group) -> float:
    done = {}
    dist.barrier(group=group)
    t0 = time.perf_counter()
    work = dist.all_reduce(buf, group=group, async_op=True)
    work.get_future().then(lambda _f: done.setdefault("t", time.perf_counter()))
    work.wait()
    return (done.get("t") or time.perf_counter()) - t0


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
    """Per repetition, for the next module of a step (cycling), back to back: the module alone,
    and the ladder's overlap, the AllReduce issued async just before the module and waited on
    after it (its end taken by its completion callback); then, as often, the AllReduce as a step
    pays it (``allreduce_bench.chain_allreduce_s``, the ``allreduce`` table's own measure, less
    rank 0's mean issue time: what the engine simulates of it after the launch). Slowest ranks' times. The slowdowns are
    the engine's rates solved from the four timings' means (a step pays the sum of its modules and
    AllReduces, tails included; a solve per repetition of heavy-tailed timings is mostly noise);
    the spread columns are the per-repetition solves against the mean AllReduce."""
    from calibration.allreduce_bench import FLOOR_US, chain_allreduce_s

    modules = decode_modules(ctx, point["model"], point["group_size"], point["m"], point["dtype"])
    dtype = DTYPES[point["dtype"]]
    buf = torch.zeros(element_count(point["size_bytes"], dtype), dtype=dtype, device=ctx.device)
    for module in modules:  # warm-up
        module()
        _comm_alone_cpu(buf, group)
    rows, alone_a, issue = [], [], []
    for rep in range(ctx.opts.repeat_count):
        module = modules[rep % len(modules)]
        dist.barrier(group=group)
        alone_c = ctx.max_over(time_host_s(module), group)
        issue_s, over_c, over_a = _overlap_async_cpu(buf, module, group)
        rows.append((alone_c, ctx.max_over(over_c, group), ctx.max_over(over_a, group)))
        issue.append(issue_s)
        alone_a.append(chain_allreduce_s(ctx, lambda: dist.all_reduce(buf, group=group), modules, group))
    if ctx.rank != 0:
        return None
    # What the engine simulates of the AllReduce: the step-paid call less its issue (charged by
    # the collective launch, laddersim.costs.host_overhead).
    comm_s = max(float(np.mean(alone_a)) - float(np.mean(issue)), FLOOR_US * 1e-6)
    return _mean_solve(rows, comm_s)


def _mean_solve(rows: list[tuple[float, float, float]], comm_s: float) -> dict:
    """The interference row from (compute alone, compute overlapped, AllReduce end) per repetition
    and the mean AllReduce ``comm_s``: the rates solved from the means (``fluid_slowdowns``), the
    per-repetition solves' p10 and p90."""
    alone_c, over_c, over_a = (float(np.mean(col)) for col in zip(*rows))
    solved = fluid_slowdowns(alone_c, comm_s, over_c, over_a)
    pairs = np.array([fluid_slowdowns(c, comm_s, oc, oa) for c, oc, oa in rows])
    spreads = []
    for column, value in enumerate(solved):
        finite = pairs[np.isfinite(pairs[:, column]), column]
        if not math.isfinite(value):  # no overlap in the means: the repetitions' median, else none
            value = float(np.median(finite)) if len(finite) else 0.0
        spreads.append((value, *(_spread(list(finite + 1.0))[1:] if len(finite) else (value, value))))
    (compute, compute_p10, compute_p90), (comm, comm_p10, comm_p90) = spreads
    return {
        "reps": len(rows), "gemm_alone_us": alone_c * 1e6, "gemm_overlap_us": over_c * 1e6,
        "comm_alone_us": comm_s * 1e6, "comm_overlap_us": over_a * 1e6,
        "compute_slowdown": compute, "comm_slowdown": comm, "compute_p10": compute_p10,
        "compute_p90": compute_p90, "comm_p10": comm_p10, "comm_p90": comm_p90,
    }


# Below this share of its work done during the compute, an AllReduce counts as stalled at it
# (its slowdown is then 1 / MIN_PROGRESS - 1, large and finite, so the engine's clock runs).
MIN_PROGRESS = 0.01


def fluid_slowdowns(alone_c: float, alone_a: float, over_c: float, over_a: float) -> tuple[float, float]:
    """(compute, comm) slowdowns of laddersim's engine (``laddersim.engine``: while both run, the
    compute progresses at 1 / (1 + compute slowdown), the collective at 1 / (1 + comm slowdown),
    each at full speed alone) that reproduce one overlapped timing: the AllReduce (``alone_a``
    of work) issued at 0 beside ``alone_c`` of compute; the compute ended at ``over_c``, the
    AllReduce at ``over_a``. Solved as the engine runs them: the AllReduce overlaps the compute
    for ``o = min(over_a, over_c)``; if it outlived the compute, what it did during the compute is
    its work minus the time it ran alone afterwards."""
    o = min(over_a, over_c)
    if o <= 0.0:  # the AllReduce was done before the compute began: no overlap to solve from
        return float("nan"), float("nan")
    alone_part = over_c - o  # compute time with no AllReduce beside it
    compute = o / max(alone_c - alone_part, 1e-12) - 1.0 if alone_c > alone_part else float("nan")
    done = alone_a if over_a <= over_c else alone_a - (over_a - over_c)
    progress = max(done, MIN_PROGRESS * alone_a) / o
    return compute, 1.0 / progress - 1.0


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


if __name__ == "__main__":
    from calibration.calibrate_all import main

    sys.exit(main(benchmarks=("interference",)))
