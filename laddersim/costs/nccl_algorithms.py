"""NCCL's multi-node AllReduce: every algorithm and protocol the profile's fabric offers, timed
as NCCL's tuner times them (``src/graph/tuning.cc``: ``time = latency + bytes / bandwidth`` per
algorithm/protocol), the fastest chosen per message size.

A group of ``n = g * N`` ranks, ``g`` GPUs on each of ``N`` nodes, with ``nics = min(g, NICs)``
network cards in use per node; latencies in us, ``S`` the bytes per rank:

* ring: one flat ring over all ranks. Latency ``base + 2(n - N) intra hops + 2N network hops``;
  bandwidth ``2(n-1)/n * S / min(intra busbw, nics * ring NIC busbw) / protocol efficiency``.
  Simple's hop latencies are the profile's fitted ones (NCCL's constants overestimate a measured
  10-node ring's pipeline fill by ~45%), never below LL's total; LL's and LL128's are NCCL's;
* tree: NCCL's double binary tree across nodes, a chain inside each node. Latency ``base +
  2((g-1) intra hops + ceil(log2 N) network hops)``: logarithmic in the node count. Bandwidth:
  each node sends and receives ``S`` over its NICs when it is a leaf of one tree and the root of
  the other (2 nodes), ``2S`` when it is interior in one tree (more nodes):
  ``k * S / (nics * tree NIC busbw * efficiency)``, ``k = 1`` on 2 nodes, beyond it
  ``1 / network.tree_deep_bandwidth_share`` for LL128 and Simple (2 in principle; measured where
  sweeps exist); LL stays at ``k = 1`` under NCCL's own cap, which it lowers beyond 2 nodes;
* NVLS-tree (NVSwitch with NVLink SHARP): the node reduces in the switch (``NVLS_INTRA_US``, at
  the switch's own bandwidth: the transport's NVLS line, which NCCL_P2P_DISABLE leaves), then a
  tree across nodes; Simple only;
* CollNet (in-network reduction, SHARP): each node sends and receives ``S`` once whatever the
  node count (``k = 1``); Simple only.

LL128 runs only where the node's GPUs reach each other over NVLink (tuning.cc enables it for a
graph with ``typeIntra <= PATH_NVB``): not over PCIe, nor through host memory under
NCCL_P2P_DISABLE (the transport's SHM path, ``laddersim.costs.transport``), where the ring and
the tree keep LL and Simple.

Every network hop pays NCCL's per-hop NET latency plus the fabric's own (``network.allreduce.
step_latency_us``, for Simple twice as NCCL adds it twice, or ``network.simple_step_latency_us``), every collective once the fabric's
fixed cost (``network.allreduce.base_latency_us``: 0 on InfiniBand, the plugin's proxy round on
EFA/TCPXO). LL's bus bandwidth is capped at NCCL's ``llMaxBw`` (or the profile's measured cap,
``network.ll_max_bus_bandwidth_gb_per_s``), LL128's at the profile's measured cap if it has one. Both
caps are bus bandwidths, as NCCL's tuner states them: a ring's time is ``2(n-1)/n * S`` over
the capped bus bandwidth, a tree's ``S`` over half of it (NCCL converts a tree's bus bandwidth to
its algorithm bandwidth with a factor 0.5, ``nccl_tuning.TREE_ALGBW_PER_BUSBW``): a 256 KiB tree/LL
AllReduce on 2 nodes moves at most 19.5 GB/s, 34 us at NCCL's tree correction (0.4), not 17 us.
"""

from __future__ import annotations

import math

import numpy as np

from laddersim.costs.nccl_tuning import (
    BASE_LATENCY_US, INTRA_HOP_US, LL_MAX_BUSBW_GB_PER_S, NET_HOP_US, NET_OVERHEAD_US, NVLS_INTRA_US, PROTOCOLS,
    RING_EFFICIENCY, TREE_ALGBW_PER_BUSBW, TREE_CORRECTION, TREE_EFFICIENCY,
)
from laddersim.costs.scaling.view import links
from laddersim.costs.transport import nvls_bus_bandwidth_gb_per_s, prices, ring_transport, shm_simple_bus_bandwidth_gb_per_s
from laddersim.costs.transport import protocols as transport_protocols
from laddersim.hardware.profile import HardwareProfile

def intra_busbw_bytes_per_s(profile: HardwareProfile, gpus: int) -> float:
    """Large-message intra-node bus bandwidth: the best term of the fit (or the alpha-beta tier)."""
    if gpus <= 1:
        return math.inf
    spec = profile.collectives.transport
    intra = links(profile).intra
    if prices(profile, gpus) and ring_transport(spec, gpus) == "shm":
        return intra.bytes_per_s(shm_simple_bus_bandwidth_gb_per_s(spec, gpus))
    fit = profile.intra_node_fit(gpus)
    gbps = (max(t.bus_bandwidth_gb_per_s for t in fit.terms) if fit is not None
            else profile.collectives.intra_node.bus_bandwidth_gb_per_s.value)
    return intra.bytes_per_s(gbps)


