"""The numbers a what-if scale multiplies, as the cost model really uses them for one TP group.

A scale of the intra-node bandwidth multiplies whatever laddersim.costs.collectives picks for the
group's ``tp / nodes`` GPUs (a measured table, a per-GPU-count fit, or the alpha-beta fallback),
so "the bandwidth" it scales is that curve's large-message bus bandwidth, and "the latency" its
small-message time; under the transport mechanism (``collectives.transport``) those are of the
path NCCL's tuner picks at that size (NVLS, an SHM or a P2P ring), and the label names it; the
inter-node scales multiply the profile's network tier. Sweeps convert set values (GB/s, us) to
scales with these; break-even reports its result in them.
"""

from __future__ import annotations

import numpy as np

from laddersim.costs import transport
from laddersim.costs.collectives import alpha_beta_time_s, nccl_allreduce_s, transport_choice
from laddersim.costs.scaling.view import links
from laddersim.errors import UserInputError
from laddersim.hardware.profile import HardwareProfile


class NoEffect(UserInputError):
    """The quantity cannot change this group's time (e.g. an inter-node scale on one node)."""


# Message sizes (bytes) far above any measured table: the AllReduce time grows linearly there, so
# its slope is the bandwidth the model uses for large messages.
_LARGE_BYTES = (2.0 ** 34, 2.0 ** 35)


def group_nominal(profile: HardwareProfile, tp: int, vary: str) -> tuple[float, str]:
    """(value, what it is) of the quantity ``vary`` scales, for a TP group of ``tp`` ranks on
    ``profile`` as the cost model uses it: GB/s for bandwidths, us for latencies.

    Raises NoEffect (a UserInputError) when the scale cannot matter for this group: inter-node scales when
    the group fits one node, intra-node ones when each node holds one rank.
    """
    nodes = profile.nodes_for(tp)
    gpus = tp // nodes
    if tp == 1:
        raise NoEffect(f"vary: {vary} has no effect: TP 1 runs no AllReduce; allowed: --tp 2 or more")
    if vary.startswith("inter_"):
        if nodes == 1:
            raise NoEffect(
                f"vary: {vary} has no effect: TP {tp} fits one {profile.name} node "
                f"({profile.node.gpus_per_node} GPUs), so no AllReduce crosses the network; "
                f"allowed here: intra_bandwidth, intra_latency")
        tier, inter = profile.network.allreduce, links(profile).inter
        if vary == "inter_bandwidth":
            return (inter.bandwidth_of(tier.bus_bandwidth_gb_per_s.value),
                    "bus bandwidth of the profile's network tier (network.allreduce)")
        latency_s = float(alpha_beta_time_s(tier, nodes, 0.0, inter))
        return latency_s * 1e6, f"latency of the profile's network tier (network.allreduce) across {nodes} nodes"
    if gpus == 1:
        raise NoEffect(
            f"vary: {vary} has no effect: TP {tp} on {profile.name} puts one GPU on each node, so no "
            f"AllReduce stays inside a node; allowed here: inter_bandwidth, inter_latency")
    if vary == "intra_bandwidth":
        t_small_s, t_large_s = nccl_allreduce_s(profile, gpus, np.array(_LARGE_BYTES), nodes=1)
        moved_bytes = 2.0 * (gpus - 1) / gpus * (_LARGE_BYTES[1] - _LARGE_BYTES[0])
        return (moved_bytes / (t_large_s - t_small_s) / 1e9,
                f"large-message bus bandwidth of the {gpus}-GPU AllReduce "
                f"({_intra_source(profile, gpus, _LARGE_BYTES[1], 'bandwidth')})")
    latency_s = float(nccl_allreduce_s(profile, gpus, np.zeros(1), nodes=1)[0])
    return latency_s * 1e6, f"small-message time of the {gpus}-GPU AllReduce ({_intra_source(profile, gpus, 0.0, 'latency')})"


def _intra_source(profile: HardwareProfile, gpus: int, size_bytes: float, quantity: str) -> str:
    """Where the model's intra-node AllReduce time for ``gpus`` GPUs at ``size_bytes`` comes from,
    named by the profile field it reads (what a scale of it varies)."""
    sizes = np.geomspace(1.0, 2.0 ** 30, 16)
    if not np.allclose(nccl_allreduce_s(profile, gpus, sizes, nodes=1),
                       nccl_allreduce_s(profile, gpus, sizes, nodes=1, measured=False),
                       rtol=1e-12, atol=0.0):
        return "measured table"
    fit = f"fit for {gpus} GPUs" if profile.intra_node_fit(gpus) is not None else "alpha-beta fallback collectives.intra_node"
    if not transport.prices(profile, gpus):
        return fit
    algorithm, protocol = transport_choice(profile, gpus, size_bytes)
    ring = transport.ring_transport(profile.collectives.transport, gpus)
    if algorithm == "nvls":
        path = "NVLS, the switch's reduction (collectives.transport.nvls)"
    elif ring == "shm":
        path = f"an SHM ring through host memory, {protocol.upper()} (collectives.transport.shm)"
    else:
        path = f"a P2P ring over {'NVLink' if ring == 'p2p_nvlink' else 'PCIe'} ({fit})"
    return f"transport mechanism: NCCL's tuner picks {path} at this size; the scale multiplies every path's {quantity}"
