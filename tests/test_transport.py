"""NCCL's intra-node transport as a mechanism (issue 29 item 1): the transport a ring takes from the
topology a profile states, host-memory and socket-link sharing as GPUs are added, NCCL's protocol
and algorithm choice, and golden cases from public P2P-disabled nccl-tests tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from laddersim.costs import transport
from laddersim.costs.allreduce import allreduce_time_s
from laddersim.costs.collectives import bandwidth_share, collective_choice
from laddersim.hardware.profile import load_profile, profiles_dir
from laddersim.hardware.sourced import Sourced
from laddersim.hardware.transport_spec import NodeTopology


@pytest.fixture(scope="module")
def off():
    return load_profile("h100-sxm-p2p-off")


def _topology(**kw):
    base = {"p2p": "enabled", "gpu_links": "pcie", "gpus_per_pcie_switch": Sourced(value=4, source="test"),
            "gpus_per_socket": Sourced(value=4, source="test"), "source": "test"}
    return NodeTopology(**(base | kw))


def _with(profile, **topology):
    spec = profile.collectives.transport.model_copy(update={"topology": _topology(**topology)})
    return spec


def test_transport_follows_the_topology(off):
    assert transport.ring_transport(_with(off, p2p="disabled", gpu_links="nvlink"), 2) == "shm"
    assert transport.ring_transport(_with(off, gpu_links="nvlink"), 8) == "p2p_nvlink"
    pcie = _with(off)  # 4 GPUs behind a switch: P2P within it (NCCL's PXB level), SHM beyond
    assert [transport.ring_transport(pcie, n) for n in (2, 4, 8)] == ["p2p_pcie", "p2p_pcie", "shm"]


def test_ll128_only_over_nvlink():
    assert "ll128" in transport.protocols("p2p_nvlink")
    for name in ("p2p_pcie", "shm"):
        assert transport.protocols(name) == ("ll", "simple")


def test_host_memory_and_socket_link_are_shared(off):
    """Simple's SHM busbw: each GPU's rate while host memory has room, then host memory split over
    the ring's GPUs on a socket, and the socket link once the ring spans two sockets."""
    spec = off.collectives.transport
    shm = spec.shm.model_copy(update={"host_memory_bandwidth_gb_per_s": Sourced(value=120, source="test"),
                                      "simple_bus_bandwidth_gb_per_s": Sourced(value=24.0, source="test")})
    spec = spec.model_copy(update={"shm": shm, "topology": _topology(gpus_per_socket=Sourced(value=4, source="test"))})
    rates = [transport.shm_simple_bus_bandwidth_gb_per_s(spec, n) for n in (2, 3, 4, 8)]
    assert rates[0] == pytest.approx(min(24.0, 120 / 4))  # 2 GPUs: 2 x 2 x busbw through one socket's memory
    assert rates[2] == pytest.approx(120 / 8)  # 4 GPUs on one socket share its memory
    assert rates[3] == pytest.approx(min(120 / 8, spec.shm.socket_link_bandwidth_gb_per_s.value))


@settings(max_examples=40, deadline=None)
@given(host=st.floats(10, 1000), per_socket=st.integers(1, 8), link=st.floats(5, 100))
def test_shm_bandwidth_never_grows_as_gpus_are_added(off, host, per_socket, link):
    spec = off.collectives.transport
    shm = spec.shm.model_copy(update={"host_memory_bandwidth_gb_per_s": Sourced(value=host, source="test"),
                                      "socket_link_bandwidth_gb_per_s": Sourced(value=link, source="test")})
    spec = spec.model_copy(update={"shm": shm, "topology": _topology(gpus_per_socket=Sourced(value=per_socket, source="test"))})
    rates = [transport.shm_simple_bus_bandwidth_gb_per_s(spec, n) for n in range(2, 17)]
    assert all(b <= a + 1e-12 for a, b in zip(rates, rates[1:]))


