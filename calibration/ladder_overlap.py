"""The ladder's overlap on CPU ranks, measured as the ladder runs it, and the engine's rates that
reproduce it.

A ladder step issues each module's AllReduce async and waits for it only before the module after
next (``ladder_bench.ladder``): while a module computes, the AllReduce before it progresses on
the same cores (gloo's threads), and while the calling thread waits for one AllReduce, the next
one progresses too. A single AllReduce beside a single module after a barrier sees neither the
pipelining nor the ranks in step (measured on 2 shared cores: the AllReduce ended ~1 ms after the
module where a ladder step waited ~0.6 ms). So per repetition, on every rank at once, back to back:

* the model's modules in a row, alone (``alone``);
* the same modules in ladder order, each module's AllReduce issued async after it and waited on
  before the module after next (``ladder``), with the time spent in the modules themselves and in
  the issues;
* the AllReduce as a standard step pays it (``allreduce_bench.chain_allreduce_s``), and its issue
  as calibrate's ``overhead`` benchmark times it (``overhead_bench.collective_issue_s``: what the
  engine charges a collective launch).

The engine runs the same chain with the profile's decomposition: per module a compute op, a
collective launch of the issue's time and the AllReduce less that issue. An issue inside the chain
takes longer than alone (gloo's thread, woken by it, runs on the calling thread's core): that
excess is compute-thread time lost to the AllReduce, counted with the modules. The two rates are
those with which the engine ends the chain when it ended and spends in the compute ops what the
chain spent in its modules (and the issues' excess): ``laddersim.fitting.ladder_chain.ladder_rates``,
solved again by ``calibrate fit`` against the AllReduce of the fitted table.
"""

from __future__ import annotations

import time

import numpy as np
import torch.distributed as dist



def ladder_chain_s(ctx, modules, bufs, group) -> tuple[float, float, float]:
    """(ladder chain seconds, seconds in the modules, seconds in the issues) of this rank: the
    modules in ladder order, module i's AllReduce (of ``bufs[i]``) waited on before module i+2."""
    pending, in_modules, issues = [], 0.0, []
    dist.barrier(group=group)
    start = time.perf_counter()
    for i, module in enumerate(modules):
        if i >= 2:
            pending[i - 2].wait()
        t0 = time.perf_counter()
        module()
        t1 = time.perf_counter()
        pending.append(dist.all_reduce(bufs[i], group=group, async_op=True))
        in_modules += t1 - t0
        issues.append(time.perf_counter() - t1)
    for work in pending[-2:]:
        work.wait()
    return time.perf_counter() - start, in_modules, float(np.sum(issues))
