"""Every shipped profile loads, validates, cites a source for every number, and a malformed copy
of it is rejected with a one-line error naming the field; the profiles CLI works end to end."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from laddersim.errors import UserInputError
from laddersim.hardware.profile import list_profiles, load_profile, profiles_dir, read_profile_mapping

PROFILES = list_profiles()
REQUIRED = {"h100-sxm-nvswitch", "h100-sxm-p2p-off", "a100-sxm-nvswitch", "h200-sxm-nvswitch", "h100-pcie",
            "l40s-pcie", "a100-pcie-nvlink-pairs", "b200-sxm-nvswitch"}


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "laddersim", *args], capture_output=True, text=True, env=env)


def test_the_issue_profiles_are_shipped():
    assert REQUIRED <= set(PROFILES)


@pytest.mark.parametrize("name", PROFILES)
def test_profile_loads_and_every_number_has_a_source(name):
    prof = load_profile(name)
    assert prof.name == name
    raw = yaml.safe_load((profiles_dir() / f"{name}.yaml").read_text())

    def walk(node, path):
        if isinstance(node, dict):
            if "value" in node:
                assert len(str(node.get("source", ""))) >= 10, f"{path}: no source"
            for key, sub in node.items():
                walk(sub, f"{path}.{key}")
        elif isinstance(node, list):
            for i, sub in enumerate(node):
                walk(sub, f"{path}[{i}]")

    walk(raw, name)
    for fit in prof.collectives.intra_node_fits:
        assert "laddersim profiles fit" in fit.source  # reproducible by a recorded command


@pytest.mark.parametrize("name", PROFILES)
def test_malformed_copy_is_rejected_with_one_line(name, tmp_path):
    src = profiles_dir() / f"{name}.yaml"
    shutil.copytree(profiles_dir() / "tables", tmp_path / "tables")
    raw = read_profile_mapping(src)  # with what it extends merged in
    bad = dict(raw, gpu=dict(raw["gpu"], peak_tflopz=raw["gpu"]["peak_tflops"]))  # typo'd field
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(UserInputError, match=r"gpu\.peak_tflopz: unknown field"):
        load_profile(path)
    bad = dict(raw, node=dict(raw["node"], fabric="infiniband"))
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(UserInputError, match=r"node\.fabric"):
        load_profile(path)
    proc = _cli("profiles", "show", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "node.fabric" in lines[0]


@pytest.mark.parametrize("where,value,message", [
    (("collectives", "intra_node", "bus_bandwidth_gb_per_s"), 0, "must be > 0, got 0"),  # divided by: hung simulate
    (("collectives", "intra_node", "bus_bandwidth_gb_per_s"), -370, "must be > 0, got -370"),  # made transfers faster
    (("gpu", "peak_tflops"), 0, "must be > 0"),
    (("gpu", "memory_bandwidth_gb_per_s"), -1, "must be > 0"),
    (("network", "nics_per_node"), 0, "must be >= 1, got 0"),
    (("interference", "compute_slowdown"), -0.5, "must be >= 0, got -0.5"),
    (("framework", "step_overhead_us"), -3, "must be >= 0"),
])
def test_impossible_numbers_are_rejected_with_one_line(tmp_path, where, value, message):
    shutil.copytree(profiles_dir() / "tables", tmp_path / "tables")
    raw = yaml.safe_load((profiles_dir() / "h100-sxm-nvswitch.yaml").read_text())
    node = raw
    for key in where:
        node = node[key]
    node["value"] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(UserInputError, match=".".join(where) + ": value " + message):
        load_profile(path)


@pytest.mark.parametrize("value", [".nan", ".inf"])
def test_non_finite_numbers_are_rejected(tmp_path, value):
    # A NaN or infinite value stalled the engine's clock (simulate hung) or passed silently.
    shutil.copytree(profiles_dir() / "tables", tmp_path / "tables")
    text = (profiles_dir() / "h100-sxm-nvswitch.yaml").read_text()
    text = text.replace("gemm_compute_efficiency: {value: 0.814,", f"gemm_compute_efficiency: {{value: {value},")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserInputError, match=r"gpu\.gemm_compute_efficiency\.value: Input should be a finite number"):
        load_profile(path)


def test_profiles_report_out_must_be_a_file_path(tmp_path):
    proc = _cli("profiles", "report", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: out: {tmp_path} is a directory; allowed: a Markdown "
                                                f"file path such as {tmp_path / 'collectives.md'}"]


def test_missing_table_file_is_rejected(tmp_path):
    raw = yaml.safe_load((profiles_dir() / "h100-sxm-nvswitch.yaml").read_text())
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))  # no tables/ beside it
    with pytest.raises(UserInputError, match="file not found"):
        load_profile(path)


def test_missing_allgather_table_file_is_rejected_by_name(tmp_path):
    shutil.copytree(profiles_dir() / "tables", tmp_path / "tables")
    raw = yaml.safe_load((profiles_dir() / "h100-sxm-nvswitch.yaml").read_text())
    raw["collectives"]["allgather_tables"] = [{"file": "tables/allgather.csv", "source": "a calibration run"}]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(UserInputError, match=r"collectives\.allgather_tables: file not found: tables/allgather\.csv"):
        load_profile(path)


def test_duplicate_fit_counts_are_rejected(tmp_path):
    shutil.copytree(profiles_dir() / "tables", tmp_path / "tables")
    raw = yaml.safe_load((profiles_dir() / "h100-sxm-nvswitch.yaml").read_text())
    fits = raw["collectives"]["intra_node_fits"]
    raw["collectives"]["intra_node_fits"] = fits + fits[:1]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(UserInputError, match="two fits for the same gpus count"):
        load_profile(path)


def test_cli_list_show():
    proc = _cli("profiles", "list")
    assert proc.returncode == 0
    for name in REQUIRED:
        assert name in proc.stdout
    assert re.search(r"h100-pcie\s+no \(what-if\)", proc.stdout)
    assert re.search(r"b200-sxm-nvswitch\s+yes", proc.stdout)  # priced from its own GEMM and NCCL tables
    proc = _cli("profiles", "show", "h100-sxm-nvswitch")
    assert proc.returncode == 0
    line = next(l for l in proc.stdout.splitlines() if l.startswith("gpu.peak_tflops"))
    assert "989.4" in line and "[datasheet" in line
    assert "collectives.intra_node_fits[gpus=8]" in proc.stdout


def test_cli_check_without_shared_uses_shipped_rows():
    env = {**__import__("os").environ, "LADDERSIM_SHARED": "/nonexistent"}
    proc = _cli("profiles", "check", "h200-sxm-nvswitch", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "shipped rows" in proc.stdout
    assert "aic_h200_sxm_nccl_2.29.2" in proc.stdout and "pass" in proc.stdout
    assert "aic_gemm_h200_sxm_vllm_0.24.0" in proc.stdout


def test_cli_unknown_profile_is_one_line():
    proc = _cli("profiles", "check", "no-such-gpu")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "allowed:" in proc.stderr


@pytest.mark.parametrize("name", PROFILES)
def test_simulate_runs_every_profile(name):
    """The issue: every profile with 8B and 70B at TP 8 (one schedule pair each, short lengths to
    keep the suite lean), and 405B at TP 16 where the profile has a network."""
    from laddersim.simulation.simulate import SimOptions, make_scenario, simulate

    prof = load_profile(name)
    cases = [("llama-3.1-8b", 8), ("llama-3.1-70b", 8)] + ([("llama-3.1-405b", 16)] if prof.network else [])
    for model, tp in cases:
        out = {}
        for schedule in ("standard", "ladder"):
            res = simulate(make_scenario(model=model, hardware=name, tp=tp, batch=1, prompt_len=128, gen_len=16,
                                         schedule=schedule), SimOptions())
            out[schedule] = res.summary()
        assert out["standard"]["tokens_per_s"] > 0
        # Ladder hides communication: never slower than standard on the same machine.
        assert out["ladder"]["tokens_per_s"] >= out["standard"]["tokens_per_s"] * 0.99


def _sources(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "source" and isinstance(value, str):
                yield value
            else:
                yield from _sources(value)
    elif isinstance(node, list):
        for value in node:
            yield from _sources(value)


def test_sources_name_public_origins_not_local_paths():
    """Users have no ../shared: profile sources and table headers cite repository, commit and file."""
    from laddersim.profiles_check.origins import public_origin
    from laddersim.profiles_check.sources import ALLREDUCE_SOURCES, GEMM_SOURCES, SENDRECV_SOURCES

    for name in PROFILES:
        texts = list(_sources(read_profile_mapping(profiles_dir() / f"{name}.yaml")))
        assert texts and not [t for t in texts if "../shared" in t], name
    for key, src in {**ALLREDUCE_SOURCES, **GEMM_SOURCES, **SENDRECV_SOURCES}.items():
        lines = (profiles_dir() / "tables" / f"{key}.csv").read_text().splitlines()
        header = [line for line in lines if line.startswith("#")]
        assert not [line for line in header if "../shared" in line], key
        assert header[0] == f"# source: {public_origin(src.path)}", key
        assert " @ " in header[0] or "commit: not recorded in provenance" in header[0], key


def test_a_copy_with_other_tables_does_not_keep_the_loaded_ones():
    """A what-if copy (model_copy, as sweeps and fits make) loads its own tables: the original's,
    once loaded, are not carried over (it made a test order-dependent: a copy without tables still
    priced from them)."""
    from laddersim.costs.allreduce import allreduce_time_s
    from laddersim.costs.collectives import fit_time_s
    from laddersim.hardware import load_profile

    l40s = load_profile("l40s-pcie")
    size = np.array([2.0**20])
    with_table = allreduce_time_s(l40s, 2, size)[0]  # loads the original's tables
    fit_only = l40s.model_copy(update={"collectives": l40s.collectives.model_copy(update={"tables": []})})
    assert fit_only.allreduce_arrays == [] and l40s.allreduce_arrays
    assert allreduce_time_s(fit_only, 2, size)[0] == pytest.approx(fit_time_s(l40s.intra_node_fit(2), size)[0])
    assert allreduce_time_s(fit_only, 2, size)[0] != pytest.approx(with_table)
