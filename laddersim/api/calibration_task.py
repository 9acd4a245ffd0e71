"""Calibration: measure this cluster (``calibrate_run``), turn a run into a profile
(``calibrate_fit``), import nccl-tests ``all_reduce_perf`` logs as a run (``import_nccl_tests``),
read NCCL's own choices from its debug log (``nccl_log``, ``nccl_tuning``), or a framework file from
a kernel trace (``calibrate_kernels``) (laddersim.measure)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.measure.options import RunOptions
# The command line's `calibrate run` flags and how they become RunOptions (laddersim.measure.options).
from laddersim.measure.options import add_run_args, options_from_args  # noqa: F401

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.model.framework import Framework
    from laddersim.hardware.profile import HardwareProfile

DEFAULT_BASE = "h100-sxm-nvswitch"  # the profile a run's unmeasured parameters come from
TORCH_INSTALL = "pip install torch (any release >= 2.1; the CPU build is enough for gloo ranks)"
RUN = RunOptions.model_fields  # calibrate_run's defaults, stated once in RunOptions


def copied_reason(value, base: str) -> str | None:
    """Why a fitted profile's ``value`` was copied from the ``base`` profile rather than measured
    (laddersim.fitting.run_context), or None: what ``calibrate fit`` marks in its summary."""
    from laddersim.fitting.run_context import copied_reason as reason

    return reason(value, base)


def calibrate_run(out: str | Path, *, backend: str = RUN["backend"].default,
                  world_size: int = RUN["world_size"].default, quick: bool = RUN["quick"].default,
                  benchmarks: Sequence[str] = RUN["benchmarks"].default, sizes_bytes: Sequence[int] = (),
                  dtypes: Sequence[str] = (), models: Sequence[str] = (), tp: Sequence[int] = (),
                  batch: Sequence[int] = (), prompt_len: Sequence[int] = (), warmup: int = 0, repeats: int = 0,
                  graph: bool = RUN["graph"].default, rank_timeout_s: float = RUN["rank_timeout_s"].default,
                  command: str | None = None) -> int:
    """``laddersim calibrate run``: the microbenchmarks into the run directory ``out`` (created;
    resumable: every point is appended as soon as it is measured), spawning ``world_size`` local
    ranks, or as one worker under torchrun. Needs torch. Returns the exit code of the ranks (0: all
    finished).

    ``backend``: auto (default: nccl when CUDA GPUs are visible, else gloo), gloo or nccl;
    ``quick``: a small grid with few repeats; ``benchmarks``: a subset of laddersim.measure.schema
    .BENCHMARKS (default all); ``sizes_bytes``: AllReduce sizes per rank (default 1 KiB to 256 MiB,
    x2); ``dtypes``: AllReduce dtypes (float16, bfloat16, float32; default all three); ``models``:
    models whose GEMM shapes to time, at ``tp``, ``batch`` and (prefill GEMMs) ``prompt_len``;
    ``warmup``, ``repeats``: iterations per point (0: 5 and 25, or 2 and 5 with ``quick``);
    ``graph``: on CUDA, also time CUDA-graph captured collectives and GEMMs; ``rank_timeout_s``:
    locally spawned ranks none of which finishes a timed step for this long are stopped as hung
    (default 600). ``command``: what the run records as the command that made it (default: this
    process's command line). Exit codes: 0 every point measured, 1 a rank crashed (twice in a row,
    or an unexpected error), 2 bad input or the machine refused (full disk, hung ranks), 130
    interrupted; the measured points are kept in every case."""
    import importlib.util

    from laddersim.measure.environment import command_line
    from laddersim.measure.options import check_rank_timeout, check_unused_options
    from laddersim.measure.runner import launch
    from laddersim.errors import UserInputError

    if importlib.util.find_spec("torch") is None:
        raise UserInputError(f"calibrate run: needs torch, which is not installed; {TORCH_INSTALL}")
    if world_size < 1:
        raise UserInputError(f"world-size: must be a positive integer, got {world_size}")
    if warmup < 0 or repeats < 0:
        raise UserInputError("warmup/repeats: must be >= 0 (0 = default)")
    check_rank_timeout(rank_timeout_s)
    opts = RunOptions(backend=backend, world_size=world_size, out=str(out), quick=quick, benchmarks=tuple(benchmarks),
                      sizes_bytes=tuple(sizes_bytes), dtypes=tuple(dtypes), models=tuple(models), tp=tuple(tp),
                      batch=tuple(batch), prompt_len=tuple(prompt_len), warmup=warmup, repeats=repeats, graph=graph,
                      rank_timeout_s=rank_timeout_s)
    check_unused_options(opts)
    return launch(opts, command or command_line())


def calibrate_fit(run_dir: str | Path, name: str, base: str = DEFAULT_BASE) -> HardwareProfile:
    """``laddersim calibrate fit``: a hardware profile fitted to the calibration run ``run_dir``,
    written to
    ``run_dir/profile.yaml`` and returned; named ``name``; the parameters the run did not measure
    come from the profile ``base`` (default h100-sxm-nvswitch). Warnings (a measured table whose
    times fall with size, a fit at its bound, a roofline the measurements exceed) go to stderr."""
    from laddersim.errors import UserInputError
    from laddersim.fitting.profile_from_run import KEPT_ON_FAILURE, fit_run, roofline_warnings
    from laddersim.support.io_write import check_output

    check_output(Path(run_dir) / "profile.yaml", "run_dir", "file")
    try:
        profile = fit_run(str(run_dir), name, base)
    except OSError as exc:  # a table the disk refused (laddersim.measure.atomic)
        raise UserInputError(f"run: cannot write {exc.filename or run_dir}: {exc.strerror or exc}; "
                             f"{KEPT_ON_FAILURE}") from None
    _warn_noisy(str(run_dir))
    for warning in roofline_warnings(profile):
        print(warning, file=sys.stderr)
    return profile


def import_nccl_tests(logs: Sequence[str | Path], out: str | Path, name: str | None = None,
                      base: str = DEFAULT_BASE, iters: int | None = None) -> HardwareProfile:
    """``laddersim calibrate import-nccl-tests``: nccl-tests ``all_reduce_perf`` ``logs`` as a run
    directory ``out`` with its profile (``out/profile.yaml``), returned: what the logs measure is
    refitted, the rest kept from ``base`` (default h100-sxm-nvswitch) with one warning line naming
    the missing sizes. ``name``: the profile's (default: the folder's name); ``iters``: iterations
    per point where a log's header does not say."""
    from laddersim.fitting.nccl_tests import import_logs
    from laddersim.support.io_write import check_output

    check_output(out, "out", "dir")
    from laddersim.api.params import MAX_COUNT, checked, count

    iters = checked("iters", count(1, MAX_COUNT, optional=True), iters)
    profile = import_logs([str(log) for log in logs], str(out), name, base, iters)
    _warn_noisy(str(out))
    return profile


