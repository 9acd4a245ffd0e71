"""Worker processes die with the laddersim process that started them.

A sweep's pool workers and a calibration run's ranks are started by one parent. If that parent is
killed (SIGKILL, an OOM kill, a closed terminal), nothing else would stop them: ranks would go on
measuring and appending to a run directory that a resumed run then writes too. ``die_with_parent``,
called first thing in every child, asks Linux to send the child SIGKILL when its parent thread
exits (``prctl(PR_SET_PDEATHSIG)``) and, because the child's direct parent may be a helper (a
fork server) rather than laddersim itself, also watches laddersim's pid from a daemon thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_INTERVAL_S = 0.2


def _pdeathsig(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (a killed parent stays one until it is reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(owner_pid: int, parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid or not _alive(owner_pid):
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(WATCH_INTERVAL_S)


def die_with_parent(owner_pid: int) -> None:
    """Make this process die when ``owner_pid`` (the laddersim process that started it) does."""
    _pdeathsig(signal.SIGKILL)
    parent_pid = os.getppid()
    # The owner may already be gone (it died before the prctl above): then so must we.
    if not _alive(owner_pid) or parent_pid == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=_watch, args=(owner_pid, parent_pid), name="laddersim-parent-watch",
                     daemon=True).start()
