"""Hardware profiles: one YAML file per system under ``hardware_profiles/``.

Every number in a profile is a ``Sourced`` value: the number in the file's human unit (the unit
is in the field name: ``_tflops``, ``_gbps`` = GB/s (1e9 B/s), ``_us``, ``_gb``) and where it
came from (a measured table with file and rows, a datasheet, or a fit with its data and command).
Properties ending in SI units (``_s``, ``_bytes_per_s``, ``_flops_per_s``, ``_bytes``) convert
once, here; nothing else in laddersim sees human units.

Measured tables (AllReduce times, GEMM times) live beside the profile as small CSV files with
``#`` comment lines citing their source; a profile names them by relative path.
"""

from __future__ import annotations

import csv
import os
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from laddersim.config_files import build, read_yaml_mapping
from laddersim.errors import UserInputError
from laddersim.io_read import first_line, read_csv
from laddersim.resources import resource_path

if TYPE_CHECKING:  # pandas loads only where a table is read as a frame (profiles check/fit)
    import pandas as pd

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Sourced(BaseModel):
    """A number and where it came from."""

    model_config = _FROZEN

    value: float = Field(allow_inf_nan=False)  # a NaN or infinity would stall the engine's clock
    source: str = Field(min_length=3)


def _bounded(low: float, *, strict: bool):
    """A validator of a ``Sourced`` value: above ``low`` (``strict``) or at least ``low``."""
    def check(number: Sourced) -> Sourced:
        if number.value < low or (strict and number.value == low):
            raise ValueError(f"value must be {'>' if strict else '>='} {low:g}, got {number.value:g}")
        return number
    return AfterValidator(check)


# A rate, capacity, efficiency or count that must be above zero (a zero bandwidth would divide
# by zero, a negative one would make transfers faster), and a time or fraction that may be zero.
Positive = Annotated[Sourced, _bounded(0.0, strict=True)]
NonNegative = Annotated[Sourced, _bounded(0.0, strict=False)]
AtLeastOne = Annotated[Sourced, _bounded(1.0, strict=False)]


# The GpuSpec field holding each Workload dtype's compute peak.
PEAK_FIELD_BY_DTYPE = {"bfloat16": "peak_tflops", "float16": "peak_tflops", "float32": "peak_tflops_fp32",
                       "fp8": "peak_tflops_fp8"}


class GpuSpec(BaseModel):
    """One GPU: peak rates (datasheet), achievable efficiencies (fits), capacity."""

    model_config = _FROZEN

    name: str
    peak_tflops: Positive  # dense fp16/bf16 tensor-core peak, 1e12 FLOP/s
    peak_tflops_fp8: Positive | None = None  # dense FP8 tensor-core peak; None: the GPU has no FP8
    peak_tflops_fp32: Positive | None = None  # FP32 peak (torch matmuls run in FP32 unless TF32 is on)
    memory_bandwidth_gbps: Positive  # HBM/GDDR peak, GB/s
    memory_gb: Positive  # capacity, 1e9 bytes
    # GEMM model: t = launch + max(flops / (peak * compute_eff), bytes / (bw * memory_eff)),
    # blended by a p-norm of order ``gemm_blend_order`` (see laddersim.costs.gemm).
    gemm_compute_efficiency: Positive
    gemm_memory_efficiency: Positive
    gemm_blend_order: Positive = Sourced(value=4.0, source="default p-norm blend of roofline terms")
    gemm_tile_m: Positive = Sourced(value=64, source="default M tile (cuBLAS/CUTLASS 64-row tiles)")
    gemm_tile_n: Positive = Sourced(value=128, source="default N tile (cuBLAS/CUTLASS Hopper and Ampere 64x128 / 128x128 tiles)")
    # Streaming multiprocessors (datasheet); with it, a library GEMM whose output tiles cannot fill
    # the SMs is split along K (laddersim.costs.op_costs.splits_k). None: no split-K rule.
    sm_count: Positive | None = None
    # 16-bit tensor throughput (1e12 FLOP/s) that a long run of compute-bound kernels sustains at
    # the GPU's power limit: a prefill's back-to-back GEMMs run at it, while a short GEMM
    # microbenchmark (a few ms of work) runs at boost clocks above it. Caps the GEMM time's compute
    # rate (laddersim.costs.gemm_tables). None: no cap.
    sustained_tflops: Positive | None = None
    # Memory-bound kernels (norms, elementwise, KV-cache reads): fraction of peak bandwidth.
    elementwise_memory_efficiency: Positive
    attention_compute_efficiency: Positive  # prefill flash-attention, fraction of peak_tflops
    kernel_launch_us: NonNegative  # floor per kernel inside a CUDA graph
    # GEMM tables (CSV m,n,k,time_us) the GEMM model is checked against (laddersim profiles check).
    gemm_tables: list[MeasuredTable] = []
    usable_memory_fraction: Positive = Sourced(
        value=0.9, source="default: 10% of HBM kept for CUDA context, allocator slack, workspace"
    )

    @property
    def peak_flops_per_s(self) -> float:
        return self.peak_tflops.value * 1e12

    def dtypes(self) -> list[str]:
        """The Workload dtypes this GPU has a compute peak for."""
        return [dtype for dtype, field in PEAK_FIELD_BY_DTYPE.items() if getattr(self, field) is not None]

    def peak_flops_per_s_for(self, dtype: str) -> float:
        """Peak FLOP/s of GEMMs and attention in ``dtype`` (a Workload dtype)."""
        field = PEAK_FIELD_BY_DTYPE[dtype]
        peak = getattr(self, field)
        if peak is None:
            raise UserInputError(f"dtype: {dtype} needs gpu.{field} and {self.name} gives none; "
                                 f"allowed: {', '.join(self.dtypes())}")
        return peak.value * 1e12

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gbps.value * 1e9

    @property
    def memory_capacity_bytes(self) -> float:
        return self.memory_gb.value * 1e9

    @property
    def kernel_launch_s(self) -> float:
        return self.kernel_launch_us.value * 1e-6


