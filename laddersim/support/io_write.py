"""The writing layer: every output path is checked before any work starts.

``check_output`` refuses, with one line naming the flag and what is allowed, a path under the
kernel's pseudo file systems (/proc, /sys, /dev), a file where a directory is wanted or the other
way round, a parent that is a file, and a place this user cannot write. It creates nothing, so a
command refused later leaves no empty directory behind.

``lock_run_dir`` makes the writer of a run directory (a sweep, a calibration run, a benchmark
CSV) the only one: an ``fcntl`` lock held until the process ends, so a second writer on the
same directory is one error line instead of a second stream of appends.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from laddersim.errors import UserInputError

PSEUDO_ROOTS = ("/proc", "/sys", "/dev")
LOCK_FILE = ".laddersim.lock"


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))


def _under_pseudo(path: Path) -> str | None:
    for candidate in (_absolute(path), Path(os.path.realpath(path))):
        for root in PSEUDO_ROOTS:
            if candidate == Path(root) or Path(root) in candidate.parents:
                return root
    return None


def check_output(path: str | Path, flag: str, kind: str = "file") -> Path:
    """Check that ``path`` can be written as a ``kind`` ("file" or "dir"); returns it as a Path.

    ``flag`` names the option in the error (``out``, ``report``, ``trace``).
    """
    path = Path(path)
    text = str(path)
    if not text or "\0" in text:
        raise UserInputError(f"{flag}: {text!r} is not a path; allowed: a writable {kind} path")
    root = _under_pseudo(path)
    if root is not None:
        raise UserInputError(f"{flag}: {path} is under {root}, a kernel file system; allowed: a writable "
                             f"{'directory' if kind == 'dir' else 'file'} path elsewhere")
    try:
        if kind == "file" and path.is_dir():
            raise UserInputError(f"{flag}: {path} is a directory; allowed: a file path")
        if kind == "dir" and path.exists() and not path.is_dir():
            raise UserInputError(f"{flag}: {path} exists and is not a directory; allowed: a directory path")
        existing = _absolute(path)
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if existing != _absolute(path) and not existing.is_dir():
            raise UserInputError(f"{flag}: cannot write to {path}: {existing} is a file, not a directory")
        target = existing if existing != _absolute(path) else path
        if target.is_dir() and not os.access(target, os.W_OK | os.X_OK):
            raise UserInputError(f"{flag}: cannot write in {target}: permission denied; allowed: a writable path")
        if not target.is_dir() and not os.access(target, os.W_OK):
            raise UserInputError(f"{flag}: cannot write {target}: permission denied; allowed: a writable path")
    except OSError as exc:  # e.g. a name too long, a loop of symlinks
        raise UserInputError(f"{flag}: cannot use {path}: {exc.strerror or exc}") from None
    return path


def make_dir(path: str | Path, flag: str) -> Path:
    """``mkdir -p`` after ``check_output``; an OS error is one line."""
    path = check_output(path, flag, "dir")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"{flag}: cannot create {path}: {exc.strerror or exc}") from None
    return path


_HELD: dict[str, int] = {}  # lock path -> open descriptor, held for the life of this process


def lock_run_dir(directory: str | Path, flag: str = "out", lock_name: str = LOCK_FILE,
                 shown: str | Path | None = None) -> Path:
    """Take the exclusive writer lock of ``directory`` (created if missing) for this process.

    Another process holding it is one error line naming its pid (and ``shown``, the file the
    lock stands for, else the directory). The lock goes with the process (also when it is
    killed); taking it twice in one process is a no-op.
    """
    directory = make_dir(directory, flag)
    lock = directory / lock_name
    key = os.path.realpath(lock)
    if key in _HELD:
        return lock
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise UserInputError(f"{flag}: cannot lock {directory}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise UserInputError(f"{flag}: {shown or directory} is being written by another laddersim process "
                             f"(pid {holder}); allowed: one writer at a time (wait for it, or write elsewhere)") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[key] = fd
    return lock


def unlock_run_dir(directory: str | Path, lock_name: str = LOCK_FILE, remove: bool = False) -> None:
    """Release a lock taken by ``lock_run_dir`` in this process (a no-op if not held); ``remove``
    deletes the lock file too, while still holding it (a lock beside a user's file, not in a run
    directory of ours, should not outlive the run)."""
    lock = Path(directory) / lock_name
    fd = _HELD.pop(os.path.realpath(lock), None)
    if fd is not None:
        if remove:
            with contextlib.suppress(OSError):
                lock.unlink()
        os.close(fd)


@contextlib.contextmanager
def run_dir_lock(directory: str | Path, flag: str = "out", lock_name: str = LOCK_FILE) -> Iterator[Path]:
    """``lock_run_dir`` for the duration of a ``with`` block (a lock this process already held
    before the block stays held after it)."""
    key = os.path.realpath(Path(directory) / lock_name)
    held_before = key in _HELD
    lock = lock_run_dir(directory, flag, lock_name)
    try:
        yield lock
    finally:
        if not held_before:
            unlock_run_dir(directory, lock_name)


ROW_FORMATS = (".csv", ".parquet", ".json")  # what ``write_rows`` writes, by the file's suffix


def out_format(path: str | Path) -> str:
    """The suffix of a rows file ``write_rows`` can write; any other is one line naming them."""
    suffix = Path(path).suffix.lower()
    if suffix not in ROW_FORMATS:
        raise UserInputError(f"out: '{path}' has no known format; allowed: a file ending in {', '.join(ROW_FORMATS)}")
    return suffix


def write_rows(rows: list[dict], path: str | Path) -> None:
    """Rows (JSON objects, e.g. ``simulate --json``'s) as CSV, Parquet or the same JSON array;
    one line on stderr names the file."""
    import json
    import sys

    import pandas as pd

    suffix = out_format(path)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".json":
            Path(path).write_text(json.dumps(rows, indent=2) + "\n")
        elif suffix == ".csv":
            pd.DataFrame(rows).to_csv(path, index=False)
        else:
            pd.DataFrame(rows).to_parquet(path, index=False)
    except OSError as exc:
        raise UserInputError(f"out: cannot write {path}: {exc.strerror}") from None
    print(f"out: {Path(path)} ({len(rows)} rows)", file=sys.stderr)
