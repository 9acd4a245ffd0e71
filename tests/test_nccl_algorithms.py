"""NCCL's multi-node AllReduce model (laddersim.costs.nccl_algorithms): closed-form cases and
hypothesis properties over every shipped profile with a network."""

from __future__ import annotations

import math

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laddersim.fitting.nccl_tests import implausible_row, parse_log
from laddersim.costs import nccl_algorithms
from laddersim.costs.allreduce import allreduce_time_s
from laddersim.costs.collectives import collective_choice, slowdowns, table_offset
from laddersim.hardware.profile import list_profiles, load_profile
from laddersim.hardware.overrides import with_overrides
from laddersim.errors import UserInputError

NETWORKED = [name for name in list_profiles() if load_profile(name).network is not None]
SETTINGS = settings(max_examples=15, deadline=None)


def test_tree_latency_is_nccls_formula():
    """16 KiB on 2 nodes x 8 H100 over IB: tree/LL, 6.8 + 2 x (7 x 1.0 + 1 x (5.0 + 2.24)) us plus
    the LL transfer at NCCL's llMaxBw (39 GB/s, a bus bandwidth) converted to the tree's algorithm
    bandwidth (x 0.5: tuning.cc "Convert bus BW to algorithm BW", ratio .5 for Tree) times its tree
    correction at 16 KiB (treeCorrectionFactor[LL][log2(16384 / 64) = 8] = 0.7) (NCCL tuning.cc,
    Tables A/B/C)."""
    h100 = load_profile("h100-sxm-nvswitch")
    size = 16384.0
    assert collective_choice(h100, 16, size) == ("tree", "ll")
    expected_s = (6.8 + 2 * (7 * 1.0 + 1 * (5.0 + 2.24))) * 1e-6 + size / (0.7 * 0.5 * 39e9)
    assert float(nccl_algorithms.model_s(h100, 8, 2, [size])[0]) == pytest.approx(expected_s, rel=1e-9)


def test_tree_caps_are_bus_bandwidths_halved_for_the_tree():
    """NCCL caps a protocol's bus bandwidth (llMaxBw 39 GB/s for LL on 2 Intel-hosted nodes; the
    profile's LL128 cap) and then halves a tree's (its algorithm bandwidth is busBw x 0.5,
    tuning.cc lines 376-381 of ../shared/reference_data/p2p_off_pcie/raw/nccl_tuning_cc_HEAD.cc), so a
    256 KiB tree/LL AllReduce over 2 x 8 H100 moves at 19.5 GB/s times NCCL's tree correction
    at 256 KiB (0.4): 33.6 us of transfer, and tree/LL128 at half the profile's 150 GB/s cap
    times 0.6: 5.8 us; a ring keeps its cap as a bus bandwidth (2(n-1)/n x S over it)."""
    h100 = load_profile("h100-sxm-nvswitch")
    size = 262144.0
    times = nccl_algorithms.candidates_s(h100, 8, 2, np.array([size]))
    ll_latency_s = (6.8 + 2 * (7 * 1.0 + 1 * (5.0 + 2.24))) * 1e-6
    assert float(times[("tree", "ll")][0]) == pytest.approx(ll_latency_s + size / (0.4 * 19.5e9), rel=1e-9)
    ll128_latency_s = (14.0 + 2 * (7 * 1.25 + 1 * (8.5 + 2.24))) * 1e-6
    assert float(times[("tree", "ll128")][0]) == pytest.approx(ll128_latency_s + size / (0.6 * 75e9), rel=1e-9)
    ring_ll_latency_s = (6.6 + 2 * (2 * (2.7 + 2.24) + 14 * 1.0)) * 1e-6
    ring_ll_s = ring_ll_latency_s + 2 * 15 / 16 * size / 39e9
    assert float(times[("ring", "ll")][0]) == pytest.approx(ring_ll_s, rel=1e-9)


