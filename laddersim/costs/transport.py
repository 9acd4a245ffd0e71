"""NCCL's intra-node transport as a mechanism (profiles with ``collectives.transport``).

Which transport a ring of ``n`` GPUs of one node uses follows from the topology the profile states,
as NCCL decides it (``src/transport.cc``: P2P, then SHM, then NET; ``src/graph/paths.cc``):

* P2P over NVLink where P2P is allowed and the GPUs share NVLink (a bridged pair: only 2 GPUs);
* P2P over PCIe where P2P is allowed and the ring stays behind one PCIe switch (NCCL's default
  P2P level PXB: not across host bridges or sockets);
* SHM through host memory otherwise, and for every pair under ``NCCL_P2P_DISABLE=1``.

Protocols (``src/graph/tuning.cc``): LL128 only on NVLink paths (``typeIntra <= PATH_NVB``); LL and
Simple everywhere. NVLS (the switch reduces, no P2P transport involved) where the node offers it
and the group has more than two GPUs (``src/transport/nvls.cc``: NVLS is off for 2 GPUs).

A group size with a fit of its own (``collectives.intra_node_fits``: a measurement of this
machine's collective, or ``laddersim fit``'s) keeps that fit; the mechanism prices the others.

Times: a P2P ring keeps the profile's fitted protocol lines (``collectives.intra_node_fits`` /
``intra_node``); an SHM ring is ``base + 2(n-1) hops + 2(n-1)/n S / busbw`` per protocol, its
Simple bandwidth the least of one GPU's SHM rate, its socket's host memory shared by the ring's
GPUs on it (each byte written and read once) and the socket link crossed twice by a ring over two
sockets; NVLS is the switch's own lines for the nearest stated GPU count (the least of them at each
size, as a fitted protocol curve: ``collectives.transport.nvls``). NCCL's tuner picks among them by
its own estimates (``nccl_estimates_s``: the SHM path costed as PCI, NVLS at 25 us and the switch's
bandwidth), not by what each really takes, so a message may run on a slower candidate than the
fastest.
"""

from __future__ import annotations

import math

import numpy as np

from laddersim.costs.nccl_tuning import BASE_LATENCY_US, INTRA_HOP_US, NVLS_INTRA_US
from laddersim.costs.scaling.view import links
from laddersim.hardware.profile import HardwareProfile
from laddersim.hardware.transport_spec import TransportSpec

TRANSPORTS = ("p2p_nvlink", "p2p_pcie", "shm", "net")
# llMaxBws single node, Hopper (NVIDIA/nccl src/graph/tuning.cc llMaxBws): LL's cap, GB/s.
LL_MAX_SINGLE_NODE_GB_PER_S = 141.0


def prices(profile: HardwareProfile, gpus: int) -> bool:
    """Does the mechanism price a one-node group of ``gpus``: the profile states its transport and
    has no fit of its own for that group size (a fit is a measurement and wins)."""
    return profile.collectives.transport is not None and profile.intra_node_fit(gpus) is None


def ring_transport(spec: TransportSpec, gpus: int) -> str:
    """The transport of a ring over ``gpus`` GPUs of one node (module docstring)."""
    topo = spec.topology
    if topo.p2p == "disabled":
        return "shm"
    if topo.gpu_links == "nvlink" or (topo.gpu_links == "nvlink_pairs" and gpus <= 2):
        return "p2p_nvlink"
    return "p2p_pcie" if gpus <= topo.gpus_per_pcie_switch.value else "shm"


def protocols(transport: str) -> tuple[str, ...]:
    """The protocols NCCL enables on a ring of this transport: LL128 only over NVLink (tuning.cc:
    LL128 needs ``typeIntra <= PATH_NVB``; a path through the CPU, as every SHM hop and every
    GPU pair under NCCL_P2P_DISABLE takes, and a PCIe switch path are beyond it)."""
    return ("ll", "ll128", "simple") if transport == "p2p_nvlink" else ("ll", "simple")


def ring_offers(profile: HardwareProfile) -> dict[str, tuple[str, ...]]:
    """The transports a one-node ring takes on the profile's node (2 GPUs to a full node), in
    ``TRANSPORTS`` order, each with the protocols NCCL enables on it."""
    taken = {ring_transport(profile.collectives.transport, n) for n in range(2, profile.node.gpus_per_node + 1)}
    return {name: protocols(name) for name in TRANSPORTS if name in taken}


