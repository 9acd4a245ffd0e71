"""CPU ranks on one host: each rank on cores of its own.

Ranks that stand for GPUs on a CPU host share its cores. Left to the scheduler, a rank and its
backend threads (gloo's worker and transport threads) move between the cores, and the ranks fall
out of step: on this project's 2-core machine two unpinned ranks entered an AllReduce 0.4-1.8 ms
apart on average and a batch-16 step without collectives took 46 ms; pinned, 0.2-0.5 ms apart and
36 ms. So calibrate and ``ladder_bench`` pin every CPU rank the same way (the calibration then
measures what the benchmark pays): local rank r gets cores ``[r * k, (r + 1) * k)`` of the
process's allowed cores, ``k = cores // local ranks``, and runs k intra-op threads. With more
local ranks than cores nothing is pinned and each rank runs one thread.
"""

from __future__ import annotations

import os


def allowed_cores() -> list[int]:
    """The cores this process may run on (all of them where the OS cannot say)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def rank_cores(local_rank: int, local_ranks: int, cores: list[int] | None = None) -> list[int] | None:
    """The cores of local rank ``local_rank`` of ``local_ranks`` (None: fewer cores than ranks)."""
    cores = allowed_cores() if cores is None else cores
    per = len(cores) // max(1, local_ranks)
    if per < 1 or not 0 <= local_rank < local_ranks:
        return None
    return cores[local_rank * per:(local_rank + 1) * per]


def pin_cpu_rank(local_rank: int, local_ranks: int) -> int:
    """Pin this process to its rank's cores and run that many intra-op threads; returns them.
    Every thread that exists is pinned (torch's and the backend's, if started), and threads
    started later inherit the calling thread's cores."""
    import torch

    cores = rank_cores(local_rank, local_ranks)
    if cores is None or not hasattr(os, "sched_setaffinity"):
        threads = 1 if cores is None else len(cores)
        torch.set_num_threads(threads)
        return threads
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]:
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that ended meanwhile
            pass
    torch.set_num_threads(len(cores))
    return len(cores)
