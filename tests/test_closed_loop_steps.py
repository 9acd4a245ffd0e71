"""``calibration/closed_loop.py``: a step that fails ends the loop in one line with its exit code
(no traceback), keeping what was stored (a fit refused as measured under load, say)."""

from __future__ import annotations

import subprocess

import pytest

from calibration import closed_loop


@pytest.mark.parametrize("code, expected", [(2, 2), (1, 1), (-9, 1)])
def test_a_failed_step_is_one_line_with_its_exit_code(monkeypatch, capsys, code, expected):
    cmd = ["python", "-m", "laddersim", "calibrate", "fit", "runs/b16", "--name", "x"]

    def failing():
        raise subprocess.CalledProcessError(code, cmd)

    monkeypatch.setattr(closed_loop, "main", failing)
    assert closed_loop.run_main() == expected
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: closed loop: step `laddersim calibrate fit ...`")
    assert f"exit code {code}" in err[0] and "re-run the same command to resume" in err[0]


def test_a_loop_that_finishes_returns_its_code(monkeypatch):
    monkeypatch.setattr(closed_loop, "main", lambda: 0)
    assert closed_loop.run_main() == 0
