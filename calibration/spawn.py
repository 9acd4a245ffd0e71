"""Start local ranks, watch them and stop them: the process plumbing of ``bench_launch``
(calibrate's benchmarks) and ``ladder_bench`` (the real generation benchmark). Knows nothing of
either.

Locally spawned ranks meet at a ``FileStore`` in a directory of the caller's (never a listening
TCPStore) and bind their gloo/NCCL sockets to the loopback interface; they ignore Ctrl-C (their
launcher stops them), die with the launching process (``laddersim.support.child_lifetime``) and
drop their writes to a closed stderr (``laddersim.measure.closed_stderr``).

The launcher waits on the ranks itself rather than through torch's ``ProcessContext.join``: a rank
that fails tells it why in one line (``laddersim.measure.faults``), the others are stopped without
torch's log lines, and a run in which no rank makes progress (``progress``, called by the
benchmarks after each timed step) for ``no_progress_s`` is stopped as hung. Every way the ranks
can end short is one exception, ``RanksFailed``: every rank's end and the one that was the cause.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # run as `python calibration/x.py` from a checkout
    sys.path.insert(0, _ROOT)

import torch.multiprocessing as mp  # noqa: E402

from laddersim.measure.closed_stderr import drop_writes_when_closed  # noqa: E402
from laddersim.measure.faults import RankEnd, account_of, cause_of  # noqa: E402
from laddersim.support.child_lifetime import die_with_parent  # noqa: E402

# Socket interface of locally spawned ranks: the loopback, whatever the host name resolves to.
LOOPBACK_ENV = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}
RENDEZVOUS_PREFIX = ".rendezvous-"


def local_rendezvous(run_dir: str | Path) -> str:
    """A ``file://`` init method for locally spawned ranks: a FileStore in ``run_dir`` (a fresh
    name per launch), never a listening TCPStore. torch removes the file only when every rank
    closed the store cleanly; ``remove_rendezvous`` removes it whatever the ranks did."""
    path = Path(run_dir).resolve() / f"{RENDEZVOUS_PREFIX}{os.getpid()}-{time.monotonic_ns()}"
    return f"file://{path}"


def remove_rendezvous(init_method: str) -> None:
    """Remove the FileStore of ``init_method`` (``local_rendezvous``), once its ranks have ended."""
    try:
        Path(init_method.removeprefix("file://")).unlink()
    except OSError:
        pass


def remove_stale_rendezvous(run_dir: str | Path) -> None:
    """Remove what launches killed outright left in ``run_dir``: call it holding the directory's
    writer lock, when no rank of another launch can be using one."""
    for path in Path(run_dir).glob(f"{RENDEZVOUS_PREFIX}*"):
        try:
            path.unlink()
        except OSError:
            pass


def loopback_only() -> None:
    """Bind this rank's gloo/NCCL sockets to the loopback (unless the user chose an interface)."""
    for key, value in LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)


# ---- progress -------------------------------------------------------------------------------------
_PROGRESS: tuple | None = None  # (the shared array of last-progress times, this rank), in a spawned rank


def progress() -> None:
    """Tell the launcher that this rank made progress (a no-op outside spawned ranks)."""
    if _PROGRESS is not None:
        beats, rank = _PROGRESS
        beats[rank] = time.monotonic()


# ---- the ranks ------------------------------------------------------------------------------------
STOP_TIMEOUT_S = 5.0  # how long stopped ranks get to die of SIGTERM before SIGKILL
POLL_S = 0.5  # how often the launcher looks at the ranks' progress
GRACE_S = 3.0  # after a rank fails, how long the others get to end on their own (they see it gone)


class RanksFailed(mp.ProcessExitedException):
    """The ranks did not all finish: ``ends`` (every rank's, in the order seen), ``cause`` (the one
    that stopped the run, ``laddersim.measure.faults.cause_of``) and ``hang`` (what the launcher saw
    when it stopped ranks that made no progress, else None). ``error_index`` and ``signal_name``
    are the cause's, as torch's exception has them."""

    def __init__(self, ends: list[RankEnd], hang: str | None = None):
        cause = cause_of(ends) or ends[0]
        message = hang or cause.describe()
        super().__init__(message, error_index=cause.rank, error_pid=0,
                         exit_code=cause.exit_code if cause.exit_code is not None else 1,
                         signal_name=None if hang else cause.signal_name)
        self.ends, self.cause, self.hang = ends, cause, hang

    def __reduce__(self):
        return (type(self), (self.ends, self.hang))


