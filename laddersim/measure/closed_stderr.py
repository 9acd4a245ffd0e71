"""A closed stderr never ends a run: writes to it are dropped from the first one refused on.

A run whose stderr is a pipe its reader closed (``laddersim calibrate run ... 2>&1 | head -2``) gets
EPIPE on its next progress line; a measurement of minutes must not die of its log. ``DroppingStream``
wraps ``sys.stderr`` (and ``sys.stdout``): the first write or flush refused (a closed pipe, a terminal gone, a log file on a
full disk) points the stream's file
descriptor at /dev/null, so later writes, torch's and gloo's own included, go nowhere, and the
run goes on; its exit code still says how it went.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator


class DroppingStream(io.TextIOBase):
    """``inner``, except that a refused write is dropped, as are all after it."""

    def __init__(self, inner):
        self.inner = inner
        self.dropped = inner is None

    def write(self, text: str) -> int:
        if not self.dropped:
            try:
                self.inner.write(text)
            except (OSError, ValueError):
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.dropped:
            try:
                self.inner.flush()
            except (OSError, ValueError):
                self._drop()

    def _drop(self) -> None:
        """Any refusal drops the log, not the run: a closed pipe (EPIPE), a terminal gone (EIO), a
        log file on a full disk (ENOSPC), a stream object closed (ValueError)."""
        self.dropped = True
        with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
            fd = self.inner.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
            self.inner.flush()  # what the inner stream still holds goes to /dev/null now

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        if self.inner is None:
            raise io.UnsupportedOperation("no stream")
        return self.inner.fileno()

    def isatty(self) -> bool:
        return bool(self.inner is not None and not self.dropped and self.inner.isatty())

    @property
    def encoding(self) -> str:
        return getattr(self.inner, "encoding", None) or "utf-8"


def drop_writes_when_closed() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` for the rest of this process (a spawned rank)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, DroppingStream):
            setattr(sys, name, DroppingStream(stream))


@contextlib.contextmanager
def writes_dropped_when_closed() -> Iterator[None]:
    """``drop_writes_when_closed`` for a ``with`` block; the streams are restored after it."""
    saved = sys.stdout, sys.stderr
    drop_writes_when_closed()
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = saved
