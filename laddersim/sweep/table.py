"""Stored rows -> the tidy results table (one row per point), written as Parquet and CSV.

Columns: the input columns (INPUT_COLUMNS; override columns empty where the grid does not sweep
them), ``status``, ``error``, the metrics, and ``speedup_vs_standard`` = tokens/s over tokens/s of
the same point under schedule ``standard`` (empty where that point is not in the table or did not
run). Rows are sorted by the input columns, so the same points give byte-identical files however
the sweep was run, split or interrupted.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from laddersim.sweep.evaluate import METRIC_COLUMNS
from laddersim.sweep.grid import OVERRIDE_COLUMNS
from laddersim.sweep.points import INPUT_COLUMNS, SCENARIO_COLUMNS

_INT_COLUMNS = ("tp", "pp", "pp_microbatches", "batch", "prompt_len", "gen_len")


def _not_set(value) -> bool:
    """None and NaN both mean "not set"."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _speedups(columns: dict[str, list]) -> list[float | None]:
    """tokens/s over tokens/s of the same point (its inputs but the schedule) under ``standard``,
    where both ran; None elsewhere."""
    keys = list(zip(*[[None if _not_set(v) else v for v in columns[c]] for c in INPUT_COLUMNS if c != "schedule"]))
    tokens, status = columns["tokens_per_s"], columns["status"]
    standard = {key: t for key, schedule, st, t in zip(keys, columns["schedule"], status, tokens)
                if schedule == "standard" and st == "ok"}
    return [t / base if (base := standard.get(key)) and st == "ok" else None
            for key, st, t in zip(keys, status, tokens)]


def results_frame(rows: list[dict]) -> pd.DataFrame:
    """The table of ``rows`` (store rows; their ``key`` is dropped)."""
    known = set(INPUT_COLUMNS) | set(METRIC_COLUMNS) | {"key", "status", "error", "speedup_vs_standard"}
    extra = sorted(set().union(*map(dict.keys, rows)) - known) if rows else []
    columns = list(INPUT_COLUMNS) + ["status", "error"] + list(METRIC_COLUMNS) + extra
    data = {c: [r.get(c) for r in rows] for c in columns}
    data["speedup_vs_standard"] = _speedups(data)
    # (an empty table: object columns, as from no records; astype below fixes the known ones)
    frame = pd.DataFrame(data, columns=columns + ["speedup_vs_standard"]) if rows else \
        pd.DataFrame([], columns=columns + ["speedup_vs_standard"])
    frame = frame.astype(column_types())
    frame = frame.sort_values(list(INPUT_COLUMNS), na_position="first", kind="mergesort")
    return frame.reset_index(drop=True)


def column_types() -> dict[str, str]:
    """Fixed dtypes, so a table with no infeasible rows (or no ok rows) has the same schema."""
    types = {c: "string" for c in SCENARIO_COLUMNS if c not in _INT_COLUMNS}
    types.update({c: "int64" for c in _INT_COLUMNS})
    types.update({c: "float64" for c in OVERRIDE_COLUMNS})
    types.update({"status": "string", "error": "string", "nodes": "Int64"})
    types.update({c: "float64" for c in METRIC_COLUMNS if c != "nodes"})
    types["speedup_vs_standard"] = "float64"
    return types


def write_results(frame: pd.DataFrame, out_dir: str | Path) -> tuple[Path, Path]:
    """``results.parquet`` and ``results.csv`` (floats at full precision: they round-trip)."""
    out_dir = Path(out_dir)
    parquet, csv = out_dir / "results.parquet", out_dir / "results.csv"
    # Write to a temporary name and rename, so a Ctrl-C never leaves a half-written table.
    for path, write in ((parquet, lambda p: frame.to_parquet(p, index=False)),
                        (csv, lambda p: frame.to_csv(p, index=False, lineterminator="\n"))):
        tmp = path.with_name(path.name + ".tmp")
        write(tmp)
        tmp.replace(path)
    return parquet, csv
