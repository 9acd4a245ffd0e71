"""The pieces of a calibrate run's fault handling, each alone: a failing rank's one-line account,
which end of several is the cause, a stderr whose reader went away, a file replaced whole."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from laddersim.measure.atomic import replace_file
from laddersim.measure.closed_stderr import DroppingStream
from laddersim.measure.faults import Account, RankEnd, account_of, cause_of


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - with its traceback, as a rank catches it
        return caught


def test_a_refused_write_is_a_disk_fault_naming_the_file():
    account = account_of(raised(OSError(errno.ENOSPC, "No space left on device", "/run/measurements/gemm.csv")))
    assert account == Account("disk", "no space left on device writing /run/measurements/gemm.csv")
    assert account_of(raised(OSError(errno.EDQUOT, "Disk quota exceeded"))).line == "disk quota exceeded"


def test_a_rendezvous_file_the_disk_refuses_is_a_disk_fault():
    torch = pytest.importorskip("torch")
    store_error = torch.distributed.DistStoreError("No space left on device")
    assert account_of(raised(store_error)) == Account("disk", "no space left on device creating the ranks' "
                                                              "rendezvous file")


def test_a_lost_peer_and_a_collective_timeout_are_named_as_such():
    closed = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                          "[127.0.0.1]:30094")
    assert account_of(raised(closed)).kind == "peer"
    timeout = RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv")
    assert account_of(raised(timeout)).kind == "timeout"


def test_input_a_rank_cannot_measure_is_its_one_line():
    from laddersim.errors import UserInputError

    assert account_of(raised(UserInputError("models: 'x' is not a preset"))) == Account(
        "input", "models: 'x' is not a preset")


def test_anything_else_is_an_error_with_its_traceback():
    account = account_of(raised(ValueError("a bug\nsecond line")))
    assert account.kind == "error" and account.line == "ValueError: a bug"
    assert account.detail.startswith("Traceback (most recent call last):") and "in raised" in account.detail


DISK = Account("disk", "no space left on device writing x.csv")
PEER = Account("peer", "lost its peers (Connection closed by peer)")


@pytest.mark.parametrize("ends, cause", [
    ([RankEnd(0, 1, PEER), RankEnd(1, -9)], 1),  # killed: the survivor's lost peer is no cause
    ([RankEnd(1, 1, PEER), RankEnd(0, 1, DISK)], 0),  # the disk, whichever ended first
    ([RankEnd(0, 1, DISK), RankEnd(1, -15, stopped=True)], 0),  # stopped by the launcher: no cause
    ([RankEnd(1, 1, PEER), RankEnd(0, 1, PEER)], 1),  # only lost peers: the first seen
])
def test_the_cause_is_a_rank_that_failed_on_its_own(ends, cause):
    assert cause_of(ends).rank == cause


def test_a_rank_end_in_words():
    assert RankEnd(1, -9).describe() == "rank 1 died of SIGKILL"
    assert RankEnd(0, 1, DISK).describe() == "rank 0: no space left on device writing x.csv"
    assert RankEnd(2, 3).describe() == "rank 2 exited with code 3"
    assert cause_of([RankEnd(0, 0), RankEnd(1, 0)]) is None


def test_a_stream_whose_reader_went_away_drops_what_is_written(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)
    inner = open(write_end, "w", buffering=1)  # a line-buffered stderr into a closed pipe
    stream = DroppingStream(inner)
    stream.write("progress line\n")  # EPIPE: dropped, not raised
    stream.flush()
    assert stream.dropped
    assert os.write(write_end, b"torch's own write\n") == 18  # the descriptor now points at /dev/null
    assert os.path.samestat(os.fstat(write_end), os.stat(os.devnull))
    inner.close()


def test_a_closed_stderr_does_not_change_a_commands_exit_code():
    """A process whose stderr reader is gone before it writes: its exit code is its own."""
    code = ("import sys\nfrom laddersim.measure.closed_stderr import drop_writes_when_closed\n"
            "drop_writes_when_closed()\nfor _ in range(1000): print('x' * 100, file=sys.stderr)\nsys.exit(3)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    proc.stderr.close()
    assert proc.wait(timeout=60) == 3


def test_a_file_the_disk_refuses_to_replace_is_kept_and_no_tmp_is_left(tmp_path, monkeypatch):
    target = tmp_path / "profile.yaml"
    target.write_text("old\n")

    def fsync(fd):  # a file system that allocates late refuses at fsync
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="No space left on device") as refused:
        replace_file(target, "new\n")
    assert refused.value.filename == str(target)
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["profile.yaml"]
    monkeypatch.undo()
    replace_file(target, "new\n")
    assert target.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["profile.yaml"]


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_a_rank_timeout_that_is_not_a_positive_number_is_one_line(tmp_path, value):
    proc = subprocess.run([sys.executable, "-m", "laddersim", "calibrate", "run", "--backend", "gloo",
                           "--rank-timeout-s", value, "--out", str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: rank-timeout-s: must be a positive number of seconds")
    assert not (tmp_path / "run").exists()
