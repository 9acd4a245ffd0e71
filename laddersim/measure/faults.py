"""How the ranks of a calibration run ended, each in one line, and which end stopped the run.

A rank that fails says why in one line (``account_of`` its exception): the disk refused a write
(``disk``), its peers went away (``peer``: a consequence, another rank ended first), a collective
timed out (``timeout``), what the user gave cannot be measured (``input``, a ``UserInputError``),
or anything else (``error``, with its traceback: a bug to report). The
launcher gathers every rank's end (``RankEnd``) and names one cause (``cause_of``): a rank's own
failure before the ``peer`` losses it caused, and nothing the launcher itself stopped.
No torch here: the exceptions are told apart by their errno, class name and message.
"""

from __future__ import annotations

import errno
import signal
import traceback
from dataclasses import dataclass

from laddersim.errors import UserInputError

# A write the machine refused: the run's disk, not its measurements, is at fault.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG})
# torch.distributed's FileStore reports a refused write as a DistStoreError carrying the strerror.
DISK_MESSAGES = ("No space left on device", "Disk quota exceeded", "Read-only file system",
                 "Input/output error", "File too large")
# gloo's (and NCCL's) words for a peer that went away mid-collective.
PEER_MESSAGES = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                 "Connection refused", "NCCL communicator was aborted")
TIMEOUT_MESSAGES = ("Timed out", "timed out", "Timeout", "timeout")
DETAIL_MAX_CHARS = 8000  # a traceback kept for an ``error``: its end, where the cause is


@dataclass(frozen=True)
class Account:
    """A failing rank's own word: ``kind`` (disk, peer, timeout, input, error), one ``line``, and for an
    ``error`` its traceback (``detail``)."""

    kind: str
    line: str
    detail: str = ""


def _first_line(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def account_of(exc: BaseException) -> Account:
    """What ``exc``, raised in a rank, means for the run."""
    message = _first_line(str(exc))
    names = {cls.__name__ for cls in type(exc).__mro__}
    if isinstance(exc, UserInputError):
        return Account("input", message)
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        where = f" writing {exc.filename}" if exc.filename else ""
        return Account("disk", f"{(exc.strerror or message).lower()}{where}")
    if "DistStoreError" in names and any(text in message for text in DISK_MESSAGES):
        return Account("disk", f"{message.lower()} creating the ranks' rendezvous file")
    if any(text in message for text in PEER_MESSAGES):
        return Account("peer", f"lost its peers ({message[:120]})")
    if any(text in message for text in TIMEOUT_MESSAGES) and ("DistError" in names or "RuntimeError" in names):
        return Account("timeout", f"a collective timed out ({message[:120]})")
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return Account("error", f"{type(exc).__name__}: {message[:200]}", detail[-DETAIL_MAX_CHARS:])


@dataclass(frozen=True)
class RankEnd:
    """How one rank ended: its exit code (negative: the signal that killed it; None: still
    running when the launcher stopped the others), its own account if it gave one, and whether
    the launcher stopped it (then its end is no cause)."""

    rank: int
    exit_code: int | None
    account: Account | None = None
    stopped: bool = False

    @property
    def signal_name(self) -> str | None:
        if self.exit_code is None or self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"

    @property
    def failed(self) -> bool:
        return self.exit_code != 0

    def describe(self) -> str:
        """``rank 1 died of SIGKILL``, ``rank 0: no space left on device writing X``, ..."""
        if self.account is not None:
            return f"rank {self.rank}: {self.account.line}"
        if self.signal_name:
            return f"rank {self.rank} died of {self.signal_name}"
        return f"rank {self.rank} exited with code {self.exit_code}"


def cause_of(ends: list[RankEnd]) -> RankEnd | None:
    """The end that stopped the run, in the order the launcher saw them: the first rank that
    failed on its own account (not a ``peer`` loss), else the first killed by a signal, else the
    first that failed in any other way, peers lost last. Ends the launcher caused are no cause."""
    own = [end for end in ends if end.failed and not end.stopped]
    for wanted in (lambda e: e.account is not None and e.account.kind != "peer",
                   lambda e: e.account is None and e.signal_name is not None,
                   lambda e: e.account is None,
                   lambda e: True):
        found = [end for end in own if wanted(end)]
        if found:
            return found[0]
    return None