def spawn_ranks(target, nprocs: int, args: tuple, no_progress_s: float | None = None) -> None:
    """Run ``target(rank, *args)`` on ``nprocs`` local processes and wait for them (also used by
    ``ladder_bench.py``); ``RanksFailed`` if they did not all finish, or if none of them called
    ``progress`` for ``no_progress_s`` seconds (None: no limit).

    SIGINT is blocked (held, not dropped) while the ranks are started: they inherit the mask and
    ignore SIGINT from their first line (``_rank_main``), so a Ctrl-C on the terminal, or a SIGINT
    sent to this parent alone, reaches only the parent, which then stops them itself: SIGTERM, and
    SIGKILL for any still alive after STOP_TIMEOUT_S. A Ctrl-C while the ranks are being started
    waits in the parent and lands as soon as they can be stopped (on two loaded cores a starting
    parent can be descheduled while its ranks already measure). A rank cut mid-append leaves at
    most a last line without its newline, which the next run reports and measures again.
    """
    spawning = multiprocessing.get_context("spawn")
    reports = spawning.SimpleQueue()  # (rank, Account) of each rank that failed
    spawned_at = time.monotonic()
    beats = spawning.Array("d", [spawned_at] * nprocs, lock=False)  # each rank's last progress
    held = {signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        context = mp.spawn(_rank_main, args=(target, os.getpid(), reports, beats, args), nprocs=nprocs,
                           join=False)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
        raise
    try:  # entered before SIGINT is let through: an interrupt from here on stops the ranks
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)  # a held Ctrl-C raises here
        _watch(context.processes, reports, beats, spawned_at, no_progress_s)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop(context.processes)
        raise


def _rank_main(rank: int, target, owner_pid: int, reports, beats, args: tuple) -> None:
    """A spawned rank: ignores SIGINT (its launcher stops it), dies with ``owner_pid`` (the
    launching process), drops writes to a closed stderr, then runs ``target``; a failure is
    reported to the launcher in one line (``account_of``) and ends the rank with exit code 1."""
    global _PROGRESS
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # drops a Ctrl-C held since the spawn
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    die_with_parent(owner_pid)
    drop_writes_when_closed()
    _PROGRESS = (beats, rank)
    progress()
    try:
        target(rank, *args)
    except Exception as exc:  # noqa: BLE001 - every failure is told to the launcher, in one line
        reports.put((rank, account_of(exc)))
        sys.exit(1)


def _watch(processes: list, reports, beats, spawned_at: float, no_progress_s: float | None) -> None:
    """Wait for ``processes``; return when all exited 0, else stop the others and raise RanksFailed.
    ``beats``: each rank's last progress (``spawned_at`` until it starts, ``_rank_main``)."""
    pending = {proc.sentinel: rank for rank, proc in enumerate(processes)}
    order: list[int] = []  # ranks in the order they ended
    accounts: dict[int, object] = {}
    hang = None
    # A rank that has not started yet (it imports torch: seconds, more on a loaded machine) makes
    # progress while it uses CPU time; once started, only its ``progress`` calls count (a rank
    # waiting on a stopped peer can spin: NCCL's host threads do).
    starting_cpu: dict[int, int | None] = {}
    started_last = spawned_at

    def last_progress() -> float:
        nonlocal started_last
        for rank in pending.values():
            if beats[rank] == spawned_at:
                ticks = process_cpu_ticks(processes[rank].pid)
                if ticks != starting_cpu.get(rank, -1):
                    starting_cpu[rank], started_last = ticks, time.monotonic()
        return max(max(beats), started_last)

    def reap(timeout: float) -> None:
        for sentinel in multiprocessing.connection.wait(list(pending), timeout=timeout):
            rank = pending.pop(sentinel)
            processes[rank].join()
            order.append(rank)
        while not reports.empty():
            rank, account = reports.get()
            accounts[rank] = account

    while pending and all(processes[rank].exitcode == 0 for rank in order):
        reap(POLL_S)
        if pending and no_progress_s is not None and time.monotonic() - last_progress() > no_progress_s:
            hang = _hang([(rank, processes[rank].pid, beats[rank] == spawned_at)
                          for rank in sorted(pending.values())])
            break
    if not pending and all(processes[rank].exitcode == 0 for rank in order):
        return
    deadline = time.monotonic() + (0.0 if hang else GRACE_S)
    while pending and time.monotonic() < deadline:  # the others see their peer gone and end
        reap(max(0.0, deadline - time.monotonic()))
    stopped = sorted(pending.values())
    _stop([processes[rank] for rank in stopped])
    reap(0.0)
    ends = [RankEnd(rank, processes[rank].exitcode, accounts.get(rank), stopped=rank in stopped)
            for rank in order + [rank for rank in stopped if rank not in order]]
    raise RanksFailed(ends, hang)


def process_state(pid: int) -> str:
    """The state letter of ``pid`` in /proc (R, S, D, T stopped, t traced...), "" if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def process_cpu_ticks(pid: int) -> int | None:
    """User plus system CPU time of ``pid`` in clock ticks (/proc), None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[-1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def _hang(ranks: list[tuple[int, int, bool]]) -> str:
    """What hung ranks (rank, pid, whether it never started) are doing, in words, looked at before
    they are stopped."""
    said = []
    for rank, pid, unstarted in ranks:
        state = process_state(pid)
        if state in ("T", "t"):
            said.append(f"rank {rank} is stopped ({'SIGSTOP' if state == 'T' else 'a debugger'})")
        elif unstarted:
            said.append(f"rank {rank} never started (stalled in its imports, using no CPU)")
    return ", ".join(said) if said else "every rank is alive and none is stopped: they wait on one another"


def _stop(processes: list) -> None:
    """Terminate ``processes`` (SIGTERM, then SIGKILL after STOP_TIMEOUT_S) and reap them; a
    stopped one (SIGSTOP) is continued so that it can die of the SIGTERM."""
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
            try:
                os.kill(proc.pid, signal.SIGCONT)
            except OSError:
                pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for proc in processes:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()
