"""The AllReduce model: closed-form goldens, properties, and a sample of the measured-table
comparisons of `laddersim profiles check` (shipped rows, so no ../shared needed) as regressions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laddersim.costs import transport
from laddersim.costs.allreduce import allreduce_time_s
from laddersim.costs.collectives import fit_time_s
from laddersim.costs.scaling.view import LinkScale
from laddersim.hardware.overrides import with_overrides
from laddersim.hardware.comm_specs import ProtocolTerm, TierFit
from laddersim.hardware.profile import load_profile
from laddersim.profiles_check.compare import check_allreduce
from laddersim.fitting.curve_fits import fit_protocol_terms

MIB = 1 << 20


def _group(profile_name: str, table_stem: str, gpus: int, nodes: int):
    checks = check_allreduce(load_profile(profile_name), force_shipped=True)
    return next(c for c in checks if c.table.file.endswith(f"{table_stem}.csv") and c.gpus == gpus and c.nodes == nodes)


@pytest.mark.parametrize("profile,table,gpus,nodes", [
    ("h100-sxm-nvswitch", "aic_h100_sxm_nccl_2.29.2", 8, 1),
    ("h100-sxm-nvswitch", "aic_h100_sxm_nccl_2.29.2", 2, 1),
    ("h100-sxm-nvswitch", "nccltests_aws_p5_h100_1node", 8, 1),
    ("h100-sxm-nvswitch", "nccltests_h100_cluster_10node_8gpn", 80, 10),
    ("h100-sxm-nvswitch", "nccltests_h100_cluster_2node_1gpn", 2, 2),
    ("h100-sxm-nvswitch", "tokenweave_h100_fig5", 8, 1),
    ("h200-sxm-nvswitch", "apex_h200_sxm", 8, 1),
    ("h200-sxm-nvswitch", "stas00_h200_1node", 8, 1),
    ("b200-sxm-nvswitch", "aic_b200_sxm_nccl_2.29.2", 8, 1),
    ("b200-sxm-nvswitch", "aic_b200_sxm_nccl_2.29.2", 2, 1),
    ("a100-sxm-nvswitch", "aic_a100_sxm_nccl_2.27.3", 4, 1),
    ("l40s-pcie", "aic_l40s_nccl_2.27.3", 2, 1),
])
def test_model_reproduces_measured_table(profile, table, gpus, nodes):
    """Acceptance of issue 3: median |rel err| <= 10%, worst <= 30% over 4 KiB-256 MiB."""
    c = _group(profile, table, gpus, nodes)
    assert len(c.rows) >= 4
    assert c.model_median <= 0.10, c.rows
    assert c.model_worst <= 0.30, c.rows


def test_p2p_off_point_and_slowdown():
    """Ladder paper: 8-GPU 4 MiB AllReduce, 135.4 us P2P off (78.6 us on), single eager call. With
    P2P off NCCL leaves the host-staged ring for the switch's NVLS at MiB sizes on 8 GPUs, at what
    the authors' paired runs and this point measure NVLS to take there (the profile's 8-GPU NVLS
    lines, tools/fits/fit_p2p_off_transport.py --lines): the point is met within 5%, twice the P2P-on
    time; with 2 GPUs (no NVLS) the host-staged ring is many times slower than NVLink."""
    c = _group("h100-sxm-p2p-off", "ladder_paper_p2p_off_point", 8, 1)
    assert c.model_median <= 0.05 and c.table.use == "check" and c.passes and not c.table.expect_miss
    on, off = load_profile("h100-sxm-nvswitch"), load_profile("h100-sxm-p2p-off")
    assert allreduce_time_s(off, 8, 4 * MIB) > 1.8 * allreduce_time_s(on, 8, 4 * MIB)
    assert allreduce_time_s(off, 2, 4 * MIB) > 5 * allreduce_time_s(on, 2, 4 * MIB)


def test_expected_misses_stay_explained():
    """A table that misses must carry its reason (the report shows it); the EFA table misses."""
    for name in ("h100-sxm-nvswitch", "a100-sxm-nvswitch", "b200-sxm-nvswitch"):
        for c in check_allreduce(load_profile(name), force_shipped=True):
            if len(c.rows) and not c.outside_window and not c.passes:
                assert c.table.expect_miss, (name, c.table.file, c.gpus, c.nodes)
    efa = _group("h100-sxm-nvswitch", "nccltests_aws_p5_h100_2node_efa", 16, 2)
    assert not efa.passes and "EFA" in efa.table.expect_miss


@pytest.mark.parametrize("name", ["h200-sxm-nvswitch", "b200-sxm-nvswitch"])
def test_intra_node_fits_are_what_profiles_fit_prints(name):
    """The shipped protocol lines are the fit ``laddersim profiles fit NAME`` makes to the
    profile's own NCCL table (to the digits each states: busbw within 0.2% or 0.005 GB/s)."""
    from laddersim.fitting.public_tables import fit_intra_node

    profile = load_profile(name)
    fitted = {f.gpus: f for f in fit_intra_node(profile)}
    assert sorted(fitted) == [f.gpus for f in profile.collectives.intra_node_fits] == [2, 4, 8]
    for stated in profile.collectives.intra_node_fits:
        assert stated.source == fitted[stated.gpus].source
        pairs = list(zip(stated.terms, fitted[stated.gpus].terms, strict=True))
        for a, b in pairs:
            assert a.protocol == b.protocol
            assert a.latency_us == pytest.approx(b.latency_us, abs=5e-3)
            assert a.bus_bandwidth_gb_per_s == pytest.approx(b.bus_bandwidth_gb_per_s, rel=2e-3, abs=5e-3)


