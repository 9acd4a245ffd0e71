"""A pipeline's stage boundary: NCCL point-to-point send/recv between the two stages' GPUs, pair
by pair (rank r to rank r, ``laddersim.hardware.placement``), over the link each pair shares.

* **P2P inside a node** (NVLink, or PCIe behind one switch: the rule of
  ``laddersim.costs.transport`` applied to the pair): the profile's measured send/recv table of one
  pair in one node (``collectives.sendrecv_tables``, log-log in size, the host launch corrected as
  for AllReduce tables); without one, the profile's 2-GPU AllReduce: a 2-rank ring AllReduce of
  2S bytes is two ring steps, each one send of S bytes across the pair (reduce-scatter, then
  all-gather), so a send costs its latency floor (a 1-byte AllReduce) once and half of its time
  above the floor.
* **Through host memory** (SHM: NCCL_P2P_DISABLE, or GPUs behind different PCIe switches): one
  hop of the profile's SHM transport (``collectives.transport.shm``): NCCL's ring base latency and
  one hop of the protocol NCCL sends the message with (LL up to ``NCCL_P2P_LL_THRESHOLD``, 16 KiB
  by default, src/enqueue.cc; Simple above), and the bytes at that protocol's SHM rate; the pairs
  of one socket share its host memory (each byte written and read once), pairs crossing sockets
  share the socket link.
* **Across nodes**: NCCL's net transport, as the AllReduce model prices one ring hop over the
  network (``laddersim.costs.nccl_algorithms``): the ring base latency, the fabric's fixed cost and
  one network hop of the protocol, and the bytes at a NIC's ring bus bandwidth (LL: half of it,
  8-byte lines carrying 4 bytes of flags), the pairs of a node sharing its NICs.

The pairs of a boundary send at once; the boundary takes as long as its slowest pair. The
profile's what-if scales apply (intra- or inter-node).
"""

from __future__ import annotations

import math

import numpy as np

from laddersim.costs.collectives import interpolate_table_s, mode_correction_s, nccl_allreduce_s
from laddersim.costs.gemm_tables import SILICON, SOL
from laddersim.costs.nccl_algorithms import net_hop_us
from laddersim.costs.nccl_tuning import BASE_LATENCY_US, RING_EFFICIENCY
from laddersim.costs.scaling.view import links
from laddersim.hardware.profile import HardwareProfile
from laddersim.hardware.placement import Hop

P2P_LL_THRESHOLD_BYTES = 16384  # NCCL_P2P_LL_THRESHOLD's default (src/enqueue.cc): LL up to it, Simple above
LL, SIMPLE = 0, 2  # indices into nccl_tuning's per-protocol tuples


