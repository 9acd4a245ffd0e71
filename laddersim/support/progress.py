"""A progress bar on stderr for a simulation long enough to want one (``simulate``, ``timeline``)."""

from __future__ import annotations

import sys


class ProgressBar:
    """A stderr bar for a simulation expected to take more than a couple of seconds (judged from
    its size: engine runs x ops x ranks); silent otherwise. ``ProgressBar(label)`` is a context
    manager whose ``update(done, total, op_ranks)`` the simulator calls."""

    OP_RANKS = 60_000  # about two seconds of engine time

    def __init__(self, label: str):
        self.label = label
        self.bar = None

    def update(self, done: int, total: int, op_ranks: int) -> None:
        if self.bar is None and total * op_ranks > self.OP_RANKS:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.label, unit="pass", file=sys.stderr, leave=False,
                            dynamic_ncols=True)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()