class NodeSpec(BaseModel):
    """GPUs in one node and the fabric joining them."""

    model_config = _FROZEN

    gpus_per_node: int = Field(gt=0)
    fabric: Literal["nvswitch", "nvlink-pairs", "pcie"]
    description: str = ""


class AlphaBeta(BaseModel):
    """NCCL-style cost of an AllReduce over one tier: latency per algorithm step plus bytes/bandwidth.

    ``algorithm`` = ring: 2(n-1) steps, 2(n-1)/n of the bytes over each link;
    tree: 2 log2(n) steps, the bytes twice over the bottleneck link;
    nvls / one-shot: a constant number of steps (``fixed_steps``), 2(n-1)/n of the bytes.
    """

    model_config = _FROZEN

    algorithm: Literal["ring", "tree", "nvls"]
    base_latency_us: NonNegative  # fixed cost of launching the collective
    step_latency_us: NonNegative  # per algorithm step
    bus_bandwidth_gbps: Positive  # achieved busbw at large sizes, nccl-tests convention
    fixed_steps: int = 2


class ProtocolTerm(BaseModel):
    """One line of a per-GPU-count AllReduce fit: ``latency_us + 2(n-1)/n * bytes / busbw``.

    NCCL picks, per size, the algorithm/protocol (LL, LL128, Simple; ring, tree, NVLS) its tuner
    predicts fastest, each a latency plus a bandwidth term; the fit keeps that form: the time is
    the minimum over the terms. ``protocol`` is a label only (which regime the term describes).
    """

    model_config = _FROZEN

    protocol: str
    latency_us: float = Field(gt=0, allow_inf_nan=False)
    bus_bandwidth_gbps: float = Field(gt=0, allow_inf_nan=False)


class TierFit(BaseModel):
    """Fitted AllReduce curve of one tier for one participant count (see ``ProtocolTerm``)."""

    model_config = _FROZEN

    gpus: int = Field(gt=1)
    terms: list[ProtocolTerm] = Field(min_length=1)
    source: str = Field(min_length=3)  # the table and rows fitted, and the command that fits


