"""The Python API (``laddersim.simulate`` and friends) and ``simulate --out``: the same numbers
as the command, one row per schedule, and an import that stays cheap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import laddersim
from laddersim.cli import main
from laddersim.simulation.simulate import make_scenario, simulate

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
    direct = simulate(make_scenario(model="llama-3.1-8b", hardware=profile, tp=2, batch=1, prompt_len=128, gen_len=8,
                                    schedule="ladder", dtype="float32", kv_cache="dynamic")).summary()
    assert len(frame) == 1 and frame["tokens_per_s"].iloc[0] == direct["tokens_per_s"]
    assert frame["speedup_vs_standard"].iloc[0] is None  # no standard row to compare with


def test_timeline_holds_every_schedule():
    spans = laddersim.timeline(**{**SCENARIO, "gen_len": 2}, schedules=["standard", "ladder"], steps="all")
    assert list(spans.columns[:1]) == ["schedule"]
    for schedule in ("standard", "ladder"):
        want = simulate(make_scenario(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2, batch=1, prompt_len=128,
                                      gen_len=2, schedule=schedule)).timeline("all")
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
    frame = laddersim.sweep(grid, tmp_path / "sweep", workers=1)
    assert sorted(frame["schedule"]) == ["ladder", "standard"]
    assert frame.equals(pd.read_parquet(tmp_path / "sweep" / "results.parquet"))


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError):
        laddersim.no_such_function  # noqa: B018


def test_import_is_cheap():
    """``import laddersim`` loads neither the simulator nor pandas; the first call does."""
    code = ("import sys, laddersim; print('pandas' in sys.modules, 'laddersim.simulation.simulate' in sys.modules); "
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


# ---- every public function: a real signature, its own docstring, the command's defaults -------

PUBLIC = ("simulate", "timeline", "sweep", "validate", "fit", "plan", "serving", "kernels", "load_profile")


def test_every_public_function_is_listed():
    from laddersim import api

    assert set(PUBLIC) <= set(laddersim.__all__) and set(api.PUBLIC) == set(laddersim.__all__) - {"__version__"}


@pytest.mark.parametrize("name", PUBLIC)
def test_help_and_signature_show_the_function(name):
    import inspect
    import pydoc

    function = getattr(laddersim, name)
    assert inspect.isfunction(function) and function.__module__.startswith("laddersim.api.")
    parameters = inspect.signature(function).parameters
    assert parameters and all(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters.values())
    text = pydoc.render_doc(function, renderer=pydoc.plaintext)
    assert text.splitlines()[0] == f"Python Library Documentation: function {name} in module {function.__module__}"
    assert f"{name}(" + next(iter(parameters)) in text  # the signature, first parameter first
    first_line = inspect.getdoc(function).splitlines()[0]
    assert len(first_line) > 20 and first_line in text


def _command_defaults(command: str) -> dict:
    from laddersim.cli import build_parser

    parser = build_parser([command])
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {a.dest: a.default for a in sub._actions if a.dest != "help"}


# API parameter -> command option, where the names differ.
_RENAMED = {"schedules": "schedule"}


@pytest.mark.parametrize("name, skip", [
    ("simulate", {"schedules", "progress"}),  # --schedule's default None means standard and ladder; a bar always
    ("plan", {"progress"}),  # the command: --no-progress
    ("serving", {"schedules", "per_request", "progress"}),  # the command: --no-progress
    ("kernels", set()),
    ("validate", {"measured", "report", "progress"}),  # the command's report folder is runs/validation
])
def test_api_defaults_are_the_commands(name, skip):
    """Every option's default is its API parameter's: the flags read them (cli.args.default_of)."""
    import inspect

    defaults = _command_defaults(name)
    checked = 0
    for parameter in inspect.signature(getattr(laddersim, name)).parameters.values():
        if parameter.default is parameter.empty or parameter.name in skip:
            continue
        option = parameter.name if parameter.name in defaults else _RENAMED.get(parameter.name, parameter.name)
        want = defaults[option]
        got = parameter.default
        assert (list(got) if isinstance(got, tuple) else got) == want or str(got) == want, parameter.name
        checked += 1
    assert checked >= 5


def test_plan_from_python_is_the_commands_answer(capsys):
    kwargs = dict(profiles=["h100-sxm-nvswitch"], tps=[1, 2], batches=[1, 8], prompt_len=128, gen_len=16,
                  min_user_tokens_per_s=50.0, workers=1)
    frame = laddersim.plan("llama-3.1-8b", **kwargs)
    assert main(["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "--tp", "1", "2",
                 "--batch", "1", "8", "--prompt-len", "128", "--gen-len", "16", "--min-user-tokens-per-s", "50",
                 "--workers", "1", "--json", "--no-progress"]) == 0
    assert frame.to_dict("records") == json.loads(capsys.readouterr().out)
    assert len(frame) > 0 and (frame["user_tokens_per_s"] >= 50).all()
    assert frame["usd_per_million_tokens"].is_monotonic_increasing
    # A target nothing meets: an empty table, not an error.
    assert laddersim.plan("llama-3.1-8b", **{**kwargs, "min_user_tokens_per_s": 1e6}).empty
    # One schedule, profile or TP given alone (not in a list) is one, not its characters.
    alone = laddersim.plan("llama-3.1-8b", **{**kwargs, "profiles": "h100-sxm-nvswitch", "tps": 2},
                           schedules="ladder")
    assert len(alone) > 0 and set(alone["schedule"]) == {"ladder"} and set(alone["tp"]) == {2}


def test_serving_from_python_is_the_commands_answer(capsys):
    frame = laddersim.serving("llama-3.1-8b", "h100-sxm-nvswitch", 2, rate=2.0, requests=40, prompt_len=128,
                              gen_len=32, ttft_slo_s=0.5)
    assert main(["serving", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
                 "--rate", "2", "--requests", "40", "--prompt-len", "128", "--gen-len", "32",
                 "--ttft-slo-s", "0.5", "--json", "--no-progress"]) == 0
    assert frame.to_dict("records") == json.loads(capsys.readouterr().out)
    assert list(frame["schedule"]) == ["standard", "ladder"]
    requests = laddersim.serving("llama-3.1-8b", "h100-sxm-nvswitch", 2, rate=2.0, requests=40, prompt_len=128,
                                 gen_len=32, schedules=["ladder"], per_request=True)
    assert len(requests) == 40 and list(requests.columns[:1]) == ["schedule"]


def test_bad_arguments_are_one_line_errors():
    from laddersim.errors import UserInputError

    with pytest.raises(UserInputError, match="tp") as info:
        laddersim.plan("llama-3.1-8b", tps=[0], workers=1, min_user_tokens_per_s=10)
    assert "\n" not in str(info.value) and not str(info.value).startswith("error:")
    with pytest.raises(UserInputError, match="^tp: must be a positive integer up to 65536, got 0$"):
        laddersim.simulate("llama-3.1-8b", "h100-sxm-nvswitch", 0)  # not a ZeroDivisionError
    with pytest.raises(UserInputError, match="rate"):
        laddersim.serving("llama-3.1-8b", "h100-sxm-nvswitch", 2)  # neither a rate nor a trace


def test_fit_from_python_is_the_commands_fit(tmp_path, capsys):
    measured = pd.DataFrame([{"model": "llama-3.1-8b", "tp": 2, "nodes": 1, "batch": 1, "prompt_len": 128,
                              "gen_len": 8, "p2p": "on", "schedule": s, "tokens_per_s": v}
                             for s, v in (("standard", 150.0), ("ladder", 180.0))])
    frame = laddersim.fit(measured, "h100-sxm-nvswitch", dtype="bfloat16", out=tmp_path / "fitted.yaml")
    assert {"predicted_tokens_per_s", "tokens_per_s_low", "tokens_per_s_high", "predicted_speedup",
            "measured"} <= set(frame.columns)
    base = laddersim.simulate("llama-3.1-8b", "h100-sxm-nvswitch", 2, 1, 128, 8, ["standard"], dtype="bfloat16")
    fitted = frame[frame.schedule == "standard"].iloc[0]
    # Fitted to the standard row: nearer to it than the base profile's prediction.
    assert abs(fitted.predicted_tokens_per_s / 150.0 - 1) < abs(base.tokens_per_s.iloc[0] / 150.0 - 1)
    assert set(frame.attrs["profiles"]) == {"on"}
    assert laddersim.load_profile(tmp_path / "fitted.yaml").framework == frame.attrs["profiles"]["on"].framework
    # The command fits the same numbers.
    measured.to_csv(tmp_path / "measured.csv", index=False)
    assert main(["fit", str(tmp_path / "measured.csv"), "--hardware", "h100-sxm-nvswitch", "--dtype", "bfloat16",
                 "--out", str(tmp_path / "cli.yaml"), "--report", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out.split("fitted parameters:")[1].split("\n\n")[0]
    assert printed.split() == " ".join(f"{k} = {v:.4g}" for k, v in frame.attrs["parameters"].items()).split()


def test_kernels_from_python_is_the_commands_table(capsys):
    frame = laddersim.kernels("llama-3.1-8b", "h100-sxm-nvswitch", 2, batch=4, schedule="ladder")
    assert main(["kernels", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "--batch", "4",
                 "--schedule", "ladder", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["layer_us"] == frame.attrs["layer_us"]
    assert [k["us"] for k in printed["kernels"]] == frame["us"].tolist()
    assert "collective" in set(frame["class"])


def test_submodules_named_like_functions_still_import():
    from laddersim.simulation.simulate import make_scenario as imported
    from laddersim.sweeps import runner

    assert imported is make_scenario and runner.__name__ == "laddersim.sweeps.runner"
    assert callable(laddersim.sweep) and laddersim.sweep.__module__.startswith("laddersim.api.")


def test_fit_names_the_p2p_off_profile_as_the_command_does():
    """One rule for laddersim.fit and `laddersim fit`: NEW-p2p-off.yaml beside NEW.yaml, else -p2p-off added."""
    from laddersim.fitting.rows import p2p_off_path

    assert p2p_off_path(Path("runs/new.yaml")) == Path("runs/new-p2p-off.yaml")
    assert p2p_off_path(Path("runs/new.yml")) == Path("runs/new-p2p-off.yml")
    assert p2p_off_path(Path("runs/fitted")) == Path("runs/fitted-p2p-off")
    assert p2p_off_path(Path("runs/new.json")) == Path("runs/new.json-p2p-off")


def test_the_shared_choices_are_the_simulators():
    """laddersim.support.choices states the allowed values the API and the flags share; they are the ones
    the simulator accepts (a dtype the workload has no size for would fail late)."""
    from laddersim.support.choices import DTYPES, FRAMEWORKS, KV_CACHES, KV_READS
    from laddersim.model.framework import framework_names
    from laddersim.model.workload import DTYPE_BYTES, Workload

    assert set(DTYPES) == set(DTYPE_BYTES)
    assert set(FRAMEWORKS) <= set(framework_names())
    for kv_cache in KV_CACHES:
        for kv_reads in KV_READS:
            assert Workload(batch=1, prompt_len=8, gen_len=2, kv_cache=kv_cache, kv_reads=kv_reads).kv_cache == kv_cache
