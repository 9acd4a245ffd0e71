"""A calibration taken while other work ran is marked: one warning line at the end of the run, the
figures in run.json, and calibrate fit repeats it (``laddersim.measure.load``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from laddersim.measure.load import LoadRecord, load_line, load_warnings

ROOT = Path(__file__).resolve().parents[1]
IDLE = dict(elapsed_s=60.0, cpus=2, ranks=2, points=10, others_cpu_share=0.05, load_average=2.2, repeat_spread=0.2)


def test_an_idle_run_has_no_sign_and_no_line():
    assert LoadRecord(**IDLE).signs() == [] and load_line(LoadRecord(**IDLE)) is None


@pytest.mark.parametrize("changed, sign", [
    ({"others_cpu_share": 0.48}, "other processes used 48% of the 2 CPUs"),
    ({"load_average": 3.4}, "load average 3.4 on 2 CPUs beside 2 ranks"),
    ({"repeat_spread": 1.5}, "the repeats spread over 1.5x their median (p10 to p90)"),
])
def test_each_sign_past_its_limit_marks_the_run(changed, sign):
    record = LoadRecord(**{**IDLE, **changed})
    assert record.signs() == [sign]
    assert load_line(record) == f"measured under load ({sign}): 10 points"


def test_no_line_without_points_and_no_cpu_share_from_an_instant():
    assert load_line(LoadRecord(**{**IDLE, "points": 0, "load_average": 9.0})) is None
    assert LoadRecord(**{**IDLE, "elapsed_s": 0.5, "others_cpu_share": 0.9}).signs() == []


def test_fit_repeats_each_marked_invocation():
    manifest = {"load_warnings": ["2026-01-01T00:00:00+00:00: measured under load (x): 3 points"]}
    assert load_warnings(manifest) == [
        "warning: run.json: 2026-01-01T00:00:00+00:00: measured under load (x): 3 points: a profile fitted to them "
        "can mispredict; re-measure on an idle machine into a new --out"]
    assert load_warnings({}) == []


def test_a_run_beside_busy_processes_is_marked_and_fit_says_so(tmp_path):
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = tmp_path / "run"
    # A busy process per two CPUs: beside the two ranks they take a third of the CPUs or more.
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range((os.cpu_count() or 2) // 2 or 1)]
    try:
        run = subprocess.run([sys.executable, "-m", "laddersim", "calibrate", "run", "--backend", "gloo",
                              "--world-size", "2", "--benchmarks", "allreduce", "--sizes", "1KiB,4KiB",
                              "--dtypes", "float32", "--repeats", "3", "--warmup", "1", "--out", str(out)],
                             env=env, capture_output=True, text=True, timeout=300)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert run.returncode == 0, run.stderr
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("warning:")]
    assert line.startswith("warning: calibrate run: measured under load (other processes used ")
    assert line.endswith(": 2 points are kept and marked in run.json (calibrate fit repeats this); for a profile "
                         "to trust, re-measure on an idle machine into a new --out")
    manifest = json.loads((out / "run.json").read_text())
    load = manifest["invocations"][-1]["load"]
    assert load["others_cpu_share"] > 0.25 and load["points"] == 2 and load["cpus"] == os.cpu_count()
    (marked,) = manifest["load_warnings"]
    assert "measured under load (other processes used" in marked
    fit = subprocess.run([sys.executable, "-m", "laddersim", "calibrate", "fit", str(out), "--name", "loaded"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert fit.returncode == 0, fit.stderr
    assert f"warning: run.json: {marked}: a profile fitted to them can mispredict" in fit.stderr