class NetworkSpec(BaseModel):
    """The inter-node network."""

    model_config = _FROZEN

    nics_per_node: AtLeastOne
    nic_bandwidth_gbps: Positive  # per NIC, GB/s (400 Gb/s NDR = 50 GB/s)
    # The fabric: base_latency_us = its fixed cost per collective (0 on InfiniBand; a plugin's proxy
    # round on EFA/TCPXO), step_latency_us = its latency per network hop (NCCL's net latency, added
    # to NCCL's own per-hop NET latency), bus_bandwidth_gbps = what one NIC carries for a tree.
    allreduce: AlphaBeta
    # A flat ring over all ranks crosses each node boundary on every channel; its bandwidth is
    # min(intra-node busbw, NICs used per node * this per-NIC busbw). None: the tree's per-NIC busbw.
    ring_nic_bus_bandwidth_gbps: Positive | None = None
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
    ll_max_bus_bandwidth_gbps: Positive | None = None
    # LL128's bus bandwidth across nodes (NCCL caps it per channel: perChMaxRingLL128Bw,
    # perChMaxTreeLL128Bw, times the channels the network runs); None: no cap beyond its 120/128.
    ll128_max_bus_bandwidth_gbps: Positive | None = None
    # Share of the 2-node tree bandwidth a tree over more nodes reaches: 0.5 in principle (a node
    # interior in one of the two trees moves 2S per direction instead of S).
    tree_deep_bandwidth_share: Positive = Sourced(
        value=0.5, source="NCCL double binary tree: beyond 2 nodes each node is interior in one tree, 2S per direction")


class MeasuredTable(BaseModel):
    """A resampled measured table shipped beside the profile (CSV with ``#`` source comments)."""

    model_config = _FROZEN

    file: str
    source: str = Field(min_length=3)
    mode: Literal["eager", "graph"] = "eager"  # timed eagerly or captured in a CUDA graph
    library: str = ""  # e.g. "NCCL 2.29.2"
    # model: the simulator may interpolate it; check: only compared with (laddersim profiles check).
    use: Literal["model", "check"] = "model"
    # loop: averaged back-to-back loop (launch hidden); single: one CUDA-event-timed call (launch
    # and skew included); kernel: profiler kernel time.
    timing: Literal["loop", "single", "kernel"] = "loop"
    # Why a check is expected to miss, shown in the report (empty: it should pass).
    expect_miss: str = ""


class CollectiveSpec(BaseModel):
    """How AllReduce time is computed for this system."""

    model_config = _FROZEN

    mode: Literal["eager", "graph"] = "graph"  # the regime simulated (compiled decode = graph)
    # Added per collective when simulating ``eager`` from a ``graph`` table, and subtracted the
    # other way round: host launch cost not hidden by CUDA-graph replay.
    eager_launch_us: NonNegative = Sourced(value=0.0, source="default: no launch-cost correction")
    intra_node: AlphaBeta
    tables: list[MeasuredTable] = []
    # Fitted per-GPU-count curves of the intra-node tier (used where no model table matches, and
    # always for the intra-node part of a multi-node AllReduce).
    intra_node_fits: list[TierFit] = []
    # table: interpolate a model table when one matches the group; fit: always the fitted model.
    prefer: Literal["table", "fit"] = "table"
    # AllReduce algorithms NCCL may choose on this system (laddersim.costs.nccl_algorithms): ring
    # and tree everywhere; nvls (one node) and nvls_tree (across nodes) only where the NVSwitch does
    # the reduction (not over PCIe, SHM or with P2P off); collnet only with in-network reduction.
    algorithms: list[Literal["ring", "tree", "nvls", "nvls_tree", "collnet"]] = ["ring", "tree"]


class InterferencePoint(BaseModel):
    """Measured overlap slowdowns for one AllReduce message size."""

    model_config = _FROZEN

    size_bytes: int = Field(gt=0)
    compute_slowdown: float = Field(ge=0, allow_inf_nan=False)
    comm_slowdown: float = Field(ge=0, allow_inf_nan=False)
    source: str = Field(min_length=3)


