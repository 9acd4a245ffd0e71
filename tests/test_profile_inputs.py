"""What ``--hardware`` says about what it was given (issue 38): a calibrated device runs the dtype it
was measured in only, naming it; a folder that is no calibration run says what it lacks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from laddersim.errors import UserInputError
from laddersim.hardware.profile import load_profile
from laddersim.support.resources import resource_path
from tests.cli_run import run_cli

CPU_RUN = Path(__file__).parent / "data" / "calibration_compute_bound_gemms"  # gloo, float32 (SOURCE.md)
SMALL = str(resource_path("examples", "small-4l-512", "config.json"))


@pytest.fixture(scope="module")
def fitted_cpu_run(tmp_path_factory):
    """The shipped CPU calibration (every GEMM timed in float32) fitted into a profile."""
    from laddersim.cli import main

    run = tmp_path_factory.mktemp("cpu") / "run"
    shutil.copytree(CPU_RUN, run)
    assert main(["calibrate", "fit", str(run), "--name", "cpu-f32"]) == 0
    return run


def test_a_float32_calibration_refuses_the_default_bfloat16_naming_what_it_measured(fitted_cpu_run, capsys):
    gpu = load_profile(fitted_cpu_run).gpu
    assert gpu.measured_dtype.value == "float32" and "measurements/gemm.csv" in gpu.measured_dtype.source
    assert gpu.dtypes() == ["float32"]
    argv = ["simulate", "--hardware", str(fitted_cpu_run), "--model", SMALL, "--tp", "2", "--gen-len", "4"]
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: dtype: bfloat16, but ") and "calibrated in float32" in err
    assert err.rstrip().endswith("allowed: float32")
    code, out, err = run_cli(argv + ["--dtype", "float32"], capsys)
    assert code == 0, err


def test_a_gpu_with_datasheet_peaks_keeps_every_dtype():
    gpu = load_profile("h100-sxm-nvswitch").gpu
    assert gpu.measured_dtype is None and {"bfloat16", "float32", "fp8"} <= set(gpu.dtypes())


def test_a_folder_that_is_no_calibration_run_says_what_it_lacks(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a run")
    code, out, err = run_cli(["simulate", "--hardware", str(tmp_path), "--model", "llama-3.1-8b", "--tp", "2"], capsys)
    assert code == 2 and err.count("\n") == 1 and "unknown profile" not in err
    assert f"hardware: {tmp_path} is a folder" in err and "no profile.yaml" in err and "no run.json" in err
    with pytest.raises(UserInputError, match="does not exist"):
        load_profile(tmp_path / "missing" / "profile.yaml")
    with pytest.raises(UserInputError, match="is a file but not a profile"):
        load_profile(tmp_path / "notes.txt")
    with pytest.raises(UserInputError, match="unknown profile 'h100'"):
        load_profile("h100")
