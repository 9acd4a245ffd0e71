"""``extends:``: which values a derived profile restates, ``profiles show`` marking the inherited
ones, and the A100 PCIe profile without NVLink built on it."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.api.profiles_task import INHERITED, show_profile
from laddersim.cli import main
from laddersim.costs.allreduce import allreduce_time_s
from laddersim.hardware import load_profile
from laddersim.hardware.profile import list_profiles, profile_lineage
from laddersim.profiles_check.inheritance import inherited_from, stated_paths

DERIVED = [name for name in list_profiles() if len(profile_lineage(name)) > 1]


def test_stated_paths_treat_a_sourced_value_and_a_list_as_one_value():
    mapping = {"name": "x", "gpu": {"peak_tflops": {"value": 1, "source": "s"}},
               "collectives": {"tables": [{"file": "a.csv"}], "intra_node": {"algorithm": "ring"}}}
    assert stated_paths(mapping) == {"name", "gpu.peak_tflops", "collectives.tables", "collectives.intra_node.algorithm"}


def test_inherited_from_names_the_nearest_profile_that_states_a_value():
    lineage = [("c", {"name": "c", "gpu": {"a": 1}}), ("b", {"name": "b", "gpu": {"b": 2}}),
               ("a", {"name": "a", "gpu": {"a": 0, "b": 0, "c": 0}, "fits": [1]})]
    marks = inherited_from(lineage, ["name", "gpu.a", "gpu.b", "gpu.c", "fits[gpus=2]", "offers.one_node"])
    assert marks == {"gpu.b": "b", "gpu.c": "a", "fits[gpus=2]": "a"}  # offers: derived, stated by none
    assert inherited_from(lineage[2:], ["gpu.a"]) == {}  # a profile that extends nothing inherits nothing


def test_shipped_derived_profiles_exist():
    assert {"a100-pcie", "a100-sxm-aws-p4de-efa", "h100-sxm-aws-p5-efa"} <= set(DERIVED)


@pytest.mark.parametrize("name", DERIVED)
def test_every_marked_value_is_the_bases_and_every_restated_one_is_the_files(name):
    lines = show_profile(name)
    own = stated_paths(profile_lineage(name)[0][1])
    base = {path: (value, source) for path, value, source in show_profile(profile_lineage(name)[1][0])}
    marked = [(path, value, source) for path, value, source in lines if source.startswith(INHERITED)]
    assert marked, name
    for path, value, source in marked:
        assert not any(path == s or path.startswith(s + ".") for s in own), path
        if source.startswith(f"{INHERITED} {profile_lineage(name)[1][0]}") and path in base:
            assert value == base[path][0], path  # the base's value, unchanged
            if base[path][1]:
                assert source.endswith(base[path][1]), path  # and its own citation
    for path, _, source in lines:
        if path in own:
            assert not source.startswith(INHERITED), path


def test_profiles_show_marks_inherited_values_on_stdout_and_counts_them_on_stderr(capsys):
    assert main(["profiles", "show", "a100-pcie"]) == 0
    captured = capsys.readouterr()
    rows = {line.split()[0]: line for line in captured.out.splitlines()}
    assert f"[{INHERITED} a100-pcie-nvlink-pairs; datasheet" in rows["gpu.peak_tflops"]
    assert INHERITED not in rows["node.fabric"] and INHERITED not in rows["collectives.intra_node.bus_bandwidth_gb_per_s"]
    assert "values inherited from a100-pcie-nvlink-pairs" in captured.err
    assert main(["profiles", "show", "h100-sxm-nvswitch"]) == 0  # extends nothing: nothing marked
    plain = capsys.readouterr()
    assert INHERITED not in plain.out and plain.err == ""


def test_a100_pcie_is_the_nvlink_pairs_gpu_on_plain_pcie():
    pcie, pairs, l40s = (load_profile(n) for n in ("a100-pcie", "a100-pcie-nvlink-pairs", "l40s-pcie"))
    assert pcie.gpu == pairs.gpu  # the same card: datasheet values inherited
    assert pcie.node.fabric == "pcie" and pcie.collectives.transport.topology.gpu_links == "pcie"
    assert not pcie.measured and pcie.collectives.tables == []  # no table of this machine: a what-if
    sizes = np.array([4096.0, 65536.0, 1 << 20, 16 << 20])
    # Two GPUs behind one switch: the PCIe Gen4 x16 P2P ring measured on the L40S node (same link),
    # through l40s-pcie's fit of that table (l40s-pcie reads the table itself: within the fit's 5%).
    np.testing.assert_allclose(allreduce_time_s(pcie, 2, sizes), allreduce_time_s(l40s, 2, sizes), rtol=0.05)
    # Beyond the switch the ring goes through host memory: slower per byte than the 2-GPU P2P ring.
    assert allreduce_time_s(pcie, 4, sizes[-1:])[0] > allreduce_time_s(pcie, 2, sizes[-1:])[0]
    # Every number cites its source.
    for path, value, source in show_profile("a100-pcie"):
        try:
            float(value)
        except ValueError:
            continue
        if path.startswith(("gpu.", "collectives.", "interference.", "framework.")) and not path.endswith(
                ("fixed_steps", "gpus_per_node")):
            assert source, path
