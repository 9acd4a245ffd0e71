"""A sweep into a directory: skip points already stored, run the rest, store each as it finishes,
consolidate the grid's rows into ``results.parquet`` / ``results.csv`` at the end or on Ctrl-C.

Layout of DIR: ``points.jsonl`` (the store, see laddersim.sweeps.store), ``provenance.json``
(laddersim version, profile hashes), ``grid.yaml`` (the grid of
the last run), ``results.parquet``, ``results.csv``. The table holds the points of the grid that
was run; a directory reused with another grid keeps serving the points the two share.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from laddersim.support.collector import collector_paused
from laddersim.hardware.profile import load_profile
from laddersim.support.progress import progress_bar
from laddersim.support.provenance import profile_sha256, provenance
from laddersim.support.io_write import check_output, run_dir_lock
from laddersim.sweeps.grid import SweepGrid
from laddersim.sweeps.points import Point, expand_grid
from laddersim.sweeps.runner import run_points
from laddersim.sweeps.store import SweepStore
from laddersim.sweeps.table import results_frame, write_results


@dataclass(frozen=True)
class SweepReport:
    points: int  # in the grid
    computed: int  # by this run
    reused: int  # found in the store
    frame: pd.DataFrame  # the results table
    parquet: Path
    csv: Path
    complete: bool  # False when interrupted

    def status_counts(self) -> dict[str, int]:
        return {s: int(n) for s, n in self.frame["status"].value_counts().sort_index().items()}


def _write_grid(grid: SweepGrid, out_dir: Path) -> None:
    text = yaml.safe_dump(grid.model_dump(exclude_none=True), sort_keys=False)
    (out_dir / "grid.yaml").write_text(text)


def _write_provenance(points: list[Point], out_dir: Path) -> None:
    """``provenance.json``: the laddersim version and a hash of each profile (before overrides)."""
    refs = dict.fromkeys((p.hardware, p.hardware_ref) for p in points)
    record = provenance([]) | {"profiles": {name: profile_sha256(load_profile(ref)) for name, ref in refs}}
    (out_dir / "provenance.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def run_sweep(grid: SweepGrid, out_dir: str | Path, workers: int = 1, scheduler: str | None = None,
              progress: bool = True) -> SweepReport:
    out_dir = check_output(out_dir, "out", "dir")
    points = expand_grid(grid)
    with run_dir_lock(out_dir):  # one writer per directory: a second sweep on it is one error line
        _write_grid(grid, out_dir)
        _write_provenance(points, out_dir)
        return run_points_into(points, out_dir, workers, scheduler, progress)


def run_points_into(points: list[Point], out_dir: Path, workers: int = 1, scheduler: str | None = None,
                    progress: bool = True) -> SweepReport:
    # (the store's rows are many objects that live on: laddersim.support.collector)
    with collector_paused(), SweepStore(out_dir) as store:
        todo = [p for p in points if p.key not in store]
        reused = len(points) - len(todo)
        computed = 0
        # Started (a Dask scheduler connected) before the bar is drawn, so that a connection error
        # is one line of its own; any later error closes the bar first.
        running = run_points(todo, workers, scheduler) if todo else ()
        bar = progress_bar(len(points), "sweep", "pt", enabled=progress, initial=reused, dynamic_ncols=True)
        try:
            for rows in running:
                store.add_many(rows)
                computed += len(rows)
                bar.update(len(rows))
        except KeyboardInterrupt:
            bar.close()
            _consolidate(points, store, out_dir, reused, computed, complete=False)
            raise
        finally:
            bar.close()
        return _consolidate(points, store, out_dir, reused, computed, complete=True)


def _consolidate(points: list[Point], store: SweepStore, out_dir: Path, reused: int, computed: int,
                 complete: bool) -> SweepReport:
    # Rows always come from the store, never from memory, so a table is the same whether its
    # points were computed now, earlier, or in pieces.
    # The point's own inputs win over the stored copy (a hand-edited line cannot retype a column).
    rows = [{**store.rows[p.key], **p.inputs()} for p in points if p.key in store]
    frame = results_frame(rows)
    parquet, csv = write_results(frame, out_dir)
    return SweepReport(len(points), computed, reused, frame, parquet, csv, complete)
