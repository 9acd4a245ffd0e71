"""Reading the measured tables a profile names (CSV with ``#`` source comments), cached by
file identity so an edited table is read again."""

from __future__ import annotations

import csv
import warnings
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from laddersim.errors import UserInputError
from laddersim.support.io_read import first_line, read_csv

if TYPE_CHECKING:  # pandas loads only where a table is read as a frame (profiles check/fit)
    import pandas as pd


def file_identity(path: Path) -> tuple[Path, int, int]:
    """(resolved path, modification time, size): the cache key of a table read."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise UserInputError(f"table: cannot read {path}: {exc.strerror}") from None
    return path.resolve(), stat.st_mtime_ns, stat.st_size


def read_table_arrays(path: Path) -> dict[str, np.ndarray]:
    """A shipped AllReduce table as numpy columns gpus, nodes, size_bytes, time_s, sorted by
    (gpus, nodes, size_bytes); the same numbers as ``read_table_csv``. Cached like it."""
    return _read_table_arrays(*file_identity(Path(path)))


def read_plain_columns(path: Path, names: tuple[str, ...]) -> np.ndarray | None:
    """The ``names`` columns of a shipped table (``#`` comment lines, then a CSV header) as a float
    array of shape (rows, len(names)), read without pandas so the simulate path stays light; None
    for a file this plain reader cannot take (its caller reads it through the reading layer,
    which says exactly what is wrong)."""
    try:
        with open(path, newline="") as handle:
            lines = [line for line in handle if line.strip() and not line.startswith("#")]
        header = next(csv.reader(lines[:1]))
        index = [header.index(name) for name in names]
        body = ",".join(line.strip() for line in lines[1:])
        if body and set(body) <= _NUMBER_CHARACTERS:  # numbers only: parsed all at once, as float() does
            values = _numbers(body)
            if values is not None and values.size == (len(lines) - 1) * len(header) == body.count(",") + 1:
                return values.reshape(-1, len(header))[:, index].copy()
        rows = list(csv.reader(lines[1:]))
        return np.array([[float(row[i]) for i in index] for row in rows], dtype=float).reshape(-1, len(names))
    except (OSError, IndexError, ValueError, StopIteration):
        return None


_NUMBER_CHARACTERS = frozenset("0123456789.eE+-,")


def _numbers(text: str) -> np.ndarray | None:
    """The comma-separated decimal numbers of ``text`` (None where numpy's reader stops early)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy warns where it stops before the end
            return np.fromstring(text, sep=",")
    except (ValueError, DeprecationWarning):
        return None


@lru_cache(maxsize=256)
def _read_table_arrays(path: Path, _mtime_ns: int, _size: int) -> dict[str, np.ndarray]:
    values = read_plain_columns(path, ("gpus", "nodes", "size_bytes", "time_us"))
    if values is None:
        frame = _read_table_csv(path, _mtime_ns, _size)
        return {name: frame[name].to_numpy() for name in ("gpus", "nodes", "size_bytes", "time_s")}
    order = np.lexsort((values[:, 2], values[:, 1], values[:, 0]))
    values = values[order]
    columns = {"gpus": values[:, 0].astype(int), "nodes": values[:, 1].astype(int), "size_bytes": values[:, 2],
               "time_s": values[:, 3] * 1e-6}
    if not np.isfinite(columns["time_s"]).all() or (columns["time_s"] <= 0).any():
        raise UserInputError(f"table: {path} has non-positive or non-finite times")
    return columns


def read_table_csv(path: Path) -> "pd.DataFrame":
    """Read a shipped table: ``#`` comment lines, then gpus,nodes,size_bytes,time_us columns.

    Cached by file identity (path, modification time, size): profile copies made for what-if
    studies share one read. Callers must not modify the returned frame.
    """
    return _read_table_csv(*file_identity(Path(path)))


def _read_csv(path: Path, dtypes: dict[str, type]) -> "pd.DataFrame":
    """A shipped table: ``#`` comment lines, then at least the ``dtypes`` columns, typed."""
    frame = read_csv(path, "table", comment="#")  # the reading layer: every failure is one line
    missing = set(dtypes) - set(frame.columns)
    if missing:
        raise UserInputError(f"table: {path} lacks columns {sorted(missing)}")
    try:
        return frame.astype(dtypes)
    except (ValueError, TypeError, OverflowError) as exc:
        raise UserInputError(f"table: {path}: {first_line(exc)}; allowed: numbers in {', '.join(dtypes)}") from None


@lru_cache(maxsize=256)
def _read_table_csv(path: Path, _mtime_ns: int, _size: int) -> "pd.DataFrame":
    frame = _read_csv(path, {"gpus": int, "nodes": int, "size_bytes": float, "time_us": float})
    frame["time_s"] = frame["time_us"] * 1e-6
    if not np.isfinite(frame["time_s"]).all() or (frame["time_s"] <= 0).any():
        raise UserInputError(f"table: {path} has non-positive or non-finite times")
    return frame.sort_values(["gpus", "nodes", "size_bytes"]).reset_index(drop=True)


def read_gemm_table_csv(path: Path) -> "pd.DataFrame":
    """Read a shipped GEMM table: ``#`` comment lines, then m,n,k,time_us columns."""
    return _read_csv(path, {"m": int, "n": int, "k": int, "time_us": float})
