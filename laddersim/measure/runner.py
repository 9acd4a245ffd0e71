"""Run orchestration: check a ``calibrate run`` request, prepare the run directory, launch.

The measuring itself is in ``calibration/`` (torch programs, launchable with torchrun); this
module decides backend and device, refuses impossible requests with one-line errors before any
rank starts, validates what an earlier run left in the directory, and reports progress.
torch is imported lazily, only when a run is actually requested.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from laddersim.measure.cores import rank_cores
from laddersim.measure.environment import describe_host, merge_manifest, now_utc, read_manifest, write_manifest
from laddersim.measure.grid import World, build_grid, rounded_sizes_note
from laddersim.measure.load import LoadRecord, load_line, run_warning
from laddersim.measure.options import RunOptions
from laddersim.measure.schema import SCHEMAS, point_key
from laddersim.measure.store import PointStore, measurement_path
from laddersim.errors import UserInputError
from laddersim.support.provenance import laddersim_version
from laddersim.support.resources import calibration_module

# gloo ranks time-share the CPU cores; beyond this many per core a run measures the OS scheduler.
GLOO_RANKS_PER_CORE = 4


def resolve_backend(requested: str) -> tuple[str, str]:
    """(backend, device) for ``auto`` / ``gloo`` / ``nccl``."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if requested == "auto":
        requested = "nccl" if cuda and dist.is_nccl_available() else "gloo"
    if requested == "nccl":
        if not cuda:
            raise UserInputError("backend: nccl needs CUDA GPUs and none is visible; allowed: gloo, auto")
        if not dist.is_nccl_available():
            raise UserInputError("backend: this torch build has no NCCL; allowed: gloo, auto")
        return "nccl", "cuda"
    if not dist.is_gloo_available():
        raise UserInputError("backend: this torch build has no gloo; allowed: nccl, auto")
    return "gloo", "cpu"


def max_local_ranks(backend: str) -> int:
    """nccl: one rank per visible GPU; gloo: GLOO_RANKS_PER_CORE ranks per CPU core."""
    if backend == "nccl":
        import torch

        return torch.cuda.device_count()
    return GLOO_RANKS_PER_CORE * (os.cpu_count() or 1)


def check_local_ranks(local_ranks: int, backend: str) -> None:
    limit = max_local_ranks(backend)
    if local_ranks > limit:
        what = f"{limit} visible GPUs" if backend == "nccl" else (
            f"{os.cpu_count()} CPU cores x {GLOO_RANKS_PER_CORE} ranks per core")
        raise UserInputError(f"world-size: {local_ranks} ranks on this host exceed the {what}; "
                             f"allowed: 1..{limit}")


def _check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "measurements").mkdir(exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UserInputError(f"out: cannot write to {out}: {exc.strerror or exc}") from None


def prepare_run_dir(opts: RunOptions, world: World, backend: str, command: str) -> dict:
    """Create/validate the run directory, write run.json; return the grid. Rank 0 / parent only.

    Existing measurement files are validated line by line here, before any rank starts (a
    corrupt line is an error; an interrupted last line is reported and cut).
    """
    out = Path(opts.out)
    if out.exists() and not out.is_dir():
        raise UserInputError(f"out: {out} exists and is not a directory")
    _check_writable(out)
    grid = build_grid(world, opts)
    note = rounded_sizes_note(world, opts) if grid.get("allreduce") else None
    if note:
        print(f"[calibrate] allreduce: {note}", file=sys.stderr, flush=True)
    for name in SCHEMAS:
        PointStore(measurement_path(out, name), SCHEMAS[name]).load(repair=True)
    fresh = describe_host(backend, world.device)
    fresh.update(world_size=world.world_size, ranks_per_node=world.ranks_per_node,
                 nodes=world.nodes, threads_per_rank=threads_per_rank(world),
                 modes=sorted({p["mode"] for points in grid.values() for p in points if "mode" in p}),
                 options=opts.model_dump(mode="json", exclude={"out"}),
                 date_utc=now_utc(), command_line=command, laddersim_version=laddersim_version())
    manifest = merge_manifest(out, fresh, {"date_utc": now_utc(), "command_line": command,
                                           "laddersim_version": laddersim_version()})
    write_manifest(out, manifest)
    return grid


def threads_per_rank(world: World) -> int:
    """CPU ranks stand for GPUs: each gets an equal share of the cores (intra-op threads; each
    rank is pinned to its share, ``laddersim.measure.cores``)."""
    if world.device == "cuda":
        return 0  # not applicable
    cores = rank_cores(0, world.ranks_per_node)
    return 1 if cores is None else len(cores)


def stored_rows(out: str | Path, grid: dict) -> dict[str, list[dict]]:
    """The points of ``grid`` already in ``out``'s measurement files, per benchmark (whole lines
    only; read as they are, nothing cut or reported)."""
    rows = {}
    for name, points in grid.items():
        schema = SCHEMAS[name]
        wanted = {point_key(schema, p) for p in points}
        stored = PointStore(measurement_path(out, name), schema, warn=lambda message: None).load()
        rows[name] = [row for row in stored if point_key(schema, row) in wanted]
    return rows


def kept_note(out: str | Path, grid: dict) -> str:
    """``N of M points`` (the points of ``grid`` already stored in ``out``)."""
    stored = sum(len(rows) for rows in stored_rows(out, grid).values())
    return f"{stored} of {sum(len(points) for points in grid.values())} points"


def record_load(out: str | Path, record: LoadRecord) -> str | None:
    """Add what the load watch saw to ``run.json`` (the last invocation's ``load``; a run measured
    under load also gets its ``load_line``, dated, in ``load_warnings``); returns the run's warning
    line, or None. A manifest the disk refuses to update leaves it unrecorded, said in the line."""
    line = load_line(record)
    try:
        manifest = read_manifest(out)
        if manifest.get("invocations"):
            manifest["invocations"][-1]["load"] = record.as_dict()
        if line:
            manifest["load_warnings"] = list(manifest.get("load_warnings", [])) + [f"{now_utc()}: {line}"]
        write_manifest(out, manifest)
    except OSError as exc:
        return run_warning(line) + f" (not recorded in run.json: {exc.strerror})" if line else None
    return run_warning(line) if line else None


class Progress:
    """One stderr line per measured point: benchmark, count, what, result."""

    def __init__(self, benchmark: str, total: int, resumed: int):
        self.benchmark, self.total, self.count = benchmark, total, resumed
        self.started = time.monotonic()
        if resumed:
            self.line(f"{resumed} of {total} points already measured, resuming")

    def line(self, text: str) -> None:
        print(f"[calibrate] {self.benchmark}: {text}", file=sys.stderr, flush=True)

    def step(self, what: str, result: str) -> None:
        self.count += 1
        self.line(f"{self.count}/{self.total} {what}: {result} "
                  f"({time.monotonic() - self.started:.1f} s)")


def launch(opts: RunOptions, command: str) -> int:
    """Run the calibration benchmarks (spawning local ranks, or as a torchrun worker) with the
    programs shipped with this laddersim (``laddersim.support.resources``)."""
    return calibration_module("bench_launch").launch(opts, command)