@pytest.mark.parametrize("size,protocol,factor", [
    (32.0, 0, 1.0), (64.0, 0, 1.0), (1024.0, 0, 0.9), (4096.0, 0, 0.7), (524288.0, 0, 0.4), (524288.0, 1, 0.6),
    (2048.0, 1, 0.9), (4194304.0, 1, 0.8), (524288.0, 2, 0.5), (2.0**28, 2, 0.9), (2.0**29, 2, 1.0),
    (2.0**34, 1, 1.0), (1048575.0, 2, 0.5),
])
def test_tree_correction_is_nccls_table(size, protocol, factor):
    """NCCL's treeCorrectionFactor[protocol][floor(log2(bytes / 64))], 1 outside 64 B - 512 MiB
    (src/graph/tuning.cc at HEAD: ../shared/reference_data/p2p_off_pcie/raw/nccl_tuning_cc_HEAD.cc
    lines 623-627; LL128 is 0.9 at 2 KiB, 0.6 from 64 KiB to 2 MiB, 0.8 at 4 MiB)."""
    assert float(nccl_algorithms.tree_correction(protocol, size)) == pytest.approx(factor)


@pytest.mark.parametrize("table", ["nccltests_aws_p5_h100_2node_efa.csv", "nccltests_gcp_a3mega_h100_2node_tcpxo.csv"])
def test_two_node_medium_messages_rise_as_measured(table):
    """Golden from the public 2 nodes x 8 H100 sweeps (shipped rows): from 4 KiB to 512 KiB, a
    decode AllReduce's batch sizes, time rises 45 us over EFA and 47 us over TCPXO, two fabrics
    with different floors (79 / 127 us): the rise is the algorithm's, not the fabric's latency.
    The IB model rises 29 us: LL at half NCCL's llMaxBw (the tree's algorithm bandwidth) times
    its tree correction (0.4 at 256-512 KiB) until tree/LL128 takes over. The IB NICs are faster
    than either fabric, so the model stays below the sweeps' rise, never above it."""
    rows = pd.read_csv(Path(load_profile("h100-sxm-nvswitch").base_dir) / "tables" / table, comment="#")
    rows = rows[(rows["gpus"] == 16) & (rows["nodes"] == 2)].set_index("size_bytes")["time_us"] * 1e-6
    measured_rise_s = rows[524288] - rows[4096]
    model = allreduce_time_s(load_profile("h100-sxm-nvswitch"), 16, np.array([4096.0, 524288.0]), nodes=2,
                             measured=False)
    assert 0.4 * measured_rise_s < model[1] - model[0] < measured_rise_s


def test_ll128_only_where_the_node_path_is_nvlink():
    """NCCL enables LL128 for a graph whose intra-node path is NVLink (tuning.cc: pEnable &=
    typeIntra <= PATH_NVB): across 2 nodes of 8 H100 with P2P on, ring and tree offer it; under
    NCCL_P2P_DISABLE the node's GPUs reach each other through host memory (SHM), so only LL and
    Simple remain (and NVLS-tree, the switch's reduction); one GPU a node crosses no such path."""
    on, off = load_profile("h100-sxm-nvswitch"), load_profile("h100-sxm-p2p-off")
    size = np.array([262144.0])
    assert {("ring", "ll128"), ("tree", "ll128")} <= set(nccl_algorithms.candidates_s(on, 8, 2, size))
    assert {p for _, p in nccl_algorithms.candidates_s(off, 8, 2, size)} == {"ll", "simple"}
    assert nccl_algorithms.ll128_offered(off, 1) and not nccl_algorithms.ll128_offered(off, 8)


def test_a_tree_across_nodes_fills_a_channel_per_4_kib_whatever_the_ranks():
    """NCCL multiplies only a ring's LL thread threshold by the ranks (tuning.cc:
    threadThresholds[RING][LL] *= nRanks; a channel needs threshold x threads, LL's 8 B x 512):
    a 32 KiB decode AllReduce over 2 x 8 H100 runs as tree/LL on 32768 / 4096 = 8 of the 32
    channels and slows the GEMMs beside it by 8/32 of the full-size slowdown (0.1), where a ring
    over the same 16 ranks (16 x 4096 B a channel) would take 1 channel; one node keeps its
    per-rank rule (16 KiB on 8 GPUs: 1 channel)."""
    h100 = load_profile("h100-sxm-nvswitch")
    full = h100.interference.compute_slowdown.value
    assert collective_choice(h100, 16, 32768.0) == ("tree", "ll")
    assert slowdowns(h100, 16, 32768.0)[0] == pytest.approx(full * 8 / 32)
    assert h100.interference.channel_share(32768.0, 16, per_rank=False) == 8 / 32
    assert h100.interference.channel_share(32768.0, 16) == 1 / 32  # a ring's rule
    raw = h100.model_dump(exclude={"base_dir"})
    raw["collectives"]["algorithms"] = ["ring"]
    ring_only = type(h100).model_validate({**raw, "base_dir": h100.base_dir})
    assert collective_choice(ring_only, 16, 32768.0)[0] == "ring"
    assert slowdowns(ring_only, 16, 32768.0)[0] == pytest.approx(full / 32)
    assert slowdowns(h100, 8, 16384.0)[0] == pytest.approx(full / 32)


