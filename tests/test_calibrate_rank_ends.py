"""How a calibrate run's ranks end short, injected for real on this CPU (gloo, 2 ranks): each fault
is one line saying what happened and what is kept, no torch log lines, no rendezvous file left,
and the same command resumes to the full point set.

* a rank killed mid-run (SIGKILL) is launched again and the run completes;
* a rank stopped (SIGSTOP) is a hung run, ended after ``--rank-timeout-s`` with one line, exit 2;
* a rank 0 that aborts after every point was stored leaves a complete run, exit 0;
* a closed stderr (``2>&1 | head -2``) drops the log, never the run;
* ranks that wait on one another without progress are stopped as hung.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from laddersim.cli import main  # noqa: E402
from laddersim.measure.runner import calibration_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# The large sizes keep the run going for a while after its first points: a fault injected then
# lands mid-run.
SIZES = "1KiB,4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB,64MiB"
EXPECTED_SIZES = [1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]


def run_args(out: Path, *extra: str) -> list[str]:
    return ["calibrate", "run", "--backend", "gloo", "--world-size", "2", "--benchmarks", "allreduce",
            "--sizes", SIZES, "--dtypes", "float32", "--repeats", "3", "--warmup", "1", "--out", str(out), *extra]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def data_lines(out: Path) -> list[str]:
    path = out / "measurements" / "allreduce.csv"
    return path.read_text().split("\n")[1:-1] if path.exists() else []


def sizes_stored(out: Path) -> list[int]:
    with open(out / "measurements" / "allreduce.csv") as fh:
        return [int(row["size_bytes"]) for row in csv.DictReader(fh)]


def start(out: Path, *extra: str, **popen) -> subprocess.Popen:
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "laddersim", *run_args(out, *extra)], env=env(),
                            stdout=popen.pop("stdout", subprocess.DEVNULL), text=True, start_new_session=True,
                            **popen)


def wait_for_points(proc: subprocess.Popen, out: Path, points: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while len(data_lines(out)) < points and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if proc.poll() is not None or len(data_lines(out)) < points:
        proc.kill()
        raise AssertionError(f"the run must be caught mid-way: {proc.communicate()[1] if proc.stderr else ''}")


def ranks_of(pid: int) -> list[int]:
    """The spawned ranks of the launcher ``pid``, in rank order (started in order: rising pids)."""
    ranks = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            ranks.append(int(entry.name))
    return sorted(ranks)


def resume_and_check(out: Path, kept: list[str]) -> subprocess.CompletedProcess:
    """The same command again: exit 0, every point once, the kept lines byte for byte first."""
    proc = subprocess.run([sys.executable, "-m", "laddersim", *run_args(out)], env=env(), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert sorted(sizes_stored(out)) == EXPECTED_SIZES
    assert data_lines(out)[: len(kept)] == kept
    assert "already measured, resuming" in proc.stderr
    return proc


def assert_clean(out: Path, stderr: str) -> None:
    """No torch log line, no traceback, no rendezvous or temporary file left in the run."""
    assert "Terminating process" not in stderr and "Traceback" not in stderr, stderr
    left = sorted(p.name for p in out.iterdir() if p.name.startswith(".rendezvous-") or p.name.endswith(".tmp"))
    assert not left, left


def test_a_rank_killed_mid_run_is_launched_again_and_the_run_completes(tmp_path):
    out = tmp_path / "killed"
    proc = start(out)
    wait_for_points(proc, out, 2)
    ranks = ranks_of(proc.pid)
    assert len(ranks) == 2
    before = data_lines(out)
    os.kill(ranks[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert "[calibrate] rank 1 died of SIGKILL; launching the ranks again for the points not yet measured" in err
    assert sorted(sizes_stored(out)) == EXPECTED_SIZES
    assert data_lines(out)[: len(before)] == before  # the points stored before the kill, as they were
    assert not [line for line in err.splitlines() if line.startswith("error:")], err
    assert_clean(out, err)


def test_a_stopped_rank_ends_the_run_after_the_rank_timeout_with_one_line(tmp_path):
    out = tmp_path / "stopped"
    proc = start(out, "--rank-timeout-s", "15")
    wait_for_points(proc, out, 2)
    ranks = ranks_of(proc.pid)
    assert len(ranks) == 2
    os.kill(ranks[1], signal.SIGSTOP)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        for pid in ranks:  # whatever the verdict, leave nothing stopped behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2, err
    assert len(errors) == 1 and errors == [err.splitlines()[-1]], err
    kept = data_lines(out)
    assert errors[0].startswith("error: calibrate run: no rank made progress for 15 s (--rank-timeout-s): "
                                "rank 1 is stopped (SIGSTOP); the run was stopped and "
                                f"{len(kept)} of 9 points are kept in {out}; re-run the same command to resume")
    assert not any(Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
                   for pid in ranks)
    assert_clean(out, err)
    resume_and_check(out, kept)


def abort_after_the_last_point(rank: int, target, *args) -> None:
    """The rank's ``target``, then rank 0 aborts (SIGABRT) as a crash in torch's teardown would."""
    target(rank, *args)
    if rank == 0:
        os.abort()


def test_a_rank_that_aborts_after_the_last_point_leaves_a_complete_run(tmp_path, monkeypatch, capsys):
    launch = calibration_module("bench_launch")
    real, calls = launch.spawn_ranks, []

    def spawn(target, nprocs, args, **options):
        calls.append(nprocs)
        return real(abort_after_the_last_point, nprocs, (target, *args), **options)

    monkeypatch.setattr(launch, "spawn_ranks", spawn)
    out = tmp_path / "aborted"
    assert main(run_args(out)) == 0
    err = capsys.readouterr().err
    assert calls == [2]  # not launched again: nothing was missing
    assert "[calibrate] rank 0 died of SIGABRT, after every point was stored: the run is complete" in err
    assert not [line for line in err.splitlines() if line.startswith("error:")], err
    assert sizes_stored(out) == EXPECTED_SIZES
    assert_clean(out, err)


def test_a_closed_stderr_drops_the_log_and_the_run_completes(tmp_path):
    out = tmp_path / "headed"
    out.mkdir()
    stale = out / ".rendezvous-1-2"  # what a launcher killed outright leaves; removed by the next run
    stale.write_bytes(b"")
    proc = start(out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # `2>&1 | head -2`
    head = [proc.stdout.readline() for _ in range(2)]
    proc.stdout.close()
    assert proc.wait(timeout=240) == 0, head
    assert sizes_stored(out) == EXPECTED_SIZES
    assert_clean(out, "")


def wait_without_progress(rank: int, seconds: float) -> None:
    """A rank that waits and measures nothing, as ranks in a deadlock do."""
    time.sleep(seconds)


def test_ranks_that_wait_on_one_another_are_stopped_as_hung():
    spawn = calibration_module("spawn")
    with pytest.raises(spawn.RanksFailed) as failed:  # left alone, they would end well after 120 s
        spawn.spawn_ranks(wait_without_progress, 2, (120.0,), no_progress_s=3.0)
    assert failed.value.hang == "every rank is alive and none is stopped: they wait on one another"
    assert [(end.rank, end.stopped) for end in sorted(failed.value.ends, key=lambda e: e.rank)] == [
        (0, True), (1, True)]
