"""The compute side of a hardware profile: the GPU, the node, the serving framework's constants
and the per-op host overhead of an eager run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_serializer, model_validator

from laddersim.errors import UserInputError
from laddersim.hardware.sourced import FROZEN_CONFIG, MeasuredTable, NonNegative, Positive, Sourced

# The GpuSpec field holding each Workload dtype's compute peak.
PEAK_FIELD_BY_DTYPE = {"bfloat16": "peak_tflops", "float16": "peak_tflops", "float32": "peak_tflops_fp32",
                       "fp8": "peak_tflops_fp8"}
# The GpuSpec field holding a quantized GEMM's tensor-core peak (laddersim.model.quantization
# ``tensor_cores``); FP4 is no Workload dtype, so it is not among the GPU's ``dtypes()``.
TENSOR_CORE_PEAK_FIELD = {"fp8": "peak_tflops_fp8", "fp4": "peak_tflops_fp4"}


class TableRates(BaseModel):
    """The GPU's rates its measured tables ran at, kept by a fit (``laddersim fit``) that moves
    the GPU's own: a table's time follows the fitted rates (``GpuSpec.table_rates``)."""

    model_config = FROZEN_CONFIG

    gemm_memory_efficiency: float = Field(gt=0, allow_inf_nan=False)
    gemm_compute_efficiency: float = Field(gt=0, allow_inf_nan=False)
    kernel_launch_us: float = Field(ge=0, allow_inf_nan=False)
    source: str = Field(min_length=3)


class MeasuredDtype(BaseModel):
    """The one dtype a calibrated device's compute numbers were measured in, and where."""

    model_config = FROZEN_CONFIG

    value: Literal["float16", "bfloat16", "float32", "fp8"]
    source: str = Field(min_length=3)


class QuantizedGemmTable(MeasuredTable):
    """A measured table of one quantized GEMM kind (CSV ``m,n,k,time_us``; laddersim.costs.quantized_gemm):
    ``fp8`` per-tensor scaled FP8, ``fp8_block`` block-scaled FP8 (128 x 128 weight blocks), ``nvfp4``
    FP4 with an FP8 scale per 16 elements."""

    gemm_dtype: Literal["fp8", "fp8_block", "nvfp4"]


class GpuSpec(BaseModel):
    """One GPU: peak rates (datasheet), achievable efficiencies (fits), capacity."""

    model_config = FROZEN_CONFIG

    name: str
    peak_tflops: Positive  # dense fp16/bf16 tensor-core peak, 1e12 FLOP/s
    peak_tflops_fp8: Positive | None = None  # dense FP8 tensor-core peak; None: the GPU has no FP8
    # dense FP4 (NVFP4) tensor-core peak; None: the GPU has no FP4 tensor cores (left out of the
    # dump when None, so a profile without it dumps and hashes as it did before the field existed)
    peak_tflops_fp4: Positive | None = None
    peak_tflops_fp32: Positive | None = None  # FP32 peak (torch matmuls run in FP32 unless TF32 is on)
    memory_bandwidth_gb_per_s: Positive  # HBM/GDDR peak, GB/s
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
    # L2 cache (datasheet, 1e6 bytes) and the rate the SMs read L2-resident data (GB/s): with both,
    # the repeated K/V reads of a grouped-query decode attention that reads each KV head once per
    # query head are served by L2 (laddersim.costs.l2_reuse). None: every read from HBM.
    l2_cache_mb: Positive | None = None
    l2_bandwidth_gb_per_s: Positive | None = None
    # One dependent global-memory round trip a CTA waits on inside a kernel's loop (a load issued,
    # its data in shared memory, the barrier passed), microseconds: what a kernel whose grid is
    # smaller than the GPU takes per step of its loop (laddersim.costs.sdpa_attention). None: such
    # kernels are priced by their work and bytes alone.
    global_load_latency_us: Positive | None = None
    # GEMM tables (CSV m,n,k,time_us) the GEMM model is checked against (laddersim profiles check).
    gemm_tables: list[MeasuredTable] = []
    # Quantized GEMM tables, one per kind (laddersim.costs.quantized_gemm); left out of the dump
    # when empty, so a profile without them dumps and hashes as it did before the field existed.
    quantized_gemm_tables: list[QuantizedGemmTable] = []
    usable_memory_fraction: Positive = Sourced(
        value=0.9, source="default: 10% of HBM kept for CUDA context, allocator slack, workspace"
    )
    # A device with no datasheet here (CPU ranks, an unknown GPU) calibrated by ``laddersim
    # calibrate fit``: its peak and GEMM efficiencies are its GEMMs' rates in this dtype, so it
    # runs this dtype only. None: every dtype with a peak (datasheet peaks).
    measured_dtype: MeasuredDtype | None = None
    # The rates the measured tables ran at, where a fit to end-to-end runs (laddersim fit) moved
    # the GPU's own (the efficiencies and kernel floor above): a time read from a measured table
    # (``gemm_tables``: laddersim.costs.gemm_tables; a traced stack's kernel classes:
    # laddersim.costs.calibrated_kernels) follows the fitted rates. None: the rates above are the
    # tables' own (left out of the profile's dump, so a profile without a fit dumps and hashes as
    # it did before the field existed).
    table_rates: TableRates | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        data = handler(self)
        if self.table_rates is None:
            data.pop("table_rates", None)
        if not self.quantized_gemm_tables:
            data.pop("quantized_gemm_tables", None)
        if self.peak_tflops_fp4 is None:
            data.pop("peak_tflops_fp4", None)
        return data

    def memory_rate_over_tables(self) -> float:
        """How much faster than its measured tables this GPU streams memory (1 without a fit)."""
        if self.table_rates is None:
            return 1.0
        return self.gemm_memory_efficiency.value / self.table_rates.gemm_memory_efficiency

    def floor_over_tables(self) -> float:
        """This GPU's kernel floor over the one its measured tables ran with (1 without a fit)."""
        if self.table_rates is None or self.table_rates.kernel_launch_us == 0:
            return 1.0
        return self.kernel_launch_us.value / self.table_rates.kernel_launch_us

    @property
    def peak_flops_per_s(self) -> float:
        return self.peak_tflops.value * 1e12

    def dtypes(self) -> list[str]:
        """The Workload dtypes this GPU has a compute peak for (a calibrated device: the one measured)."""
        if self.measured_dtype is not None:
            return [self.measured_dtype.value]
        return [dtype for dtype, field in PEAK_FIELD_BY_DTYPE.items() if getattr(self, field) is not None]

    def peak_flops_per_s_for(self, dtype: str) -> float:
        """Peak FLOP/s of GEMMs and attention in ``dtype`` (a Workload dtype, or a quantized GEMM's
        tensor cores: ``TENSOR_CORE_PEAK_FIELD``)."""
        measured = self.measured_dtype
        if measured is not None and dtype != measured.value:
            raise UserInputError(f"dtype: {dtype}, but {self.name}'s compute was calibrated in {measured.value} "
                                 f"(its GEMM rates hold for that dtype only); allowed: {measured.value}")
        field = PEAK_FIELD_BY_DTYPE.get(dtype) or TENSOR_CORE_PEAK_FIELD[dtype]
        peak = getattr(self, field)
        if peak is None:
            raise UserInputError(f"dtype: {dtype} needs gpu.{field} and {self.name} gives none; "
                                 f"allowed: {', '.join(self.dtypes())}")
        return peak.value * 1e12

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_per_s.value * 1e9

    @property
    def memory_capacity_bytes(self) -> float:
        return self.memory_gb.value * 1e9

    @property
    def kernel_launch_s(self) -> float:
        return self.kernel_launch_us.value * 1e-6