class InterferenceSpec(BaseModel):
    """Mutual slowdown of compute and communication while they overlap on one GPU.

    ``comm_slowdown_part`` says which part of a collective ``comm_slowdown`` stretches:

    * ``whole``: its whole time, whatever the message;
    * ``bandwidth``: only its time above the latency floor (the time of a one-byte message). An
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
    collective's own slowdown is not scaled: its CTAs meet the GEMMs' whatever their number.
    """

    model_config = _FROZEN

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

    def channel_share(self, size_bytes: float, ranks: int) -> float:
        """Share of the full channel count NCCL gives a collective of ``size_bytes`` over
        ``ranks`` ranks (1 without ``collective_channels``, or for one rank)."""
        if self.collective_channels is None or ranks <= 1:
            return 1.0
        full = self.collective_channels.value
        per_channel = ranks * self.channel_bytes_per_rank.value
        return min(full, max(1.0, float(np.floor(size_bytes / per_channel)))) / full

    def at(self, size_bytes: float, bandwidth_share: float = 1.0, ranks: int = 1) -> tuple[float, float]:
        """(compute_slowdown, comm_slowdown of the whole collective) while a collective of
        ``size_bytes`` over ``ranks`` ranks runs; ``bandwidth_share`` is the share of its time above
        its latency floor (read only when ``comm_slowdown_part`` is ``bandwidth``)."""
        if not self.by_size:
            share = bandwidth_share if self.comm_slowdown_part == "bandwidth" else 1.0
            return (self.compute_slowdown.value * self.channel_share(size_bytes, ranks),
                    self.comm_slowdown.value * share)
        log_sizes = np.log([p.size_bytes for p in self.by_size])
        x = np.log(max(float(size_bytes), 1.0))
        return (float(np.interp(x, log_sizes, [p.compute_slowdown for p in self.by_size])),
                float(np.interp(x, log_sizes, [p.comm_slowdown for p in self.by_size])))


class FrameworkSpec(BaseModel):
    """Fixed per-step costs of the serving framework (gpt-fast style compiled decode)."""

    model_config = _FROZEN

    step_overhead_us: NonNegative  # per forward pass: graph launch, host sync, input prep
    sampling_us: NonNegative  # top-k sampling of one batch of logits, fixed part
    # A collective on the critical path of a compiled step pays its kernel start-up and the
    # compute/NCCL stream hand-off, which nccl-tests' back-to-back loop hides (added per collective).
    collective_sync_us: NonNegative = Sourced(value=0.0, source="default: no per-collective sync cost")
    # Its part that grows with the message: bytes / this bandwidth (0 = none). Staging or
    # copying the message on the compute stream's side of the hand-off.
    collective_sync_gbps: NonNegative = Sourced(value=0.0, source="default: no per-byte hand-off cost")
    # Copy kernels the framework runs on the compute stream before each collective: Inductor lowers
    # a compiled (functional) all_reduce by cloning its input into a fresh buffer, one memory-bound
    # kernel reading and writing the message. 0 for eager in-place collectives.
    collective_input_copies: NonNegative = Sourced(value=0.0, source="default: in-place collectives, no copy")
    # Kernel floor inside a single-token forward pass (batch-1 decode, GEMM M = 1). torch.compile
    # with coordinate-descent tuning (gpt-fast) lowers an M = 1 matmul to a generated Triton
    # reduction instead of a cuBLAS call and fuses the norms, RoPE, activation and residual adds
    # into those kernels, so such a step pays fewer, shorter kernel starts than any M > 1 step.
    # None: the GPU's kernel floor (gpu.kernel_launch_us) as in every other pass.
    single_token_kernel_floor_us: NonNegative | None = None


class HostOps(BaseModel):
    """Top-level framework ops one program op of ``kind`` dispatches, per op class (a profiler
    trace of the real run divided by the program's occurrences of the kind)."""

    model_config = _FROZEN

    kind: str
    compute: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    view: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    collective: float = Field(default=0.0, ge=0, allow_inf_nan=False)


