"""How a rank of ``ladder_bench.py`` reduces: nothing (``NO_COMM``, one rank or upper_bound),
torch.distributed collectives (eager), or functional collectives (under torch.compile), blocking
or async with a late wait (ladder)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


# ---- communication -------------------------------------------------------------------------

class _Done:
    """A finished (or lazily finished) reduction."""

    def __init__(self, t: Tensor):
        self.t = t

    def wait(self) -> Tensor:
        return self.t


class _Work:
    """An in-flight ``dist.all_reduce(..., async_op=True)``."""

    def __init__(self, t: Tensor, work):
        self.t, self.work = t, work

    def wait(self) -> Tensor:
        self.work.wait()
        return self.t


class Comm:
    """Collectives one rank needs: ``start`` an AllReduce (sum) of a partial output, and
    ``gather_vocab`` the vocab-parallel logits. This base class is the world-size-1 identity."""

    rank, world_size = 0, 1

    def start(self, t: Tensor):
        return _Done(t)

    def all_reduce(self, t: Tensor) -> Tensor:
        return self.start(t).wait()

    def gather_vocab(self, t: Tensor) -> Tensor:
        return t


class DistComm(Comm):
    """Eager torch.distributed: async AllReduce, waited on when the caller needs the sum."""

    def __init__(self, group=None):
        self.group = group
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
        self._parts: dict[tuple, list[Tensor]] = {}  # AllGather outputs, kept like a static cache

    def start(self, t: Tensor):
        return _Work(t, dist.all_reduce(t, group=self.group, async_op=True))

    def gather_vocab(self, t: Tensor) -> Tensor:
        key = (t.shape, t.dtype, t.device)
        if key not in self._parts:
            self._parts[key] = [torch.empty_like(t) for _ in range(self.world_size)]
        parts = self._parts[key]
        dist.all_gather(parts, t.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)


class FuncolComm(DistComm):
    """Functional collectives, for ``torch.compile`` (as gpt-fast's tp.py does): the result is
    an AsyncCollectiveTensor whose wait is issued at its first use, i.e. where ``wait()`` is."""

    def start(self, t: Tensor):
        import torch.distributed._functional_collectives as funcol
        return _Done(funcol.all_reduce(t, "sum", self.group or dist.group.WORLD))

    def gather_vocab(self, t: Tensor) -> Tensor:
        import torch.distributed._functional_collectives as funcol
        # all_gather_single replaces the deprecated all_gather_tensor in recent torch.
        gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
        g = gather(t.contiguous(), 0, self.group or dist.group.WORLD)
        return torch.cat(torch.chunk(g, self.world_size, dim=0), dim=-1)


NO_COMM = Comm()
