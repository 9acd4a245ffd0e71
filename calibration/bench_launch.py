"""Launch the calibration benchmarks on every rank and store each point as soon as it exists.

Two ways in, one code path after ``init_process_group``:

* under ``torchrun`` (``LOCAL_RANK`` and ``WORLD_SIZE`` set): one process per GPU, single or
  multi-node, ``env://`` rendezvous; rank 0 prepares the run directory and tells the others
  whether to go on;
* alone: checks everything first (one-line errors), locks the run directory (one writer), then
  spawns ``--world-size`` local ranks. Their rendezvous is a ``FileStore`` in the run directory
  and their gloo/NCCL sockets are bound to the loopback interface, so nothing listens on a
  network interface; only torchrun (multi-node) runs use the network. The ranks die with this
  process (``laddersim.support.child_lifetime``), also when it is killed outright.

Rank 0 decides which points are still missing (resume), broadcasts them, and appends each
measured point to ``RUN_DIR/measurements/<benchmark>.csv``. AllReduce groups are the first g
ranks for g = 2..world size (all ranks create every group, as torch.distributed requires).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # run as `python calibration/x.py` from a checkout
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from calibration.spawn import (  # noqa: E402
    RanksFailed, local_rendezvous, loopback_only, progress, remove_rendezvous, remove_stale_rendezvous, spawn_ranks,
)
from laddersim.measure import runner  # noqa: E402
from laddersim.measure.closed_stderr import drop_writes_when_closed, writes_dropped_when_closed  # noqa: E402
from laddersim.measure.cores import pin_cpu_rank  # noqa: E402
from laddersim.measure.environment import read_manifest, write_manifest  # noqa: E402
from laddersim.measure.faults import RankEnd, account_of  # noqa: E402
from laddersim.measure.grid import World  # noqa: E402
from laddersim.measure.load import LoadWatch  # noqa: E402
from laddersim.measure.options import RunOptions  # noqa: E402
from laddersim.measure.schema import SCHEMAS, point_key  # noqa: E402
from laddersim.measure.store import PointStore, measurement_path  # noqa: E402
from laddersim.errors import UserInputError  # noqa: E402
from laddersim.support.io_write import check_output, lock_run_dir, run_dir_lock  # noqa: E402


@dataclass
class Ctx:
    """What a benchmark needs to know about this rank."""

    rank: int
    world: World
    backend: str
    device: torch.device
    opts: RunOptions
    groups: dict

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def group_of(self, point: dict):
        """The process group of ``point["group_size"]`` (the first g ranks), or None when this
        rank is not in it and sits the point out."""
        size = point["group_size"]
        return self.groups[size] if self.rank < size else None

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize()

    def max_over(self, value: float, group) -> float:
        """The slowest rank's value in ``group``: a collective is done when its last rank is."""
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        progress()  # a timed step done (calibration.spawn: the launcher's hang watch)
        return float(t.item())


def _benchmark_modules() -> dict:
    from calibration import (
        allgather_bench, allreduce_bench, gemm_bench, interference_bench, memory_bench, op_trace, overhead_bench,
        skew_bench,
    )

    return {"allreduce": allreduce_bench, "allgather": allgather_bench, "gemm": gemm_bench, "memory": memory_bench,
            "interference": interference_bench, "overhead": overhead_bench, "ops": op_trace,
            "skew": skew_bench}


def _broadcast(obj, src: int = 0):
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def run_rank(rank: int, world: World, backend: str, device: torch.device, opts: RunOptions,
             grid: dict | None) -> None:
    """Measure every missing point of ``grid`` (rank 0's grid, broadcast to all)."""
    if world.device == "cpu":
        torch.set_num_threads(runner.threads_per_rank(world))
    groups = {g: dist.new_group(list(range(g))) for g in range(2, world.world_size)}
    groups[world.world_size] = dist.group.WORLD
    ctx = Ctx(rank, world, backend, device, opts, groups)
    hosts = [None] * world.world_size
    dist.all_gather_object(hosts, socket.gethostname())
    if rank == 0:
        manifest = read_manifest(opts.out)
        manifest["hosts"] = sorted(set(hosts))
        write_manifest(opts.out, manifest)
    grid = _broadcast(grid)
    modules = _benchmark_modules()
    for name, points in grid.items():
        schema = SCHEMAS[name]
        store = PointStore(measurement_path(opts.out, name), schema)
        todo = None
        if rank == 0:
            done = store.done_keys(repair=True)
            todo = [i for i, p in enumerate(points) if point_key(schema, p) not in done]
        todo = _broadcast(todo)
        shown = runner.Progress(name, len(points), len(points) - len(todo)) if rank == 0 else None
        for i in todo:
            values = modules[name].measure(ctx, points[i])
            if rank == 0:
                store.append({**points[i], **values})
                shown.step(modules[name].describe(points[i]), modules[name].result(values))
            progress()
        dist.barrier()


