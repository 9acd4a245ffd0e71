"""Stored rows -> the tidy results table (one row per point), written as Parquet and CSV.

Columns: the input columns (INPUT_COLUMNS; override columns empty where the grid does not sweep
them), ``status``, ``error``, the metrics, and ``speedup_vs_standard`` = tokens/s over tokens/s of
the same point under schedule ``standard`` (empty where that point is not in the table or did not
run). Rows are sorted by the input columns, so the same points give byte-identical files however
the sweep was run, split or interrupted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from laddersim.sweeps.evaluate import METRIC_COLUMNS
from laddersim.sweeps.grid import OVERRIDE_COLUMNS
from laddersim.sweeps.points import INPUT_COLUMNS, SCENARIO_COLUMNS

_INT_COLUMNS = ("tp", "pp", "pp_microbatches", "batch", "prompt_len", "gen_len")


def _unset_as_none(values: list) -> list:
    """The values with NaN made None (both mean "not set"; a float is NaN where it is not equal to
    itself); a column without floats as it is."""
    if not any(issubclass(t, float) for t in set(map(type, values))):
        return values
    return [None if isinstance(v, float) and v != v else v for v in values]


def _speedups(columns: dict[str, list]) -> list[float | None]:
    """tokens/s over tokens/s of the same point (its inputs but the schedule) under ``standard``,
    where both ran; None elsewhere."""
    keys = list(zip(*[_unset_as_none(columns[c]) for c in _key_columns(columns) if c != "schedule"]))
    tokens, status = columns["tokens_per_s"], columns["status"]
    standard = {key: t for key, schedule, st, t in zip(keys, columns["schedule"], status, tokens)
                if schedule == "standard" and st == "ok"}
    return [t / base if (base := standard.get(key)) and st == "ok" else None
            for key, st, t in zip(keys, status, tokens)]


def _key_columns(columns) -> list[str]:
    """The input columns, and ``ep`` where a row places a mixture-of-experts model's experts."""
    return list(INPUT_COLUMNS) + (["ep"] if "ep" in columns else [])


def results_frame(rows: list[dict]) -> pd.DataFrame:
    """The table of ``rows`` (store rows; their ``key`` is dropped)."""
    known = set(INPUT_COLUMNS) | set(METRIC_COLUMNS) | {"key", "status", "error", "speedup_vs_standard"}
    extra = sorted(set().union(*map(dict.keys, rows)) - known) if rows else []
    columns = list(INPUT_COLUMNS) + ["status", "error"] + list(METRIC_COLUMNS) + extra
    # Column by column (each row's values read in one pass over the columns, then transposed).
    data = dict(zip(columns, map(list, zip(*[tuple(map(r.get, columns)) for r in rows])))) if rows else \
        {c: [] for c in columns}
    if "ep" in data:  # (a point's row names its ep only where it is not 1)
        data["ep"] = [1 if v is None else int(v) for v in data["ep"]]
    data["speedup_vs_standard"] = _speedups(data)
    # (an empty table: object columns, as from no records; astype below fixes the known ones)
    frame = pd.DataFrame(data, columns=columns + ["speedup_vs_standard"]) if rows else \
        pd.DataFrame([], columns=columns + ["speedup_vs_standard"])
    frame = frame.astype(column_types())
    frame = frame.sort_values(_key_columns(frame.columns), na_position="first", kind="mergesort")
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


CSV_SPLIT_ROWS = 20_000  # a table this long has its CSV's second half formatted by a forked process


def write_results(frame: pd.DataFrame, out_dir: str | Path) -> tuple[Path, Path]:
    """``results.parquet`` and ``results.csv`` (floats at full precision: they round-trip).

    A long table's CSV is formatted in two halves at once, the second by a forked process while
    this one writes the Parquet file and the first half: pandas formats each row on its own (chunk
    by chunk), so the two halves joined are ``to_csv`` of the whole, byte for byte."""
    out_dir = Path(out_dir)
    parquet, csv = out_dir / "results.parquet", out_dir / "results.csv"
    # Write to a temporary name and rename, so a Ctrl-C never leaves a half-written table.
    tmp_csv = csv.with_name(csv.name + ".tmp")
    tail = _start_tail(frame, csv.with_name(csv.name + ".tail.tmp"))
    try:
        tmp = parquet.with_name(parquet.name + ".tmp")
        frame.to_parquet(tmp, index=False)
        tmp.replace(parquet)
        head = frame if tail is None else frame.iloc[:tail[1]]
        head.to_csv(tmp_csv, index=False, lineterminator="\n")
        if tail is not None:
            _append_tail(tail, frame, tmp_csv)
        tmp_csv.replace(csv)
    finally:
        if tail is not None:
            _stop_tail(tail)
    return parquet, csv


def _csv_rows(frame: pd.DataFrame, path: Path) -> None:
    frame.to_csv(path, index=False, header=False, lineterminator="\n")


def _start_tail(frame: pd.DataFrame, path: Path):
    """(process, first row, path) of a forked process writing the CSV rows of the table's second
    half to ``path``; None where the table is short or processes cannot be forked here."""
    import multiprocessing

    if len(frame) < CSV_SPLIT_ROWS or "fork" not in multiprocessing.get_all_start_methods():
        return None
    half = len(frame) // 2
    process = multiprocessing.get_context("fork").Process(target=_csv_rows, args=(frame.iloc[half:], path),
                                                          daemon=True)
    process.start()
    return process, half, path


def _append_tail(tail, frame: pd.DataFrame, csv_path: Path) -> None:
    """The second half's rows after the first's: the forked process's file, or (it failed) written here."""
    process, half, path = tail
    process.join()
    if process.exitcode != 0 or not path.exists():
        _csv_rows(frame.iloc[half:], path)
    with csv_path.open("ab") as out, path.open("rb") as rows:
        shutil.copyfileobj(rows, out, 1 << 20)


def _stop_tail(tail) -> None:
    process, _, path = tail
    if process.is_alive():  # (interrupted before it was joined)
        process.terminate()
        process.join()
    path.unlink(missing_ok=True)