def test_b200_nccl_allreduce_is_its_table_at_the_tables_sizes():
    """Golden, AIConfigurator b200_sxm nccl_perf 2.29.2 (tables/aic_b200_sxm_nccl_2.29.2.csv, an
    nccl-tests loop: no launch to add on a graph-mode profile): 8 GPUs 1 MiB 30.14 us, 2 GPUs 4 KiB
    10.27 us, 4 GPUs 8 MiB 84.91 us (a step the fitted lines miss: 57.5 us)."""
    from laddersim.costs.allreduce import allreduce_source
    from laddersim.costs.gemm_tables import SILICON
    from laddersim.model.framework import load_framework

    b200 = load_profile("b200-sxm-nvswitch")
    for gpus, size, table_us in ((8, MIB, 30.14), (2, 4096, 10.27), (4, 8 * MIB, 84.91)):
        assert allreduce_time_s(b200, gpus, size) == pytest.approx(table_us * 1e-6, rel=1e-9)
        assert allreduce_source(b200, gpus, size, load_framework("gpt-fast")) == SILICON
    assert allreduce_time_s(b200, 4, 8 * MIB, measured=False) == pytest.approx(57.47e-6, rel=1e-3)


def test_fit_time_is_min_of_protocol_lines():
    fit = TierFit(gpus=4, source="golden", terms=[
        ProtocolTerm(protocol="ll", latency_us=10, bus_bandwidth_gb_per_s=10),
        ProtocolTerm(protocol="simple", latency_us=50, bus_bandwidth_gb_per_s=300)])
    size = np.array([1e3, 1e8])
    moved = 1.5 * size
    expected = np.minimum(10e-6 + moved / 10e9, 50e-6 + moved / 300e9)
    np.testing.assert_allclose(fit_time_s(fit, size), expected)
    np.testing.assert_allclose(fit_time_s(fit, 1e3, LinkScale(latency=2.0)), 20e-6 + 1.5e3 / 10e9)


def test_fit_recovers_synthetic_protocol_lines():
    size = 2.0 ** np.arange(9, 30)
    truth = np.minimum(8 + 1.75 * size / (20 * 1e3), 40 + 1.75 * size / (400 * 1e3))
    pairs = fit_protocol_terms(8, size, truth)
    model = np.min([a + 1.75 * size / (b * 1e3) for a, b in pairs], axis=0)
    assert np.max(np.abs(model / truth - 1)) < 0.02


def test_multi_node_never_faster_than_its_intra_node_part():
    """Hierarchical = intra-node AllReduce of the full buffer + the inter-node shard: a
    single-node table is never stretched across nodes."""
    prof = load_profile("h100-sxm-nvswitch")
    size = np.geomspace(4096, 256 * MIB, 30)
    two_nodes = allreduce_time_s(prof, 16, size)
    one_node = allreduce_time_s(prof, 8, size)
    assert np.all(two_nodes > one_node)


@settings(max_examples=30, deadline=None)
@given(size=st.floats(min_value=512, max_value=2**30), scale=st.floats(min_value=1.0, max_value=8.0),
       tp=st.sampled_from([2, 4, 8, 16]))
def test_more_bandwidth_is_never_slower(size, scale, tp):
    prof = load_profile("h100-sxm-nvswitch")
    fast = with_overrides(prof, intra_bandwidth_scale=scale, inter_bandwidth_scale=scale)
    assert allreduce_time_s(fast, tp, size) <= allreduce_time_s(prof, tp, size) * (1 + 1e-12)


@pytest.mark.parametrize("name", ["h100-sxm-nvswitch", "a100-sxm-nvswitch", "l40s-pcie", "b200-sxm-nvswitch"])
def test_fitted_curves_grow_with_size(name):
    prof = load_profile(name)
    size = np.geomspace(512, 2**30, 200)
    for gpus in (2, 4, 8):
        if transport.prices(prof, gpus):
            # not a fitted curve: NCCL's tuner picks by its own estimates, and its LL -> Simple
            # switch on an SHM ring can land on a faster real time (test_transport.py covers it)
            continue
        t = allreduce_time_s(prof, gpus, size, nodes=1, measured=False)
        assert np.all(np.diff(t) >= 0)