def _spawned(rank: int, world: World, backend: str, opts: RunOptions, grid: dict, init: str) -> None:
    loopback_only()
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:  # before the backend starts its threads: they inherit the rank's cores
        pin_cpu_rank(rank, world.ranks_per_node)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world.world_size)
    try:
        run_rank(rank, world, backend, device, opts, grid if rank == 0 else None)
    finally:
        dist.destroy_process_group()


def _torchrun_worker(opts: RunOptions, command: str, backend: str, device_kind: str) -> int:
    drop_writes_when_closed()  # a closed stderr never ends a worker
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    runner.check_local_ranks(local_size, backend)
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        pin_cpu_rank(local_rank, local_size)
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size)
    world = World(world_size, local_size, device_kind)
    try:
        grid, error = None, None
        if rank == 0:
            try:
                lock_run_dir(opts.out)  # held until this rank 0 exits: one writer per run directory
                grid = runner.prepare_run_dir(opts, world, backend, command)
            except UserInputError as exc:
                error = str(exc)
        error = _broadcast(error)
        if error:
            if rank == 0:
                raise UserInputError(error)
            return 2
        try:
            run_rank(rank, world, backend, device, opts, grid)
        except OSError as exc:  # rank 0's writes refused: one line; the other ranks lose their peer
            if rank != 0 or account_of(exc).kind != "disk":
                raise
            _say(f"error: calibrate run: rank 0: {account_of(exc).line}; {runner.kept_note(opts.out, grid)} are kept "
                 f"in {opts.out}; free some space and re-run the same command to resume")
            return 2
    finally:
        dist.destroy_process_group()
    return 0


def launch(opts: RunOptions, command: str) -> int:
    """Entry point of ``laddersim calibrate run`` and ``calibration/*.py``; the exit code: 0 every
    point measured, 1 a rank crashed (twice in a row, or an unexpected error), 2 bad input or the
    machine refused (a full disk, hung ranks), 130 interrupted. Each fault is one line saying what
    happened and what is kept; the measured points are kept in every case.

    Writes to a closed stderr are dropped (``laddersim.measure.closed_stderr``): a run whose log
    reader went away goes on. Ctrl-C: the finished points are already on disk; the caller prints
    one line and exits 130. From the first interrupt on, further ones are ignored, so an impatient
    second Ctrl-C cannot break the (short, bounded) shutdown with a traceback.
    """
    with writes_dropped_when_closed():
        try:
            return _launch(opts, command)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            raise
        except OSError as exc:  # the launcher's own writes (lock, run.json) refused
            where = f" writing {exc.filename}" if exc.filename else ""
            _say(f"error: calibrate run: {(exc.strerror or str(exc)).lower()}{where}; the points already in "
                 f"{opts.out} are kept as they were")
            return 2


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _launch(opts: RunOptions, command: str) -> int:
    backend, device_kind = runner.resolve_backend(opts.backend)
    if "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _torchrun_worker(opts, command, backend, device_kind)
    runner.check_local_ranks(opts.world_size, backend)
    world = World(opts.world_size, opts.world_size, device_kind)
    check_output(opts.out, "out", "dir")
    with run_dir_lock(opts.out):  # a second writer on this directory is one error line
        remove_stale_rendezvous(opts.out)  # left by a launcher killed outright; none is in use now
        grid = runner.prepare_run_dir(opts, world, backend, command)
        before = _rows(runner.stored_rows(opts.out, grid))
        watch = LoadWatch(opts.world_size)
        code, last_line = _measure(opts, world, backend, grid)
        new = [row for key, row in _rows(runner.stored_rows(opts.out, grid)).items() if key not in before]
        load_line = runner.record_load(opts.out, watch.finish(new))  # the points this invocation measured
        if load_line:
            _say(load_line)
    if last_line:  # how the run ended, last
        _say(last_line)
    if code == 0:
        _say(f"[calibrate] done: {opts.out}; next: laddersim calibrate fit {opts.out} --name NAME")
    return code


