"""calibration/closed_loop_series.py: the per-run bars, the streak, the per-row bias, the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # calibration/ is not an installed package

from calibration import closed_loop_series as cls  # noqa: E402

SCRIPT = REPO / "calibration" / "closed_loop_series.py"


def validation(speedup_errors: dict[tuple[int, str], float], tokens_errors: list[float]) -> pd.DataFrame:
    """Rows as `laddersim validate` writes them: a standard row per batch (speedup 1) and the
    given speedup errors for the others; rel_error from ``tokens_errors`` in row order."""
    rows = []
    for batch in sorted({b for b, _ in speedup_errors}):
        rows.append({"batch": batch, "schedule": "standard", "measured_speedup": 1.0, "predicted_speedup": 1.0,
                     "speedup_error_pp": 0.0})
        for (b, schedule), err in speedup_errors.items():
            if b == batch:
                rows.append({"batch": b, "schedule": schedule, "measured_speedup": 1.5,
                             "predicted_speedup": 1.5 + err / 100, "speedup_error_pp": err})
    frame = pd.DataFrame(rows)
    frame["rel_error"] = tokens_errors[: len(frame)]
    return frame


def write_run(root: Path, name: str, frame: pd.DataFrame) -> Path:
    out = root / name
    (out / "calibrated").mkdir(parents=True)
    frame.to_csv(out / "calibrated" / "validation.csv", index=False)
    return out


ERRS_A = {(1, "ladder"): -2.0, (1, "upper_bound"): 7.0, (4, "ladder"): 1.0, (4, "upper_bound"): -9.0}
ERRS_B = {(1, "ladder"): 4.0, (1, "upper_bound"): -3.0, (4, "ladder"): 1.0, (4, "upper_bound"): -7.0}


def test_run_figures_are_closed_loops_summary_figures():
    frame = validation(ERRS_A, [0.01, -0.03, 0.10, -0.05, 0.02, 0.04])
    figures = cls.run_figures(frame)
    # speedup errors of the non-standard rows: |-2|, |7|, |1|, |-9| -> median 4.5, worst 9
    assert figures["speedup_median_pp"] == pytest.approx(4.5)
    assert figures["speedup_worst_pp"] == pytest.approx(9.0)
    # tokens/s over all six rows: 1, 3, 10, 5, 2, 4 % -> median 3.5, worst 10
    assert figures["tokens_median_pct"] == pytest.approx(3.5)
    assert figures["tokens_worst_pct"] == pytest.approx(10.0)


def test_per_row_bias_mean_spread_and_call():
    frames = {"a": validation(ERRS_A, [0.0] * 6), "b": validation(ERRS_B, [0.0] * 6)}
    bias = cls.row_bias(frames).set_index(["batch", "schedule"])
    assert set(bias.index) == set(ERRS_A)  # standard rows are left out
    ub4 = bias.loc[(4, "upper_bound")]
    assert ub4["mean_error_pp"] == pytest.approx(-8.0)
    assert ub4["sd_error_pp"] == pytest.approx(2 ** 0.5)  # sample sd of -9, -7
    assert bool(ub4["bias"])  # |-8| > 2 * 1.414 / sqrt(2) = 2
    assert not bool(bias.loc[(1, "upper_bound"), "bias"])  # mean 2, sd 7.07: noise
    line = cls.series_line(cls.per_run(frames, 20.0, 5.0), cls.row_bias(frames))
    assert line.endswith("largest row bias: batch 4 upper_bound -8.0 pp (sd 1.4 pp)")


def test_a_row_with_zero_spread_and_a_nonzero_mean_is_a_bias():
    same = {(4, "ladder"): 1.0}
    frames = {"a": validation(same, [0.0, 0.0]), "b": validation(same, [0.0, 0.0])}
    assert bool(cls.row_bias(frames).iloc[0]["bias"])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.booleans(), max_size=30))
def test_longest_streak_is_the_longest_run_of_consecutive_passes(flags):
    text = "".join("1" if f else "0" for f in flags)
    assert cls.longest_streak(flags) == max((len(part) for part in text.split("0")), default=0)


def test_bars_decide_each_run():
    frames = {"a": validation(ERRS_A, [0.0] * 6), "b": validation(ERRS_B, [0.0] * 6)}
    # speedup medians: a 4.5 pp (2, 7, 1, 9), b 3.5 pp (4, 3, 1, 7)
    assert list(cls.per_run(frames, 20.0, 5.0)["met"]) == [True, True]
    assert list(cls.per_run(frames, 20.0, 4.0)["met"]) == [False, True]
    assert list(cls.per_run(frames, 0.0, 5.0)["met"]) == [True, True]  # tokens/s errors all 0
    assert list(cls.per_run({"c": validation(ERRS_A, [0.25] * 6)}, 20.0, 5.0)["met"]) == [False]


def test_cli_summarizes_finished_runs_and_writes_the_report(tmp_path):
    a = write_run(tmp_path, "r1", validation(ERRS_A, [0.02] * 6))
    b = write_run(tmp_path, "r2", validation(ERRS_B, [0.30] * 6))  # tokens/s 30%: misses the 20% bar
    c = write_run(tmp_path, "r3", validation(ERRS_A, [0.01] * 6))
    out = tmp_path / "series"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--summarize", str(a), str(b), str(c), "--out", str(out)],
                          capture_output=True, text=True, check=True)
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("closed loop series: 3 runs, 2 met both bars (longest streak 1)")
    rows = pd.read_csv(out / "series.csv")
    assert sorted(rows["run"].unique()) == ["r1", "r2", "r3"] and len(rows) == 18
    report = (out / "index.md").read_text()
    assert "| r2 | 30.00 |" in report and last in report


@pytest.mark.parametrize("args, needle", [
    (["--runs", "0"], "--runs must be at least 1, got 0"),
    (["--summarize", "/nonexistent/run"], "no validated rows"),
    (["--runs", "two"], "invalid int value: 'two'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    proc = subprocess.run([sys.executable, str(SCRIPT), *args, "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_a_series_keeps_finished_runs_and_resumes_with_the_rest(tmp_path):
    # Two runs finished before (an interrupted series): --runs 2 runs no closed loop again,
    # says so, and summarises them (a third would start closed_loop.py in run_dir/run_3).
    out = tmp_path / "series"
    write_run(out, "run_1", validation(ERRS_A, [0.02] * 6))
    write_run(out, "run_2", validation(ERRS_B, [0.02] * 6))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--runs", "2", "--run-dir", str(tmp_path / "runs"),
                           "--out", str(out)], capture_output=True, text=True, check=True)
    assert proc.stderr.count("finished before, kept") == 2
    assert not (tmp_path / "runs").exists()
    assert proc.stdout.strip().splitlines()[-1].startswith("closed loop series: 2 runs, 2 met both bars (longest streak 2)")
