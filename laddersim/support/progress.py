"""Progress bars on stderr, drawn only where a person watches it (a terminal): a bar written to a
file or a pipe is a log full of carriage returns, so a redirected stderr gets none.

``progress_bar`` is the bar of a count of things (configurations, requests, sweep points);
``ProgressBar`` the bar of one simulation, drawn only when it is long enough to want one."""

from __future__ import annotations

import sys


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (not a file, a pipe or a closed stream)."""
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # closed
        return False


def progress_bar(total: int, desc: str, unit: str, *, enabled: bool = True, **options):
    """A tqdm bar of ``total`` ``unit`` on stderr, disabled unless ``enabled`` and stderr is a
    terminal (a disabled bar takes the same calls and draws nothing); ``options`` go to tqdm."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not (enabled and stderr_is_terminal()),
                **options)


class ProgressBar:
    """A stderr bar for a simulation expected to take more than a couple of seconds (judged from
    its size: engine runs x ops x ranks); silent otherwise, and where stderr is no terminal.
    ``ProgressBar(label)`` is a context manager whose ``update(done, total, op_ranks)`` the
    simulator calls."""

    OP_RANKS = 60_000  # about two seconds of engine time

    def __init__(self, label: str):
        self.label = label
        self.bar = None
        self.shown = stderr_is_terminal()

    def update(self, done: int, total: int, op_ranks: int) -> None:
        if self.bar is None and self.shown and total * op_ranks > self.OP_RANKS:
            self.bar = progress_bar(total, self.label, "pass", leave=False, dynamic_ncols=True)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()