def nvls_busbw_bytes_per_s(profile: HardwareProfile, gpus: int) -> float:
    """Bus bandwidth of NVLS-tree's node part, the switch's own reduction: the transport's NVLS
    line where the profile states one for a group without its own fit (under NCCL_P2P_DISABLE
    the ring's SHM rate is not what NVLS moves at), else the node's best fitted term (the NVLS
    line of an NVSwitch fit)."""
    gbps = nvls_bus_bandwidth_gb_per_s(profile, gpus) if prices(profile, gpus) else None
    if gbps is None:
        return intra_busbw_bytes_per_s(profile, gpus)
    return links(profile).intra.bytes_per_s(gbps)


def _intra_hop_us(profile: HardwareProfile, algorithm: str, p: int) -> float:
    hw = "pci" if profile.node.fabric == "pcie" else "nvlink"
    return links(profile).intra.latency_of(max(INTRA_HOP_US[hw][algorithm][p], NET_OVERHEAD_US[p]))


def net_hop_us(profile: HardwareProfile, algorithm: str, p: int) -> float:
    network = profile.network
    fabric_us = network.allreduce.step_latency_us.value
    if PROTOCOLS[p] == "simple":
        simple = network.simple_step_latency_us
        fabric_us = simple.value if simple is not None else 2.0 * fabric_us
    return links(profile).inter.latency_of(NET_HOP_US[algorithm][p] + fabric_us)


def tree_correction(protocol: int, size_bytes) -> np.ndarray:
    """NCCL's ``treeCorrectionFactor`` for a tree AllReduce of ``size_bytes`` per rank: the share
    of the tree's modelled bandwidth a medium message gets, as NCCL's tuner applies it to the
    tree's bandwidth. NCCL steps it at each power of two (index ``floor(log2(bytes / 64))``, 1
    outside 64 B - 256 MiB); here it is linear in log2 size between those powers (exact at each),
    so that time never falls as a message grows across a step (the factor changes by at most 1.25x
    a doubling)."""
    size = np.asarray(size_bytes, dtype=float)
    table = TREE_CORRECTION[protocol]
    log2_points = np.arange(5.0, 6.0 + len(table) + 1.0)  # 32 B (1.0), 64 B ... 256 MiB, 512 MiB (1.0)
    return np.interp(np.log2(np.maximum(size, 1.0)), log2_points, (1.0, *table, 1.0))


def ll128_offered(profile: HardwareProfile, gpus_per_node: int) -> bool:
    """Does NCCL enable LL128 for a ring or tree with ``gpus_per_node`` GPUs on each node: their
    path inside the node is NVLink (one GPU a node has no such path to cross)."""
    if gpus_per_node <= 1:
        return True
    spec = profile.collectives.transport
    if spec is not None:
        return "ll128" in transport_protocols(ring_transport(spec, gpus_per_node))
    fabric = profile.node.fabric
    return fabric == "nvswitch" or (fabric == "nvlink-pairs" and gpus_per_node <= 2)


def _tree_depth(nodes: int) -> int:
    return math.ceil(math.log2(nodes))


