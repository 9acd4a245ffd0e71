"""The command line is the API's shell: what a command prints and writes is the API function's
answer rendered (compared here, not frozen: the numbers move with the model); and what the
commands left to the user to find out (issue 38, section 3): where validate and fit write, a
Reproduce line that runs, the defaults in --help, a note on profiles resting on datasheets only,
profiles report relative to the current folder."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

import laddersim
from cli_run import run_cli

MEASURED = """model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s
llama-3.1-8b,2,1,1,128,8,on,standard,150
llama-3.1-8b,2,1,1,128,8,on,ladder,180
llama-3.1-8b,4,1,1,128,8,on,standard,220
llama-3.1-8b,4,1,1,128,8,on,ladder,260
"""
SCENARIO = ["--model", "llama-3.1-8b", "--tp", "2", "--prompt-len", "128", "--gen-len", "8"]
DATASHEETS = "rest on datasheets only"


@pytest.fixture
def measured(tmp_path, monkeypatch):
    """A small measured table, with the current folder an empty one (as a user's)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "measured.csv"
    path.write_text(MEASURED)
    return path


# ---- validate and fit write under runs/, with a Reproduce line that runs ----------------------------

def test_validate_writes_under_runs_and_its_reproduce_line_runs(measured, capsys):
    code, out, err = run_cli(["validate", str(measured), "--dtype", "bfloat16"], capsys)
    assert code == 0 and err.endswith("report: runs/validation/index.md\n")
    assert not Path("reports").exists()  # a run in a checkout leaves the committed reports/ alone
    report = Path("runs/validation")
    first = {p.name: p.read_bytes() for p in report.iterdir() if p.is_file()}
    line = next(x for x in (report / "index.md").read_text().splitlines() if x.startswith("Reproduce: "))
    command = shlex.split(line.removeprefix("Reproduce: ").strip("`"))
    assert command[:3] == ["laddersim", "validate", "runs/validation/measured.csv"]
    measured.unlink()  # the line needs only what the report folder holds
    code, again, _ = run_cli(command[1:], capsys)
    assert code == 0 and again == out
    assert {p.name: p.read_bytes() for p in report.iterdir() if p.is_file()} == first  # the same report


def test_validate_from_python_is_the_commands_answer(measured, capsys):
    frame = laddersim.validate(measured, dtype="bfloat16", report="r")
    code, out, _ = run_cli(["validate", str(measured), "--dtype", "bfloat16", "--report", "r2"], capsys)
    assert code == 0
    assert frame.attrs["summary"].to_string(index=False, float_format=lambda v: f"{v:.2f}") in out
    assert frame.attrs["report"] == "r/index.md" and frame.attrs["p2p_pairs"] is None
    assert (Path("r") / "validation.csv").read_bytes() == (Path("r2") / "validation.csv").read_bytes()


def test_fit_writes_under_runs_and_names_its_own_rows(measured, capsys):
    code, _, err = run_cli(["fit", str(measured), "--hardware", "h100-sxm-nvswitch", "--dtype", "bfloat16",
                            "--out", "fitted.yaml"], capsys)
    assert code == 0 and err.endswith("report: runs/fit/index.md\n") and not Path("reports").exists()
    line = next(x for x in Path("runs/fit/index.md").read_text().splitlines() if x.startswith("Reproduce: "))
    assert shlex.split(line.removeprefix("Reproduce: ").strip("`")) == [
        "laddersim", "fit", "runs/fit/measured.csv", "--hardware", "h100-sxm-nvswitch", "--dtype", "bfloat16",
        "--out", "fitted.yaml"]
    pd.testing.assert_frame_equal(pd.read_csv("runs/fit/measured.csv"), pd.read_csv(measured), check_dtype=False)
    assert "`laddersim fit runs/fit/measured.csv" in Path("fitted.yaml").read_text()  # the fit's source


# ---- --help shows the defaults of the workload options -----------------------------------------------

@pytest.mark.parametrize("command, flags", [
    ("simulate", {"--batch": "(default 1)", "--prompt-len": "(default 1024)", "--gen-len": "(default 512)",
                  "--seed": "(default 0)"}),
    ("kernels", {"--batch": "(default 1)", "--prompt-len": "(default 1024)", "--gen-len": "(default 512)"}),
    ("plan", {"--workers": "(default: all cores)"}),
])
def test_help_shows_every_workload_default(command, flags, capsys):
    from laddersim.cli import build_parser

    code, out, _ = run_cli([command, "--help"], capsys)
    parser = next(a for a in build_parser([command])._actions if a.dest == "command").choices[command]
    helps = {a.option_strings[0]: a.help for a in parser._actions if a.option_strings}
    text = " ".join(out.split())  # argparse wraps help lines
    for flag, default in flags.items():
        assert helps[flag] and helps[flag].endswith(default) and " ".join(helps[flag].split()) in text, flag


# ---- a profile with no measurement behind it says so where it predicts ------------------------------

@pytest.mark.parametrize("argv", [
    ["simulate", *SCENARIO, "--json"],
    ["kernels", "--model", "llama-3.1-8b", "--tp", "2"],
    ["serving", "--model", "llama-3.1-8b", "--tp", "2", "--rate", "2", "--requests", "10", "--prompt-len", "64",
     "--gen-len", "8", "--no-progress"],
])
@pytest.mark.parametrize("hardware, noted", [("h100-pcie", True), ("b200-sxm-nvswitch", False),
                                             ("h100-sxm-nvswitch", False)])
def test_a_datasheet_only_profile_is_one_note_on_stderr(argv, hardware, noted, capsys):
    code, out, err = run_cli([*argv, "--hardware", hardware], capsys)
    assert code == 0 and DATASHEETS not in out
    notes = [line for line in err.splitlines() if DATASHEETS in line]
    assert notes == ([f"note: {hardware} is a what-if profile with no measured tables behind it: its predictions "
                      "rest on datasheets only"] if noted else [])
    assert laddersim.load_profile(hardware).measured is not noted


def test_a_bad_input_with_a_datasheet_profile_stays_one_line(capsys):
    code, _, err = run_cli(["simulate", *SCENARIO[:2], "--tp", "3", "--hardware", "h100-pcie"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: tp:")


# ---- profiles report writes under the current folder --------------------------------------------------

def test_profiles_report_goes_under_the_current_folder(tmp_path, monkeypatch):
    from laddersim.profiles_check import report

    monkeypatch.chdir(tmp_path)
    target = report.report_target(None)
    assert target.resolve() == tmp_path / "reports" / "collectives.md"  # not the checkout's reports/


# ---- every other command: its output is the API's answer rendered -----------------------------------

def test_profiles_list_and_show_are_the_apis(capsys):
    code, out, _ = run_cli(["profiles", "list"], capsys)
    names = [line.split()[0] for line in out.splitlines()[2:]]
    assert code == 0 and names == laddersim.profiles()["name"].tolist()
    code, out, _ = run_cli(["profiles", "show", "h100-sxm-p2p-off"], capsys)
    lines = laddersim.show_profile("h100-sxm-p2p-off")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == [p for p, _, _ in lines]
    assert all(source in out for _, _, source in lines)


def test_break_even_is_the_apis(capsys):
    sides = dict(a="ladder@h100-sxm-p2p-off", b="standard@h100-sxm-nvswitch")
    result = laddersim.break_even("llama-3.1-8b", 2, prompt_len=128, gen_len=8, **sides)
    code, out, _ = run_cli(["plan", "break-even", *SCENARIO, "--a", sides["a"], "--b", sides["b"], "--json"], capsys)
    assert code == 0 and json.loads(out) == json.loads(json.dumps({**asdict(result), "value": result.value}))
    assert result.scale is None or result.lo <= result.scale <= result.hi


def test_sweep_prints_the_apis_counts(tmp_path, capsys):
    flags = dict(models=["llama-3.1-8b"], hardware=["h100-sxm-nvswitch"], tp=[2, 4], prompt_len=[64], gen_len=[4])
    frame = laddersim.sweep(None, tmp_path / "api", workers=1, **flags)
    code, out, _ = run_cli(["sweep", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "4",
                            "--prompt-len", "64", "--gen-len", "4", "--out", str(tmp_path / "cli"), "--workers", "1",
                            "--no-progress"], capsys)
    counts = ", ".join(f"{status} {n}" for status, n in frame.attrs["status_counts"].items())
    assert code == 0 and out.splitlines()[0] == f"sweep: {frame.attrs['points']} points ({frame.attrs['computed']} " \
                                                 f"computed, 0 reused): {counts}"
    assert pd.read_parquet(tmp_path / "cli" / "results.parquet").equals(frame)
    with pytest.raises(laddersim.errors.UserInputError, match="give a GRID.yaml or grid flags"):
        laddersim.sweep({"models": ["llama-3.1-8b"]}, tmp_path / "x", tp=[2])


def test_plot_timeline_draws_what_the_api_draws(tmp_path, capsys):
    scenario = dict(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2, prompt_len=64, gen_len=4)
    paths = laddersim.plot_timeline(**scenario, out=tmp_path / "api")
    code, out, _ = run_cli(["plot", "--kind", "timeline", *SCENARIO[:4], "--hardware", "h100-sxm-nvswitch",
                            "--prompt-len", "64", "--gen-len", "4", "--out", str(tmp_path / "cli")], capsys)
    assert code == 0 and out.split() == [str(tmp_path / "cli.png"), str(tmp_path / "cli.svg")]
    assert [p.suffix for p in paths] == [".png", ".svg"]
    assert (tmp_path / "cli.png").read_bytes() == paths[0].read_bytes()


def test_nccl_log_csv_is_the_apis_table(tmp_path, capsys):
    from test_nccl_log import p2p_off_log

    log = tmp_path / "nccl.log"
    log.write_text(p2p_off_log())
    frame = laddersim.nccl_log([log], hardware="h100-sxm-p2p-off", max_size=1 << 20)
    code, out, _ = run_cli(["calibrate", "nccl-log", str(log), "--hardware", "h100-sxm-p2p-off", "--max-size",
                            str(1 << 20), "--out", str(tmp_path / "c.csv")], capsys)
    assert code == 0 and out.endswith(f"wrote {tmp_path / 'c.csv'}\n")
    written = pd.read_csv(tmp_path / "c.csv")
    assert written["size_bytes"].tolist() == frame["size_bytes"].tolist()
    assert written["nccl"].tolist() == frame["nccl"].tolist()


def test_the_api_checks_what_the_flags_checked():
    """No argparse between a Python caller and the work: the API refuses bad values itself, one line."""
    from laddersim.errors import UserInputError

    with pytest.raises(UserInputError, match="^zoom-layers: must be an integer from 0 to 2147483647, got -1$"):
        laddersim.plot_timeline("llama-3.1-8b", "h100-sxm-nvswitch", 2, zoom_layers=-1)
    with pytest.raises(UserInputError, match="^kind: 'timeline' does not plot a results table"):
        laddersim.plot("results.parquet", "timeline")
    with pytest.raises(UserInputError, match="^phase: 'x' is not a phase"):
        laddersim.kernels("llama-3.1-8b", "h100-sxm-nvswitch", 2, phase="x")
    with pytest.raises(UserInputError, match="^gen-len: must be >= 2"):
        laddersim.plan("llama-3.1-8b", gen_len=1, min_user_tokens_per_s=1, workers=1)
