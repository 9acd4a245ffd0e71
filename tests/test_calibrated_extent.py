"""A calibrated profile used where it was measured, and beyond: validate reads a CPU table's own
dtype, simulate and validate say in one line when a scenario leaves the ranks and nodes the
calibration measured, or when the calibration ran under load.

The profile is fitted from a stored closed-loop calibration (2 gloo ranks x 1 node, float32;
``tests/data/calibration_compute_bound_gemms``), so no test measures anything."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from laddersim.hardware import load_profile
from laddersim.hardware.calibration_extent import extent_note, load_note, measured_extent

RUN = Path(__file__).parent / "data" / "calibration_compute_bound_gemms"
MODEL = Path(__file__).parents[1] / "examples" / "small-4l-512" / "config.json"
LOAD_LINE = "2026-11-24T16:00:00+00:00: measured under load (other processes used 48% of the 2 CPUs): 14 points"


def laddersim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "laddersim", *args], capture_output=True, text=True, timeout=300)


def _fit(tmp: Path, name: str, load_warnings: list[str] | None = None) -> Path:
    run = tmp / name
    shutil.copytree(RUN, run)
    if load_warnings is not None:
        manifest = json.loads((run / "run.json").read_text())
        manifest["load_warnings"] = load_warnings
        (run / "run.json").write_text(json.dumps(manifest))
    proc = laddersim("calibrate", "fit", str(run), "--name", name)
    assert proc.returncode == 0, proc.stderr
    return run


@pytest.fixture(scope="module")
def idle_run(tmp_path_factory) -> Path:
    return _fit(tmp_path_factory.mktemp("extent"), "cpu-idle")


@pytest.fixture(scope="module")
def loaded_run(tmp_path_factory) -> Path:
    return _fit(tmp_path_factory.mktemp("extent"), "cpu-loaded", [LOAD_LINE, LOAD_LINE.replace("14", "3")])


def _table(path: Path, dtype: str = "float32") -> Path:
    rows = [f"{MODEL},2,1,1,32,8,on,{schedule},{tokens},{dtype}" for schedule, tokens in
            (("standard", 40.0), ("ladder", 50.0))]
    path.write_text("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s,dtype\n" + "\n".join(rows) + "\n")
    return path


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: hardware:")]


def test_the_fitted_profile_records_the_ranks_and_nodes_it_measured(idle_run):
    assert measured_extent(load_profile(str(idle_run))) == (2, 1)
    assert measured_extent(load_profile("h100-sxm-nvswitch")) is None  # shipped: no calibration behind it


def test_extent_note_golden_cases(idle_run):
    profile = load_profile(str(idle_run))
    assert extent_note(profile, 2, 1) is None and extent_note(profile, 1, 1) is None
    more_ranks = extent_note(profile, 4, 1)
    assert "calibrated on 2 ranks x 1 node" in more_ranks and "above 2 ranks" in more_ranks
    assert "between nodes" not in more_ranks
    more_nodes = extent_note(profile, 4, 2)
    assert "4 GPUs on 2 nodes" in more_nodes and "copied from h100-sxm-nvswitch, not measured" in more_nodes
    assert extent_note(load_profile("h100-sxm-nvswitch"), 64, 8) is None


def test_validate_reads_the_tables_dtype_and_a_flag_overrides_it(idle_run, tmp_path):
    table = _table(tmp_path / "out.csv")
    proc = laddersim("validate", str(table), "--hardware", str(idle_run), "--out", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr
    assert "float32" in (tmp_path / "report" / "validation.csv").read_text()
    assert _warnings(proc.stderr) == []  # 2 ranks on 1 node: what was measured, on an idle machine
    # --dtype given wins over the column: the profile measured float32 only, so float16 is refused.
    refused = laddersim("validate", str(table), "--hardware", str(idle_run), "--dtype", "float16",
                        "--out", str(tmp_path / "r2"))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith("error: dtype: float16") and "allowed: float32" in refused.stderr


def test_simulate_beyond_the_calibrated_ranks_says_so_in_one_line(idle_run):
    inside = laddersim("simulate", "--hardware", str(idle_run), "--model", str(MODEL), "--tp", "2", "--dtype",
                       "float32", "--prompt-len", "32", "--gen-len", "4", "--schedule", "standard")
    assert inside.returncode == 0, inside.stderr
    assert _warnings(inside.stderr) == []
    beyond = laddersim("simulate", "--hardware", str(idle_run), "--model", str(MODEL), "--tp", "4", "--dtype",
                       "float32", "--prompt-len", "32", "--gen-len", "4", "--schedule", "standard")
    assert beyond.returncode == 0, beyond.stderr
    lines = _warnings(beyond.stderr)
    assert len(lines) == 1 and "calibrated on 2 ranks x 1 node" in lines[0] and "4 GPUs on 2 nodes" in lines[0]


def test_a_calibration_under_load_is_said_once_by_simulate_and_validate(loaded_run, tmp_path):
    profile = load_profile(str(loaded_run))
    assert profile.provenance["load_warnings"].count("measured under load") == 2
    note = load_note(profile)
    assert "3 points" in note and "1 earlier invocation" in note  # the last invocation's figures
    sim = laddersim("simulate", "--hardware", str(loaded_run), "--model", str(MODEL), "--tp", "2", "--dtype",
                    "float32", "--prompt-len", "32", "--gen-len", "4", "--schedule", "standard")
    assert sim.returncode == 0, sim.stderr
    assert _warnings(sim.stderr) == [note]
    val = laddersim("validate", str(_table(tmp_path / "out.csv")), "--hardware", str(loaded_run),
                    "--out", str(tmp_path / "report"))
    assert val.returncode == 0, val.stderr
    assert _warnings(val.stderr) == [note]


def test_a_profile_whose_provenance_holds_no_load_lines_reads_its_run_json(loaded_run, tmp_path):
    profile = load_profile(str(loaded_run))
    older = profile.model_copy(update={"provenance": {k: v for k, v in profile.provenance.items()
                                                      if k != "load_warnings"}})
    assert load_note(older) == load_note(profile)  # base_dir is the run directory, run.json beside
    assert load_note(older.model_copy(update={"base_dir": str(tmp_path)})) is None


def _with_impossible_allreduce(tmp: Path, name: str, load_warnings: list[str] | None) -> Path:
    run = tmp / name
    shutil.copytree(RUN, run)
    # A step's AllReduce on CPU ranks is a difference of two timings: under load it can reach the
    # 1 us floor, a bus bandwidth no link has.
    (run / "measurements" / "allreduce.csv").write_text(
        "world_size,group_size,nodes,dtype,mode,size_bytes,reps,stat,time_us,p10_us,p90_us,min_us,max_us\n"
        "2,2,1,float32,eager,1048576,30,mean,1,1,1,1,1\n")
    if load_warnings is not None:
        manifest = json.loads((run / "run.json").read_text())
        manifest["load_warnings"] = load_warnings
        (run / "run.json").write_text(json.dumps(manifest))
    return run


@pytest.mark.parametrize("loaded", [False, True])
def test_an_impossible_point_of_a_run_measured_under_load_says_so_in_its_one_line(tmp_path, loaded):
    run = _with_impossible_allreduce(tmp_path, "run", [LOAD_LINE] if loaded else None)
    proc = laddersim("calibrate", "fit", str(run), "--name", "x")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: measurement:") and "exceeds 1.5x the fastest link" in lines[0]
    assert ("this run was measured under load (other processes used 48% of the 2 CPUs): 14 points" in lines[0]) == loaded
