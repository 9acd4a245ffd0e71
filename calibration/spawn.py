"""Start local ranks and stop them: the process plumbing of ``bench_launch`` (calibrate's
benchmarks) and ``ladder_bench`` (the real generation benchmark). Knows nothing of either.

Locally spawned ranks meet at a ``FileStore`` in a directory of the caller's (never a listening
TCPStore) and bind their gloo/NCCL sockets to the loopback interface; they ignore Ctrl-C (their
launcher stops them) and die with the launching process (``laddersim.support.child_lifetime``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # run as `python calibration/x.py` from a checkout
    sys.path.insert(0, _ROOT)

import torch.multiprocessing as mp  # noqa: E402

from laddersim.support.child_lifetime import die_with_parent  # noqa: E402

# Socket interface of locally spawned ranks: the loopback, whatever the host name resolves to.
LOOPBACK_ENV = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


def local_rendezvous(run_dir: str | Path) -> str:
    """A ``file://`` init method for locally spawned ranks: a FileStore in ``run_dir`` (a fresh
    name per launch; torch removes it when the ranks are done), never a listening TCPStore."""
    path = Path(run_dir).resolve() / f".rendezvous-{os.getpid()}-{time.monotonic_ns()}"
    return f"file://{path}"


def loopback_only() -> None:
    """Bind this rank's gloo/NCCL sockets to the loopback (unless the user chose an interface)."""
    for key, value in LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)


STOP_TIMEOUT_S = 5.0  # after Ctrl-C, how long the ranks get to die of SIGTERM before SIGKILL


def spawn_ranks(target, nprocs: int, args: tuple) -> None:
    """Run ``target(rank, *args)`` on ``nprocs`` local processes and wait for them (also used by
    ``ladder_bench.py``).

    SIGINT is blocked (held, not dropped) while the ranks are started: they inherit the mask and
    ignore SIGINT from their first line (``_rank_main``), so a Ctrl-C on the terminal, or a SIGINT
    sent to this parent alone, reaches only the parent, which then stops them itself: SIGTERM, and
    SIGKILL for any still alive after STOP_TIMEOUT_S. A Ctrl-C while the ranks are being started
    waits in the parent and lands as soon as they can be stopped (on two loaded cores a starting
    parent can be descheduled while its ranks already measure). A rank cut mid-append leaves at
    most a last line without its newline, which the next run reports and measures again.
    """
    held = {signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        context = mp.spawn(_rank_main, args=(target, os.getpid(), args), nprocs=nprocs, join=False)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
        raise
    try:  # entered before SIGINT is let through: an interrupt from here on stops the ranks
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)  # a held Ctrl-C raises here
        while not context.join():
            pass
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop(context.processes)
        raise


def _rank_main(rank: int, target, owner_pid: int, args: tuple) -> None:
    """A spawned rank: ignores SIGINT (its launcher stops it) and dies with ``owner_pid`` (the
    launching process), then runs ``target``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # drops a Ctrl-C held since the spawn
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    die_with_parent(owner_pid)
    target(rank, *args)


def _stop(processes: list) -> None:
    """Terminate ``processes`` (SIGTERM, then SIGKILL after STOP_TIMEOUT_S) and reap them."""
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for proc in processes:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()
