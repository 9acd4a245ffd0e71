"""The Python API (``laddersim.simulate`` and friends) and ``simulate --out``: the same numbers
as the command, one row per schedule, and an import that stays cheap."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

import laddersim
from laddersim.cli import main
from laddersim.simulate import make_scenario, simulate

SCENARIO = dict(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2, batch=1, prompt_len=128, gen_len=8)
FLAGS = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "--batch", "1",
         "--prompt-len", "128", "--gen-len", "8", "--schedule", "standard", "--schedule", "ladder"]


@pytest.fixture(scope="module")
def cli_rows():
    """``simulate --json``'s objects for SCENARIO (run once for the module)."""
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["simulate", *FLAGS, "--json"]) == 0
    return json.loads(buffer.getvalue())


def test_simulate_is_one_row_per_schedule_with_the_json_columns(cli_rows):
    frame = laddersim.simulate(**SCENARIO, schedules=["standard", "ladder"])
    assert list(frame["schedule"]) == ["standard", "ladder"]
    assert list(frame.columns) == list(cli_rows[0])
    assert frame.to_dict("records") == cli_rows  # the same numbers, exactly
    assert frame["speedup_vs_standard"].iloc[0] == 1.0
    assert frame["tokens_per_s"].iloc[1] > frame["tokens_per_s"].iloc[0]  # ladder hides AllReduces


def test_simulate_takes_workload_options_and_objects():
    profile = laddersim.load_profile("h100-sxm-nvswitch")
    frame = laddersim.simulate(**{**SCENARIO, "hardware": profile}, schedules="ladder", dtype="float32",
                               kv_cache="dynamic")
    direct = simulate(make_scenario("llama-3.1-8b", profile, 2, 1, 128, 8, "ladder", "float32", "dynamic")).summary()
    assert len(frame) == 1 and frame["tokens_per_s"].iloc[0] == direct["tokens_per_s"]
    assert frame["speedup_vs_standard"].iloc[0] is None  # no standard row to compare with


def test_timeline_holds_every_schedule():
    spans = laddersim.timeline(**{**SCENARIO, "gen_len": 2}, schedules=["standard", "ladder"], steps="all")
    assert list(spans.columns[:1]) == ["schedule"]
    for schedule in ("standard", "ladder"):
        want = simulate(make_scenario("llama-3.1-8b", "h100-sxm-nvswitch", 2, 1, 128, 2, schedule)).timeline("all")
        got = spans[spans["schedule"] == schedule].drop(columns="schedule").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want)


def test_validate_predicts_the_given_rows():
    measured = pd.DataFrame([{"model": "llama-3.1-8b", "tp": 2, "nodes": 1, "batch": 1, "prompt_len": 128,
                              "gen_len": 8, "p2p": "on", "schedule": s, "tokens_per_s": 100.0}
                             for s in ("standard", "ladder")])
    frame = laddersim.validate(measured, dtype="bfloat16")
    want = laddersim.simulate(**SCENARIO)["tokens_per_s"].tolist()
    assert frame["predicted_tokens_per_s"].tolist() == pytest.approx(want, rel=1e-12)
    assert frame["rel_error"].tolist() == pytest.approx([w / 100.0 - 1 for w in want], rel=1e-9)


def test_sweep_returns_the_results_table(tmp_path):
    grid = {"models": ["llama-3.1-8b"], "hardware": ["h100-sxm-nvswitch"], "tp": [2], "prompt_len": [64],
            "gen_len": [4], "schedules": ["standard", "ladder"]}
    frame = laddersim.sweep(grid, tmp_path / "sweep")
    assert sorted(frame["schedule"]) == ["ladder", "standard"]
    assert frame.equals(pd.read_parquet(tmp_path / "sweep" / "results.parquet"))


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError):
        laddersim.no_such_function  # noqa: B018


def test_import_is_cheap():
    """``import laddersim`` loads neither the simulator nor pandas; the first call does."""
    code = ("import sys, laddersim; print('pandas' in sys.modules, 'laddersim.simulate' in sys.modules); "
            "laddersim.load_profile; print('laddersim.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "True"]


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json"])
def test_simulate_out_writes_the_json_rows(suffix, tmp_path, capsys, cli_rows):
    out = tmp_path / f"rows{suffix}"
    assert main(["simulate", *FLAGS, "--out", str(out)]) == 0
    capsys.readouterr()
    if suffix == ".json":
        assert json.loads(out.read_text()) == cli_rows
        return
    frame = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    want = pd.DataFrame(cli_rows)
    assert list(frame.columns) == list(want.columns)
    pd.testing.assert_frame_equal(frame, want, check_dtype=False, rtol=1e-12)


def test_simulate_out_with_an_unknown_format_is_one_line_exit_2(tmp_path, capsys):
    assert main(["simulate", *FLAGS, "--out", str(tmp_path / "rows.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: out:") and ".parquet" in err and err.count("\n") == 1
    assert not (tmp_path / "rows.txt").exists()
