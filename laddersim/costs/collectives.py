"""AllReduce (and logits AllGather) time for a tensor-parallel group.

Where the profile ships a measured table for exactly this group shape (ranks and nodes), the time
is interpolated in that table (log-log over message size). Otherwise an NCCL-style alpha-beta
model is used, tier by tier:

* one node: ``base + steps(n) * step_latency + 2(n-1)/n * bytes / busbw_intra``;
* several nodes: hierarchical, as NCCL's tree/NVLS-tree algorithms behave: an intra-node
  reduce-scatter and all-gather (together costed as one intra-node AllReduce of the full buffer,
  from the node's table when it has one) plus an inter-node AllReduce of each rank's 1/g shard
  over the network tier, every GPU driving its own share of the node's NICs. A single-node table
  is never stretched across nodes.
"""

from __future__ import annotations

import math

import numpy as np

from laddersim.hardware.profile import AlphaBeta, HardwareProfile, MeasuredTable


def _algorithm_steps(tier: AlphaBeta, n: int) -> float:
    if n <= 1:
        return 0.0
    if tier.algorithm == "ring":
        return 2.0 * (n - 1)
    if tier.algorithm == "tree":
        return 2.0 * math.ceil(math.log2(n))
    return float(tier.fixed_steps)


def alpha_beta_time_s(tier: AlphaBeta, n: int, size_bytes, bandwidth_scale: float = 1.0,
                      latency_scale: float = 1.0):
    """AllReduce over one tier of ``n`` participants, ``size_bytes`` each (array-friendly)."""
    size = np.asarray(size_bytes, dtype=float)
    if n <= 1:
        return np.zeros_like(size)
    latency_us = tier.base_latency_us.value + _algorithm_steps(tier, n) * tier.step_latency_us.value
    latency_s = latency_us * 1e-6 * latency_scale
    busbw = tier.bus_bandwidth_gbps.value * 1e9 * bandwidth_scale
    return latency_s + 2.0 * (n - 1) / n * size / busbw


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
    """The first shipped table with rows for this group shape, preferring the simulated mode."""
    mode = profile.collectives.mode
    candidates = [(t, f) for t, f in profile.allreduce_tables if t.mode == mode]
    candidates += [(t, f) for t, f in profile.allreduce_tables if t.mode != mode]
    for table, frame in candidates:
        rows = frame[(frame["gpus"] == gpus) & (frame["nodes"] == nodes)]
        if len(rows) >= 2:
            return table, rows["size_bytes"].to_numpy(), rows["time_s"].to_numpy()
    return None


def _mode_correction_s(profile: HardwareProfile, table: MeasuredTable) -> float:
    """Launch cost to add (eager simulated from a graph table) or remove (the other way)."""
    launch = profile.collectives.eager_launch_us.value * 1e-6
    if table.mode == profile.collectives.mode:
        return 0.0
    return launch if profile.collectives.mode == "eager" else -launch


def _scaled_table_s(sizes, times, size_bytes, bandwidth_scale: float, latency_scale: float):
    """Table time with the what-if scalings: floor * latency_scale + rest / bandwidth_scale."""
    t = interpolate_table_s(sizes, times, size_bytes)
    if bandwidth_scale == 1.0 and latency_scale == 1.0:
        return t
    floor = times.min()
    return floor * latency_scale + np.maximum(t - floor, 0.0) / bandwidth_scale


def intra_node_allreduce_s(profile: HardwareProfile, gpus: int, size_bytes):
    """AllReduce among ``gpus`` ranks of one node."""
    if gpus <= 1:
        return np.zeros_like(np.asarray(size_bytes, dtype=float))
    w = profile.what_if
    found = _table_for(profile, gpus, 1)
    if found is not None:
        table, sizes, times = found
        floor = 0.5 * times[0]  # never let a launch correction make a collective nearly free
        t = _scaled_table_s(sizes, times, size_bytes, w.intra_bandwidth_scale, w.intra_latency_scale)
        return np.maximum(t + _mode_correction_s(profile, table), floor * w.intra_latency_scale)
    return alpha_beta_time_s(profile.collectives.intra_node, gpus, size_bytes,
                             w.intra_bandwidth_scale, w.intra_latency_scale)


def allreduce_time_s(profile: HardwareProfile, tp: int, size_bytes):
    """Seconds for one AllReduce of ``size_bytes`` per rank over a TP group of ``tp`` ranks."""
    size = np.asarray(size_bytes, dtype=float)
    if tp <= 1:
        return np.zeros_like(size)
    nodes = profile.nodes_for(tp)
    if nodes == 1:
        return intra_node_allreduce_s(profile, tp, size)
    w = profile.what_if
    found = _table_for(profile, tp, nodes)
    if found is not None:
        table, sizes, times = found
        # A multi-node table mixes both tiers; the inter-node tier is the bottleneck, so its
        # what-if scalings apply.
        t = _scaled_table_s(sizes, times, size, w.inter_bandwidth_scale, w.inter_latency_scale)
        return t + _mode_correction_s(profile, table)
    gpus_per_node = tp // nodes
    intra = intra_node_allreduce_s(profile, gpus_per_node, size)
    assert profile.network is not None  # nodes_for() refuses multi-node without a network
    inter = alpha_beta_time_s(profile.network.allreduce, nodes, size / gpus_per_node,
                              w.inter_bandwidth_scale, w.inter_latency_scale)
    return intra + inter


def allgather_time_s(profile: HardwareProfile, tp: int, output_bytes):
    """AllGather producing ``output_bytes`` on every rank.

    A ring AllGather moves (n-1)/n of the output per rank, half of what an AllReduce of the same
    buffer moves, with the same latency structure; it is costed as an AllReduce of half the size.
    """
    return allreduce_time_s(profile, tp, np.asarray(output_bytes, dtype=float) / 2.0)
