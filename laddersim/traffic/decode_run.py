"""Decode runs: consecutive iterations in which every running sequence decodes one token and
nothing else happens (no admission, no preemption, no finish before the last one).

Between two events that change the batch (an arrival admitted, a sequence finished, a block
short) a continuous-batching engine repeats the same iteration with every sequence one position
longer, and that is most of its iterations. A run keeps the batch as it was at the run's start
(arrays over its slots) plus the number of iterations done, so that an iteration costs O(1)
bookkeeping (its shape: the positions attended, summed; the blocks it takes) and a stretch of
them can be priced at once (``IterationTimer.decode_steps``). ``advance`` writes the run back
into the scheduler's slots. The iterations and their order are the scheduler's own: a run is
only started where ``ContinuousBatcher.plan`` would form exactly these iterations, and it stops
where that could change (``ContinuousBatcher.steady_decode`` says when).
"""

from __future__ import annotations

import numpy as np

# Iterations one run covers at most (x its batch, in elements): bounds the arrays a run prices at
# once; a longer stretch is covered by consecutive runs.
MAX_RUN_ELEMENTS = 1 << 20


class DecodeRun:
    """Iterations of the running batch decoding together, from its state at the run's start.

    ``limit``: the iterations the run may cover (up to the first finish, included; while the
    free blocks cover every sequence's new ones; at most MAX_RUN_ELEMENTS / batch). ``blocked``:
    admission is ruled out for the whole run (the batch is full, no budget is left, or the
    queue's head does not fit), so arrivals do not end it; otherwise the run lasts while the
    queue is empty. ``done``: iterations completed so far.
    """

    def __init__(self, cached: list[int], generated: list[int], output: list[int], blocks: list[int],
                 free_blocks: int, block_size: int):
        self.batch = len(cached)
        self.cached = np.array(cached, dtype=np.int64)  # at the run's start
        self.until_finish = min(o - g for o, g in zip(output, generated))  # the iteration of the first finish
        self.kv_base = int(self.cached.sum())
        self.block_size = block_size
        cap = max(1, min(self.until_finish, MAX_RUN_ELEMENTS // self.batch))
        # The iteration (0-based) in which each sequence first needs a new block, then every block_size.
        self.first_need = np.array(blocks, dtype=np.int64) * block_size - self.cached
        self.cum_needs = np.cumsum(_needs(self.first_need, block_size, cap))
        self.limit = min(cap, int(np.searchsorted(self.cum_needs, free_blocks, side="right")))
        self.free_at_start = free_blocks
        self.blocked = False
        self.done = 0

    def kv_sum(self, i: int) -> int:
        """Positions attended in iteration ``i`` of the run (0-based), summed: ``decode_kv``."""
        return self.kv_base + self.batch * (i + 1)

    def kv_lens(self, i: int) -> np.ndarray:
        """Positions each sequence attends in iteration ``i`` of the run (0-based)."""
        return self.cached + (i + 1)

    def free_blocks(self) -> int:
        """Free blocks after the iterations done."""
        return self.free_at_start - (int(self.cum_needs[self.done - 1]) if self.done else 0)

    def new_blocks(self, steps: int) -> np.ndarray:
        """Blocks each sequence took in the run's first ``steps`` iterations."""
        first = self.first_need
        return np.where(steps > first, (steps - 1 - first) // self.block_size + 1, 0)


def _needs(first_need: np.ndarray, block_size: int, steps: int) -> np.ndarray:
    """New blocks the batch takes in each of ``steps`` iterations (sequence j in iterations
    first_need[j], first_need[j] + block_size, ...)."""
    per_seq = max(0, -(-steps // block_size))
    at = (first_need[:, None] + block_size * np.arange(per_seq)[None, :]).ravel()
    return np.bincount(at[(at >= 0) & (at < steps)], minlength=steps)