def stretches_beside_compute(path: str, protocol: str) -> bool:
    """Does a collective on this path (a ring's transport, or ``nvls``) and protocol slow down
    while GEMMs run beside it (the profile's ``interference.comm_slowdown``, NanoFlow's trade-off
    of a collective's throughput against the SMs the GEMMs leave it)?

    Not an SHM ring's Simple: NCCL's Simple protocol moves each chunk with bulk copies into and out
    of a FIFO in host memory (src/transport/shm.cc), at the rate of the host path (PCIe and host
    memory: 14.5 GB/s bus on the paper's DGX H100, about 1/30 of NVLink's), which the GEMMs do not use;
    the few warps that issue the copies need a sliver of their SM. The authors' runs show it (TP 2
    with P2P off, where the 8-128 MiB prefill AllReduces run the SHM ring's Simple: with the stretch
    ladder's prefill was predicted 15-29% too slow over both CUDA-graph tables' rows, standard's,
    which overlaps nothing, within 6%; without it ladder's is 4-9% fast, as at P2P on). An SHM
    ring's LL keeps the stretch: its bandwidth is the polling of 512 threads a channel, which share
    their SMs' issue slots with co-resident GEMM warps, and the paired runs' LL decode rows at 4 and
    8 GPUs keep it (without it paper-1B TP 4 batch 16 ladder moves from 0.4 to 8.0 pp)."""
    return not (path == "shm" and protocol == "simple")


def nvls_allowed(profile: HardwareProfile, gpus: int) -> bool:
    """NVLS: the node's switch reduces (``nvls`` among the profile's algorithms), more than 2 GPUs
    (NCCL's ``ncclNvlsInit``: no NVLS for a group of 2 or fewer; P2P is not among its conditions)."""
    return "nvls" in profile.collectives.algorithms and gpus > 2 and bool(_nvls_terms(profile.collectives.transport, gpus))


def _nvls_terms(spec: TransportSpec, gpus: int) -> list:
    """The NVLS lines stated for ``gpus`` GPUs, else those of the nearest count (none: no NVLS)."""
    if not spec.nvls:
        return []
    nearest = min(spec.nvls, key=lambda t: (abs(math.log(t.gpus / gpus)), t.gpus)).gpus
    return [t for t in spec.nvls if t.gpus == nearest]


def nvls_bus_bandwidth_gb_per_s(profile: HardwareProfile, gpus: int) -> float | None:
    """Bus bandwidth of the node's in-switch reduction for ``gpus`` GPUs, its stated lines' best
    (None: no transport, or NVLS not allowed for this group). NVLS is no P2P transport, so a node
    under NCCL_P2P_DISABLE keeps it, for a one-node AllReduce and as NVLS-tree's node part."""
    spec = profile.collectives.transport
    if spec is None or not nvls_allowed(profile, gpus):
        return None
    return max(t.bus_bandwidth_gb_per_s for t in _nvls_terms(spec, gpus))


def shm_simple_bus_bandwidth_gb_per_s(spec: TransportSpec, gpus: int) -> float:
    """Simple's busbw of an SHM ring over ``gpus`` GPUs: one GPU's SHM rate, its socket's host
    memory shared by the ring's GPUs on it (2 x busbw each: written, then read), and, for a ring
    over more than one socket, the socket link (the ring crosses it once each way)."""
    shm = spec.shm
    per_socket = min(float(gpus), spec.topology.gpus_per_socket.value)
    rate = min(shm.simple_bus_bandwidth_gb_per_s.value, shm.host_memory_bandwidth_gb_per_s.value / (2.0 * per_socket))
    if gpus > spec.topology.gpus_per_socket.value:
        rate = min(rate, shm.socket_link_bandwidth_gb_per_s.value)
    return rate


def shm_candidates_s(profile: HardwareProfile, gpus: int, size_bytes) -> dict:
    """Seconds of an SHM ring, per protocol NCCL enables on it (``protocols("shm")``): NCCL's ring
    base latency, 2(n-1) host-staged hops and the moved bytes at the protocol's bandwidth."""
    spec = profile.collectives.transport
    intra = links(profile).intra
    moved = 2.0 * (gpus - 1) / gpus * np.asarray(size_bytes, dtype=float)
    steps = 2.0 * (gpus - 1)
    shm = spec.shm
    lines = {"ll": (BASE_LATENCY_US["ring"][0], shm.ll_hop_latency_us.value, shm.ll_bus_bandwidth_gb_per_s.value),
             "simple": (BASE_LATENCY_US["ring"][2], shm.simple_hop_latency_us.value,
                        shm_simple_bus_bandwidth_gb_per_s(spec, gpus))}
    out = {}
    for protocol in protocols("shm"):
        base_us, hop_us, gbps = lines[protocol]
        out[("ring", protocol)] = intra.latency_s(base_us + steps * hop_us) + moved / intra.bytes_per_s(gbps)
    return out


def nvls_s(profile: HardwareProfile, gpus: int, size_bytes):
    """Seconds of the switch's AllReduce: the least of its stated lines at each size."""
    intra = links(profile).intra
    moved = 2.0 * (gpus - 1) / gpus * np.asarray(size_bytes, dtype=float)
    return np.min([intra.latency_s(term.latency_us) + moved / intra.bytes_per_s(term.bus_bandwidth_gb_per_s)
                   for term in _nvls_terms(profile.collectives.transport, gpus)], axis=0)


