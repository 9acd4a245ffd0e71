"""``laddersim calibrate`` end to end on this CPU: gloo ranks on 127.0.0.1, a reduced grid.

run -> fit -> load the profile -> simulate with it; a run killed with SIGKILL mid-way resumes to
the full point set with nothing duplicated or lost; bad input is one line and exit code 2.
"""

from __future__ import annotations

import csv
import shutil
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from laddersim.fitting.modules import module_seconds
from laddersim.fitting.monotone import nondecreasing_fit
from laddersim.measure.schema import SCHEMAS, point_key
from laddersim.fitting.step_allreduce import (
    collective_issue_us, ladder_chain_rows, pooled_allreduce, resolved_rates,
)
from laddersim.cli import main
from laddersim.costs.allreduce import allgather_source, allgather_time_s, allreduce_time_s
from laddersim.costs.gemm_tables import SILICON
from laddersim.model.framework import load_framework
from laddersim.hardware import load_profile
from laddersim.model.shape import load_model_shape

pytest.importorskip("torch")

TINY_MODEL = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000}
# A reduced grid: 3 AllReduce sizes, the --quick GEMM/memory/interference grids, 3 repeats.
QUICK = ["--backend", "gloo", "--world-size", "2", "--quick", "--sizes", "1KiB,64KiB,1MiB",
         "--repeats", "3", "--warmup", "1"]


def laddersim(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "laddersim", *args], capture_output=True, text=True,
                          timeout=300, **kw)


