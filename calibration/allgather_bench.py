"""AllGather of the vocab-parallel logits, as a decode step pays it (``laddersim calibrate run``).

A tensor-parallel step ends with every rank's ``[batch, vocab / tp]`` logits gathered into the
whole vocabulary (``calibration/ladder_comm.py``: ``dist.all_gather`` of the parts, then a
``cat``). The engine prices that gather from a measured table where the profile has one
(``tables/allgather.csv``), else as an AllReduce of half the gathered bytes (the NCCL ring
argument of ``laddersim.costs.op_costs.collective_message_bytes``). On CPU ranks the argument does
not hold: gloo's AllGather has no reduction and other wake-ups; on two shared cores a two-rank
probe (an lm_head slice, then the collective, 150 times) timed it at 0.3-0.5x the AllReduce of half
its bytes at batch 1 and 4 and 1.1-1.2x at batch 16 (4-layer, width-512 model, 32K vocabulary,
2026-11-24). A standard step and its upper bound both pay it, so its error moves every predicted
speedup.

Points: the gathered bytes of each ``--models`` model at each ``--batch``, over tp = the world
size. Where the collectives progress on the cores that compute (gloo on CPU ranks), a timed call
is what the step pays (``allreduce_bench.chain_allreduce_s``): every rank computes its lm_head
slice (the model's own shape), then gathers, CHAIN times in a row, less the lm_heads alone; the
value is the mean (a step pays the sum). Elsewhere (NCCL) each call is timed after a barrier,
eagerly or as a CUDA-graph replay, the slowest rank's time. Alone, through the launcher:

    python calibration/calibrate_all.py --benchmarks allgather --backend gloo --world-size 2 --models CONFIG \
        --out runs/cpu
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from calibration import allreduce_bench  # noqa: E402
from calibration.allreduce_bench import chain_allreduce_s, chain_mean, time_per_call  # noqa: E402
from calibration.bench_timing import DTYPES  # noqa: E402
from laddersim.model.shape import load_model_shape  # noqa: E402

CHAIN = 4  # lm_head + gather pairs per timed chain (a step has one; a chain of one is all noise)


def logits_shape(opts, tp: int, size_bytes: int, itemsize: int) -> tuple[int, int, int] | None:
    """(batch, dim, vocab per rank) of the first run model and batch whose gathered logits are
    ``size_bytes``; None if none is."""
    for name in opts.models:
        shape = load_model_shape(name)
        for batch in opts.batch or (1,):
            if shape.gathered_logits_bytes(batch, tp, itemsize) == size_bytes:
                return batch, shape.dim, shape.vocab_per_rank(tp)
    return None


def measure(ctx, point: dict) -> dict | None:
    group = ctx.group_of(point)
    if group is None:
        return None
    tp, dtype = point["group_size"], DTYPES[point["dtype"]]
    itemsize = torch.tensor([], dtype=dtype).element_size()
    part = torch.randn(point["size_bytes"] // (itemsize * tp), dtype=dtype, device=ctx.device)
    parts = [torch.empty_like(part) for _ in range(tp)]

    def gather():
        dist.all_gather(parts, part, group=group)
        return torch.cat(parts, dim=-1)

    gather()  # communicator set-up outside any timing or capture
    shape = logits_shape(ctx.opts, tp, point["size_bytes"], itemsize)
    if not ctx.is_cuda and point["mode"] == "eager" and shape is not None:
        batch, dim, vocab_r = shape
        x = torch.randn(batch, dim, dtype=dtype, device=ctx.device)
        w = torch.randn(vocab_r, dim, dtype=dtype, device=ctx.device)

        def lm_head():
            part.copy_((x @ w.T).reshape(-1))

        modules = [lm_head] * CHAIN
        for _ in range(ctx.opts.warmup_count):
            lm_head()
            gather()
        samples = [chain_allreduce_s(ctx, gather, modules, group) for _ in range(ctx.opts.chain_repeat_count)]
        return chain_mean(samples) if ctx.rank == 0 else None
    return time_per_call(ctx, gather, point["mode"], group)


def describe(point: dict) -> str:
    return f"{allreduce_bench.describe(point)} gathered"  # the same point keys


def result(values: dict) -> str:
    return f"{values.get('stat', 'median')} {values['time_us']:.1f} us"