class HostOverheadSpec(BaseModel):
    """Framework (host dispatch) cost of the ops a real forward pass runs around its kernels
    (``laddersim.costs.host_overhead``): eager Python and dispatcher work, allocation, and the
    norms', RoPE's, cache writes', views' and sampling's many small ops.

    ``timing`` = ``synchronous`` (CPU ranks): the host runs each op's work itself, so host and
    compute time add; ``asynchronous`` (eager on a GPU): the host launches ahead of the device,
    so an op takes the longer of the two.

    ``collective_progress`` = ``host_cores``: the collectives' progress (gloo's worker threads)
    runs on the cores the compute uses, so an overlapped collective and compute slow each other
    through the profile's ``interference`` rates, measured that way by calibrate (the model's
    own modules beside an async AllReduce); ``device``: they run on the accelerator.
    """

    model_config = _FROZEN

    mode: Literal["eager", "graph", "compile"] = "eager"
    timing: Literal["synchronous", "asynchronous"]
    compute_op_us: NonNegative  # per op that runs a kernel (and allocates)
    view_op_us: NonNegative  # per view op (metadata only)
    collective_op_us: NonNegative  # per collective issue on the calling thread
    ops: list[HostOps] = Field(min_length=1)
    ops_source: str = Field(min_length=3)
    collective_progress: Literal["device", "host_cores"] = "device"
    collective_progress_source: str = "default: collectives progress on the device"
    # Synchronous hosts: the share of its cores a busy rank really gets (other processes take the
    # rest); the rank's compute-stream ops run at this speed (laddersim.costs.host_overhead).
    cpu_share: Positive = Sourced(value=1.0, source="default: the ranks have their cores to themselves")
    # The step's top-k sampling measured as one call at the calibrated batch (None: the sampling
    # kind is its modelled kernels plus its ops' per-op cost); ``sampling_ops``: the framework ops
    # that call ran, which the sampling kind's traced ops include.
    sampling_us: NonNegative | None = None
    sampling_ops: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _one_entry_per_kind(self) -> "HostOverheadSpec":
        kinds = [entry.kind for entry in self.ops]
        if len(kinds) != len(set(kinds)):
            raise ValueError(f"ops: one entry per kind, got {sorted(kinds)}")
        return self


class WhatIf(BaseModel):
    """Scalings applied on top of the measured/fitted collective costs, for what-if sweeps.

    Bandwidth scales divide the bandwidth-bound part of a collective's time, latency scales
    multiply the latency part; for a measured table the latency part is the table's floor (its
    smallest-size time) and the rest is bandwidth-bound.
    """

    model_config = _FROZEN

    intra_bandwidth_scale: float = Field(default=1.0, gt=0)
    intra_latency_scale: float = Field(default=1.0, ge=0)
    inter_bandwidth_scale: float = Field(default=1.0, gt=0)
    inter_latency_scale: float = Field(default=1.0, ge=0)
    # Where non-identity scalings came from (a what-if override, or ``laddersim fit``).
    source: str = ""


class HardwareProfile(BaseModel):
    """A whole system: GPU, node, optional network, collectives, interference, framework."""

    model_config = _FROZEN

    name: str
    description: str = ""
    measured: bool = True  # False for forward-looking what-ifs built from datasheets only
    gpu: GpuSpec
    node: NodeSpec
    network: NetworkSpec | None = None
    collectives: CollectiveSpec
    interference: InterferenceSpec
    framework: FrameworkSpec
    host_overhead: HostOverheadSpec | None = None  # None: kernels alone (a compiled, graph-replayed run)
    provenance: dict[str, str] = {}  # free-form: who made it, how (calibration runs, fits)
    what_if: WhatIf = WhatIf()  # scalings for what-if studies; identity in shipped profiles

    # Directory the profile was loaded from (tables are relative to it); not part of the file.
    base_dir: str = Field(default="", exclude=True)

    @model_validator(mode="after")
    def _check_tables_exist(self) -> "HardwareProfile":
        for where, tables in (("collectives.tables", self.collectives.tables),
                              ("gpu.gemm_tables", self.gpu.gemm_tables)):
            for table in tables:
                if self.base_dir and not (Path(self.base_dir) / table.file).exists():
                    raise ValueError(f"{where}: file not found: {table.file}")
        nvls = sorted({"nvls", "nvls_tree"} & set(self.collectives.algorithms))
        if nvls and self.node.fabric != "nvswitch":
            raise ValueError(f"collectives.algorithms: {', '.join(nvls)} needs node.fabric nvswitch (NVLink SHARP), "
                             f"not {self.node.fabric}; allowed: ring, tree, collnet")
        counts = [fit.gpus for fit in self.collectives.intra_node_fits]
        if len(counts) != len(set(counts)):
            raise ValueError("collectives.intra_node_fits: two fits for the same gpus count")
        for fit in self.collectives.intra_node_fits:
            if fit.gpus > self.node.gpus_per_node:
                raise ValueError(f"collectives.intra_node_fits: a fit for {fit.gpus} GPUs, but node.gpus_per_node "
                                 f"is {self.node.gpus_per_node}; allowed: gpus 2..{self.node.gpus_per_node}")
        return self

    def nodes_for(self, tp: int) -> int:
        """Nodes a TP group of ``tp`` ranks spans (ranks packed onto as few nodes as possible)."""
        per_node = self.node.gpus_per_node
        if tp <= per_node:
            return 1
        if self.network is None:
            raise UserInputError(
                f"tp: {tp} exceeds the {per_node} GPUs of one {self.name} node and the profile has "
                f"no inter-node network; allowed: 1..{per_node}"
            )
        if tp % per_node:
            raise UserInputError(
                f"tp: {tp} spans nodes but is not a multiple of gpus_per_node ({per_node}) of {self.name}; "
                f"allowed: 1..{per_node} on one node, or {per_node * 2}, {per_node * 3}, ... across nodes"
            )
        return tp // per_node

    @cached_property
    def allreduce_tables(self) -> list[tuple[MeasuredTable, "pd.DataFrame"]]:
        """Loaded measured AllReduce tables: columns gpus, nodes, size_bytes, time_s."""
        out = []
        for table in self.collectives.tables:
            frame = read_table_csv(Path(self.base_dir) / table.file)
            out.append((table, frame))
        return out

    @cached_property
    def allreduce_arrays(self) -> list[tuple[MeasuredTable, dict[str, np.ndarray]]]:
        """The measured AllReduce tables as numpy columns (gpus, nodes, size_bytes, time_s), sorted
        like ``allreduce_tables``: what the simulator reads, without loading pandas."""
        return [(table, read_table_arrays(Path(self.base_dir) / table.file)) for table in self.collectives.tables]

    def intra_node_fit(self, gpus: int) -> TierFit | None:
        return next((f for f in self.collectives.intra_node_fits if f.gpus == gpus), None)


