"""NCCL's AllReduce for a tensor-parallel group: the ``nccl`` implementation of
``laddersim.costs.allreduce`` (which every caller outside this package goes through), and the
choice, interference and latency share of a message NCCL carries.

Three sources, in order of preference for a group of ``n`` ranks on ``nodes`` nodes:

1. a shipped measured table for exactly this group shape (``use: model``), interpolated log-log
   over message size (unless the profile says ``prefer: fit``);
2. one node: the profile's fitted curve for ``n`` GPUs (``collectives.intra_node_fits``), the
   minimum over protocol terms ``latency + 2(n-1)/n * bytes / busbw``, as NCCL's tuner picks the
   fastest algorithm/protocol per size; else the generic alpha-beta ``collectives.intra_node``;
3. several nodes: NCCL's algorithms (ring, tree, NVLS-tree, CollNet) and protocols (LL, LL128,
   Simple), the fastest the fabric offers at each size (``laddersim.costs.nccl_algorithms``),
   times the offset of a measured multi-node table with as many GPUs per node
   (``table_offset``): exact at the table's own shape and sizes, carried to other node counts.

Tier parameters come from fits to measured tables (see each profile's sources);
``laddersim profiles check`` compares this model with the original rows.
"""

from __future__ import annotations

import math

import numpy as np

from laddersim.costs import nccl_algorithms, transport
from laddersim.costs.scaling.view import UNSCALED, LinkScale, is_scaled, links, unscaled
from laddersim.hardware.comm_specs import AlphaBeta, TierFit
from laddersim.hardware.profile import HardwareProfile
from laddersim.hardware.sourced import MeasuredTable


def _algorithm_steps(tier: AlphaBeta, n: int) -> float:
    if n <= 1:
        return 0.0
    if tier.algorithm == "ring":
        return 2.0 * (n - 1)
    if tier.algorithm == "tree":
        return 2.0 * math.ceil(math.log2(n))
    return float(tier.fixed_steps)


def alpha_beta_time_s(tier: AlphaBeta, n: int, size_bytes, link: LinkScale = UNSCALED):
    """AllReduce over one alpha-beta tier of ``n`` participants, ``size_bytes`` each
    (array-friendly), through ``link``'s what-if factors."""
    size = np.asarray(size_bytes, dtype=float)
    if n <= 1:
        return np.zeros_like(size)
    latency_us = tier.base_latency_us.value + _algorithm_steps(tier, n) * tier.step_latency_us.value
    busbw = link.bytes_per_s(tier.bus_bandwidth_gb_per_s.value)
    return np.full(size.shape, link.latency_s(latency_us)) + 2.0 * (n - 1) / n * size / busbw


