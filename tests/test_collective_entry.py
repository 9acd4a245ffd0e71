"""The collectives' shape, held: the rest of the package asks ``laddersim.costs.allreduce`` for an
AllReduce's or AllGather's time (the one entry, which picks the implementation), and the what-if
factors meet the formulas in one module (``laddersim.costs.scaling.view``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from laddersim.costs.allreduce import (
    CUSTOM, IMPLEMENTATIONS, MULTIMEM, NCCL, allreduce_source, allreduce_time_s, candidates, implementation_for,
)
from laddersim.costs.scaling.view import LinkScale, links
from laddersim.hardware.overrides import with_overrides
from laddersim.hardware.profile import load_profile
from laddersim.model.framework import load_framework

PACKAGE = Path(__file__).resolve().parents[1] / "laddersim"
COSTS = PACKAGE / "costs"
# What modules outside laddersim.costs may take from the collective modules besides the entry:
# NCCL's choice of a message and its interference, the measured-table utilities, NCCL's constants
# and the one-tier formula the fits adjust.
ALLOWED = {
    "laddersim.costs.collectives": {"collective_choice", "slowdowns", "bandwidth_share", "interpolate_table_s",
                                    "mode_correction_s", "alpha_beta_time_s"},
    "laddersim.costs.nccl_tuning": {"PROTOCOLS", "TREE_CORRECTION", "BASE_LATENCY_US"},
    "laddersim.costs.nccl_algorithms": set(),
}
# The transport mechanism's parameters are fitted (fitting) and described (profiles) from outside.
TRANSPORT_USERS = {"laddersim/fitting/p2p_off_transport.py", "laddersim/api/profiles_task.py"}


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []


def test_outside_the_costs_an_allreduce_is_priced_only_through_the_entry():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if COSTS in path.parents:
            continue
        where = str(path.relative_to(PACKAGE.parent))
        for module, names in _imports(path):
            if module in ALLOWED:
                found += [f"{where}: {module}.{n}" for n in names if n not in ALLOWED[module]]
            if (module == "laddersim.costs" and "transport" in names or module == "laddersim.costs.transport") \
                    and where not in TRANSPORT_USERS:
                found.append(f"{where}: laddersim.costs.transport")
    assert found == []


def test_the_what_if_factors_are_read_in_one_module():
    readers = sorted(str(p.relative_to(PACKAGE.parent)) for p in COSTS.rglob("*.py")
                     if re.search(r"\.what_if\b|_(bandwidth|latency)_scale\b", p.read_text()))
    assert readers == ["laddersim/costs/scaling/view.py"]


def test_the_rule_tries_a_frameworks_kernels_before_nccl():
    assert candidates(None) == (NCCL,)
    assert candidates(load_framework("gpt-fast")) == (NCCL,)
    assert candidates(load_framework("vllm")) == (MULTIMEM, CUSTOM, NCCL)
    assert candidates(load_framework("vllm"), custom=False) == (MULTIMEM, NCCL)
    assert set(IMPLEMENTATIONS) == {"nccl", "multimem", "custom"}


def test_a_custom_kernel_runs_on_one_node_only_and_nccl_takes_the_rest():
    """vLLM's custom kernel reads its peers' memory: on a two-node group of h100-sxm-nvswitch the
    rule falls back to NCCL, priced as gpt-fast's NCCL AllReduce plus the same stream hand-off."""
    hw, vllm, gpt_fast = load_profile("h100-sxm-nvswitch"), load_framework("vllm"), load_framework("gpt-fast")
    assert implementation_for(hw, vllm, 8, 16384.0)[0] is CUSTOM
    assert implementation_for(hw, vllm, 16, 16384.0) == (NCCL, None)
    nccl_s = float(allreduce_time_s(hw, 16, 16384.0))
    assert allreduce_time_s(hw, 16, 16384.0, vllm) == nccl_s + vllm.collective_handoff_half_s()
    assert allreduce_time_s(hw, 16, 16384.0, gpt_fast) == nccl_s + gpt_fast.collective_handoff_half_s()
    assert allreduce_source(hw, 16, 16384.0, vllm) == "SOL"
    assert allreduce_time_s(hw, 1, 16384.0, vllm) == 0.0


def test_the_link_view_applies_each_factor_as_the_formulas_do():
    link = LinkScale(bandwidth=2.0, latency=3.0)
    assert link.latency_s(10.0) == 10.0 * 1e-6 * 3.0
    assert link.bytes_per_s(450.0) == 450.0 * 1e9 * 2.0
    # a table: its floor a latency, the rest bandwidth-bound
    assert link.table_scalar_s(30e-6, 10e-6) == pytest.approx(10e-6 * 3.0 + 20e-6 / 2.0)
    np.testing.assert_allclose(link.table_s(np.array([5e-6, 30e-6]), 10e-6), [30e-6, 40e-6])
    hw = load_profile("h100-sxm-nvswitch")
    scaled = with_overrides(hw, intra_bandwidth_scale=2.0, inter_latency_scale=0.5)
    assert links(hw).identity and not links(scaled).identity
    assert (links(scaled).intra, links(scaled).inter) == (LinkScale(2.0, 1.0), LinkScale(1.0, 0.5))


@pytest.mark.parametrize("tp", [2, 8, 16])
def test_a_scaled_bandwidth_never_slows_an_allreduce_and_identity_changes_nothing(tp):
    hw = load_profile("h100-sxm-nvswitch")
    sizes = np.geomspace(1.0, 2.0**30, 31)
    same = with_overrides(hw, intra_bandwidth_scale=1.0, inter_bandwidth_scale=1.0)
    assert np.array_equal(allreduce_time_s(same, tp, sizes), allreduce_time_s(hw, tp, sizes))
    fast = with_overrides(hw, intra_bandwidth_scale=2.0, inter_bandwidth_scale=2.0)
    assert np.all(allreduce_time_s(fast, tp, sizes) <= allreduce_time_s(hw, tp, sizes) * (1 + 1e-12))
    assert allreduce_time_s(fast, tp, sizes)[-1] < 0.75 * allreduce_time_s(hw, tp, sizes)[-1]


def test_the_custom_kernel_runs_on_the_world_sizes_vllm_accepts(tmp_path):
    """vLLM's CustomAllreduce takes 2, 4, 6 or 8 GPUs; a table row for 3 GPUs is not used."""
    from laddersim.hardware.sourced import MeasuredTable

    hw, vllm = load_profile("h100-sxm-nvswitch"), load_framework("vllm")
    path = tmp_path / "custom.csv"
    path.write_text("gpus,nodes,size_bytes,time_us\n3,1,1024,4.0\n3,1,65536,6.0\n")
    table = MeasuredTable(file=str(path), source="test", library="vLLM custom all-reduce", mode="graph")
    three = hw.model_copy(update={"collectives": hw.collectives.model_copy(update={"tables": [table]})})
    assert three.allreduce_arrays[0][1]["gpus"].tolist() == [3, 3]
    assert implementation_for(three, vllm, 3, 4096.0) == (NCCL, None)
    assert implementation_for(hw, vllm, 4, 4096.0)[0] is CUSTOM
