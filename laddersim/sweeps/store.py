"""The resumable store: one JSON line per finished point in ``DIR/points.jsonl``.

Each line is written whole and flushed the moment its point finishes, so a sweep killed at any
instant loses at most the points still running. A line cut short by the kill (no trailing
newline) is dropped on the next open. Python's json writes floats with ``repr``, which round-trips
exactly, so a row read back is bit-identical to the row computed. A key seen twice (two runs
writing one directory) keeps its first row.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from laddersim.errors import UserInputError

STORE_FILE = "points.jsonl"
_PLAIN = frozenset((str, int, float, bool, type(None)))  # values json writes and reads back as themselves


def _row_problem(row) -> str | None:
    """Why ``row`` (a parsed line) cannot be a stored result row, or None."""
    from laddersim.sweeps.evaluate import METRIC_COLUMNS, STATUSES

    if not isinstance(row, dict):
        return "not a JSON object"
    if not isinstance(row.get("key"), str):
        return "no text key"
    if "status" in row and row["status"] not in STATUSES:
        return f"status must be one of {', '.join(STATUSES)}"
    for column in METRIC_COLUMNS:
        value = row.get(column)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            return f"{column} must be a finite number >= 0 or empty"
    # A static point's result is its tokens/s; a serving point's (a ``rate`` axis) its throughput.
    throughput = "throughput_tokens_per_s" if row.get("rate") is not None else "tokens_per_s"
    value = row.get(throughput)
    positive = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if row.get("status") == "ok" and not positive:
        return f"an ok row needs {throughput} > 0"
    return None


class SweepStore:
    """A sweep's finished rows by point key; ``add`` appends and flushes one line."""

    def __init__(self, out_dir: str | Path):
        self.path = Path(out_dir) / STORE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rows: dict[str, dict] = {}
        self._load()
        self._file = self.path.open("a", encoding="utf-8")

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        complete = data.rfind(b"\n") + 1
        if complete < len(data):  # a line torn by a kill: cut it so appends start on a fresh line
            with self.path.open("r+b") as f:
                f.truncate(complete)
        for number, line in enumerate(data[:complete].splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep
                row = None
            problem = _row_problem(row)
            if problem:
                raise UserInputError(f"out: {self.path} line {number} is not a result row ({problem}); "
                                     "remove that line (or the directory) and re-run")
            self.rows.setdefault(row["key"], row)

    def __contains__(self, key: str) -> bool:
        return key in self.rows

    def add(self, row: dict) -> None:
        self.add_many([row])

    def add_many(self, rows: list[dict]) -> None:
        """Append the rows (one task's) as lines, written and flushed together."""
        lines = []
        for row in rows:
            if row["key"] in self.rows:
                continue
            line = json.dumps(row, separators=(",", ":"))
            lines.append(line + "\n")
            # Exactly what a later run will read back: a row of plain values is (Python's json
            # writes floats with repr, which round-trips), any other is read back from its line.
            self.rows[row["key"]] = row if set(map(type, row.values())) <= _PLAIN else json.loads(line)
        if lines:
            self._file.write("".join(lines))
            self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "SweepStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