def nccl_log(logs: Sequence[str | Path], hardware: str | Path | HardwareProfile | None = None,
             max_size: int = 64 << 20, out: str | Path | None = None) -> pd.DataFrame:
    """``laddersim calibrate nccl-log``: NCCL's own transport and algorithm choices read from its
    debug ``logs`` (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING): one row per tuning table
    (``table``, ``communicator``) and AllReduce size (powers of two from 1 KiB to ``max_size``
    bytes, default 64 MiB) with NCCL's pick, beside the pick of ``hardware``'s profile for the same
    GPU count when given. ``out``: also write the rows as CSV (a .csv file)."""
    from laddersim.api.common import profile_of
    from laddersim.api.params import checked, count
    from laddersim.measure.nccl_log import choice_rows, read_logs
    from laddersim.errors import UserInputError
    from laddersim.support.io_write import check_output

    max_size = checked("max_size", count(1, 2**62), max_size)
    target = check_output(out, "out", "file") if out else None
    if target is not None and not str(target).endswith(".csv"):
        raise UserInputError(f"out: '{out}' must end in .csv")
    tables = read_logs([str(log) for log in logs])
    frame = choice_rows(tables, max_size, profile_of(hardware) if hardware else None)
    if target is not None:
        frame.to_csv(target, index=False, float_format="%.6g")
    return frame


def nccl_tuning(logs: Sequence[str | Path]) -> list[dict]:
    """``laddersim calibrate nccl-log --yaml``: the AllReduce entries of the tuning tables in NCCL's
    debug ``logs`` as a
    profile's ``collectives.transport.nccl_tuning`` list (needs NCCL >= 2.19, which prints the
    tables' rank counts)."""
    from laddersim.measure.nccl_log import profile_entries, read_logs
    from laddersim.errors import UserInputError

    entries = profile_entries(read_logs([str(log) for log in logs]))
    if not entries:
        raise UserInputError("log: no tuning table with its rank count (NCCL >= 2.19 prints 'nRanks N nNodes M')")
    return entries


def calibrate_kernels(trace_dir: str | Path, hardware: str | Path | HardwareProfile, out: str | Path,
                      base: str = "gpt-fast", model: str | None = None) -> Framework:
    """``laddersim calibrate kernels``: a framework file (``out``, a .yaml) from the one-GPU kernel
    trace ``trace_dir`` (``calibration/kernel_trace.py --out``; an ``examples/...`` folder not in
    the current folder is the shipped example), returned: per traced batch the linears' kernel path
    and, per kernel class, its kernels and achieved bandwidth. ``hardware``: the traced GPU's profile (its
    kernel floor); ``base``: the shipped framework for what a trace does not measure (default
    gpt-fast); ``model``: the traced model (default: the trace's PROVENANCE.md --model)."""
    from laddersim.fitting.run_context import atomic_write
    from laddersim.fitting.kernel_trace import fit_kernels, framework_yaml
    from laddersim.errors import UserInputError
    from laddersim.model.framework import framework_names
    from laddersim.support.io_write import check_output
    from laddersim.support.resources import given_or_shipped

    if not str(out).endswith((".yaml", ".yml")):
        raise UserInputError(f"out: '{out}' must end in .yaml (a framework file)")
    if base not in framework_names():
        raise UserInputError(f"base: unknown framework '{base}'; allowed: {', '.join(framework_names())}")
    target = check_output(out, "out", "file")
    fw = fit_kernels(given_or_shipped(trace_dir), hardware, base, model, name=Path(out).stem)
    atomic_write(Path(target), framework_yaml(fw))
    return fw


def _warn_noisy(run_dir: str) -> None:
    """On stderr, one line per measured table whose times fall with size (noise, kept as is), and
    one per invocation of the run that measured under load (``laddersim.measure.load``)."""
    from laddersim.fitting.host import fit_warnings
    from laddersim.fitting.noisy_tables import noisy_table_warnings
    from laddersim.measure.environment import read_manifest
    from laddersim.measure.load import load_warnings

    for warning in noisy_table_warnings(run_dir) + fit_warnings(run_dir) + load_warnings(read_manifest(run_dir)):
        print(warning, file=sys.stderr)
