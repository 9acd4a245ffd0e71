"""A calibrate run whose rank dies of a signal is launched again once, resuming from its store."""

from __future__ import annotations

import csv

import pytest

pytest.importorskip("torch")

import torch.multiprocessing as mp  # noqa: E402

from laddersim.measure.runner import calibration_module  # noqa: E402
from laddersim.cli import main  # noqa: E402

ARGS = ["calibrate", "run", "--backend", "gloo", "--world-size", "2", "--benchmarks", "allreduce",
        "--sizes", "1KiB,4KiB", "--dtypes", "float32", "--repeats", "2", "--warmup", "1"]


def crashing_first(monkeypatch, crashes: int) -> list[int]:
    """Make the first ``crashes`` launches die as a segfaulting rank 0 would; the calls made."""
    launch = calibration_module("bench_launch")
    real, calls = launch.spawn_ranks, []

    def spawn(target, nprocs, args, **options):
        calls.append(nprocs)
        if len(calls) <= crashes:
            raise mp.ProcessExitedException("process 0 terminated with signal SIGSEGV", error_index=0,
                                            error_pid=1, exit_code=-11, signal_name="SIGSEGV")
        return real(target, nprocs, args, **options)

    monkeypatch.setattr(launch, "spawn_ranks", spawn)
    return calls


def test_a_rank_killed_by_a_signal_is_launched_again_and_the_run_completes(tmp_path, monkeypatch, capsys):
    calls = crashing_first(monkeypatch, crashes=1)
    assert main([*ARGS, "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert calls == [2, 2]
    assert "[calibrate] rank 0 died of SIGSEGV; launching the ranks again for the points not yet measured" in err
    with open(tmp_path / "run" / "measurements" / "allreduce.csv") as fh:
        assert [int(r["size_bytes"]) for r in csv.DictReader(fh)] == [1024, 4096]


def test_a_second_death_in_a_row_is_one_error_line_and_exit_1(tmp_path, monkeypatch, capsys):
    calls = crashing_first(monkeypatch, crashes=2)
    assert main([*ARGS, "--out", str(tmp_path / "run")]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert calls == [2, 2] and len(errors) == 1
    assert "rank 0 died of SIGSEGV again, 2 launches in a row; the finished points are kept" in errors[0]
