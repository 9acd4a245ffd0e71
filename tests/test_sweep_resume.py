"""A sweep really killed (SIGKILL) half-way, then re-run, gives the same table as one that ran
straight through, and the re-run computes only the missing points."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import yaml

from laddersim.sweeps import load_grid, run_sweep

GRID = {"models": ["llama-3.1-8b"], "hardware": ["h100-sxm-nvswitch"], "tp": [4, 8],
        "batch": [1, 4, 16, 64], "prompt_len": [256], "gen_len": [32],
        "schedules": ["standard", "ladder", "parallel"],
        "overrides": {"intra_bandwidth_scale": [0.25, 1.0]}}
TOTAL = 2 * 4 * 3 * 2


def _sweep_cmd(grid, out):
    return [sys.executable, "-m", "laddersim", "sweep", str(grid), "--out", str(out), "--workers", "2",
            "--no-progress"]


def _stored(out) -> int:
    path = out / "points.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_killed_sweep_resumes_to_the_same_table(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    reference = run_sweep(load_grid(grid), tmp_path / "straight", workers=2, progress=False)
    assert reference.points == TOTAL

    out = tmp_path / "killed"
    # Own session, so the kill reaches the pool's worker processes too (all started here).
    proc = subprocess.Popen(_sweep_cmd(grid, out), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while _stored(out) < 10 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "sweep finished before it could be killed; make the grid larger"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    done_at_kill = _stored(out)
    assert 10 <= done_at_kill < TOTAL
    assert not (out / "results.csv").exists()  # killed, not consolidated

    resumed = subprocess.run(_sweep_cmd(grid, out), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    computed = TOTAL - done_at_kill
    assert f"{TOTAL} points ({computed} computed, {done_at_kill} reused)" in resumed.stdout

    for name in ("results.csv", "results.parquet"):
        assert (out / name).read_bytes() == (tmp_path / "straight" / name).read_bytes(), name
    keys = [json.loads(line)["key"] for line in (out / "points.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == TOTAL


def test_ctrl_c_keeps_finished_points_in_the_table(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    out = tmp_path / "interrupted"
    proc = subprocess.Popen(_sweep_cmd(grid, out), start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while _stored(out) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "sweep finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the sweep process
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    assert "interrupted: finished work is kept" in stderr and "Traceback" not in stderr
    # The partial table holds exactly the stored points, consolidated at the interrupt.
    stored = _stored(out)
    assert 5 <= stored < TOTAL
    assert len((out / "results.csv").read_text().splitlines()) == stored + 1
    resumed = subprocess.run(_sweep_cmd(grid, out), capture_output=True, text=True, timeout=120)
    assert f"{TOTAL} points ({TOTAL - stored} computed, {stored} reused)" in resumed.stdout
    straight = run_sweep(load_grid(grid), tmp_path / "straight", workers=2, progress=False)
    assert (out / "results.csv").read_bytes() == straight.csv.read_bytes()
