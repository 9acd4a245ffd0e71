"""Where commands write by default and how a user reaches the shipped programs: nothing lands in
the root of the current folder, and ``laddersim program`` runs a calibration program from any
folder (what ``python calibration/NAME.py`` is in a checkout)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from laddersim.cli import main
from laddersim.cli.program_cmd import programs

REPO = Path(__file__).resolve().parents[1]


def test_timeline_without_out_writes_under_runs_plots_and_says_where(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plot", "--kind", "timeline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch",
                 "--tp", "2", "--prompt-len", "32", "--gen-len", "2"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == ["runs/plots/timeline-llama-3.1-8b-tp2.png", "runs/plots/timeline-llama-3.1-8b-tp2.svg"]
    assert all((tmp_path / p).stat().st_size > 1000 for p in printed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # nothing in the folder's root


def test_program_list_names_every_runnable_program_in_user_words(capsys):
    assert main(["program", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in lines]
    runnable = sorted(p.stem for p in (REPO / "calibration").glob("*.py")
                      if '__name__ == "__main__"' in p.read_text())
    assert names == runnable == sorted(programs())
    assert {"ladder_bench", "kernel_trace", "closed_loop", "closed_loop_series", "calibrate_all"} <= set(names)
    assert not any("``" in line for line in lines)


def test_program_path_is_the_shipped_file(capsys):
    assert main(["program", "--path", "ladder_bench"]) == 0
    assert Path(capsys.readouterr().out.strip()) == REPO / "calibration" / "ladder_bench.py"


@pytest.mark.parametrize("argv, message", [
    (["program"], "error: program: give a NAME (laddersim program --list names them)"),
    (["program", "bench_launch"], "error: program: unknown program 'bench_launch'; allowed: calibrate_all, "),
    (["program", "--path", "ladder_bench", "--x"], "error: path: prints the file only"),
])
def test_program_refuses_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_program_runs_the_program_with_its_own_arguments(tmp_path):
    """Through the console entry point from an empty folder: the program's own --help, its exit code."""
    proc = subprocess.run([sys.executable, "-m", "laddersim", "program", "kernel_trace", "--help"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--model" in proc.stdout and "kernel_trace" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "laddersim", "program", "kernel_trace", "--out", "x", "--no-such-flag"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--no-such-flag" in bad.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def without_torch(monkeypatch):
    """torch not installed, as the commands see it (importlib.util.find_spec finds no torch)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))


def test_program_without_torch_gives_an_install_line_that_works_anywhere(without_torch, capsys):
    assert main(["program", "ladder_bench", "--help"]) == 2
    err = capsys.readouterr().err
    assert "needs torch" in err and "pip install torch" in err and "-e " not in err and "'.[" not in err


def test_calibrate_run_without_torch_gives_an_install_line_that_works_anywhere(tmp_path, without_torch, capsys):
    assert main(["calibrate", "run", "--backend", "gloo", "--world-size", "2", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs torch" in err and "pip install torch" in err
    assert "-e " not in err and "'.[" not in err  # a checkout-only install line is no use from a wheel
