"""Replacing a file whole: the new text is written beside it (``NAME.tmp``), synced, and renamed
over it, so a reader sees the old file or the new one, never part of either. A write the disk
refuses (full, quota, I/O error) removes the temporary file and raises an ``OSError`` naming the
file that was to be written; the old file is left as it was."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def replace_file(path: str | Path, text: str) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OSError(exc.errno, exc.strerror, str(path)) from None
