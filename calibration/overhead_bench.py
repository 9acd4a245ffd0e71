"""Framework (host dispatch) overhead per op: chains of small ops, timed in the run's own mode.

A real forward pass runs hundreds of small framework ops per step (norms, RoPE, cache writes,
views, sampling; calibration/op_trace.py counts them). Each pays the framework's per-op cost
whatever its size: Python, the dispatcher, allocation, and a kernel floor. This benchmark times
chains of ``CHAIN_OPS`` such ops at the smallest useful shape, per op class as op_trace classes
the trace's ops:

* ``compute``: glue ops of a transformer step (casts, elementwise, reductions, a stack) on a
  ``[1, 1, 64]`` tensor, each allocating its output;
* ``view``: view, transpose, select, slice, unsqueeze (metadata only);
* ``sampling`` (with ``--models``): one call of the run's top-k sampling
  (``calibration/ladder_forward.sample``) of ``[batch, vocab]`` logits at the first ``--batch`` and
  the largest model vocabulary: a few ops, but each a kernel over the whole vocabulary (top-k,
  softmax, random draws) that no per-op figure covers; the value is per call, and
  ``ops_per_chain`` its framework ops;
* ``collective``: the issue of an async AllReduce of one element (the call's return, the wait
  outside the timing): what the calling thread pays to hand a collective to the backend;
* ``cpu_share`` (CPU ranks): every rank runs the compute chain back to back for a sustained
  window; the slowest rank's CPU time over its wall time is the share of the cores a busy rank
  gets while other processes compete for them.

Compute, view and sampling run in the run's cache state (``bench_timing``: before each sample
every rank streams its decode step's weight bytes, so the framework's code and data are evicted
as in a step whose small ops run between weight reads) on every rank at once, the value being the
slowest rank's median. Modes: ``eager`` (CPU: the chain's wall time; CUDA: the host's launch time, ``perf_counter``
around the chain without a sync, the GPU running behind); on CUDA also ``graph`` (the chain
captured in a CUDA graph, the replay's device time per op: the kernel floor inside a graph) and
``compile`` (``torch.compile(mode="reduce-overhead")`` of the chain: per traced op, what is left
after fusion and graph replay). Values: median over ``repeats`` chains, spread as percentiles.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from calibration.bench_timing import (  # noqa: E402
    DTYPES, capture, run_group, slowest_summary, summarize, time_cuda_s,
    working_set_bytes)
from calibration.op_trace import top_level_ops  # noqa: E402
from laddersim.model.shape import load_model_shape  # noqa: E402

CHAIN_OPS = 40  # ops per timed chain (a multiple of each chain's period)


def _compute_chain(x: torch.Tensor, w: torch.Tensor):
    """The ops of an RMSNorm and of a rotation's combine step (as in ladder_bench)."""
    def chain():
        y = x
        for _ in range(CHAIN_OPS // 10):
            f = y.float()
            h = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-5)
            y = torch.stack([h * w, h - w], dim=-1).sum(-1)
        return y
    return chain