def rows(path: Path) -> list[dict]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "cpu"
    model = out.parent / "config.json"
    model.write_text(json.dumps(TINY_MODEL))
    proc = laddersim("calibrate", "run", *QUICK, "--models", str(model), "--tp", "2", "--batch", "1",
                     "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    fit = laddersim("calibrate", "fit", str(out), "--name", "cpu-gloo-test")
    assert fit.returncode == 0, fit.stderr
    return out, model, proc


def test_run_measures_every_grid_point_and_records_the_environment(calibrated):
    out, _, proc = calibrated
    allreduce = rows(out / "measurements" / "allreduce.csv")
    assert [int(r["size_bytes"]) for r in allreduce] == [1024, 65536, 1048576]
    assert all(r["group_size"] == "2" and r["mode"] == "eager" and float(r["time_us"]) > 0 for r in allreduce)
    assert all(float(r["min_us"]) <= float(r["time_us"]) <= float(r["max_us"]) for r in allreduce)
    # The logits AllGather of the model's step: batch 1 x 500 vocab per rank x 2 ranks x 4 B.
    allgather = rows(out / "measurements" / "allgather.csv")
    assert [(r["size_bytes"], r["stat"]) for r in allgather] == [("4000", "mean")]
    gemm = rows(out / "measurements" / "gemm.csv")
    # 6 generic shapes + the tiny model's decode GEMMs at tp 2, batch 1: qkv (1, 256, 256),
    # o_proj (1, 256, 128), gate_up (1, 512, 256), lm_head (1, 500, 256); down is qkv's shape.
    assert len(gemm) == 10 and {r["origin"].split()[-1] for r in gemm} >= {"qkv", "lm_head", "generic"}
    assert len(rows(out / "measurements" / "memory.csv")) == 6
    interference = rows(out / "measurements" / "interference.csv")
    assert len(interference) == 1 and float(interference[0]["gemm_overlap_us"]) > 0
    # The ranks' skew after 1..16 of the model's modules in a row (calibration/skew_bench.py).
    skew = rows(out / "measurements" / "skew.csv")
    assert [int(r["modules"]) for r in skew] == [1, 2, 4, 8, 16]
    assert all(float(r["stretch_us"]) > 0 and float(r["wait_us"]) > 0 and int(r["reps"]) == 3 for r in skew)
    assert all(float(r["wait_fraction"]) == pytest.approx(float(r["wait_us"]) / float(r["stretch_us"]), rel=1e-4)
               for r in skew)
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["backend"] == "gloo" and manifest["world_size"] == 2 and manifest["modes"] == ["eager"]
    assert manifest["torch"] and manifest["cpu_model"] and manifest["hosts"]
    assert "calibrate run" in manifest["command_line"] and manifest["date_utc"]
    assert "allreduce: 3/3" in proc.stderr  # progress


def test_fitted_profile_loads_with_sources_and_reproduces_the_measured_table(calibrated):
    out, model, _ = calibrated
    profile = load_profile(out)
    assert profile.name == "cpu-gloo-test" and profile.node.gpus_per_node == 2
    table = profile.collectives.tables[0]
    assert (table.file, table.mode) == ("tables/allreduce.csv", "eager")
    assert table.library.startswith("gloo (torch ")
    # The step's AllReduce, measured by both the allreduce and the interference benchmark on these
    # shared cores, pooled into one row (laddersim.fitting.step_allreduce); the table then
    # fitted non-decreasing in size, each size weighted alike (on a loaded 2-core CPU gloo times
    # are not monotone in size), never below half the smallest size's time (costs.collectives).
    frame = lambda name: pd.read_csv(out / "measurements" / f"{name}.csv")
    chains = ladder_chain_rows(frame("interference"), on_host_cores=True)
    assert len(chains) == 1
    pooled = pooled_allreduce(frame("allreduce"), chains, collective_issue_us(frame("overhead")))
    measured = pooled.to_dict("records")
    assert sum(r["reps"] for r in measured) == sum(int(r["reps"]) for r in rows(out / "measurements" / "allreduce.csv")) \
        + int(chains.iloc[0]["reps"])
    fitted_us = nondecreasing_fit([float(r["time_us"]) for r in measured])
    first_s = fitted_us[0] * 1e-6
    for r, time_us in zip(measured, fitted_us):
        expected_s = max(time_us * 1e-6, 0.5 * first_s)
        assert allreduce_time_s(profile, 2, int(r["size_bytes"])) == pytest.approx(expected_s, rel=1e-5)
    # The step's logits AllGather is priced from its own measured table (calibration/allgather_bench.py).
    gather = rows(out / "measurements" / "allgather.csv")[0]
    assert [t.file for t in profile.collectives.allgather_tables] == ["tables/allgather.csv"]
    gpt_fast = load_framework("gpt-fast")
    assert allgather_time_s(profile, 2, 4000, gpt_fast) == pytest.approx(float(gather["time_us"]) * 1e-6, rel=1e-5)
    assert allgather_source(profile, 2, 4000, gpt_fast) == SILICON
    assert str(out) in profile.gpu.gemm_compute_efficiency.source
    assert "measurements/gemm.csv" in profile.gpu.kernel_launch_us.source
    assert "measurements/interference.csv" in profile.interference.compute_slowdown.source
    # The framework's per-op costs and the traced step's ops hold what the base's fixed costs would.
    host = profile.host_overhead
    assert host.timing == "synchronous" and host.collective_progress == "host_cores"
    assert "measurements/overhead.csv" in host.compute_op_us.source and "measurements/ops.csv" in host.ops_source
    # The other processes' share of the cores is in every timing (all ranks at once, at the run's
    # load): measured and reported, not charged again.
    assert host.cpu_share.value == 1.0 and "cpu_share" in {r["op_class"] for r in rows(out / "measurements" / "overhead.csv")}
    # The run's top-k sampling over the model's vocabulary, one measured call and its ops.
    assert host.sampling_us.value > 0 and "top-k sampling at batch 1" in host.sampling_us.source
    assert host.sampling_ops >= 5
    # The wait for the slowest rank per second of compute: the line through the origin of skew.csv.
    skew = pd.read_csv(out / "measurements" / "skew.csv")
    fraction = (skew["stretch_us"] * skew["wait_us"]).sum() / (skew["stretch_us"] ** 2).sum()
    assert host.rank_skew_fraction.value == pytest.approx(fraction, rel=1e-9) and host.rank_skew_group == 2
    assert "measurements/skew.csv" in host.rank_skew_fraction.source
    # The per-op cost as the model's own modules pay it (laddersim/fitting/modules.py): the
    # op program prices a module at the skew benchmark's longest stretch, per module.
    longest = skew.loc[skew["modules"].idxmax()]
    measured_s = longest["stretch_us"] / longest["modules"] * 1e-6
    priced_s = module_seconds(profile, load_model_shape(str(model)), 2, 1, "float32", int(longest["modules"]))
    assert "fitting/modules.py" in host.compute_op_us.source and "tiny-op chains" in host.compute_op_us.source
    if host.compute_op_us.value > 0:
        assert priced_s == pytest.approx(measured_s, rel=1e-6)
    else:  # modules faster than their kernels as priced: the per-op cost floors at zero
        assert priced_s >= measured_s
    # The roofline is fitted to the model's own GEMMs (4 shapes beyond the quick grid's).
    assert "fitted to the model's 4 GEMMs" in profile.gpu.gemm_memory_efficiency.source
    assert {e.kind for e in host.ops} >= {"attn_norm", "rope", "attention", "residual_add", "collective_launch"}
    assert profile.framework.step_overhead_us.value == 0 and "host_overhead" in profile.framework.step_overhead_us.source
    assert "only one node measured" in profile.network.allreduce.bus_bandwidth_gb_per_s.source
    assert profile.provenance["backend"] == "gloo" and "calibrate run" in profile.provenance["command_line"]


def test_fit_is_deterministic(calibrated):
    out, _, _ = calibrated
    first = (out / "profile.yaml").read_bytes(), (out / "tables" / "allreduce.csv").read_bytes()
    assert laddersim("calibrate", "fit", str(out), "--name", "cpu-gloo-test").returncode == 0
    assert ((out / "profile.yaml").read_bytes(), (out / "tables" / "allreduce.csv").read_bytes()) == first


def test_simulate_with_the_calibrated_profile(calibrated):
    out, model, _ = calibrated
    proc = laddersim("simulate", "--hardware", str(out), "--model", str(model), "--tp", "2",
                     "--prompt-len", "32", "--gen-len", "8", "--dtype", "float32", "--json")
    assert proc.returncode == 0, proc.stderr
    result = {r["schedule"]: r for r in json.loads(proc.stdout)}
    assert result["standard"]["hardware"] == "cpu-gloo-test"
    # Two blocking AllReduces per layer, each at least the measured 1 KiB latency floor.
    floor_s = float(rows(out / "measurements" / "allreduce.csv")[0]["time_us"]) * 1e-6
    assert result["standard"]["comm_s"] >= 2 * 2 * 8 * floor_s * 0.5


def _data_lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text().split("\n")[1:] if line]