def test_nccl_picks_shm_ll_for_decode_and_nvls_for_prefill(off):
    """P2P off on an NVSwitch node: small messages stay on the SHM ring's LL (NCCL costs NVLS at
    25 us), MiB messages go to NVLS, which needs more than 2 GPUs; 2 GPUs stay on SHM."""
    assert collective_choice(off, 8, 4 * 1024) == ("ring", "ll")
    assert collective_choice(off, 4, 16 * 1024) == ("ring", "ll")
    assert collective_choice(off, 8, 64 * 2**20) == ("nvls", "simple")
    assert collective_choice(off, 4, 64 * 2**20) == ("nvls", "simple")
    assert collective_choice(off, 2, 64 * 2**20) == ("ring", "simple")
    # What NCCL picks is priced as it really runs: its SHM LL is slower than NCCL's estimate.
    sizes = np.array([4 * 1024.0])
    real = transport.candidates_s(off, 8, sizes, lambda s: s)
    estimate = transport.nccl_estimates_s(off, 8, sizes, real)
    assert real[("ring", "ll")][0] > estimate[("ring", "ll")][0]
    assert allreduce_time_s(off, 8, sizes)[0] == pytest.approx(real[("ring", "ll")][0])


def test_p2p_off_costs_more_than_nvlink_and_two_gpus_most_at_large_sizes(off):
    on = load_profile("h100-sxm-nvswitch")
    for gpus in (2, 4, 8):
        for size in (2**10, 2**16, 2**20):
            assert allreduce_time_s(off, gpus, np.array([float(size)]))[0] > allreduce_time_s(on, gpus, np.array([float(size)]))[0]
    big = np.array([256.0 * 2**20])  # no NVLS for 2 GPUs: the host-staged ring's Simple bandwidth
    slow = allreduce_time_s(off, 2, big)[0] / allreduce_time_s(on, 2, big)[0]
    assert slow > 5 and allreduce_time_s(off, 8, big)[0] / allreduce_time_s(on, 8, big)[0] < 2


