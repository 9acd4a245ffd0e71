"""What a profile states about its node's transports (``collectives.transport``): the topology
NCCL reads (P2P allowed or not, GPUs behind one PCIe switch, GPUs per CPU socket, NVLS) and the
cost of the host-staged SHM transport NCCL falls back to. ``laddersim.costs.transport`` turns it
into the transport of a ring, the protocols NCCL enables on it and their times."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from laddersim.hardware.sourced import FROZEN_CONFIG, AtLeastOne, NonNegative, Positive


class NodeTopology(BaseModel):
    """The node as NCCL's topology search sees it."""

    model_config = FROZEN_CONFIG

    # enabled: peers talk P2P where NCCL's P2P level allows; disabled: NCCL_P2P_DISABLE=1 (or a
    # driver without P2P): every GPU pair goes through host memory (SHM).
    p2p: Literal["enabled", "disabled"] = "enabled"
    # nvlink: every pair has NVLink (NVSwitch); pcie: P2P only behind a common PCIe switch (NCCL's
    # default P2P level PXB), SHM across host bridges and sockets; nvlink_pairs: NVLink within each
    # pair of GPUs, PCIe (as ``pcie``) between pairs.
    gpu_links: Literal["nvlink", "pcie", "nvlink_pairs"]
    gpus_per_pcie_switch: AtLeastOne
    gpus_per_socket: AtLeastOne
    source: str = Field(min_length=3)


class NvlsTerm(BaseModel):
    """One line of the NVSwitch's in-switch AllReduce (NVLS) for a GPU count: ``latency + 2(n-1)/n
    S / busbw``; several lines for one count are a fitted curve, the least of them at each size.
    NVLS reduces in the switch over NVLink multicast, not through the P2P transport, so
    NCCL_P2P_DISABLE leaves it enabled (what it then costs is the profile's measurement)."""

    model_config = FROZEN_CONFIG

    gpus: int = Field(gt=2)  # NCCL enables NVLS only with more than two GPUs
    latency_us: float = Field(gt=0, allow_inf_nan=False)
    bus_bandwidth_gb_per_s: float = Field(gt=0, allow_inf_nan=False)
    source: str = Field(min_length=3)


class ShmCosts(BaseModel):
    """NCCL's SHM transport: each ring hop is a GPU writing into a host buffer over its PCIe link
    and the next GPU reading it (``via SHM/direct/direct``)."""

    model_config = FROZEN_CONFIG

    ll_hop_latency_us: NonNegative  # per ring step, LL protocol (flag polling through host memory)
    ll_bus_bandwidth_gb_per_s: Positive  # LL's busbw through host memory
    simple_hop_latency_us: NonNegative  # per ring step, Simple protocol (after NCCL's Simple base 8.4 us)
    simple_bus_bandwidth_gb_per_s: Positive  # Simple's busbw on one GPU's PCIe link through host memory
    # Every byte a rank sends is written to and read from host memory once: a socket's memory
    # carries 2 x busbw for each of its GPUs in the ring.
    host_memory_bandwidth_gb_per_s: Positive  # per socket, achievable
    # A ring over GPUs of two sockets crosses the socket link twice (there and back), each
    # crossing carrying the ring's busbw in each direction.
    socket_link_bandwidth_gb_per_s: Positive  # per direction


class NcclGraph(BaseModel):
    """What NCCL's own tuner believes of an SHM ring (``src/graph/tuning.cc``: it picks the
    algorithm and protocol by these, not by what the transport really delivers): the bandwidth its
    topology search gives a channel of the host-staged path (the least link on it: a GPU's PCIe
    link, or the socket interconnect when the ring crosses sockets) and the channels it builds."""

    model_config = FROZEN_CONFIG

    pcie_link_gb_per_s: Positive  # NCCL's value for one GPU's PCIe link (width * speed / 80)
    socket_link_gb_per_s: Positive  # NCCL's value for the CPU interconnect (topo.h, e.g. SPR_BW 22)
    channels: AtLeastOne  # rings NCCL's search builds over the SHM path


class NcclTuningEntry(BaseModel):
    """One AllReduce entry of NCCL's own tuning table on the machine, for a communicator of
    ``gpus`` ranks (``laddersim calibrate nccl-log --yaml`` reads it from NCCL's debug log):
    its estimate of a message of n bytes is ``latency_us + n / (1000 x bandwidth_gb_per_s)`` us.
    Where a profile states these, NCCL's tuner is read, not inferred from ``nccl_graph``."""

    model_config = FROZEN_CONFIG

    gpus: int = Field(ge=2)
    algorithm: Literal["ring", "tree", "nvls"]
    protocol: Literal["ll", "ll128", "simple"]
    latency_us: float = Field(ge=0, allow_inf_nan=False)
    bandwidth_gb_per_s: float = Field(gt=0, allow_inf_nan=False)  # NCCL's algorithm bandwidth
    source: str = Field(min_length=3)


class TransportSpec(BaseModel):
    """The profile's topology and transport costs (see the module docstring)."""

    model_config = FROZEN_CONFIG

    topology: NodeTopology
    shm: ShmCosts
    nccl_graph: NcclGraph
    nvls: list[NvlsTerm] = []
    nccl_tuning: list[NcclTuningEntry] = []