def test_decode_allreduce_grows_logarithmically_with_nodes():
    """The issue's case: 16 KiB took 40 us on 2 nodes and 259 us on 4 (flat ring); the tree's
    depth is log2(nodes), so 4 nodes add one network hop each way."""
    h100 = load_profile("h100-sxm-nvswitch")
    t = {tp: float(allreduce_time_s(h100, tp, np.array([16384.0]))[0]) * 1e6 for tp in (16, 32, 64)}
    assert t[32] < 1.6 * t[16] and t[64] < 1.6 * t[32]
    assert t[32] - t[16] < 25.0


def test_profile_names_its_algorithms():
    assert "nvls" in load_profile("h100-sxm-nvswitch").collectives.algorithms
    for name in ("h100-pcie", "l40s-pcie"):
        assert not {"nvls", "nvls_tree"} & set(load_profile(name).collectives.algorithms)
    # NCCL_P2P_DISABLE leaves the switch's reduction: one-node NVLS stays (laddersim.costs.transport)
    assert set(load_profile("h100-sxm-p2p-off").collectives.algorithms) == {"ring", "tree", "nvls", "nvls_tree"}
    raw = load_profile("h100-pcie").model_dump(exclude={"base_dir"})
    raw["collectives"]["algorithms"] = ["ring", "nvls"]
    with pytest.raises(ValueError, match="nvswitch"):
        type(load_profile("h100-pcie")).model_validate(raw)


def test_nvls_tree_reduces_in_the_switch_under_p2p_disable():
    """2 nodes x 8 H100 with NCCL_P2P_DISABLE: NVLS-tree's node part is the switch's reduction at
    the transport's best stated NVLS bandwidth (8 GPUs), not the SHM ring's host-staged rate: a
    32 MiB prefill AllReduce is 25 + 2 x (20.9 + 2 x 2.24) us (NCCL's NVLS-tree latencies,
    Simple's fabric hop twice) + max(S / (8 NICs x 46 GB/s), 1.75 S / that bandwidth), and never
    less than the node's own AllReduce (what NVLS takes there with P2P off) plus the network's
    least latency. Without NVLS-tree it falls to the SHM path (ring/Simple), over 10x slower."""
    off = load_profile("h100-sxm-p2p-off")
    size = 32.0 * 2**20
    assert collective_choice(off, 16, size) == ("nvls_tree", "simple")
    nvls_gbps = max(t.bus_bandwidth_gb_per_s for t in off.collectives.transport.nvls if t.gpus == 8)
    expected_s = (25.0 + 2 * (20.9 + 2 * 2.24)) * 1e-6 + max(size / (8 * 46e9), 1.75 * size / (nvls_gbps * 1e9))
    assert float(nccl_algorithms.model_s(off, 8, 2, [size])[0]) == pytest.approx(expected_s, rel=1e-9)
    node_s = float(allreduce_time_s(off, 8, np.array([size]))[0]) + nccl_algorithms.network_floor_s(off, 2)
    assert float(allreduce_time_s(off, 16, np.array([size]))[0]) == pytest.approx(max(expected_s, node_s), rel=1e-9)
    raw = off.model_dump(exclude={"base_dir"})
    raw["collectives"]["algorithms"] = ["ring", "tree", "nvls"]
    no_tree = type(off).model_validate({**raw, "base_dir": off.base_dir})
    assert collective_choice(no_tree, 16, size)[0] == "ring"
    assert float(allreduce_time_s(no_tree, 16, np.array([size]))[0]) > 10 * expected_s


