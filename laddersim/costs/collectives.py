"""AllReduce time for a tensor-parallel group (the logits AllGather is costed as its equivalent
AllReduce, see ``laddersim.costs.op_costs.collective_message_bytes``).

Three sources, in order of preference for a group of ``n`` ranks on ``nodes`` nodes:

1. a shipped measured table for exactly this group shape (``use: model``), interpolated log-log
   over message size (unless the profile says ``prefer: fit``);
2. one node: the profile's fitted curve for ``n`` GPUs (``collectives.intra_node_fits``), the
   minimum over protocol terms ``latency + 2(n-1)/n * bytes / busbw``, as NCCL's tuner picks the
   fastest algorithm/protocol per size; else the generic alpha-beta ``collectives.intra_node``;
3. several nodes: NCCL's two multi-node shapes, whichever is faster:

   * hierarchical (tree / NVLS-tree, up to ``network.tree_max_nodes`` nodes): the node's intra-node AllReduce of the full buffer plus an
     inter-node AllReduce of each rank's 1/g shard over the network tier (each GPU drives its own
     NIC; with fewer NICs than GPUs a NIC carries g / NICs shards in turn). Latencies add; the bandwidth-bound parts are pipelined chunk by chunk, so only the
     slower one counts: ``t = lat_intra + lat_inter + max(bw_intra, bw_inter)``;
   * flat ring over all ``n`` ranks: every channel crosses the node boundary, so its bus
     bandwidth is ``min(intra-node busbw, min(g, NICs) * per-NIC ring busbw)``; its latency is
     two passes of ``N`` node-crossing hops and ``n - N`` intra-node hops (pipeline fill), which
     is what makes rings over many ranks slow below a few hundred MiB.

   A single-node table is never stretched across nodes: only its intra-node part is used.

Tier parameters come from fits to measured tables (see each profile's sources);
``laddersim profiles check`` compares this model with the original rows.
"""

from __future__ import annotations

import math

import numpy as np

from laddersim.hardware.profile import AlphaBeta, HardwareProfile, MeasuredTable, TierFit


def _algorithm_steps(tier: AlphaBeta, n: int) -> float:
    if n <= 1:
        return 0.0
    if tier.algorithm == "ring":
        return 2.0 * (n - 1)
    if tier.algorithm == "tree":
        return 2.0 * math.ceil(math.log2(n))
    return float(tier.fixed_steps)


def _alpha_beta_parts_s(tier: AlphaBeta, n: int, size_bytes, bandwidth_scale: float = 1.0,
                        latency_scale: float = 1.0):
    """(latency, bandwidth) parts of an AllReduce over one alpha-beta tier."""
    size = np.asarray(size_bytes, dtype=float)
    if n <= 1:
        return np.zeros_like(size), np.zeros_like(size)
    latency_us = tier.base_latency_us.value + _algorithm_steps(tier, n) * tier.step_latency_us.value
    busbw = tier.bus_bandwidth_gbps.value * 1e9 * bandwidth_scale
    return (np.full(size.shape, latency_us * 1e-6 * latency_scale),
            2.0 * (n - 1) / n * size / busbw)


def alpha_beta_time_s(tier: AlphaBeta, n: int, size_bytes, bandwidth_scale: float = 1.0,
                      latency_scale: float = 1.0):
    """AllReduce over one tier of ``n`` participants, ``size_bytes`` each (array-friendly)."""
    latency, bandwidth = _alpha_beta_parts_s(tier, n, size_bytes, bandwidth_scale, latency_scale)
    return latency + bandwidth


def fit_time_s(fit: TierFit, size_bytes, bandwidth_scale: float = 1.0, latency_scale: float = 1.0):
    """Fitted per-GPU-count curve: minimum over its protocol terms."""
    size = np.asarray(size_bytes, dtype=float)
    moved = 2.0 * (fit.gpus - 1) / fit.gpus * size
    terms = [term.latency_us * 1e-6 * latency_scale + moved / (term.bus_bandwidth_gbps * 1e9 * bandwidth_scale)
             for term in fit.terms]
    return np.min(terms, axis=0)


