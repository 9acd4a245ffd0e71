"""Run points on local cores (a process pool) or on a Dask distributed cluster.

Both yield lists of finished rows as tasks complete (in completion order, which varies; the
table is sorted afterwards). Points go out in small batches: one simulation takes ~10-50 ms, so a
task per point would spend a noticeable share on scheduling, and a batch per worker would make
progress and the resumable store coarse.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from laddersim.child_lifetime import die_with_parent
from laddersim.errors import UserInputError
from laddersim.sweep.evaluate import evaluate_points
from laddersim.sweep.points import Point

CONNECT_TIMEOUT_S = 20.0  # to reach the Dask scheduler before giving up


def batches(points: list[Point], workers: int) -> list[list[Point]]:
    """At least ~16 batches per worker, and at most 8 points per batch."""
    size = max(1, min(8, len(points) // max(1, 16 * workers)))
    return [points[i:i + size] for i in range(0, len(points), size)]


def _worker_init(owner_pid: int) -> None:
    # Ctrl-C goes to the whole process group; the parent handles it (stops, keeps finished
    # work), so workers must not die half-way through a batch on their own. A parent killed
    # outright takes its workers with it (they would otherwise keep computing for nobody).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(owner_pid)


def run_local(points: list[Point], workers: int) -> Iterator[list[dict]]:
    """``workers`` processes (1: in this process, no pool)."""
    tasks = batches(points, workers)
    if workers <= 1:
        for task in tasks:
            yield evaluate_points(task)
        return
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=(os.getpid(),))
    queue = iter(tasks)
    pending: set = set()
    try:
        while True:
            # A bounded queue: an interrupt then abandons little queued work.
            while len(pending) < 4 * workers and (task := next(queue, None)) is not None:
                pending.add(pool.submit(evaluate_points, task))
            if not pending:
                break
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_dask(points: list[Point], address: str) -> Iterator[list[dict]]:
    """On the Dask scheduler at ``address`` (e.g. tcp://10.0.0.5:8786). Workers need laddersim
    installed, and any model/profile files at the same absolute paths."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise UserInputError("scheduler: needs dask[distributed]; install laddersim[distributed]") from None
    try:
        client = Client(address, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise UserInputError(f"scheduler: cannot connect to '{address}': {exc}") from None
    futures = []
    try:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        futures = client.map(evaluate_points, batches(points, workers), pure=False)
        for future in as_completed(futures):
            yield future.result()
    finally:
        if futures:
            client.cancel(futures)
        client.close()


def run_points(points: list[Point], workers: int, scheduler: str | None = None) -> Iterator[list[dict]]:
    if scheduler:
        return run_dask(points, scheduler)
    return run_local(points, workers)