def candidates_s(profile: HardwareProfile, gpus_per_node: int, nodes: int, size_bytes) -> dict:
    """Seconds of every (algorithm, protocol) the profile offers for this multi-node group."""
    network = profile.network
    assert network is not None and nodes > 1  # nodes_for() refuses multi-node without a network
    scaled = links(profile)
    intra, inter = scaled.intra, scaled.inter
    size = np.asarray(size_bytes, dtype=float)
    g, n = gpus_per_node, gpus_per_node * nodes
    nics = min(float(g), network.nics_per_node.value)
    fixed_us = inter.latency_of(network.allreduce.base_latency_us.value)
    intra_bps = intra_busbw_bytes_per_s(profile, g)
    tree_bps = inter.bytes_per_s(nics * network.allreduce.bus_bandwidth_gb_per_s.value)
    ring_nic = network.ring_nic_bus_bandwidth_gb_per_s or network.allreduce.bus_bandwidth_gb_per_s
    ring_bps = min(intra_bps, inter.bytes_per_s(nics * ring_nic.value))
    ll_cap = network.ll_max_bus_bandwidth_gb_per_s
    ll_cap_bps = inter.bytes_per_s(ll_cap.value if ll_cap else LL_MAX_BUSBW_GB_PER_S[min(nodes, 3)])
    ll128_cap = network.ll128_max_bus_bandwidth_gb_per_s
    ll128_cap_bps = inter.bytes_per_s(ll128_cap.value) if ll128_cap else math.inf
    caps = (ll_cap_bps, ll128_cap_bps, math.inf)
    # Bytes each node moves per direction, in S (module docstring), for LL128 and Simple: the
    # measured share beyond 2 nodes. LL is bound by its cap, which NCCL itself lowers beyond 2
    # nodes (llMaxBw 39 -> 20.4 GB/s), so its traffic counts once.
    k = 1.0 if nodes == 2 else 1.0 / network.tree_deep_bandwidth_share.value
    chain_s = 2.0 * (g - 1) / g * size / intra_bps if g > 1 else 0.0
    out = {}
    offered = profile.collectives.algorithms
    ll128 = ll128_offered(profile, g)
    for p, proto in enumerate(PROTOCOLS):
        if proto == "ll128" and not ll128:
            continue
        if "ring" in offered:
            hops_us = 2.0 * (nodes * net_hop_us(profile, "ring", p) + (n - nodes) * _intra_hop_us(profile, "ring", p))
            if proto == "simple":  # fitted hops, never below LL's (NCCL's low-latency protocol)
                ll_us = inter.latency_of(BASE_LATENCY_US["ring"][0]) + 2.0 * (
                    nodes * net_hop_us(profile, "ring", 0) + (n - nodes) * _intra_hop_us(profile, "ring", 0))
                fitted_us = 2.0 * (inter.latency_of(nodes * network.ring_net_step_latency_us.value)
                                   + intra.latency_of((n - nodes) * network.ring_intra_step_latency_us.value))
                hops_us = max(fitted_us, ll_us - inter.latency_of(BASE_LATENCY_US["ring"][2]))
            bps = min(ring_bps * RING_EFFICIENCY[p], caps[p])
            lat_us = inter.latency_of(BASE_LATENCY_US["ring"][p]) + fixed_us + hops_us
            out[("ring", proto)] = lat_us * 1e-6 + 2.0 * (n - 1) / n * size / bps
        if "tree" in offered:
            lat_us = (inter.latency_of(BASE_LATENCY_US["tree"][p]) + fixed_us
                      + 2.0 * ((g - 1) * _intra_hop_us(profile, "tree", p) + _tree_depth(nodes) * net_hop_us(profile, "tree", p)))
            bps = min(tree_bps * TREE_EFFICIENCY[p], TREE_ALGBW_PER_BUSBW * caps[p])  # caps: bus bandwidths
            moved = (1.0 if proto == "ll" else k) * size
            transfer_s = np.maximum(moved / bps, chain_s / TREE_EFFICIENCY[p]) / tree_correction(p, size)
            out[("tree", proto)] = lat_us * 1e-6 + transfer_s
    if "nvls_tree" in offered and g > 1:
        lat_us = (intra.latency_of(NVLS_INTRA_US) + fixed_us
                  + 2.0 * _tree_depth(nodes) * net_hop_us(profile, "nvls_tree", 2))
        switch_s = 2.0 * (g - 1) / g * size / nvls_busbw_bytes_per_s(profile, g)
        out[("nvls_tree", "simple")] = lat_us * 1e-6 + np.maximum(k * size / tree_bps, switch_s)
    if "collnet" in offered:
        lat_us = fixed_us + 2.0 * (g - 1) * _intra_hop_us(profile, "tree", 2) + net_hop_us(profile, "collnet", 2)
        out[("collnet", "simple")] = lat_us * 1e-6 + np.maximum(size / tree_bps, chain_s)
    return out


def network_floor_s(profile: HardwareProfile, nodes: int) -> float:
    """Least network time any algorithm adds to a node's own AllReduce: the fabric's fixed cost
    and a tree's LL hops up and down (the cheapest way across ``nodes`` nodes)."""
    network = profile.network
    fixed_us = links(profile).inter.latency_of(network.allreduce.base_latency_us.value)
    return (fixed_us + 2.0 * _tree_depth(nodes) * net_hop_us(profile, "tree", 0)) * 1e-6


def model_s(profile: HardwareProfile, gpus_per_node: int, nodes: int, size_bytes):
    """The fastest offered algorithm/protocol at each size (what NCCL's tuner picks)."""
    return np.min(list(candidates_s(profile, gpus_per_node, nodes, size_bytes).values()), axis=0)


def choice(profile: HardwareProfile, gpus_per_node: int, nodes: int, size_bytes: float) -> tuple[str, str]:
    """(algorithm, protocol) NCCL's tuner picks for one message."""
    times = candidates_s(profile, gpus_per_node, nodes, np.array([float(size_bytes)]))
    return min(times, key=lambda key: float(times[key][0]))


def single_node_choice(profile: HardwareProfile, gpus: int, size_bytes: float) -> tuple[str, str]:
    """(algorithm, protocol) of a one-node AllReduce: the fitted protocol term that is fastest at
    this size (the fit's ``simple-large`` term is NVLS on a fabric that offers it)."""
    fit = profile.intra_node_fit(gpus)
    if fit is None:
        return (profile.collectives.intra_node.algorithm, "simple")
    moved = 2.0 * (gpus - 1) / gpus * float(size_bytes)
    best = min(fit.terms, key=lambda t: t.latency_us * 1e-6 + moved / (t.bus_bandwidth_gb_per_s * 1e9))
    if best.protocol == "simple-large":
        return ("nvls" if "nvls" in profile.collectives.algorithms else "ring", "simple")
    return ("ring", best.protocol if best.protocol in PROTOCOLS else "simple")
