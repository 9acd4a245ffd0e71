"""The communication side of a hardware profile: the inter-node network, how AllReduce time is
computed (measured tables, fitted protocol lines, NCCL's algorithms), compute/collective
interference, and the what-if scalings applied on top."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, model_validator

from laddersim.hardware.sourced import FROZEN_CONFIG, AtLeastOne, MeasuredTable, NonNegative, Positive, Sourced
from laddersim.hardware.transport_spec import TransportSpec


class AlphaBeta(BaseModel):
    """NCCL-style cost of an AllReduce over one tier: latency per algorithm step plus bytes/bandwidth.

    ``algorithm`` = ring: 2(n-1) steps, 2(n-1)/n of the bytes over each link;
    tree: 2 log2(n) steps, the bytes twice over the bottleneck link;
    nvls / one-shot: a constant number of steps (``fixed_steps``), 2(n-1)/n of the bytes.
    """

    model_config = FROZEN_CONFIG

    algorithm: Literal["ring", "tree", "nvls"]
    base_latency_us: NonNegative  # fixed cost of launching the collective
    step_latency_us: NonNegative  # per algorithm step
    bus_bandwidth_gb_per_s: Positive  # achieved busbw at large sizes, nccl-tests convention
    fixed_steps: int = 2


class ProtocolTerm(BaseModel):
    """One line of a per-GPU-count AllReduce fit: ``latency_us + 2(n-1)/n * bytes / busbw``.

    NCCL picks, per size, the algorithm/protocol (LL, LL128, Simple; ring, tree, NVLS) its tuner
    predicts fastest, each a latency plus a bandwidth term; the fit keeps that form: the time is
    the minimum over the terms. ``protocol`` is a label only (which regime the term describes).
    """

    model_config = FROZEN_CONFIG

    protocol: str
    latency_us: float = Field(gt=0, allow_inf_nan=False)
    bus_bandwidth_gb_per_s: float = Field(gt=0, allow_inf_nan=False)


class TierFit(BaseModel):
    """Fitted AllReduce curve of one tier for one participant count (see ``ProtocolTerm``)."""

    model_config = FROZEN_CONFIG

    gpus: int = Field(gt=1)
    terms: list[ProtocolTerm] = Field(min_length=1)
    source: str = Field(min_length=3)  # the table and rows fitted, and the command that fits


class NetworkSpec(BaseModel):
    """The inter-node network."""

    model_config = FROZEN_CONFIG

    nics_per_node: AtLeastOne
    nic_bandwidth_gb_per_s: Positive  # per NIC, GB/s (400 Gb/s NDR = 50 GB/s)
    # The fabric: base_latency_us = its fixed cost per collective (0 on InfiniBand; a plugin's proxy
    # round on EFA/TCPXO), step_latency_us = its latency per network hop (NCCL's net latency, added
    # to NCCL's own per-hop NET latency), bus_bandwidth_gb_per_s = what one NIC carries for a tree.
    allreduce: AlphaBeta
    # A flat ring over all ranks crosses each node boundary on every channel; its bandwidth is
    # min(intra-node busbw, NICs used per node * this per-NIC busbw). None: the tree's per-NIC busbw.
    ring_nic_bus_bandwidth_gb_per_s: Positive | None = None
    # Ring/Simple latency: 2 passes around the ring, N node-crossing hops and n - N NVLink/PCIe hops
    # each, at these per-hop costs (pipeline fill of NCCL's Simple protocol; see
    # laddersim.costs.nccl_algorithms for the other algorithms and protocols).
    ring_net_step_latency_us: NonNegative = Sourced(value=0.0, source="default: no per-hop ring latency")
    ring_intra_step_latency_us: NonNegative = Sourced(value=0.0, source="default: no per-hop ring latency")
    # The fabric's latency per network hop of the Simple protocol (RDMA write, then a flush or
    # completion round); None: twice allreduce.step_latency_us, as NCCL adds the net latency twice.
    simple_step_latency_us: NonNegative | None = None
    # LL protocol's bus bandwidth across nodes (8-byte stores with flags through the network proxy);
    # None: NCCL's llMaxBws (39.0 GB/s on 2 nodes, 20.4 beyond, Intel hosts).
    ll_max_bus_bandwidth_gb_per_s: Positive | None = None
    # LL128's bus bandwidth across nodes (NCCL caps it per channel: perChMaxRingLL128Bw,
    # perChMaxTreeLL128Bw, times the channels the network runs); None: no cap beyond its 120/128.
    ll128_max_bus_bandwidth_gb_per_s: Positive | None = None
    # Share of the 2-node tree bandwidth a tree over more nodes reaches: 0.5 in principle (a node
    # interior in one of the two trees moves 2S per direction instead of S).
    tree_deep_bandwidth_share: Positive = Sourced(
        value=0.5, source="NCCL double binary tree: beyond 2 nodes each node is interior in one tree, 2S per direction")


class CollectiveSpec(BaseModel):
    """How AllReduce time is computed for this system."""

    model_config = FROZEN_CONFIG

    mode: Literal["eager", "graph"] = "graph"  # the regime simulated (compiled decode = graph)
    # Added per collective when simulating ``eager`` from a ``graph`` table, and subtracted the
    # other way round: host launch cost not hidden by CUDA-graph replay.
    eager_launch_us: NonNegative = Sourced(value=0.0, source="default: no launch-cost correction")
    intra_node: AlphaBeta
    tables: list[MeasuredTable] = []
    # Measured AllGather tables (``size_bytes``: the gathered output, every rank's part): the
    # engine prices the logits gather from them where they cover its group and size
    # (calibration/allgather_bench.py), else as an AllReduce of half the gathered bytes.
    allgather_tables: list[MeasuredTable] = []
    # Measured point-to-point send/recv tables (``gpus`` 2: one pair; ``nodes`` 1: inside a node,
    # ``size_bytes``: the message): a pipeline's stage boundary is priced from their one-node rows
    # where the pair talks P2P (laddersim.costs.point_to_point).
    sendrecv_tables: list[MeasuredTable] = []
    # Fitted per-GPU-count curves of the intra-node tier (used where no model table matches, and
    # always for the intra-node part of a multi-node AllReduce).
    intra_node_fits: list[TierFit] = []
    # table: interpolate a model table when one matches the group; fit: always the fitted model.
    prefer: Literal["table", "fit"] = "table"
    # AllReduce algorithms NCCL may choose on this system (laddersim.costs.nccl_algorithms): ring
    # and tree everywhere; nvls (one node) and nvls_tree (across nodes) only where the NVSwitch does
    # the reduction (not over PCIe, SHM or with P2P off); collnet only with in-network reduction.
    algorithms: list[Literal["ring", "tree", "nvls", "nvls_tree", "collnet"]] = ["ring", "tree"]
    # The node's topology and transports (laddersim.costs.transport): where set, a one-node
    # AllReduce takes the transport NCCL picks for the group (a group size with a fit above keeps it).
    transport: TransportSpec | None = None


class InterferencePoint(BaseModel):
    """Measured overlap slowdowns for one AllReduce message size."""

    model_config = FROZEN_CONFIG

    size_bytes: int = Field(gt=0)
    compute_slowdown: float = Field(ge=0, allow_inf_nan=False)
    comm_slowdown: float = Field(ge=0, allow_inf_nan=False)
    source: str = Field(min_length=3)


class InterferenceSpec(BaseModel):
    """Mutual slowdown of compute and communication while they overlap on one GPU.

    ``comm_slowdown_part`` says which part of a collective ``comm_slowdown`` stretches:

    * ``whole``: its whole time, whatever the message;
    * ``bandwidth``: only its time above the latency floor (the time of a one-byte message on the
      transport and algorithm that carry it, ``laddersim.costs.collectives.bandwidth_share``). An
      overlapped collective gets the SMs the GEMMs leave it; fewer CTAs move data more slowly,
      but the kernel start and the hop synchronisation do not change, so a latency-bound decode
      AllReduce keeps its speed and a bandwidth-bound prefill one slows in full (NanoFlow's
      reduce-scatter at 8 / 16 / 32 CTAs: intercepts of 19-25 us, slopes of 9.4 -> 4.3 us per MiB).

    ``by_size`` (optional, from ``laddersim calibrate``): the slowdowns measured per message size,
    each of a whole collective. A collective occupies more SMs and moves more data as its message
    grows (NCCL adds channels and changes protocol), so a large AllReduce disturbs the GEMMs
    beside it more than a small one. Interpolated in log size and held constant beyond the ends;
    without it the two constant fractions apply to every collective.

    ``collective_channels`` (optional, without ``by_size``): NCCL's channel rule, the mechanism
    behind that growth. A collective runs one CTA per channel, and NCCL gives a message only as
    many of the communicator's channels as it fills (``src/enqueue.cc``: while ``nBytes <
    nChannels * nThreads * threadThreshold`` drop a channel; a ring's threshold is per rank, so a
    channel needs ``ranks * channel_bytes_per_rank`` bytes). ``compute_slowdown`` is then that of a
    collective on all the channels, and a smaller one takes its share: a 16 KiB decode AllReduce
    on 8 GPUs runs on 1 CTA of 32 and barely disturbs the GEMMs, a 1 MiB one on all 32. The
    collective's own slowdown is not scaled: its CTAs meet the GEMMs' whatever their number. Only
    a ring's LL threshold is per rank (tuning.cc: ``threadThresholds[RING][LL] *= nRanks``, the
    others per channel): a tree across nodes, or another protocol, fills a channel with
    ``channel_bytes_per_rank`` bytes whatever the group (``per_rank=False``), so a 32 KiB decode
    AllReduce over 2 x 8 GPUs (tree/LL) runs on 8 CTAs, where a ring over 16 ranks would run on 1.
    """

    model_config = FROZEN_CONFIG

    compute_slowdown: NonNegative  # fraction: a GEMM takes (1 + x) longer while an AllReduce runs
    comm_slowdown: NonNegative  # fraction: an AllReduce (or its part above, see the docstring) takes (1 + x) longer
    comm_slowdown_part: Literal["whole", "bandwidth"] = "whole"
    by_size: list[InterferencePoint] = []
    collective_channels: AtLeastOne | None = None  # NCCL channels of a full-size collective
    channel_bytes_per_rank: Positive = Sourced(
        value=4096, source="NCCL src/graph/tuning.cc (thread threshold of the LL protocol, NCCL_LL_THREAD_"
                           "THRESHOLD 8 B, times nRanks for a ring) x LL's 512 threads (NCCL_LL_MAX_NTHREADS), "
                           "read by src/enqueue.cc's channel loop")

    @model_validator(mode="after")
    def _check_curve_and_channels(self) -> InterferenceSpec:
        sizes = [p.size_bytes for p in self.by_size]
        if sizes != sorted(set(sizes)):
            raise ValueError(f"by_size: sizes must be distinct and increasing, got {sizes}")
        channels = self.collective_channels
        if channels is not None and channels.value != int(channels.value):
            raise ValueError(f"collective_channels: a whole number of channels, got {channels.value:g}")
        if channels is not None and self.by_size:
            raise ValueError("collective_channels: not with by_size (a measured per-size curve already holds "
                             "NCCL's channel rule); allowed: one of them")
        return self

    def channel_share(self, size_bytes: float, ranks: int, per_rank: bool = True) -> float:
        """Share of the full channel count NCCL gives a collective of ``size_bytes`` over
        ``ranks`` ranks (1 without ``collective_channels``, or for one rank); ``per_rank``: its
        threshold grows with the ranks (a ring's LL), else a channel needs the same bytes
        whatever the group."""
        if self.collective_channels is None or ranks <= 1:
            return 1.0
        full = self.collective_channels.value
        per_channel = (ranks if per_rank else 1) * self.channel_bytes_per_rank.value
        return min(full, max(1.0, float(np.floor(size_bytes / per_channel)))) / full

    def at(self, size_bytes: float, bandwidth_share: float = 1.0, ranks: int = 1,
           per_rank: bool = True) -> tuple[float, float]:
        """(compute_slowdown, comm_slowdown of the whole collective) while a collective of
        ``size_bytes`` over ``ranks`` ranks runs; ``bandwidth_share`` is the share of its time above
        its latency floor (read only when ``comm_slowdown_part`` is ``bandwidth``); ``per_rank`` as
        in ``channel_share``."""
        if not self.by_size:
            share = bandwidth_share if self.comm_slowdown_part == "bandwidth" else 1.0
            return (self.compute_slowdown.value * self.channel_share(size_bytes, ranks, per_rank),
                    self.comm_slowdown.value * share)
        log_sizes = np.log([p.size_bytes for p in self.by_size])
        x = np.log(max(float(size_bytes), 1.0))
        return (float(np.interp(x, log_sizes, [p.compute_slowdown for p in self.by_size])),
                float(np.interp(x, log_sizes, [p.comm_slowdown for p in self.by_size])))


class WhatIf(BaseModel):
    """Scalings applied on top of the measured/fitted collective costs, for what-if sweeps.

    Bandwidth scales divide the bandwidth-bound part of a collective's time, latency scales
    multiply the latency part; for a measured table the latency part is the table's floor (its
    smallest-size time) and the rest is bandwidth-bound.
    """

    model_config = FROZEN_CONFIG

    intra_bandwidth_scale: float = Field(default=1.0, gt=0)
    intra_latency_scale: float = Field(default=1.0, ge=0)
    inter_bandwidth_scale: float = Field(default=1.0, gt=0)
    inter_latency_scale: float = Field(default=1.0, ge=0)
    # Where non-identity scalings came from (a what-if override, or ``laddersim fit``).
    source: str = ""
