"""Crash-safe, resumable CSV of measured points: one line per point, appended as it exists.

Every append writes one whole line, flushes and fsyncs, so an interrupted run loses at most the
point in flight. On restart the file is read back and every line validated:

* a malformed line anywhere but at the end, a duplicate key, or a foreign header is an error
  naming the file and line (never silently dropped: the file is not ours to guess about);
* a last line without its trailing newline is what a crash in the middle of a write leaves; it is
  reported on stderr and dropped (``repair=True`` also cuts it from the file), and its point is
  measured again. A complete last line that is malformed is still an error.

An append the disk refuses (full, quota, I/O error) is undone before the error is raised: the file
is cut back to its whole lines, and a file the append created is removed, so a measurement file
always starts with its header and never ends in part of a line. A file a crash left without a
whole header (empty, or a header cut short) holds nothing: ``repair=True`` removes it.
"""

from __future__ import annotations

import csv
import io
import os
import sys
from pathlib import Path
from typing import Callable

from laddersim.measure.schema import Schema, format_cell, parse_cell, point_key
from laddersim.errors import UserInputError


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


class PointStore:
    """The measurement CSV of one benchmark."""

    def __init__(self, path: str | Path, schema: Schema, warn: Callable[[str], None] = _warn):
        self.path = Path(path)
        self.schema = schema
        self.warn = warn

    def _header(self) -> str:
        return ",".join(self.schema.columns)

    def load(self, repair: bool = False) -> list[dict]:
        """Validated rows (typed). ``repair`` cuts an interrupted last line from the file."""
        if not self.path.exists():
            return []
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise UserInputError(f"out: cannot read {self.path}: {exc.strerror}") from None
        if not data:
            if repair:
                self._remove_empty()
            return []
        text = data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        complete, tail = lines[:-1], lines[-1]  # tail is "" when the file ends with a newline
        if not complete:  # only a partial header: nothing was measured yet
            self._drop_tail(tail, 1, 0, repair)
            if repair:
                self._remove_empty()
            return []
        if complete[0] != self._header():
            raise UserInputError(
                f"out: {self.path}:1: header is '{complete[0][:80]}', expected '{self._header()}'; "
                "not a laddersim measurement file")
        rows: list[dict] = []
        seen: dict[tuple, int] = {}
        for lineno, line in enumerate(complete[1:], start=2):
            row = self._parse_line(line, lineno)
            key = point_key(self.schema, row)
            if key in seen:
                raise UserInputError(
                    f"out: {self.path}:{lineno}: duplicate point (same as line {seen[key]}): {line}")
            seen[key] = lineno
            rows.append(row)
        if tail:
            self._drop_tail(tail, len(complete) + 1, len(data) - len(tail.encode()), repair)
        return rows

    def _drop_tail(self, tail: str, lineno: int, keep_bytes: int, repair: bool) -> None:
        self.warn(f"{self.path}:{lineno}: last line has no newline (interrupted write), dropped "
                  f"and its point will be measured again: '{tail[:80]}'")
        if repair:
            with open(self.path, "r+b") as fh:
                fh.truncate(keep_bytes)
                fh.flush()
                os.fsync(fh.fileno())

    def _remove_empty(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise UserInputError(f"out: cannot remove the empty {self.path}: {exc.strerror}") from None

    def _parse_line(self, line: str, lineno: int) -> dict:
        cells = next(csv.reader([line]), [])
        columns = self.schema.columns
        if len(cells) != len(columns):
            raise UserInputError(
                f"out: {self.path}:{lineno}: corrupt line ({len(cells)} fields, expected "
                f"{len(columns)}): '{line[:80]}'")
        row = {}
        for column, cell in zip(columns, cells):
            try:
                row[column] = parse_cell(column, cell)
            except ValueError as exc:
                raise UserInputError(
                    f"out: {self.path}:{lineno}: corrupt line, {column}='{cell}' ({exc}): "
                    f"'{line[:80]}'") from None
        return row

    def done_keys(self, repair: bool = False) -> set[tuple]:
        return {point_key(self.schema, row) for row in self.load(repair=repair)}

    def append(self, row: dict) -> None:
        """Write one point as one line, durably (fsync) before returning; an append the disk
        refuses is undone (``_undo_append``) and raised as an ``OSError`` naming the file."""
        missing = [c for c in self.schema.columns if c not in row]
        if missing:
            raise ValueError(f"{self.schema.benchmark} point lacks {missing}")
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow(
            [format_cell(row[c]) for c in self.schema.columns])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        text = (buffer.getvalue() if size else self._header() + "\n" + buffer.getvalue()).encode("utf-8")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None
        try:
            while text:
                text = text[os.write(fd, text):]
            os.fsync(fd)
        except OSError as exc:
            self._undo_append(fd, size)
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None
        finally:
            os.close(fd)

    def _undo_append(self, fd: int, size: int) -> None:
        """Cut the file back to the ``size`` bytes of whole lines it had before a failed append
        (a file the append created, ``size`` 0, is removed: never a file without its header)."""
        try:
            if size:
                os.ftruncate(fd, size)
                os.fsync(fd)
            else:
                self.path.unlink()
        except OSError:
            pass  # the next run cuts a last line without its newline (see ``load``)

def measurement_path(run_dir: str | Path, benchmark: str) -> Path:
    return Path(run_dir) / "measurements" / f"{benchmark}.csv"