def interpolate_table_s(sizes_bytes: np.ndarray, times_s: np.ndarray, size_bytes):
    """Log-log interpolation in a measured (size, time) curve.

    Below the smallest size the smallest time holds (the latency floor); above the largest, time
    grows linearly with size at the last point's algorithmic bandwidth.
    """
    size = np.asarray(size_bytes, dtype=float)
    safe = np.maximum(size, sizes_bytes[0])
    inside = np.exp(np.interp(np.log(safe), np.log(sizes_bytes), np.log(times_s)))
    beyond = times_s[-1] * safe / sizes_bytes[-1]
    return np.where(safe > sizes_bytes[-1], beyond, inside)


def _table_for(profile: HardwareProfile, gpus: int, nodes: int):
    """The first model table with rows for this group shape, preferring the simulated mode."""
    mode = profile.collectives.mode
    tables = [(t, f) for t, f in profile.allreduce_arrays if t.use == "model"]
    candidates = [(t, f) for t, f in tables if t.mode == mode] + [(t, f) for t, f in tables if t.mode != mode]
    for table, columns in candidates:
        rows = (columns["gpus"] == gpus) & (columns["nodes"] == nodes)
        if rows.sum() >= 2:
            return table, columns["size_bytes"][rows], columns["time_s"][rows]
    return None


def mode_correction_s(profile: HardwareProfile, table: MeasuredTable) -> float:
    """Host launch cost to add (eager simulated, table without it) or remove (the other way).

    Only a single eager call timed with CUDA events around it contains the host launch; an eager
    back-to-back loop (nccl-tests, APEX+) overlaps each launch with the previous collective, so
    like a CUDA-graph replay it measures the collective alone.
    """
    launch = profile.collectives.eager_launch_us.value * 1e-6
    table_has_launch = table.mode == "eager" and table.timing == "single"
    simulated_has_launch = profile.collectives.mode == "eager"
    return (int(simulated_has_launch) - int(table_has_launch)) * launch


def _scaled_table_s(sizes, times, size_bytes, bandwidth_scale: float, latency_scale: float):
    """Table time with the what-if scalings: floor * latency_scale + rest / bandwidth_scale."""
    t = interpolate_table_s(sizes, times, size_bytes)
    if bandwidth_scale == 1.0 and latency_scale == 1.0:
        return t
    floor = times.min()
    return floor * latency_scale + np.maximum(t - floor, 0.0) / bandwidth_scale


def intra_node_model_s(profile: HardwareProfile, gpus: int, size_bytes):
    """The parametric intra-node AllReduce (fit for this GPU count, else generic alpha-beta)."""
    size = np.asarray(size_bytes, dtype=float)
    if gpus <= 1:
        return np.zeros_like(size)
    w = profile.what_if
    fit = profile.intra_node_fit(gpus)
    if fit is not None:
        return fit_time_s(fit, size, w.intra_bandwidth_scale, w.intra_latency_scale)
    return alpha_beta_time_s(profile.collectives.intra_node, gpus, size,
                             w.intra_bandwidth_scale, w.intra_latency_scale)


def intra_node_allreduce_s(profile: HardwareProfile, gpus: int, size_bytes, use_tables: bool = True):
    """AllReduce among ``gpus`` ranks of one node."""
    if gpus <= 1:
        return np.zeros_like(np.asarray(size_bytes, dtype=float))
    w = profile.what_if
    found = _table_for(profile, gpus, 1) if use_tables and profile.collectives.prefer == "table" else None
    if found is not None:
        table, sizes, times = found
        floor = 0.5 * times[0]  # never let a launch correction make a collective nearly free
        t = _scaled_table_s(sizes, times, size_bytes, w.intra_bandwidth_scale, w.intra_latency_scale)
        return np.maximum(t + mode_correction_s(profile, table), floor * w.intra_latency_scale)
    return intra_node_model_s(profile, gpus, size_bytes)


def _intra_busbw_bytes_per_s(profile: HardwareProfile, gpus: int) -> float:
    """Large-message intra-node bus bandwidth: the best term of the fit (or the alpha-beta tier)."""
    if gpus <= 1:
        return math.inf
    fit = profile.intra_node_fit(gpus)
    gbps = (max(t.bus_bandwidth_gbps for t in fit.terms) if fit is not None
            else profile.collectives.intra_node.bus_bandwidth_gbps.value)
    return gbps * 1e9 * profile.what_if.intra_bandwidth_scale


