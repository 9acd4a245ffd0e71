"""``sweep``: the cross product of a grid of what-if scenarios into one resumable results table
(laddersim.sweeps)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import pandas as pd

# The keys of a simple grid (no GRID.yaml) that must be given, and their flags.
REQUIRED_FLAGS = {"models": "--model", "hardware": "--hardware", "tp": "--tp"}


def sweep(grid: str | Path | dict | None, out: str | Path, workers: int | None = None, scheduler: str | None = None,
          progress: bool = False, *, models: Sequence[str] | None = None, hardware: Sequence[str] | None = None,
          tp: Sequence[int] | None = None, pp: Sequence[int] | None = None,
          pp_microbatches: Sequence[int] | None = None, batch: Sequence[int] | None = None,
          prompt_len: Sequence[int] | None = None, gen_len: Sequence[int] | None = None,
          schedules: Sequence[str] | None = None, dtype: Sequence[str] | None = None,
          kv_cache: Sequence[str] | None = None, kv_reads: Sequence[str] | None = None,
          overrides: dict[str, Sequence[float]] | None = None, ep: Sequence[int] | None = None,
          dp_attention: bool = False) -> pd.DataFrame:
    """``laddersim sweep``: every point of a grid simulated into ``out`` (a directory, created:
    ``results.parquet``, ``results.csv``, the store it resumes from), returned as one row per point
    and schedule (``status`` ok, oom or error; the simulate columns; the overrides).

    ``grid``: a GRID.yaml path (``examples/sweep_*.yaml``; an ``examples/...`` path not in the
    current folder is the shipped copy) or the same mapping as a dict (keys ``models``,
    ``hardware``, ``tp``, ``pp``, ``pp_microbatches``, ``batch``, ``prompt_len``, ``gen_len``,
    ``schedules``, ``overrides`` such as
    ``{"intra_bandwidth_gbps": [100, 400], "gpus_per_node": [4, 8]}``, ``serving``); or None and a
    simple grid from the parameters: ``models``, ``hardware`` and ``tp`` lists (required), ``pp``
    (pipeline stages, default [1]), ``pp_microbatches`` (batches in flight through them, default
    [1]), ``batch`` (default [1]), ``prompt_len`` ([1024]), ``gen_len`` ([512]), ``schedules`` ([standard, ladder]),
    ``dtype`` ([bfloat16]), ``kv_cache`` ([static]), ``kv_reads`` ([repeat_interleave]), ``ep``
    (a mixture-of-experts model's expert-parallel ranks in each TP group, default [1]; a column
    ``ep`` where a point's is not 1), ``dp_attention`` (every point with data-parallel attention,
    as ``simulate``'s: ``tp`` each attention replica's, ``ep`` all GPUs'; a column ``dp_attention``
    where on) and ``overrides`` (what-if columns to lists of values). A re-run into the same ``out`` reuses the
    points stored there. ``workers``: local processes (default: all cores); ``scheduler``: a Dask
    scheduler address (tcp://host:8786) instead; ``progress``: a bar on stderr.

    ``frame.attrs``: ``points`` (in the grid), ``computed`` (by this run), ``reused`` (from the
    store), ``status_counts`` and the two files (``parquet``, ``csv``)."""
    from laddersim.api.params import WORKERS, checked
    from laddersim.errors import UserInputError
    from laddersim.support.resources import given_or_shipped
    from laddersim.sweeps.grid import load_grid, parse_grid
    from laddersim.sweeps.sweep_dir import run_sweep

    workers = checked("workers", WORKERS, workers)
    values = {"models": models, "hardware": hardware, "tp": tp, "pp": pp, "pp_microbatches": pp_microbatches,
              "batch": batch, "prompt_len": prompt_len, "gen_len": gen_len, "schedules": schedules, "dtype": dtype,
              "kv_cache": kv_cache, "kv_reads": kv_reads, "ep": ep}
    flags = {key: list(v) for key, v in values.items() if v is not None}
    if dp_attention:
        flags["dp_attention"] = True
    overrides = {k: list(v) for k, v in (overrides or {}).items()}
    if grid is not None:
        if flags or overrides:
            given = sorted(flags) + sorted(overrides)
            raise UserInputError(f"sweep: give a GRID.yaml or grid flags, not both (flags given: {', '.join(given)})")
        parsed = parse_grid(grid, where="sweep grid") if isinstance(grid, dict) else load_grid(given_or_shipped(grid))
    else:
        missing = [flag for key, flag in REQUIRED_FLAGS.items() if key not in flags]
        if missing:
            raise UserInputError(f"sweep: without a GRID.yaml, give {', '.join(missing)}")
        if overrides:
            flags["overrides"] = overrides
        parsed = parse_grid(flags, where="sweep flags")
    report = run_sweep(parsed, out, workers=workers or os.cpu_count() or 1, scheduler=scheduler, progress=progress)
    frame = report.frame
    frame.attrs.update(points=report.points, computed=report.computed, reused=report.reused,
                       status_counts=report.status_counts(), parquet=str(report.parquet), csv=str(report.csv))
    return frame