def test_measured_multi_node_table_wins_at_its_shape_and_carries_its_offset():
    efa = load_profile("h100-sxm-aws-p5-efa")
    frame = next(f for t, f in efa.allreduce_tables if "efa" in t.file)
    sizes, times = frame["size_bytes"].to_numpy(), np.maximum.accumulate(frame["time_s"].to_numpy())
    assert np.allclose(allreduce_time_s(efa, 16, sizes), times, rtol=1e-9)  # its rows (a drop is noise)
    # 4 nodes: the model times the same offset (no step between the table and the model)
    ratio = table_offset(efa, 8, 4, sizes)
    assert np.allclose(ratio, times / allreduce_time_s(efa, 16, sizes, nodes=2, measured=False), rtol=1e-9)


@pytest.mark.parametrize("name", NETWORKED)
@SETTINGS
@given(exp=st.floats(0, 32), ratio=st.floats(1.0, 8.0), nodes=st.sampled_from([2, 3, 4, 8, 16, 32, 64]))
def test_time_non_decreasing_in_size(name, exp, ratio, nodes):
    prof = load_profile(name)
    tp = prof.node.gpus_per_node * nodes
    small, large = allreduce_time_s(prof, tp, np.array([2.0**exp, 2.0**exp * ratio]))
    assert large >= small * (1 - 1e-12)


@pytest.mark.parametrize("name", NETWORKED)
@SETTINGS
@given(exp=st.floats(0, 18), nodes=st.sampled_from([2, 3, 4, 8, 16, 32]))
def test_doubling_nodes_at_most_doubles_small_messages(name, exp, nodes):
    """From 2 nodes up (1 -> 2 nodes adds the network itself: NCCL's own model gives 15 us on one
    8-GPU NVSwitch node and 25-40 us on two, more than double). Up to 256 KiB: from 512 KiB to
    1 MiB, 2 -> 4 nodes of 8 H100 costs up to 2.5x (76 -> 155 us at 1 MiB), the 4-node trees'
    LL128/Simple being held at the fitted deep-tree share (network.tree_deep_bandwidth_share 0.1)
    and their LL at NCCL's halved llMaxBw times its tree correction (0.5 at 1 MiB)."""
    prof = load_profile(name)
    g = prof.node.gpus_per_node
    size = np.array([2.0**exp])  # up to 256 KiB
    before = float(allreduce_time_s(prof, g * nodes, size)[0])
    after = float(allreduce_time_s(prof, g * nodes * 2, size)[0])
    assert after <= 2.0 * before * (1 + 1e-9)


@pytest.mark.parametrize("name", NETWORKED)
@SETTINGS
@given(exp=st.floats(0, 32), nodes=st.sampled_from([2, 4, 8, 64]),
       scale=st.floats(1.0, 10.0), which=st.sampled_from(["bandwidth", "latency"]))
def test_more_bandwidth_or_less_latency_never_slower(name, exp, nodes, scale, which):
    prof = load_profile(name)
    tp = prof.node.gpus_per_node * nodes
    key = {"bandwidth": ("inter_bandwidth_scale", "intra_bandwidth_scale"),
           "latency": ("inter_latency_scale", "intra_latency_scale")}[which]
    factor = scale if which == "bandwidth" else 1.0 / scale
    better = with_overrides(prof, **{k: factor for k in key})
    size = np.array([2.0**exp])
    assert float(allreduce_time_s(better, tp, size)[0]) <= float(allreduce_time_s(prof, tp, size)[0]) * (1 + 1e-9)


def test_implausible_import_rows_are_refused(tmp_path):
    log = parse_log("tests/data/nccl_tests_logs/aws_p5_h100_2node_efa3200.log")
    assert implausible_row(log, 370.0) is None
    assert "exceeds 1.5x" in implausible_row(log, 100.0)
    log.rows[0].time_us = 2e6
    assert ">= 1 s" in implausible_row(log, 370.0)
    log.rows[0].time_us = math.nan
    assert "finite" in implausible_row(log, 370.0)
    with pytest.raises(UserInputError):
        raise UserInputError(implausible_row(log, 370.0))