def _rows(rows: dict[str, list[dict]]) -> dict[tuple, dict]:
    """Stored rows by (benchmark, point key)."""
    return {(name, point_key(SCHEMAS[name], row)): row for name, points in rows.items() for row in points}


def _measure(opts: RunOptions, world: World, backend: str, grid: dict) -> tuple[int, str | None]:
    """Launch the ranks until every point is stored, or a fault ends the run: the exit code and
    the line that says how the run ended, if not plainly."""
    for attempt in range(1, LAUNCH_ATTEMPTS + 1):
        init = local_rendezvous(opts.out)
        try:  # each launch measures only the points not yet stored
            if opts.world_size == 1:
                _in_process(world, backend, opts, grid, init)
            else:
                spawn_ranks(_spawned, opts.world_size, (world, backend, opts, grid, init),
                            no_progress_s=opts.rank_timeout_s)
            return 0, None
        except mp.ProcessExitedException as exc:
            failure = exc
        finally:
            remove_rendezvous(init)
        ended = _after_failure(failure, opts, grid, last=attempt == LAUNCH_ATTEMPTS)
        if ended is not None:
            return ended
    return 1, None  # not reached: the last attempt always decides


def _in_process(world: World, backend: str, opts: RunOptions, grid: dict, init: str) -> None:
    """One rank, in this process; a failure is a ``RanksFailed`` as a spawned rank's would be."""
    try:
        _spawned(0, world, backend, opts, grid, init)
    except Exception as exc:  # noqa: BLE001 - told in one line, as a spawned rank tells it
        raise RanksFailed([RankEnd(0, 1, account_of(exc))]) from exc


def _after_failure(exc: mp.ProcessExitedException, opts: RunOptions, grid: dict,
                   last: bool) -> tuple[int, str] | None:
    """The exit code and its line after ranks that ended short, or None to launch them again (a
    rank killed by a signal, once: the CPU profiler of the ops benchmark has segfaulted about once
    in 25 two-rank runs here with torch 2.13 with_stack=True, which op_trace no longer uses)."""
    cause = exc.cause if isinstance(exc, RanksFailed) else RankEnd(exc.error_index, exc.exit_code)
    hang = exc.hang if isinstance(exc, RanksFailed) else None
    kind = cause.account.kind if cause.account is not None else ("signal" if cause.signal_name else "error")
    what = (f"no rank made progress for {opts.rank_timeout_s:g} s (--rank-timeout-s): {hang}" if hang
            else cause.describe())
    stored = runner.stored_rows(opts.out, grid)
    if all(len(stored[name]) == len(points) for name, points in grid.items()):
        return 0, f"[calibrate] {what}, after every point was stored: the run is complete"
    kept = runner.kept_note(opts.out, grid)
    if kind == "signal" and not hang:
        if not last:
            _say(f"[calibrate] {what}; launching the ranks again for the points not yet measured")
            return None
        return 1, (f"error: calibrate run: {what} again, {LAUNCH_ATTEMPTS} launches in a row; the finished points "
                   f"are kept in {opts.out} ({kept}); re-run the same command to resume")
    if cause.account is not None and cause.account.detail:
        print(cause.account.detail, file=sys.stderr, end="", flush=True)  # a bug: its traceback
    todo = "free some space and " if kind == "disk" else ""
    return (2 if hang or kind in ("disk", "timeout", "input") else 1,
            f"error: calibrate run: {what}; the run was stopped and {kept} are kept in {opts.out}; {todo}re-run the "
            "same command to resume")


# A rank killed by a signal is launched again once, resuming where the store ends (``_after_failure``).
LAUNCH_ATTEMPTS = 2
