"""Independent tasks on local cores: a process pool whose workers each take whole tasks (a plan's
candidates of one TP x PP split), the answers handed back in task order.

Workers are forked from this process (they share what it has loaded) and take the next task as
they finish one, so long and short tasks even out. A task's answer must not depend on the process
it runs in (the plan evaluates each candidate with timers of its own:
``laddersim.traffic.run.own_timers``), so any number of workers gives the same answers.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import TypeVar

from laddersim.support.child_lifetime import die_with_parent

T = TypeVar("T")
R = TypeVar("R")


def _worker_init(owner_pid: int) -> None:
    # Ctrl-C goes to the whole process group: the parent handles it. A parent killed outright
    # takes its workers with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(owner_pid)


def default_workers() -> int:
    """Every core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def run_tasks(fn: Callable[[T], R], tasks: Sequence[T], workers: int,
              done: Callable[[int], None] = lambda i: None) -> list[R]:
    """``[fn(task) for task in tasks]`` on ``workers`` processes (1: in this process, in order);
    ``done(i)`` as task ``i`` finishes. An exception in a task is raised here."""
    if workers <= 1 or len(tasks) <= 1:
        answers = []
        for i, task in enumerate(tasks):
            answers.append(fn(task))
            done(i)
        return answers
    answers: list = [None] * len(tasks)
    pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), initializer=_worker_init,
                               initargs=(os.getpid(),))
    try:
        pending = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                i = pending.pop(future)
                answers[i] = future.result()
                done(i)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        pool.shutdown(wait=True)
    return answers