class NodeSpec(BaseModel):
    """GPUs in one node and the fabric joining them."""

    model_config = FROZEN_CONFIG

    gpus_per_node: int = Field(gt=0)
    fabric: Literal["nvswitch", "nvlink-pairs", "pcie"]
    description: str = ""



class FrameworkSpec(BaseModel):
    """Fixed per-step costs of the serving framework (gpt-fast style compiled decode)."""

    model_config = FROZEN_CONFIG

    step_overhead_us: NonNegative  # per forward pass: graph launch, host sync, input prep
    sampling_us: NonNegative  # top-k sampling of one batch of logits, fixed part
    # A collective on the critical path of a compiled step pays its kernel start-up and the
    # compute/NCCL stream hand-off, which nccl-tests' back-to-back loop hides (added per collective,
    # to the collective itself: it delays the collective, not the compute stream, so an overlapped
    # collective hides it).
    collective_sync_us: NonNegative = Sourced(value=0.0, source="default: no per-collective sync cost")
    # Its part that grows with the message: bytes / this bandwidth (0 = none). Staging or
    # copying the message on the compute stream's side of the hand-off.
    collective_sync_gb_per_s: NonNegative = Sourced(value=0.0, source="default: no per-byte hand-off cost")
    # Copy kernels the framework runs on the compute stream before each collective: Inductor lowers
    # a compiled (functional) all_reduce by cloning its input into a fresh buffer, one memory-bound
    # kernel reading and writing the message. 0 for eager in-place collectives.
    collective_input_copies: NonNegative = Sourced(value=0.0, source="default: in-place collectives, no copy")
    # Per collective over NCCL's proxy (across nodes) in a CUDA-graph-captured pass: the host node
    # NCCL adds to post the proxy's work, waited for on the compute stream
    # (laddersim.costs.graph_proxy).
    graph_host_node_us: NonNegative = Sourced(value=0.0, source="default: no host node priced")
    # Kernel floor inside a single-token forward pass (batch-1 decode, GEMM M = 1). torch.compile
    # with coordinate-descent tuning (gpt-fast) lowers an M = 1 matmul to a generated Triton
    # reduction instead of a cuBLAS call and fuses the norms, RoPE, activation and residual adds
    # into those kernels, so such a step pays fewer, shorter kernel starts than any M > 1 step.
    # None: the GPU's kernel floor (gpu.kernel_launch_us) as in every other pass.
    single_token_kernel_floor_us: NonNegative | None = None


class HostOps(BaseModel):
    """Top-level framework ops one program op of ``kind`` dispatches, per op class (a profiler
    trace of the real run divided by the program's occurrences of the kind)."""

    model_config = FROZEN_CONFIG

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

    model_config = FROZEN_CONFIG

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
    # Rank skew (laddersim.costs.rank_skew): what a rank waits at a collective for the slowest of
    # ``rank_skew_group`` ranks, per second of compute since the previous collective (the ranks'
    # times vary from stretch to stretch on cores shared with other work).
    rank_skew_fraction: NonNegative = Sourced(value=0.0, source="default: ranks computing alike finish together")
    rank_skew_group: int = Field(default=2, ge=2)

    @model_validator(mode="after")
    def _one_entry_per_kind(self) -> "HostOverheadSpec":
        kinds = [entry.kind for entry in self.ops]
        if len(kinds) != len(set(kinds)):
            raise ValueError(f"ops: one entry per kind, got {sorted(kinds)}")
        return self