def _view_chain(x: torch.Tensor):
    """View ops only."""
    def chain():
        y = x
        for _ in range(CHAIN_OPS // 6):
            y = y.view(1, 8, 8).transpose(1, 2).unsqueeze(0)[0].transpose(1, 2).view(1, 1, 64)
        return y
    return chain


def collective_issue_s(ctx, group) -> float:
    """Seconds of one async all_reduce issue (the wait outside the timing): the median over a
    chain of CHAIN_OPS // 4 issues of one element, after a barrier of ``group``."""
    buf = torch.zeros(1, device=ctx.device)
    dist.barrier(group=group)
    issue = []
    for _ in range(CHAIN_OPS // 4):
        t0 = time.perf_counter()
        work = dist.all_reduce(buf, group=group, async_op=True)
        issue.append(time.perf_counter() - t0)
        work.wait()
    return statistics.median(issue)


def _collective_issue(ctx, reps: int) -> list[float]:
    """Seconds per async all_reduce issue, one sample per chain (``collective_issue_s``)."""
    group = ctx.groups.get(ctx.world.world_size) if ctx.world.world_size > 1 else None
    dist.all_reduce(torch.zeros(1, device=ctx.device), group=group)
    samples = [collective_issue_s(ctx, group) for _ in range(ctx.opts.warmup_count + reps)]
    return samples[ctx.opts.warmup_count:]


def _time_chain(ctx, chain, mode: str, reps: int, before=lambda: None) -> list[float]:
    """Seconds per chain; ``before()`` runs untimed before each (every rank at once)."""
    group = run_group(ctx)
    if mode == "graph":
        chain = capture(chain, inner=1).replay
    elif mode == "compile":
        chain = torch.compile(chain, mode="reduce-overhead")
    samples = []
    for _ in _warm(chain, reps, ctx):
        before()
        ctx.sync()
        if group is not None:
            dist.barrier(group=group)
        if mode in ("graph", "compile"):
            samples.append(time_cuda_s(chain))
            continue
        t0 = time.perf_counter()
        chain()  # CUDA: the host's launch time only (no sync); CPU: the ops themselves
        samples.append(time.perf_counter() - t0)
        ctx.sync()
    return samples


def cache_evictor(ctx, dtype: torch.dtype):
    """A callable that reads the rank's decode-step working set, as a step's weight reads evict
    what ran before them."""
    itemsize = torch.tensor([], dtype=dtype).element_size()
    nbytes = working_set_bytes(ctx, dtype)
    buf = torch.ones(max(1, nbytes // itemsize), dtype=dtype, device=ctx.device)
    return lambda: buf.sum()


def sampling_call(ctx, dtype: torch.dtype):
    """The run's top-k sampling of ``[batch, vocab]`` logits (None without --models)."""
    if not ctx.opts.models:
        return None
    from calibration.ladder_forward import sample

    vocab = max(load_model_shape(name).vocab_size for name in ctx.opts.models)
    batch = (ctx.opts.batch or (1,))[0]
    logits = torch.randn(batch, 1, vocab, dtype=dtype, device=ctx.device)
    return lambda: sample(logits, 0.8, 200)


def _warm(fn, reps: int, ctx) -> range:
    for _ in range(ctx.opts.warmup_count):
        fn()
    ctx.sync()
    return range(reps)


SHARE_WINDOW_S = 0.4  # one sustained busy window
SHARE_WINDOWS = 5


def _cpu_share(ctx, chain) -> float:
    """Median over SHARE_WINDOWS of the slowest rank's CPU time / (wall time x threads) while
    every rank runs ``chain`` back to back for SHARE_WINDOW_S: the share of the cores a busy rank
    gets when other processes compete for them. A short timed sample mostly runs between two
    preemptions (its median never sees them); a whole run pays them all."""
    threads = torch.get_num_threads()
    shares = []
    for _ in range(SHARE_WINDOWS):
        dist.barrier()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        while time.perf_counter() - wall0 < SHARE_WINDOW_S:
            chain()
        share = (time.process_time() - cpu0) / ((time.perf_counter() - wall0) * threads)
        shares.append(-ctx.max_over(-min(share, 1.0), None))  # the slowest rank's
    return statistics.median(shares)


def measure(ctx, point: dict) -> dict | None:
    reps = ctx.opts.repeat_count
    if point["op_class"] == "cpu_share":  # every rank at once, as in a run
        x = torch.randn(1, 1, 64, device=ctx.device)
        share = _cpu_share(ctx, _compute_chain(x, torch.randn(64, device=ctx.device)))
        values = summarize([SHARE_WINDOW_S] * SHARE_WINDOWS)
        return {**values, "ops_per_chain": 0, "cpu_share": share} if ctx.rank == 0 else None
    if point["op_class"] == "collective":  # every rank takes part in the AllReduces
        samples = _collective_issue(ctx, reps)
        return {**summarize(samples), "ops_per_chain": 1, "cpu_share": None} if ctx.rank == 0 else None
    dtype = DTYPES[point["dtype"]]
    x = torch.randn(1, 1, 64, dtype=dtype, device=ctx.device)
    w = torch.randn(64, dtype=dtype, device=ctx.device)
    if point["op_class"] == "sampling":
        chain, per = sampling_call(ctx, dtype), 1
    else:
        chain = _compute_chain(x, w) if point["op_class"] == "compute" else _view_chain(x)
        per = None
    ops = top_level_ops(chain)
    samples = _time_chain(ctx, chain, point["mode"], reps, cache_evictor(ctx, dtype))
    values = slowest_summary(ctx, [s / (per or ops) for s in samples])
    return None if values is None else {**values, "ops_per_chain": ops, "cpu_share": None}


def describe(point: dict) -> str:
    return f"{point['op_class']} ops, {point['mode']}, {point['dtype']}"


def result(values: dict) -> str:
    if values.get("cpu_share") not in (None, ""):
        return f"a busy rank ran {values['cpu_share']:.0%} of the wall time"
    return f"median {values['time_us']:.2f} us per op (p10 {values['p10_us']:.2f}, p90 {values['p90_us']:.2f})"

