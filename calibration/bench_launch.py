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

from calibration.spawn import local_rendezvous, loopback_only, spawn_ranks  # noqa: E402
from laddersim.measure import runner  # noqa: E402
from laddersim.measure.cores import pin_cpu_rank  # noqa: E402
from laddersim.measure.environment import read_manifest, write_manifest  # noqa: E402
from laddersim.measure.grid import World  # noqa: E402
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
        progress = runner.Progress(name, len(points), len(points) - len(todo)) if rank == 0 else None
        for i in todo:
            values = modules[name].measure(ctx, points[i])
            if rank == 0:
                store.append({**points[i], **values})
                progress.step(modules[name].describe(points[i]), modules[name].result(values))
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
        run_rank(rank, world, backend, device, opts, grid)
    finally:
        dist.destroy_process_group()
    return 0


def launch(opts: RunOptions, command: str) -> int:
    """Entry point of ``laddersim calibrate run`` and ``calibration/*.py``.

    Ctrl-C: the finished points are already on disk; the caller prints one line and exits 130.
    From the first interrupt on, further ones are ignored, so an impatient second Ctrl-C cannot
    break the (short, bounded) shutdown with a traceback.
    """
    try:
        return _launch(opts, command)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise


def _launch(opts: RunOptions, command: str) -> int:
    backend, device_kind = runner.resolve_backend(opts.backend)
    if "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _torchrun_worker(opts, command, backend, device_kind)
    runner.check_local_ranks(opts.world_size, backend)
    world = World(opts.world_size, opts.world_size, device_kind)
    check_output(opts.out, "out", "dir")
    with run_dir_lock(opts.out):  # a second writer on this directory is one error line
        grid = runner.prepare_run_dir(opts, world, backend, command)
        if opts.world_size == 1:
            _spawned(0, world, backend, opts, grid, local_rendezvous(opts.out))
        else:
            for attempt in range(1, LAUNCH_ATTEMPTS + 1):
                try:  # each launch measures only the points not yet stored
                    spawn_ranks(_spawned, opts.world_size, (world, backend, opts, grid, local_rendezvous(opts.out)))
                    break
                except mp.ProcessExitedException as exc:
                    if exc.signal_name is None:
                        raise
                    what = f"rank {exc.error_index} died of {exc.signal_name}"
                    if attempt == LAUNCH_ATTEMPTS:
                        print(f"error: calibrate run: {what} again, {LAUNCH_ATTEMPTS} launches in a row; the "
                              f"finished points are kept in {opts.out}", file=sys.stderr)
                        return 1
                    print(f"[calibrate] {what}; launching the ranks again for the points not yet measured",
                          file=sys.stderr)
    print(f"[calibrate] done: {opts.out}; next: laddersim calibrate fit {opts.out} --name NAME",
          file=sys.stderr)
    return 0


# A rank killed by a signal (the CPU profiler of the ops benchmark has segfaulted about once in 25
# two-rank runs here: torch 2.13, with_stack=True) is launched again, resuming where the store ends.
LAUNCH_ATTEMPTS = 2