def _start_allreduce_run(out: Path, min_points: int, stderr=subprocess.DEVNULL):
    """A 10-size gloo AllReduce run in its own session, once ``min_points`` lines are on disk
    (or it ended, or 120 s passed): (process, its arguments, its measurement file)."""
    sizes = "1KiB,4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB,32MiB,64MiB"
    args = ["calibrate", "run", "--backend", "gloo", "--world-size", "2", "--benchmarks", "allreduce",
            "--sizes", sizes, "--dtypes", "float32", "--repeats", "5", "--warmup", "1", "--out", str(out)]
    csv_path = out / "measurements" / "allreduce.csv"
    proc = subprocess.Popen([sys.executable, "-m", "laddersim", *args], stdout=subprocess.DEVNULL,
                            stderr=stderr, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(_data_lines(csv_path)) < min_points and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc, args, csv_path


def test_killed_run_resumes_without_duplicates_or_lost_points(tmp_path):
    victim, args, csv_path = _start_allreduce_run(tmp_path / "resume", 3)
    os.killpg(victim.pid, signal.SIGKILL)  # the run and its spawned ranks: its own session
    victim.wait()
    before = _data_lines(csv_path)
    assert 3 <= len(before) < 10, "the run must be killed mid-way"
    proc = laddersim(*args)
    assert proc.returncode == 0, proc.stderr
    after = _data_lines(csv_path)
    schema = SCHEMAS["allreduce"]
    keys = [point_key(schema, r) for r in rows(csv_path)]
    expected = {(2, 2, 1, "float32", "eager", s) for s in
                (1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 33554432, 67108864)}
    assert len(keys) == len(set(keys)) == 10 and set(keys) == expected
    complete_before = [line for line in before if line.count(",") == len(schema.columns) - 1]
    assert after[: len(complete_before)] == complete_before  # measured points are kept as they were
    assert "already measured, resuming" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--backend", "mpi"], "error: calibrate run: argument --backend: invalid choice: 'mpi'"),
    (["--backend", "nccl"], "error: backend: nccl needs CUDA GPUs and none is visible; allowed: gloo, auto"),
    (["--backend", "gloo", "--world-size", "1000"], "error: world-size: 1000 ranks on this host exceed"),
    (["--sizes", "12parsecs"], "error: sizes: '12parsecs' is not a positive size"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    proc = laddersim("calibrate", "run", "--out", str(tmp_path / "x"), *args)
    assert proc.returncode == 2
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr


def test_unwritable_out_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = laddersim("calibrate", "run", "--backend", "gloo", "--out", str(blocker / "run"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: out: cannot write to ")
    assert proc.stderr.count("\n") == 1


def test_corrupt_partial_csv_is_reported_with_its_line_not_dropped(tmp_path):
    out = tmp_path / "corrupt"
    path = out / "measurements" / "allreduce.csv"
    path.parent.mkdir(parents=True)
    header = ",".join(SCHEMAS["allreduce"].columns)
    path.write_text(f"{header}\n2,2,1,float32,eager,1024,3,median,10,9,11,8,12\n2,2,1,float32,eager,garbage\n"
                    "2,2,1,float32,eager,4096,3,median,10,9,11,8,12\n")
    before = path.read_bytes()
    proc = laddersim("calibrate", "run", "--backend", "gloo", "--out", str(out), "--quick")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"error: out: {path}:3: corrupt line")
    assert path.read_bytes() == before


def test_fit_of_a_directory_that_is_not_a_run(tmp_path):
    proc = laddersim("calibrate", "fit", str(tmp_path), "--name", "x")
    assert proc.returncode == 2 and "has no run.json" in proc.stderr and proc.stderr.count("\n") == 1


def test_fit_keeps_interference_per_message_size(calibrated, tmp_path):
    out, _, _ = calibrated
    run = tmp_path / "run"
    shutil.copytree(out, run)
    path = run / "measurements" / "interference.csv"
    measured = rows(path)
    first = measured[0]
    # A second message size with other slowdowns, as a GPU grid measures (16 KiB ... 32 MiB:
    # a matmul beside the AllReduce, no ladder chain of the model's modules, model '-').
    extra = {**first, "size_bytes": str(int(first["size_bytes"]) * 16), "compute_slowdown": "0.4",
             "comm_slowdown": "0.7", "model": "-"}
    with open(path, "a", newline="") as fh:
        csv.DictWriter(fh, fieldnames=list(first)).writerow(extra)
    assert laddersim("calibrate", "fit", str(run), "--name", "two-sizes").returncode == 0
    spec = load_profile(run).interference
    assert [p.size_bytes for p in spec.by_size] == [int(first["size_bytes"]), int(extra["size_bytes"])]
    assert spec.by_size[1].compute_slowdown == 0.4 and spec.by_size[1].comm_slowdown == 0.7
    # The first size is a ladder chain on shared cores: its rates solved again against the
    # AllReduce the engine reads from the fitted table at that size (step_allreduce.resolved_rates).
    profile = load_profile(run)
    chain = pd.read_csv(path).iloc[0]
    table_us = allreduce_time_s(profile, 2, int(first["size_bytes"])) * 1e6
    issue_us = collective_issue_us(pd.read_csv(run / "measurements" / "overhead.csv"))
    compute, comm = resolved_rates(chain, table_us, issue_us, TINY_MODEL["num_hidden_layers"])
    assert spec.by_size[0].compute_slowdown == pytest.approx(max(0.0, compute), rel=1e-3)
    assert spec.by_size[0].comm_slowdown == pytest.approx(max(0.0, comm), abs=1e-3)
    assert "measurements/interference.csv" in spec.by_size[1].source
    assert spec.at(int(extra["size_bytes"]) * 4) == (0.4, 0.7)


def test_calibrate_run_without_torch_is_one_line(tmp_path, capsys, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["calibrate", "run", "--backend", "gloo", "--world-size", "2", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs torch" in err and "pip install" in err


def test_a_run_without_a_profile_says_to_fit_it(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    assert main(["simulate", "--hardware", str(run), "--model", "llama-3.1-8b", "--tp", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"laddersim calibrate fit {run} --name NAME" in err


# ---- options that would be silently unused ------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--tp", "2", "--prompt-len", "16"],
     "error: tp, prompt-len: --tp, --prompt-len need --models (used only for the model GEMM shapes); "
     "allowed: with --models MODEL[,MODEL...], or drop them"),
    (["--batch", "4"], "error: batch: --batch needs --models"),
    (["--models", "llama-3.1-8b", "--benchmarks", "memory"],
     "error: models: --models needs the gemm benchmark, which this run does not measure (benchmarks: memory)"),
    (["--sizes", "1KiB", "--dtypes", "float32", "--benchmarks", "gemm,memory"],
     "error: sizes, dtypes: --sizes, --dtypes need the allreduce benchmark"),
])
def test_options_that_would_be_unused_are_one_line_errors(tmp_path, capsys, args, message):
    out = tmp_path / "x"
    assert main(["calibrate", "run", "--backend", "gloo", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
    assert not out.exists()  # refused before anything was created


def test_single_benchmark_script_refuses_options_of_another_benchmark(tmp_path, capsys):
    from calibration.calibrate_all import main as script_main

    assert script_main(["--backend", "gloo", "--out", str(tmp_path / "x"), "--sizes", "1KiB"],
                       benchmarks=("memory",)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: sizes: --sizes needs the allreduce benchmark") and err.count("\n") == 1


# ---- AllReduce sizes are whole elements ---------------------------------------------------------

def test_sizes_are_rounded_up_to_whole_elements_and_recorded_as_moved(tmp_path):
    import torch

    from calibration.bench_timing import element_count

    out = tmp_path / "odd"
    proc = laddersim("calibrate", "run", "--backend", "gloo", "--world-size", "2", "--benchmarks", "allreduce",
                     "--sizes", "3,4,6", "--dtypes", "float32,float16", "--repeats", "1", "--warmup", "0",
                     "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    measured = [(r["dtype"], int(r["size_bytes"])) for r in rows(out / "measurements" / "allreduce.csv")]
    # float32: 3 and 4 B are one 4 B element, 6 B is two (8 B); float16: 3 B is two elements (4 B).
    assert measured == [("float32", 4), ("float32", 8), ("float16", 4), ("float16", 6)]
    notes = [line for line in proc.stderr.splitlines() if "rounded up to whole elements" in line]
    assert notes == ["[calibrate] allreduce: sizes rounded up to whole elements, measured and recorded as "
                     "such: 3 B -> 4 B (float32, float16), 6 B -> 8 B (float32)"]
    assert element_count(8, torch.float32) == 2
    with pytest.raises(ValueError, match="not a whole number of torch.float32 elements"):
        element_count(6, torch.float32)  # the buffer must move exactly the recorded bytes


# ---- a partial run's summary says what was not measured ------------------------------------------

def _fit_copy(calibrated, tmp_path, capsys, drop: tuple[str, ...]) -> tuple[Path, list[str]]:
    """Fit a copy of the calibrated run without the measurement files of ``drop``: (run, stdout lines)."""
    out, _, _ = calibrated
    run = tmp_path / "partial"
    shutil.copytree(out, run)
    for benchmark in drop:
        (run / "measurements" / f"{benchmark}.csv").unlink()
    assert main(["calibrate", "fit", str(run), "--name", "partial"]) == 0
    return run, capsys.readouterr().out.splitlines()


def _summary_line(lines: list[str], label: str) -> str:
    return next(line for line in lines if line.startswith(f"  {label} "))


def test_summary_of_a_partial_run_marks_values_copied_from_the_base(calibrated, tmp_path, capsys):
    run, lines = _fit_copy(calibrated, tmp_path, capsys, ("gemm", "memory", "interference"))
    base = "(from base h100-sxm-nvswitch: "
    peaks = _summary_line(lines, "peaks")
    assert f" TFLOP/s {base}no GEMM measured), " in peaks
    assert peaks.endswith(f" GB/s memory {base}no memory kernels measured)")
    assert _summary_line(lines, "GEMM").endswith(f"{base}fewer than 4 GEMMs measured)")
    assert _summary_line(lines, "elementwise").endswith(f"{base}not measured)")
    assert _summary_line(lines, "interference").endswith(
        f"compute scaled by NCCL's channel share of 32 {base}not measured)")
    assert _summary_line(lines, "inter-node AR").endswith(f"{base}only one node measured)")
    assert "framework overheads" not in _summary_line(lines, "also from base")  # the host overhead holds them
    assert "per compute op" in _summary_line(lines, "host overhead")
    assert "from base" not in _summary_line(lines, "intra-node AR")  # measured
    # The profile's sources say the same.
    profile = load_profile(run)
    assert profile.gpu.peak_tflops.source.startswith("copied from base profile h100-sxm-nvswitch (no GEMM measured)")
    assert profile.interference.comm_slowdown.source.startswith("copied from base profile h100-sxm-nvswitch (not measured)")
    # The copied fractions are the base's full-size ones: its channel rule comes with them.
    assert profile.interference.collective_channels.value == 32
    assert profile.interference.collective_channels.source.startswith("copied from base profile h100-sxm-nvswitch")
    assert str(run) in profile.collectives.intra_node.bus_bandwidth_gb_per_s.source


def test_summary_marks_an_unmeasured_allreduce_and_not_measured_values(calibrated, tmp_path, capsys):
    run, lines = _fit_copy(calibrated, tmp_path, capsys, ("allreduce",))
    assert _summary_line(lines, "intra-node AR").endswith(
        "(from base h100-sxm-nvswitch: no single-node AllReduce measured)")
    assert not any(line.startswith("  AR table") for line in lines)
    for label in ("peaks", "GEMM", "elementwise", "interference"):  # a CPU: rates and fits measured
        assert "from base" not in _summary_line(lines, label), label
    source = load_profile(run).collectives.intra_node.step_latency_us.source
    assert source.startswith("copied from base profile h100-sxm-nvswitch (no single-node AllReduce measured)")


# ---- Ctrl-C twice ---------------------------------------------------------------------------------

def test_second_ctrl_c_exits_quietly_and_keeps_the_finished_points(tmp_path):
    from laddersim.measure.store import PointStore

    proc, _, csv_path = _start_allreduce_run(tmp_path / "interrupted", 2, stderr=subprocess.PIPE)
    before = _data_lines(csv_path)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C on a terminal: the whole foreground group
    time.sleep(0.1)  # the second one lands while the first is shutting the run down
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert [line for line in err.splitlines() if not line.startswith("[calibrate] ")] == [
        "interrupted: finished work is kept; re-run the same command to resume"], err
    assert 2 <= len(before) < 10, "the run must be interrupted mid-way"
    kept = PointStore(csv_path, SCHEMAS["allreduce"]).load()  # whole, valid lines
    assert [format(r["size_bytes"]) for r in kept][: len(before)] == [line.split(",")[5] for line in before]


# ---- noisy tables ---------------------------------------------------------------------------------

def _rewrite_times(path: Path, time_of, column: str = "time_us") -> None:
    """Set every row's ``column`` to ``time_of(row)`` (a synthetic, fully controlled table)."""
    table = rows(path)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]), lineterminator="\n")
        writer.writeheader()
        for row in table:
            writer.writerow({**row, column: format(time_of(row), "g")})


def test_fit_reports_a_negative_interference_slowdown_in_one_line(calibrated, tmp_path, capsys):
    out, _, _ = calibrated
    run = tmp_path / "negative"
    shutil.copytree(out, run)
    # The ladder chain's modules timed 58% faster beside the AllReduce than alone: the benchmark's
    # figure and the one fit solves again from the chain's timings (step_allreduce) both read -58%.
    _rewrite_times(run / "measurements" / "interference.csv", lambda r: 0.42 * float(r["gemm_alone_us"]),
                   "gemm_overlap_us")
    _rewrite_times(run / "measurements" / "interference.csv", lambda r: -0.58, "compute_slowdown")
    _rewrite_times(run / "measurements" / "interference.csv", lambda r: 0.2, "comm_slowdown")
    assert main(["calibrate", "fit", str(run), "--name", "negative"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "interference.csv" in line]
    assert len(lines) == 1 and "compute slowdown measured -58.0%" in lines[0] and "measurement problem" in lines[0]
    assert load_profile(run).interference.compute_slowdown.value == 0.0  # held at 0, and said so


def test_fit_warns_once_per_table_whose_times_fall_with_size(calibrated, tmp_path, capsys):
    out, _, _ = calibrated
    run = tmp_path / "noisy"
    shutil.copytree(out, run)
    allreduce, memory = run / "measurements" / "allreduce.csv", run / "measurements" / "memory.csv"
    # monotone: no warning. The GEMMs too are made a clean roofline (5 us + their bytes at 10 GB/s or
    # their FLOPs at 50 GFLOP/s, whichever is slower): as measured, on a loaded machine they can leave
    # the roofline's memory term free, which calibrate fit rightly warns of, and this test is not about.
    def gemm_us(r):
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        return 5 + max(4 * (m * k + n * k + m * n) / 1e4, 2 * m * n * k / 5e4)

    gemm = run / "measurements" / "gemm.csv"
    for column in ("time_us", "p10_us", "p90_us", "min_us", "max_us"):
        _rewrite_times(gemm, gemm_us, column)
    _rewrite_times(gemm, lambda r: 2 * int(r["m"]) * int(r["n"]) * int(r["k"]) / gemm_us(r) / 1e6, "tflops")
    _rewrite_times(memory, lambda r: 1 + int(r["size_bytes"]) / 1e4)  # ~20 GB/s (read + write)
    _rewrite_times(allreduce, lambda r: 100 + int(r["size_bytes"]) / 1e4)
    for column in ("compute_slowdown", "comm_slowdown"):  # a noisy run may measure one below 0 (its own warning)
        _rewrite_times(run / "measurements" / "interference.csv", lambda r: 0.1, column)
    manifest = json.loads((run / "run.json").read_text())  # a run measured beside other work is marked, and
    manifest.pop("load_warnings", None)  # calibrate fit repeats it (tests/test_calibrate_load.py): not this test
    (run / "run.json").write_text(json.dumps(manifest))
    assert main(["calibrate", "fit", str(run), "--name", "clean"]) == 0
    assert "warning" not in capsys.readouterr().err
    # 1 MiB timed 30% below 64 KiB (106.5 us): what a loaded CPU does to a --quick table.
    _rewrite_times(allreduce, lambda r: {1024: 100.0, 65536: 106.5536, 1048576: 74.5875}[int(r["size_bytes"])])
    before = allreduce.read_bytes()
    assert main(["calibrate", "fit", str(run), "--name", "noisy"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "warning: measurements/allreduce.csv (group_size=2, nodes=1, dtype=float32, mode=eager): 1 MiB took "
        "74.59 us, 30% less than 64 KiB (106.6 us); times should grow with size, this table is noisy: re-run "
        "into a new --out without --quick or with more --repeats (the same --out only measures missing points)"]
    assert allreduce.read_bytes() == before  # measurements are kept as they are


def test_fit_refuses_an_allreduce_faster_than_the_base_profiles_links(calibrated, tmp_path):
    """One doctored row (1 MiB in 0.001 us: ~1e6 GB/s busbw) against 1.5x the base profile's
    fastest single-node link (h100-sxm-nvswitch: 370 GB/s -> 555 GB/s) is one error line."""
    out, _, _ = calibrated
    run = tmp_path / "doctored"
    shutil.copytree(out, run)
    allreduce = run / "measurements" / "allreduce.csv"
    table = rows(allreduce)
    line = 2 + next(i for i, r in enumerate(table) if r["size_bytes"] == "1048576")
    with open(allreduce, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({**r, "time_us": "0.001"} if i == line - 2 else r for i, r in enumerate(table))
    profile_before = (run / "profile.yaml").read_bytes()
    proc = laddersim("calibrate", "fit", str(run), "--name", "doctored", "--base", "h100-sxm-nvswitch")
    assert proc.returncode == 2, proc.stderr
    (error,) = proc.stderr.splitlines()
    busbw = 2 * (int(table[line - 2]["group_size"]) - 1) / int(table[line - 2]["group_size"]) * 1048576 / 0.001 / 1e3
    assert f"{allreduce}:{line}:" in error and f"busbw {busbw:g} GB/s" in error
    assert "allowed: busbw <= 555 GB/s" in error and "Traceback" not in proc.stderr
    assert (run / "profile.yaml").read_bytes() == profile_before  # no profile from the doctored run