def _file_identity(path: Path) -> tuple[Path, int, int]:
    """(resolved path, modification time, size): the cache key of a table read."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise UserInputError(f"table: cannot read {path}: {exc.strerror}") from None
    return path.resolve(), stat.st_mtime_ns, stat.st_size


def read_table_arrays(path: Path) -> dict[str, np.ndarray]:
    """A shipped AllReduce table as numpy columns gpus, nodes, size_bytes, time_s, sorted by
    (gpus, nodes, size_bytes); the same numbers as ``read_table_csv``. Cached like it."""
    return _read_table_arrays(*_file_identity(Path(path)))


def read_plain_columns(path: Path, names: tuple[str, ...]) -> np.ndarray | None:
    """The ``names`` columns of a shipped table (``#`` comment lines, then a CSV header) as a float
    array of shape (rows, len(names)), read without pandas so the simulate path stays light; None
    for a file this plain reader cannot take (its caller reads it through the reading layer,
    which says exactly what is wrong)."""
    try:
        with open(path, newline="") as handle:
            rows = list(csv.reader(line for line in handle if line.strip() and not line.startswith("#")))
        index = [rows[0].index(name) for name in names]
        return np.array([[float(row[i]) for i in index] for row in rows[1:]], dtype=float).reshape(-1, len(names))
    except (OSError, IndexError, ValueError):
        return None


@lru_cache(maxsize=256)
def _read_table_arrays(path: Path, _mtime_ns: int, _size: int) -> dict[str, np.ndarray]:
    values = read_plain_columns(path, ("gpus", "nodes", "size_bytes", "time_us"))
    if values is None:
        frame = _read_table_csv(path, _mtime_ns, _size)
        return {name: frame[name].to_numpy() for name in ("gpus", "nodes", "size_bytes", "time_s")}
    order = np.lexsort((values[:, 2], values[:, 1], values[:, 0]))
    values = values[order]
    columns = {"gpus": values[:, 0].astype(int), "nodes": values[:, 1].astype(int), "size_bytes": values[:, 2],
               "time_s": values[:, 3] * 1e-6}
    if not np.isfinite(columns["time_s"]).all() or (columns["time_s"] <= 0).any():
        raise UserInputError(f"table: {path} has non-positive or non-finite times")
    return columns


def read_table_csv(path: Path) -> "pd.DataFrame":
    """Read a shipped table: ``#`` comment lines, then gpus,nodes,size_bytes,time_us columns.

    Cached by file identity (path, modification time, size): profile copies made for what-if
    studies share one read. Callers must not modify the returned frame.
    """
    return _read_table_csv(*_file_identity(Path(path)))


def _read_csv(path: Path, dtypes: dict[str, type]) -> "pd.DataFrame":
    """A shipped table: ``#`` comment lines, then at least the ``dtypes`` columns, typed."""
    frame = read_csv(path, "table", comment="#")  # the reading layer: every failure is one line
    missing = set(dtypes) - set(frame.columns)
    if missing:
        raise UserInputError(f"table: {path} lacks columns {sorted(missing)}")
    try:
        return frame.astype(dtypes)
    except (ValueError, TypeError, OverflowError) as exc:
        raise UserInputError(f"table: {path}: {first_line(exc)}; allowed: numbers in {', '.join(dtypes)}") from None


@lru_cache(maxsize=256)
def _read_table_csv(path: Path, _mtime_ns: int, _size: int) -> "pd.DataFrame":
    frame = _read_csv(path, {"gpus": int, "nodes": int, "size_bytes": float, "time_us": float})
    frame["time_s"] = frame["time_us"] * 1e-6
    if not np.isfinite(frame["time_s"]).all() or (frame["time_s"] <= 0).any():
        raise UserInputError(f"table: {path} has non-positive or non-finite times")
    return frame.sort_values(["gpus", "nodes", "size_bytes"]).reset_index(drop=True)


def read_gemm_table_csv(path: Path) -> "pd.DataFrame":
    """Read a shipped GEMM table: ``#`` comment lines, then m,n,k,time_us columns."""
    return _read_csv(path, {"m": int, "n": int, "k": int, "time_us": float})


def profiles_dir() -> Path:
    """Where named profiles live: $LADDERSIM_PROFILES, else the shipped ``hardware_profiles/``."""
    env = os.environ.get("LADDERSIM_PROFILES")
    if env:
        return Path(env)
    return resource_path("hardware_profiles")


def list_profiles() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.yaml"))


def _resolve(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if path.is_dir() and (path / "profile.yaml").exists():
        return path / "profile.yaml"
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    named = profiles_dir() / f"{name_or_path}.yaml"
    if named.exists():
        return named
    if path.is_dir() and (path / "run.json").exists():  # laddersim.calibrate.environment.MANIFEST
        raise UserInputError(f"hardware: {name_or_path} is a calibration run without a profile yet; "
                             f"run `laddersim calibrate fit {name_or_path} --name NAME` first")
    raise UserInputError(
        f"hardware: unknown profile '{name_or_path}'; allowed: {', '.join(list_profiles())} "
        "or a path to a profile .yaml (or a calibration run directory)"
    )


def parse_profile(raw: dict, base_dir: Path, where: str = "hardware") -> HardwareProfile:
    return build(HardwareProfile, raw, where, base_dir=str(base_dir))


def _merged(base: dict, changes: dict) -> dict:
    """``base`` with ``changes`` laid over it: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def read_profile_mapping(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A profile file's mapping; ``extends: NAME`` takes a named profile as its base (the same machine
    on another fabric restates only what differs)."""
    raw = read_yaml_mapping(path, "hardware")
    base_name = raw.pop("extends", None)
    if base_name is None:
        return raw
    base_path = _resolve(str(base_name))
    if base_path.resolve() in seen or base_path.resolve() == path.resolve():
        raise UserInputError(f"hardware {path.name}: extends: {base_name} extends itself; allowed: another profile")
    return _merged(read_profile_mapping(base_path, seen + (path.resolve(),)), raw)


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A profile by name (``h100-sxm-nvswitch``), by path, or a calibration run directory."""
    path = _resolve(name_or_path)
    return _load_profile(*_file_identity(path), path)


@lru_cache(maxsize=64)
def _load_profile(_resolved: Path, _mtime_ns: int, _size: int, path: Path) -> HardwareProfile:
    # Once per file version and process (profiles are frozen): a run of several schedules, or a
    # sweep worker, parses each file once.
    return parse_profile(read_profile_mapping(path), path.parent, where=f"hardware {path.name}")