def candidates_s(profile: HardwareProfile, gpus: int, size_bytes, p2p_ring_s) -> dict:
    """``{(algorithm, protocol): seconds}`` NCCL may run for ``gpus`` GPUs of one node, as each
    really takes; ``p2p_ring_s(size)`` prices a P2P ring (the profile's fitted lines)."""
    spec = profile.collectives.transport
    transport = ring_transport(spec, gpus)
    out = shm_candidates_s(profile, gpus, size_bytes) if transport == "shm" else {("ring", "fit"): p2p_ring_s(size_bytes)}
    if nvls_allowed(profile, gpus):
        out[("nvls", "simple")] = nvls_s(profile, gpus, size_bytes)
    return out


def nccl_estimates_s(profile: HardwareProfile, gpus: int, size_bytes, real: dict) -> dict:
    """NCCL's own estimate of every candidate (``ncclTopoGetAlgoTime``: latency + bytes / bw), by
    which its tuner chooses: an SHM ring is costed as a PCI path (``intraHw = PCI``: hop latencies
    1.0 us LL, 5.7 us Simple; bandwidth ``channels x`` the path's least link, LL at half of it;
    no LL128, which NCCL enables only on paths up to NVB), NVLS at its NVLink latency (25 us) and
    the switch's best stated bandwidth; a P2P ring as it really runs.
    Where the profile states NCCL's own tuning table for ``gpus`` ranks (``nccl_tuning``, read
    from the machine's NCCL debug log), its entries are the estimates."""
    spec = profile.collectives.transport
    size = np.asarray(size_bytes, dtype=float)
    logged = {(e.algorithm, e.protocol): e for e in spec.nccl_tuning if e.gpus == gpus}
    moved = 2.0 * (gpus - 1) / gpus * size
    steps = 2.0 * (gpus - 1)
    graph = spec.nccl_graph
    link = graph.pcie_link_gb_per_s.value
    if gpus > spec.topology.gpus_per_socket.value:
        link = min(link, graph.socket_link_gb_per_s.value)
    bus_bps = graph.channels.value * link * 1e9
    out = {}
    for key, seconds in real.items():
        if key in logged:  # NCCL's own table on the machine (laddersim calibrate nccl-log)
            out[key] = (logged[key].latency_us + size / (1000.0 * logged[key].bandwidth_gb_per_s)) * 1e-6
        elif key == ("ring", "ll"):
            out[key] = (BASE_LATENCY_US["ring"][0] + steps * INTRA_HOP_US["pci"]["ring"][0]) * 1e-6 + moved / (
                min(LL_MAX_SINGLE_NODE_GB_PER_S * 1e9, 0.5 * bus_bps))
        elif key == ("ring", "simple"):
            out[key] = (BASE_LATENCY_US["ring"][2] + steps * INTRA_HOP_US["pci"]["ring"][2]) * 1e-6 + moved / bus_bps
        elif key == ("nvls", "simple"):
            out[key] = NVLS_INTRA_US * 1e-6 + moved / (nvls_bus_bandwidth_gb_per_s(profile, gpus) * 1e9)
        else:
            out[key] = seconds
    return out


def _picked(profile: HardwareProfile, gpus: int, size_bytes, p2p_ring_s):
    real = candidates_s(profile, gpus, size_bytes, p2p_ring_s)
    estimates = nccl_estimates_s(profile, gpus, size_bytes, real)
    keys = list(real)
    index = np.argmin(np.array([np.broadcast_to(estimates[k], np.shape(real[keys[0]])) for k in keys]), axis=0)
    return keys, index, real


def allreduce_s(profile: HardwareProfile, gpus: int, size_bytes, p2p_ring_s):
    """At each size, the real time of the candidate NCCL's tuner picks by its own estimates."""
    keys, index, real = _picked(profile, gpus, size_bytes, p2p_ring_s)
    stacked = np.array([real[k] for k in keys])
    return np.take_along_axis(stacked, np.expand_dims(index, 0), axis=0)[0]


def picked_floor_and_time_s(profile: HardwareProfile, gpus: int, size_bytes: float, p2p_ring_s) -> tuple[float, float]:
    """(seconds of one byte, seconds of ``size_bytes``) on the candidate NCCL's tuner picks for
    ``size_bytes``: the latency floor of the transport and algorithm that really carry the
    message (an NVLS message's floor is the switch's, not the SHM ring's a one-byte message takes)."""
    keys, index, real = _picked(profile, gpus, np.array([1.0, float(size_bytes)]), p2p_ring_s)
    picked = real[keys[int(index[1])]]
    return float(picked[0]), float(picked[1])


def choice(profile: HardwareProfile, gpus: int, size_bytes: float, p2p_ring_s) -> tuple[str, str]:
    """(algorithm, protocol) NCCL's tuner picks for one message."""
    keys, index, _ = _picked(profile, gpus, np.array([float(size_bytes)]), p2p_ring_s)
    return keys[int(index[0])]
