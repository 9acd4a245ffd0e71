"""The resumable measurement CSV: durable appends, resume keys, corrupt and truncated lines."""

from __future__ import annotations

import pytest

from laddersim.measure.schema import SCHEMAS, point_key
from laddersim.measure.store import PointStore
from laddersim.errors import UserInputError

SCHEMA = SCHEMAS["allreduce"]


def _row(size: int, time_us: float = 10.0) -> dict:
    return {"world_size": 2, "group_size": 2, "nodes": 1, "dtype": "float32", "mode": "eager",
            "size_bytes": size, "reps": 5, "stat": "median", "time_us": time_us, "p10_us": 9.0,
            "p90_us": 11.0, "min_us": 8.5, "max_us": 12.0}


def _store(tmp_path, warnings=None):
    return PointStore(tmp_path / "allreduce.csv", SCHEMA,
                      warn=(warnings.append if warnings is not None else lambda m: None))


def test_append_then_load_round_trips_and_gives_done_keys(tmp_path):
    store = _store(tmp_path)
    store.append(_row(1024, 12.5))
    store.append(_row(2048, 14.0))
    rows = store.load()
    assert [r["size_bytes"] for r in rows] == [1024, 2048]
    assert rows[0]["time_us"] == 12.5 and rows[0]["dtype"] == "float32"
    assert store.done_keys() == {point_key(SCHEMA, _row(1024)), point_key(SCHEMA, _row(2048))}
    text = store.path.read_text()
    assert text.count("\n") == 3 and text.startswith(",".join(SCHEMA.columns) + "\n")


def test_corrupt_line_in_the_middle_is_an_error_naming_file_and_line(tmp_path):
    store = _store(tmp_path)
    for size in (1024, 2048, 4096):
        store.append(_row(size))
    lines = store.path.read_text().splitlines()
    lines[2] = lines[2].replace("median", "median,extra")
    store.path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserInputError, match=r"allreduce\.csv:3: corrupt line"):
        store.load()


def test_non_numeric_cell_is_an_error(tmp_path):
    store = _store(tmp_path)
    store.append(_row(1024))
    store.append(_row(2048))
    store.path.write_text(store.path.read_text().replace(",2048,", ",2O48,"))
    with pytest.raises(UserInputError, match=r":3: corrupt line, size_bytes='2O48'"):
        store.load()


def test_truncated_last_line_is_reported_dropped_and_cut_on_repair(tmp_path):
    warnings: list[str] = []
    store = _store(tmp_path, warnings)
    store.append(_row(1024))
    store.append(_row(2048))
    full = store.path.read_bytes()
    store.path.write_bytes(full[:-7])  # a crash mid-write: no trailing newline
    assert [r["size_bytes"] for r in store.load()] == [1024]
    assert len(warnings) == 1 and ":3: last line has no newline" in warnings[0]
    store.load(repair=True)
    assert store.path.read_bytes() == full[: full.index(b"\n", full.index(b"\n") + 1) + 1]
    store.append(_row(2048, 20.0))  # the re-measured point
    assert [(r["size_bytes"], r["time_us"]) for r in store.load()] == [(1024, 10.0), (2048, 20.0)]


def test_complete_but_malformed_last_line_is_an_error_not_dropped(tmp_path):
    store = _store(tmp_path)
    store.append(_row(1024))
    with open(store.path, "a") as fh:
        fh.write("2,2,1,float32\n")
    with pytest.raises(UserInputError, match=r":3: corrupt line \(4 fields"):
        store.load()


def test_duplicate_point_and_foreign_header_are_errors(tmp_path):
    store = _store(tmp_path)
    store.append(_row(1024))
    with open(store.path, "a") as fh:
        fh.write(store.path.read_text().splitlines()[1] + "\n")
    with pytest.raises(UserInputError, match=r":3: duplicate point \(same as line 2\)"):
        store.load()
    store.path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(UserInputError, match=r":1: header is 'a,b,c'"):
        store.load()


# ---- a disk that refuses a write ----------------------------------------------------------------

def _refusing_writes(monkeypatch, after_bytes: int):
    """``os.write`` as a disk with ``after_bytes`` bytes left: a short write up to them, then ENOSPC."""
    import errno
    import os

    real, left = os.write, [after_bytes]

    def write(fd, data):
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        written = real(fd, bytes(data)[: left[0]])
        left[0] -= written
        return written

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("room", [0, 5, 30])
def test_an_append_the_disk_refuses_leaves_whole_lines_and_names_the_file(tmp_path, monkeypatch, room):
    store = _store(tmp_path)
    store.append(_row(1024))
    before = store.path.read_bytes()
    _refusing_writes(monkeypatch, room)  # 5 or 30 B: part of the line is written, then the disk is full
    with pytest.raises(OSError, match="No space left on device") as raised:
        store.append(_row(2048))
    assert raised.value.filename == str(store.path)
    assert store.path.read_bytes() == before


@pytest.mark.parametrize("room", [0, 5, 120])
def test_a_refused_first_append_leaves_no_file_without_its_header(tmp_path, monkeypatch, room):
    store = _store(tmp_path)
    _refusing_writes(monkeypatch, room)  # 120 B: the header fits, not the line after it
    with pytest.raises(OSError, match="No space left on device"):
        store.append(_row(1024))
    assert not store.path.exists()


@pytest.mark.parametrize("content", [b"", b"world_size,group_s"])
def test_repair_removes_a_file_without_a_whole_header(tmp_path, content):
    store = _store(tmp_path)
    store.path.write_bytes(content)
    assert store.load() == [] and store.path.exists()
    assert store.load(repair=True) == [] and not store.path.exists()
    store.append(_row(1024))
    assert store.path.read_text().startswith(",".join(SCHEMA.columns) + "\n")