def pair_transport(profile: HardwareProfile, sender: tuple[int, int], receiver: tuple[int, int]) -> str:
    """``p2p_nvlink``, ``p2p_pcie``, ``shm`` or ``net`` for a pair of ``(node, local GPU)``."""
    if sender[0] != receiver[0]:
        return "net"
    spec = profile.collectives.transport
    if spec is None:  # no stated topology: the node's fabric, peer to peer
        return "p2p_nvlink" if profile.node.fabric == "nvswitch" else "p2p_pcie"
    topo = spec.topology
    a, b = sender[1], receiver[1]
    if topo.p2p == "disabled":
        return "shm"
    if topo.gpu_links == "nvlink" or (topo.gpu_links == "nvlink_pairs" and a // 2 == b // 2):
        return "p2p_nvlink"
    per_switch = int(topo.gpus_per_pcie_switch.value)
    return "p2p_pcie" if a // per_switch == b // per_switch else "shm"


def _table_s(profile: HardwareProfile, size_bytes: float) -> float | None:
    """A measured one-pair, one-node send/recv table's time (None: the profile has none)."""
    intra = links(profile).intra
    for table, cols in profile.sendrecv_arrays:
        rows = (cols["gpus"] == 2) & (cols["nodes"] == 1)
        if table.use != "model" or rows.sum() < 2:
            continue
        sizes, times = cols["size_bytes"][rows], cols["time_s"][rows]
        t = float(interpolate_table_s(sizes, times, size_bytes))
        floor = float(times.min())
        t = intra.table_scalar_s(t, floor)
        return max(t + mode_correction_s(profile, table), 0.5 * floor)
    return None


def _p2p_s(profile: HardwareProfile, size_bytes: float) -> tuple[float, str]:
    measured = _table_s(profile, size_bytes)
    if measured is not None:
        return measured, SILICON
    floor_s, pair_s = nccl_allreduce_s(profile, 2, np.array([1.0, 2.0 * size_bytes]), nodes=1)
    return float(floor_s + max(pair_s - floor_s, 0.0) / 2.0), SOL


def _shm_s(profile: HardwareProfile, hop: Hop, sender: tuple[int, int], receiver: tuple[int, int],
           size_bytes: float) -> float:
    spec = profile.collectives.transport
    shm, intra = spec.shm, links(profile).intra
    per_socket = int(spec.topology.gpus_per_socket.value)
    if size_bytes <= P2P_LL_THRESHOLD_BYTES:
        latency_us = BASE_LATENCY_US["ring"][LL] + shm.ll_hop_latency_us.value
        rate_gbps = shm.ll_bus_bandwidth_gb_per_s.value
    else:
        latency_us = BASE_LATENCY_US["ring"][SIMPLE] + shm.simple_hop_latency_us.value
        sockets = [(s[0], s[1] // per_socket) for s in hop.senders]
        rate_gbps = min(shm.simple_bus_bandwidth_gb_per_s.value,
                        shm.host_memory_bandwidth_gb_per_s.value / (2.0 * max(sockets.count(x) for x in sockets)))
        if sender[1] // per_socket != receiver[1] // per_socket:
            crossing = sum(s[1] // per_socket != r[1] // per_socket for s, r in zip(hop.senders, hop.receivers))
            rate_gbps = min(rate_gbps, shm.socket_link_bandwidth_gb_per_s.value / crossing)
    return intra.latency_s(latency_us) + size_bytes / intra.bytes_per_s(rate_gbps)


def _net_s(profile: HardwareProfile, hop: Hop, size_bytes: float) -> float:
    network, inter = profile.network, links(profile).inter
    p = LL if size_bytes <= P2P_LL_THRESHOLD_BYTES else SIMPLE
    latency_us = (inter.latency_of(BASE_LATENCY_US["ring"][p] + network.allreduce.base_latency_us.value)
                  + net_hop_us(profile, "ring", p))
    nic = network.ring_nic_bus_bandwidth_gb_per_s or network.allreduce.bus_bandwidth_gb_per_s
    senders_per_node = max(sum(s[0] == node for s in hop.senders) for node, _ in hop.senders)
    share = 1.0 / math.ceil(senders_per_node / network.nics_per_node.value)
    rate_bps = inter.bandwidth_of(nic.value * 1e9 * RING_EFFICIENCY[p]) * share
    return latency_us * 1e-6 + size_bytes / rate_bps


def send_time_s(profile: HardwareProfile, hop: Hop, size_bytes: float) -> tuple[float, str, str]:
    """(seconds, transport, source label) of sending ``size_bytes`` over every pair of ``hop`` at
    once: the slowest pair's time, its transport, and ``SILICON`` where a measured table priced it
    (``SOL``: the transport model)."""
    slowest = (-1.0, "", SOL)
    for sender, receiver in zip(hop.senders, hop.receivers):
        transport = pair_transport(profile, sender, receiver)
        if transport == "net":
            seconds, label = _net_s(profile, hop, size_bytes), SOL
        elif transport == "shm":
            seconds, label = _shm_s(profile, hop, sender, receiver, size_bytes), SOL
        else:
            seconds, label = _p2p_s(profile, size_bytes)
        if seconds > slowest[0]:
            slowest = (seconds, transport, label)
    return slowest