def fit_time_s(fit: TierFit, size_bytes, link: LinkScale = UNSCALED):
    """Fitted per-GPU-count curve: minimum over its protocol terms."""
    size = np.asarray(size_bytes, dtype=float)
    moved = 2.0 * (fit.gpus - 1) / fit.gpus * size
    terms = [link.latency_s(term.latency_us) + moved / link.bytes_per_s(term.bus_bandwidth_gb_per_s)
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


def scaled_table_s(sizes, times, size_bytes, link: LinkScale):
    """A one-node table's time at ``size_bytes`` through ``link``'s what-if factors (its floor a
    latency, the rest bandwidth-bound)."""
    t = interpolate_table_s(sizes, times, size_bytes)
    return t if link.identity else link.table_s(t, times.min())


def _intra_node_model_s(profile: HardwareProfile, gpus: int, size_bytes):
    """The parametric intra-node AllReduce (fit for this GPU count, else generic alpha-beta)."""
    size = np.asarray(size_bytes, dtype=float)
    if gpus <= 1:
        return np.zeros_like(size)
    # The transport mechanism where no fit of this machine's own collective covers the group
    # (a fit, e.g. laddersim fit's per-group-size floor, is a measurement of it and wins).
    if transport.prices(profile, gpus):
        return transport.allreduce_s(profile, gpus, size, lambda s: _p2p_ring_model_s(profile, gpus, s))
    return _p2p_ring_model_s(profile, gpus, size)


def _p2p_ring_model_s(profile: HardwareProfile, gpus: int, size_bytes):
    """The profile's fitted (or alpha-beta) intra-node line for ``gpus`` GPUs."""
    size = np.asarray(size_bytes, dtype=float)
    intra = links(profile).intra
    fit = profile.intra_node_fit(gpus)
    if fit is not None:
        return fit_time_s(fit, size, intra)
    return alpha_beta_time_s(profile.collectives.intra_node, gpus, size, intra)


def _intra_node_allreduce_s(profile: HardwareProfile, gpus: int, size_bytes, use_tables: bool = True):
    """AllReduce among ``gpus`` ranks of one node."""
    if gpus <= 1:
        return np.zeros_like(np.asarray(size_bytes, dtype=float))
    intra = links(profile).intra
    found = _table_for(profile, gpus, 1) if use_tables and profile.collectives.prefer == "table" else None
    if found is not None:
        table, sizes, times = found
        floor = 0.5 * times[0]  # never let a launch correction make a collective nearly free
        t = scaled_table_s(sizes, times, size_bytes, intra)
        return np.maximum(t + mode_correction_s(profile, table), intra.latency_of(floor))
    return _intra_node_model_s(profile, gpus, size_bytes)


def _multi_node_model_s(profile: HardwareProfile, tp: int, nodes: int, size_bytes):
    """Parametric AllReduce over ``nodes`` nodes of ``tp / nodes`` GPUs each: the fastest of NCCL's
    algorithms and protocols the profile offers (``laddersim.costs.nccl_algorithms``)."""
    g = tp // nodes
    # Every algorithm still reduces the full buffer inside each node and then crosses the network:
    # never faster than the node's own AllReduce plus the least network latency.
    return np.maximum(nccl_algorithms.model_s(profile, g, nodes, size_bytes),
                      _intra_node_model_s(profile, g, size_bytes) + nccl_algorithms.network_floor_s(profile, nodes))


def table_offset(profile: HardwareProfile, gpus_per_node: int, nodes: int, size_bytes):
    """Ratio measured / model of the profile's multi-node model table nearest in node count with
    this many GPUs per node (1 where there is none): exact at the table's sizes, interpolated in
    log size between them, held beyond its ends. A row faster than a smaller message's is noise
    (calibrate warns of it): the table's running maximum is used, so time never falls with size."""
    size = np.asarray(size_bytes, dtype=float)
    shapes = sorted({(int(n), abs(math.log(n / nodes)))
                     for table, cols in profile.allreduce_arrays if table.use == "model"
                     for n in np.unique(cols["nodes"][(cols["nodes"] > 1)
                                                      & (cols["gpus"] == cols["nodes"] * gpus_per_node)])},
                    key=lambda item: (item[1], item[0]))
    found = _table_for(profile, gpus_per_node * shapes[0][0], shapes[0][0]) if shapes else None
    if found is None:
        return np.ones_like(size)
    table, sizes, times = found
    model = _multi_node_model_s(unscaled(profile), gpus_per_node * shapes[0][0], shapes[0][0], sizes)
    log_ratio = np.log(np.maximum.accumulate(times + mode_correction_s(profile, table)) / model)
    return np.exp(np.interp(np.log2(np.maximum(size, 1.0)), np.log2(sizes), log_ratio))


def nccl_allreduce_s(profile: HardwareProfile, tp: int, size_bytes, *, nodes: int | None = None,
                     measured: bool = True):
    """Seconds of one NCCL AllReduce of ``size_bytes`` per rank over ``tp`` ranks on ``nodes``
    nodes (default: as many as the profile's node size needs). Callers outside this package use
    ``laddersim.costs.allreduce.allreduce_time_s``.

    One node: its measured table, else its fit. Several nodes: NCCL's algorithm model times the
    offset of the nearest measured multi-node table with as many GPUs per node, so a table wins
    at its exact shape and sizes, and other node counts keep its offset without a step.
    ``measured=False``: the parametric model alone (fits and checks of it), for any group shape.
    """
    size = np.asarray(size_bytes, dtype=float)
    nodes = profile.nodes_for(tp) if nodes is None else nodes
    if not measured:
        if nodes == 1:
            return _intra_node_allreduce_s(profile, tp, size, False)
        return _multi_node_model_s(profile, tp, nodes, size)
    if tp <= 1:
        return np.zeros_like(size)
    if nodes == 1:
        return _intra_node_allreduce_s(profile, tp, size)
    if profile.collectives.prefer == "table" and _has_multi_node_table(profile, tp // nodes):
        return _running_max(lambda s: _within_own_table(
            profile, tp, nodes, s, _multi_node_model_s(profile, tp, nodes, s) * table_offset(profile, tp // nodes, nodes, s)),
            size)
    return _multi_node_model_s(profile, tp, nodes, size)


def _within_own_table(profile: HardwareProfile, tp: int, nodes: int, size: np.ndarray, modelled: np.ndarray) -> np.ndarray:
    """At a measured table's own group shape and within its sizes, the table itself (its running
    maximum, log-log between rows); elsewhere ``modelled``. The model times the offset is exact at
    the rows but follows the model's shape between them, where a protocol switch or NCCL's tree
    correction can rise above the next row: a measured sweep is taken as it is where it exists,
    times what the profile's what-if scales do to the model there (a what-if, or a fit)."""
    found = _table_for(profile, tp, nodes)
    if found is None:
        return modelled
    table, sizes, times = found
    order = np.argsort(sizes, kind="stable")
    sizes = sizes[order]
    times = np.maximum.accumulate(times[order] + mode_correction_s(profile, table))
    inside = (size >= sizes[0]) & (size <= sizes[-1])
    measured = interpolate_table_s(sizes, times, size)
    if is_scaled(profile):
        measured = measured * (_multi_node_model_s(profile, tp, nodes, size)
                               / _multi_node_model_s(unscaled(profile), tp, nodes, size))
    return np.where(inside, measured, modelled)


def _has_multi_node_table(profile: HardwareProfile, gpus_per_node: int) -> bool:
    return any(((cols["nodes"] > 1) & (cols["gpus"] == cols["nodes"] * gpus_per_node)).any()
               for table, cols in profile.allreduce_arrays if table.use == "model")


# Grid (points per doubling) on which an offset-scaled curve is made non-decreasing in size.
_MONOTONE_POINTS_PER_DOUBLING = 4


def _running_max(curve, size: np.ndarray) -> np.ndarray:
    """``curve(size)``, raised where needed so that time never falls with size: the model's
    protocol switches and a table's offset can meet in a dip, which no real message shows (NCCL
    could always send it as the smaller one). The maximum runs over a log grid and the sizes."""
    if size.size == 0:
        return curve(size)
    top = max(float(size.max()), 2.0)
    grid = 2.0 ** np.arange(0.0, np.log2(top) + 1.0, 1.0 / _MONOTONE_POINTS_PER_DOUBLING)
    points = np.concatenate([grid, size.reshape(-1)])
    order = np.argsort(points, kind="stable")
    envelope = np.empty_like(points)
    envelope[order] = np.maximum.accumulate(curve(points[order]))
    return envelope[grid.size:].reshape(size.shape)


def collective_choice(profile: HardwareProfile, tp: int, size_bytes: float) -> tuple[str, str]:
    """(algorithm, protocol) of one AllReduce of ``size_bytes`` over ``tp`` ranks, as NCCL's tuner
    picks it (one node: the fastest term of the profile's fit)."""
    if tp <= 1:
        return ("none", "none")
    nodes = profile.nodes_for(tp)
    if nodes == 1:
        if transport.prices(profile, tp):
            picked = transport_choice(profile, tp, size_bytes)
            if picked != ("ring", "fit"):  # a P2P ring: the fitted line's protocol, as below
                return picked
        return nccl_algorithms.single_node_choice(profile, tp, size_bytes)
    return nccl_algorithms.choice(profile, tp // nodes, nodes, size_bytes)


def slowdowns(profile: HardwareProfile, tp: int, size_bytes: float) -> tuple[float, float]:
    """(compute_slowdown, comm_slowdown) while an AllReduce of ``size_bytes`` over ``tp`` ranks
    overlaps compute (``InterferenceSpec.at``). Across nodes its channel count follows the rule of
    the algorithm NCCL picks (tuning.cc: only ``threadThresholds[RING][LL]`` is multiplied by the
    ranks): a ring's grows with the ranks, a tree's (NVLS-tree's, CollNet's) does not. One node
    keeps the per-rank rule for every protocol, as validated on the one-node tables (NCCL's own
    thresholds of LL128, Simple and NVLS are per channel too: left as they were).

    A one-node message NCCL sends over a host-bound path (``transport.stretches_beside_compute``:
    an SHM ring's Simple) keeps its speed beside compute, unless the profile measured its own
    interference per size (``by_size``)."""
    per_rank = profile.nodes_for(tp) == 1 or collective_choice(profile, tp, size_bytes)[0] == "ring"
    compute, comm = profile.interference.at(size_bytes, bandwidth_share(profile, tp, size_bytes), tp, per_rank)
    if tp > 1 and profile.nodes_for(tp) == 1 and _transport_priced(profile, tp) and not profile.interference.by_size:
        algorithm, protocol = collective_choice(profile, tp, size_bytes)
        path = "nvls" if algorithm == "nvls" else transport.ring_transport(profile.collectives.transport, tp)
        if not transport.stretches_beside_compute(path, protocol):
            comm = 0.0
    return compute, comm


def bandwidth_share(profile: HardwareProfile, tp: int, size_bytes: float) -> float:
    """Share of an AllReduce's time above its latency floor: 0 for a latency-bound message,
    towards 1 for a bandwidth-bound one.

    The floor is the time of a one-byte message on what carries this message. Where the transport
    mechanism prices a one-node group (``laddersim.costs.transport``), that is the candidate NCCL's
    tuner picks for this size: its transports differ in latency, not only in bandwidth, and a
    message NCCL sends to NVLS pays the switch's latency (48.8 us on 8 GPUs of h100-sxm-p2p-off)
    whatever the GEMMs beside it do, where a one-byte message would take the SHM ring's LL (37.5
    us); counting the difference as bandwidth-bound time would let the interference stretch a
    latency. Elsewhere (a fitted protocol curve, a measured table, NCCL's multi-node model) the
    floor is the curve's own one-byte time, as the interference was validated with."""
    if tp <= 1:
        return 0.0
    if profile.nodes_for(tp) == 1 and _transport_priced(profile, tp):
        floor_s, time_s = transport.picked_floor_and_time_s(profile, tp, float(size_bytes),
                                                            lambda s: _p2p_ring_model_s(profile, tp, s))
    else:
        floor_s, time_s = nccl_allreduce_s(profile, tp, np.array([1.0, float(size_bytes)]))
    return float(max(0.0, 1.0 - floor_s / time_s)) if time_s > 0 else 0.0


def _transport_priced(profile: HardwareProfile, gpus: int) -> bool:
    """Is a one-node AllReduce of ``gpus`` priced by the transport mechanism (no measured table
    of this group shape taken first, no fit of its own)?"""
    tabled = profile.collectives.prefer == "table" and _table_for(profile, gpus, 1) is not None
    return transport.prices(profile, gpus) and not tabled


def transport_choice(profile: HardwareProfile, gpus: int, size_bytes: float) -> tuple[str, str]:
    """(algorithm, protocol) of the candidate NCCL's tuner picks under the transport mechanism for
    ``gpus`` GPUs of one node (``("ring", "fit")``: a P2P ring on the fitted line)."""
    return transport.choice(profile, gpus, size_bytes, lambda s: _p2p_ring_model_s(profile, gpus, s))

