"""Run points on local cores (a process pool) or on a Dask distributed cluster.

Both yield lists of finished rows as tasks complete (in completion order, which varies; the
table is sorted afterwards). Points go out in batches of one program each (model, schedule): a
worker simulates a batch's points together (``laddersim.simulation.many``: one walk of the
program's event-order tree replays the runs of all of them), so a batch is as large as progress
and the resumable store allow: about an eighth of a worker's share, up to ``TASK_POINTS``. A
worker learns a program's event orders (``laddersim.engine.cached``) with a few engine runs and
replays the rest, so locally each worker has a share of the programs of its own (a contiguous
run of the grouped batches, taken part by part: ``by_part``) and, once done, takes batches from
the far end of the largest share left, instead of every worker learning every program.
"""

from __future__ import annotations

import gc
import os
import signal
from collections import deque
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from laddersim.support.child_lifetime import die_with_parent
from laddersim.errors import UserInputError
from laddersim.sweeps.evaluate import evaluate_points
from laddersim.sweeps.points import Point

CONNECT_TIMEOUT_S = 20.0  # to reach the Dask scheduler before giving up


def by_program(points: list[Point]) -> list[Point]:
    """The points grouped by program (model and schedule: on one node, the TP changes the
    durations, not the program), in grid order within a group."""
    first: dict[tuple, int] = {}
    for i, p in enumerate(points):
        first.setdefault((p.model_ref, p.schedule), i)
    return sorted(points, key=lambda p: first[(p.model_ref, p.schedule)])


TASK_POINTS = 2500  # points per batch at most (a batch's runs are replayed together)


def batches(points: list[Point], workers: int) -> list[list[Point]]:
    """Batches of one program each, grouped by program: at least ~8 per worker, at most
    ``TASK_POINTS`` points each, a program's points split evenly."""
    size = max(1, min(TASK_POINTS, len(points) // max(1, 8 * workers)))
    tasks: list[list[Point]] = []
    for group in _programs(by_program(points)):
        parts = -(-len(group) // size)
        tasks.extend(group[len(group) * i // parts:len(group) * (i + 1) // parts] for i in range(parts))
    return tasks


def _programs(points: list[Point]) -> list[list[Point]]:
    """``by_program``'s order cut where the program changes."""
    groups: list[list[Point]] = []
    for p in points:
        if not groups or (groups[-1][0].model_ref, groups[-1][0].schedule) != (p.model_ref, p.schedule):
            groups.append([])
        groups[-1].append(p)
    return groups


def by_part(share: list[list[Point]]) -> list[list[Point]]:
    """A worker's share of tasks with those of one model taken part by part: the i-th task of
    each of its programs together. They hold the same scenarios but the schedule, whose op costs a
    worker computes once for all schedules (``laddersim.simulation.symmetric_batch``), so another worker
    taking tasks from the far end of this share prices the scenarios of one part, not of every
    part of one program."""
    models: dict[str, int] = {}
    parts: dict[tuple, int] = {}
    keyed = []
    for n, task in enumerate(share):
        program = (task[0].model_ref, task[0].schedule)
        part = parts[program] = parts.get(program, -1) + 1
        keyed.append((models.setdefault(program[0], len(models)), part, n))
    return [share[n] for _, _, n in sorted(keyed)]


def _worker_init(owner_pid: int) -> None:
    # Ctrl-C goes to the whole process group; the parent handles it (stops, keeps finished
    # work), so workers must not die half-way through a batch on their own. A parent killed
    # outright takes its workers with it (they would otherwise keep computing for nobody).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(owner_pid)
    gc.enable()  # (forked from a parent that pauses it: a worker pauses it per batch, evaluate_points)


def run_local(points: list[Point], workers: int) -> Iterator[list[dict]]:
    """``workers`` processes (1: in this process, no pool)."""
    tasks = batches(points, workers)
    if workers <= 1:
        for task in tasks:
            yield evaluate_points(task)
        return
    workers = min(workers, len(tasks))
    # One single-process pool per worker, so that a task goes to the worker chosen for it.
    pools = [ProcessPoolExecutor(max_workers=1, initializer=_worker_init, initargs=(os.getpid(),))
             for _ in range(workers)]
    shares = [deque(by_part(tasks[len(tasks) * w // workers:len(tasks) * (w + 1) // workers])) for w in range(workers)]
    pending: dict = {}

    def submit(worker: int) -> None:
        own = shares[worker]
        if own:
            task = own.popleft()
        else:  # its share is done: the last task of the largest share left (the far end from its owner)
            largest = max(shares, key=len)
            if not largest:
                return
            task = largest.pop()
        pending[pools[worker].submit(evaluate_points, task)] = worker

    try:
        for worker in range(workers):
            for _ in range(2):  # one running, one queued: a worker never waits for the parent
                submit(worker)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                worker = pending.pop(future)
                submit(worker)
                yield future.result()
    finally:
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        for pool in pools:
            pool.shutdown(wait=True)


def run_dask(points: list[Point], address: str) -> Iterator[list[dict]]:
    """On the Dask scheduler at ``address`` (e.g. tcp://10.0.0.5:8786). Workers need laddersim
    installed, and any model/profile files at the same absolute paths. Connects when called, not
    when first iterated: a scheduler that cannot be reached is an error before any progress bar."""
    try:
        from dask.distributed import Client
    except ImportError:
        raise UserInputError("scheduler: needs dask[distributed]; install laddersim[distributed]") from None
    try:
        client = Client(address, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise UserInputError(f"scheduler: cannot connect to '{address}': {exc}") from None
    return _dask_results(client, points)


def _dask_results(client, points: list[Point]) -> Iterator[list[dict]]:
    """Each batch's rows as the connected ``client``'s workers finish it; the client closed after."""
    from dask.distributed import as_completed

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