def multi_node_model_s(profile: HardwareProfile, tp: int, nodes: int, size_bytes, use_tables: bool = True):
    """Parametric AllReduce over ``nodes`` nodes of ``tp / nodes`` GPUs each (module docstring)."""
    size = np.asarray(size_bytes, dtype=float)
    network = profile.network
    assert network is not None  # nodes_for() refuses multi-node without a network
    w = profile.what_if
    g = tp // nodes
    intra = intra_node_allreduce_s(profile, g, size, use_tables)
    intra_latency = intra_node_allreduce_s(profile, g, np.ones(1), use_tables)[0] if g > 1 else 0.0
    intra_bw = np.maximum(intra - intra_latency, 0.0)
    inter_latency, inter_bw = _alpha_beta_parts_s(network.allreduce, nodes, size / g,
                                                  w.inter_bandwidth_scale, w.inter_latency_scale)
    inter_bw = inter_bw * max(1.0, g / network.nics_per_node.value)  # fewer NICs than GPUs: shards share them
    hierarchical = intra_latency + inter_latency + np.maximum(intra_bw, inter_bw)
    if network.ring_nic_bus_bandwidth_gbps is None:
        return hierarchical
    if nodes > network.tree_max_nodes:
        hierarchical = np.full(size.shape, np.inf)
    nics = min(g, network.nics_per_node.value)
    ring_busbw = min(_intra_busbw_bytes_per_s(profile, g),
                     nics * network.ring_nic_bus_bandwidth_gbps.value * 1e9 * w.inter_bandwidth_scale)
    hops_us = 2.0 * (nodes * network.ring_net_step_latency_us.value
                     + (tp - nodes) * network.ring_intra_step_latency_us.value)
    ring_latency = (intra_latency + inter_latency + hops_us * 1e-6) * w.inter_latency_scale
    ring = ring_latency + 2.0 * (tp - 1) / tp * size / ring_busbw
    return np.minimum(hierarchical, ring)


def allreduce_time_s(profile: HardwareProfile, tp: int, size_bytes):
    """Seconds for one AllReduce of ``size_bytes`` per rank over a TP group of ``tp`` ranks."""
    size = np.asarray(size_bytes, dtype=float)
    if tp <= 1:
        return np.zeros_like(size)
    nodes = profile.nodes_for(tp)
    if nodes == 1:
        return intra_node_allreduce_s(profile, tp, size)
    w = profile.what_if
    found = _table_for(profile, tp, nodes) if profile.collectives.prefer == "table" else None
    if found is not None:
        table, sizes, times = found
        # A multi-node table mixes both tiers; the inter-node tier is the bottleneck, so its
        # what-if scalings apply.
        t = _scaled_table_s(sizes, times, size, w.inter_bandwidth_scale, w.inter_latency_scale)
        return t + mode_correction_s(profile, table)
    return multi_node_model_s(profile, tp, nodes, size)


def bandwidth_share(profile: HardwareProfile, tp: int, size_bytes: float) -> float:
    """Share of an AllReduce's time above its latency floor (the time of a one-byte message):
    0 for a latency-bound message, towards 1 for a bandwidth-bound one."""
    if tp <= 1:
        return 0.0
    floor_s, time_s = allreduce_time_s(profile, tp, np.array([1.0, float(size_bytes)]))
    return float(max(0.0, 1.0 - floor_s / time_s)) if time_s > 0 else 0.0


def model_allreduce_s(profile: HardwareProfile, gpus: int, nodes: int, size_bytes, use_tables: bool = False):
    """AllReduce for any group shape (``gpus`` ranks on ``nodes`` nodes, even counts a TP group
    would not use), from the parametric model only unless ``use_tables``; for checks and fits."""
    size = np.asarray(size_bytes, dtype=float)
    if nodes == 1:
        return intra_node_allreduce_s(profile, gpus, size, use_tables)
    return multi_node_model_s(profile, gpus, nodes, size, use_tables)

