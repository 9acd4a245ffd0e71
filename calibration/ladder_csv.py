"""The benchmark's output CSV: its columns, reading it back, appending one row safely, and the
key by which a re-run finds the rows it already has."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from laddersim.errors import UserInputError

# Column order of ../shared/validation/ladder_70b_tp_sweep.csv, then our extra columns.
CSV_COLUMNS = (
    "model", "tp", "nodes", "batch", "prompt_len", "gen_len", "p2p", "schedule", "tokens_per_s",
    "prefill_s", "decode_s", "backend", "device", "dtype", "repeats", "mode",
    "generations", "speedup", "speedup_q1", "speedup_q3",
)
# generations: timed back to back per measurement (``--min-time-s``); speedup: over standard, the
# median of the per-round ratios, and its quartiles (calibration/paired_rounds.py).
# A row already in --out with these values is not measured again (laddersim validate's setting
# columns, plus dtype and mode: a float32 and a bfloat16 run, or an eager and a compiled one, are
# different measurements).
RESUME_KEY = ("model", "tp", "nodes", "batch", "prompt_len", "gen_len", "p2p", "schedule", "dtype", "mode")


def _csv_lines(path: str) -> list[str]:
    """The lines of ``path`` holding CSV, i.e. not blank and not ``#`` comments; [] if missing."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def read_rows(path: str) -> tuple[tuple[str, ...], list[dict[str, str]]]:
    """Header and rows of an existing CSV; ``((), [])`` if it is missing or has no header."""
    lines = _csv_lines(path)
    if not lines:
        return (), []
    reader = csv.DictReader(lines)
    return tuple(reader.fieldnames or ()), list(reader)


def row_key(row: dict) -> tuple[str, ...]:
    """A row's ``RESUME_KEY`` values as text, whether read from the CSV or about to be written."""
    return tuple(str(row.get(c) or "").strip() for c in RESUME_KEY)


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) in (b"\n", b"\r")


def append_row(path: str, row: dict) -> None:
    """Append one row in a single write, flushed and fsynced, so an interrupted run keeps every
    row written before and never leaves part of one. The header is written only when the file
    has none (new, empty, or only comments); a last line without its newline is ended first."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS)
    if not _csv_lines(path):
        writer.writeheader()
    writer.writerow(row)
    text = buf.getvalue()
    with open(path, "ab") as f:
        if f.tell() > 0 and not _ends_with_newline(path):
            text = writer.writer.dialect.lineterminator + text
        f.write(text.encode())
        f.flush()
        os.fsync(f.fileno())


def check_out_csv(path: str) -> None:
    """--out must be writable and, if it already has a header, have exactly ``CSV_COLUMNS``."""
    try:
        if Path(path).exists():
            with open(path, "a", newline=""):
                pass
        else:  # do not leave an empty file behind a run that fails before its first row
            parent = Path(path).resolve().parent
            if not parent.is_dir():
                raise FileNotFoundError(2, "no such directory", str(parent))
            if not os.access(parent, os.W_OK):
                raise PermissionError(13, "directory not writable", str(parent))
        header, _ = read_rows(path)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserInputError(f"--out: cannot use {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if header and header != CSV_COLUMNS:
        raise UserInputError(f"--out: {path} exists with other columns; expected "
                             f"{','.join(CSV_COLUMNS)} (write to a new file)")