def test_interference_stretches_only_the_time_above_the_picked_transports_floor(off):
    """Issue 37 item 2: 16 KiB on 8 GPUs with P2P off goes to NVLS, whose latency (the 8-GPU lines'
    least at one byte, 48.78 us) the GEMMs beside it do not stretch; only the 2.9 us its bytes take
    are bandwidth-bound. A one-byte message would take the SHM ring's LL (37.5 us): measured from
    that floor, 11 us of NVLS latency counted as slowable bandwidth time (a share 5x larger)."""
    size = 16 * 1024.0
    assert collective_choice(off, 8, size) == ("nvls", "simple")
    lines = [t for t in off.collectives.transport.nvls if t.gpus == 8]

    def nvls_us(s: float) -> float:  # the switch's curve: the least of its lines, 2(n-1)/n of s moved
        return min(t.latency_us + 1.75 * s / (t.bus_bandwidth_gb_per_s * 1e3) for t in lines)
    expected = 1.0 - nvls_us(1.0) / nvls_us(size)
    assert bandwidth_share(off, 8, size) == pytest.approx(expected, rel=1e-9)
    assert 0.05 < expected < 0.06
    one_byte_us = allreduce_time_s(off, 8, np.array([1.0]))[0] * 1e6
    assert one_byte_us == pytest.approx(6.6 + 14 * off.collectives.transport.shm.ll_hop_latency_us.value, rel=1e-3)
    assert 1.0 - one_byte_us / nvls_us(size) > 4 * expected
    # where the SHM ring carries the message, its floor is the ring's own one-byte time, as before
    assert collective_choice(off, 8, 4096.0) == ("ring", "ll")
    floor_s, time_s = allreduce_time_s(off, 8, np.array([1.0, 4096.0]))
    assert bandwidth_share(off, 8, 4096.0) == pytest.approx(1.0 - floor_s / time_s, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(gpus=st.integers(2, 8), log2_size=st.floats(0.0, 30.0))
def test_bandwidth_share_is_a_share_and_follows_the_pick(off, gpus, log2_size):
    """Between 0 and 1 at every size; equal to the one-byte-floor share wherever NCCL picks for
    the message what it picks for one byte (the same candidate, the same floor)."""
    size = float(2.0 ** log2_size)
    share = bandwidth_share(off, gpus, size)
    assert 0.0 <= share < 1.0
    if collective_choice(off, gpus, size) == collective_choice(off, gpus, 1.0):
        floor_s, time_s = allreduce_time_s(off, gpus, np.array([1.0, size]))
        assert share == pytest.approx(max(0.0, 1.0 - floor_s / time_s), rel=1e-9, abs=1e-12)


def _public(table: str) -> pd.DataFrame:
    frame = pd.read_csv(profiles_dir() / "tables" / "nccltests_shm_p2p_off_public.csv", comment="#")
    return frame[frame["table"] == table]


def test_golden_rtx5090_4gpu_simple_rows_follow_nccls_simple_latency(off):
    """4x RTX 5090 through host memory (NVIDIA/nccl-tests#287, NCCL 2.26.2, P2P unsupported: SHM):
    the SHM ring's Simple with NCCL's own latency (8.4 us + 6 PCI hops of 5.7 us, tuning.cc, not
    fitted) and that host's bandwidth, read from the table's 32-128 MiB rows alone (27.3 GB/s),
    predicts its 512 KiB-16 MiB rows, where the latency is up to 40% of the time, within 8%."""
    rows = pd.read_csv(profiles_dir() / "tables" / "nccltests_shm_rtx5090_4gpu.csv", comment="#")
    big = rows[rows["size_bytes"] >= 32 * 2**20]
    moved = 1.5 * big["size_bytes"].to_numpy()  # 2(n-1)/n of each rank's buffer, 4 GPUs
    slope_us_per_byte = np.polyfit(moved, big["time_us"].to_numpy(), 1)[0]
    busbw = 1e-3 / slope_us_per_byte
    assert 26.0 < busbw < 29.0
    host = off.collectives.transport
    shm = host.shm.model_copy(update={"simple_bus_bandwidth_gb_per_s": Sourced(value=busbw, source="test: its 32-128 MiB rows"),
                                      "host_memory_bandwidth_gb_per_s": Sourced(value=1e4, source="test: not binding")})
    genoa = off.model_copy(update={"collectives": off.collectives.model_copy(update={"transport": host.model_copy(
        update={"shm": shm, "topology": _topology(p2p="disabled", gpus_per_socket=Sourced(value=4, source="test"))})})})
    mid = rows[(rows["size_bytes"] >= 2**19) & (rows["size_bytes"] <= 2**24)]
    simple = transport.shm_candidates_s(genoa, 4, mid["size_bytes"].to_numpy())[("ring", "simple")] * 1e6
    assert np.abs(simple / mid["time_us"].to_numpy() - 1.0).max() < 0.08
    latency_share = (8.4 + 6 * 5.7) / mid["time_us"].to_numpy()
    assert latency_share.max() > 0.4  # the rows test the latency, not only the bandwidth


def test_golden_public_shm_floors_follow_one_hop_latency(off):
    """The LL ring's floor, NCCL's ring LL base (6.6 us) + 2(n-1) host-staged hops, against every
    public SHM table's floor (<= 1 KiB; 2, 4 and 8 GPUs, six hosts): the profile's hop is their
    least-squares hop (tools/fits/fit_shm_transport.py), the 8-GPU table (14 hops, 8x RTX 4090 SYS)
    is met within 5%, and every host within 30% (the 2x A100 and 4x RTX 5090 hosts at the ends)."""
    frames = [_public(t) for t in ("a100sxm_2gpu_shm", "rtx4090_8gpu_sys_shm", "rtx2080ti_2gpu_shm")]
    for name in ("nccltests_rtx4090_2gpu_docker", "nccltests_rtx4090_4gpu_docker", "nccltests_shm_rtx5090_4gpu"):
        frames.append(pd.read_csv(profiles_dir() / "tables" / f"{name}.csv", comment="#").assign(table=name))
    floors = {(f["table"].iloc[0], int(f["gpus"].iloc[0])): float(f[f["size_bytes"] <= 1024]["time_us"].min())
              for f in frames}
    steps = np.array([2.0 * (gpus - 1) for _, gpus in floors])
    least_squares_hop = float(((np.array(list(floors.values())) - 6.6) * steps).sum() / (steps ** 2).sum())
    assert off.collectives.transport.shm.ll_hop_latency_us.value == pytest.approx(least_squares_hop, abs=0.01)
    errors = {key: transport.shm_candidates_s(off, key[1], np.array([8.0]))[("ring", "ll")][0] * 1e6 / floor - 1.0
              for key, floor in floors.items()}
    assert len(errors) == 6
    assert abs(errors[("rtx4090_8gpu_sys_shm", 8)]) < 0.05
    assert max(abs(e) for e in errors.values()) < 0.30, errors


def test_every_transport_constant_cites_its_data(off):
    spec = off.collectives.transport
    sources = [v.source for part in (spec.shm, spec.nccl_graph) for v in part.__dict__.values()]
    sources += [t.source for t in spec.nvls] + [spec.topology.source]
    assert all(len(s) > 30 for s in sources)
    assert "tools/fits/fit_shm_transport.py" in spec.shm.ll_hop_latency_us.source
    assert "nccltests_shm_p2p_off_public.csv" in spec.shm.simple_bus_bandwidth_gb_per_s.source


def test_shipped_pcie_profiles_state_their_topology():
    """Each PCIe profile's stated topology gives its rings' transports: P2P behind a switch, NVLink
    within a bridged pair, host-staged SHM once a ring leaves the switch; a measured fit wins."""
    h100 = load_profile("h100-pcie").collectives.transport
    assert [transport.ring_transport(h100, n) for n in (2, 4, 8)] == ["p2p_pcie", "p2p_pcie", "shm"]
    pairs = load_profile("a100-pcie-nvlink-pairs").collectives.transport
    assert [transport.ring_transport(pairs, n) for n in (2, 4, 8)] == ["p2p_nvlink", "shm", "shm"]
    l40s = load_profile("l40s-pcie")
    assert [transport.ring_transport(l40s.collectives.transport, n) for n in (2, 4, 8)] == ["p2p_pcie", "shm", "shm"]
    # h100-pcie at 8 GPUs crosses its sockets: Simple at the socket link's bandwidth, slower than at 4
    pcie = load_profile("h100-pcie")
    big = np.array([256.0 * 2**20])
    per_byte = [allreduce_time_s(pcie, n, big)[0] / (2 * (n - 1) / n) for n in (4, 8)]
    assert per_byte[1] > 1.5 * per_byte[0]


def test_golden_l40s_eight_gpu_allreduce_from_the_transport_by_hand():
    """l40s-pcie prices 8 GPUs from NCCL's SHM ring over its links (its measured node's 8-GPU rows
    are degraded and not taken): a 32 MiB prefill AllReduce by hand. Ring over two switches and two
    sockets -> SHM; NCCL's tuner estimates the path as PCI (12 GB/s, 1 channel): LL 6.6 + 14 x 1.0 us
    + 58.7 MB / 6 GB/s = 9.81 ms, Simple 8.4 + 14 x 5.7 us + 58.7 MB / 12 GB/s = 4.98 ms -> Simple;
    Simple really runs at min(13.6 GB/s SHM rate, 245 / (2 x 4) host memory, 22 socket link) = 13.6:
    8.4 + 14 x 5.7 = 88.2 us + 2 x 7/8 x 32 MiB / 13.6 GB/s = 4317.7 us -> 4405.9 us (busbw 13.3 GB/s
    against the measured node's 1.45). 2 GPUs keep their measured table (P2P behind one switch)."""
    l40s = load_profile("l40s-pcie")
    size = 32.0 * 2**20
    assert transport.prices(l40s, 8) and transport.prices(l40s, 4) and not transport.prices(l40s, 2)
    assert collective_choice(l40s, 8, size) == ("ring", "simple")
    by_hand_s = (8.4 + 14 * 5.7) * 1e-6 + 2 * 7 / 8 * size / 13.6e9
    assert float(allreduce_time_s(l40s, 8, np.array([size]))[0]) == pytest.approx(by_hand_s, rel=1e-9)
    assert by_hand_s == pytest.approx(4405.9e-6, abs=0.1e-6)
    # 4 GPUs on one socket: the same ring rate, 6 hops
    four_s = (8.4 + 6 * 5.7) * 1e-6 + 2 * 3 / 4 * size / 13.6e9
    assert float(allreduce_time_s(l40s, 4, np.array([size]))[0]) == pytest.approx(four_s, rel=1e-9)
    # 2 GPUs: the measured row itself (tables/aic_l40s_nccl_2.27.3_2gpu.csv, 32 MiB: 1689.3 us),
    # the full table's 2-GPU rows exactly; the full table is only a check
    assert float(allreduce_time_s(l40s, 2, np.array([size]))[0]) == pytest.approx(1689.3e-6, rel=1e-9)
    tables = profiles_dir() / "tables"
    full = pd.read_csv(tables / "aic_l40s_nccl_2.27.3.csv", comment="#")
    two = pd.read_csv(tables / "aic_l40s_nccl_2.27.3_2gpu.csv", comment="#")
    pd.testing.assert_frame_equal(full[full["gpus"] == 2].reset_index(drop=True), two)
    assert {t.file: t.use for t in l40s.collectives.tables}["tables/aic_l40s_nccl_2.27.3.csv"] == "check"
