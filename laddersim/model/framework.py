"""The serving framework a scenario runs under (``--framework gpt-fast|vllm``): how its kernels,
KV cache and collectives are built, as sourced data files under ``laddersim/data/frameworks/``.

The hardware profile says what a GPU and its links cost; the framework says which kernels a
forward pass launches on them: whether a batch-1 linear is a generated reduction fused with its
neighbours or a library GEMM, which AllReduce kernel runs, how attention reads the KV cache.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from laddersim.support.config_files import build, read_yaml_mapping
from laddersim.errors import UserInputError
from laddersim.hardware.sourced import NonNegative, Positive
from laddersim.model.kernel_calibration import KernelCalibration

FRAMEWORKS_DIR = Path(__file__).resolve().parents[1] / "data" / "frameworks"
# The AllReduce implementations a framework may name (records: laddersim.costs.allreduce_impls).
AllReduceName = Literal["nccl", "nvls", "pytorch-intra-node", "vllm-custom", "trtllm-custom", "sglang-custom"]
_FROZEN = ConfigDict(frozen=True, extra="forbid")
Value = TypeVar("Value")


class Choice(BaseModel, Generic[Value]):
    """A categorical setting and where it came from."""

    model_config = _FROZEN

    value: Value
    source: str = Field(min_length=3)


class FusedKinds(BaseModel):
    """Op kinds whose kernel a generated single-token linear absorbs (no kernel floor of their own)."""

    model_config = _FROZEN

    kinds: list[Literal["act", "collective_input_copy", "rope", "attn_norm", "mlp_norm"]]
    source: str = Field(min_length=3)


class OpKernels(BaseModel):
    """Kernels each memory-bound op kind launches where the framework runs it as several eager
    torch ops (no compiler fusing them): RoPE as a cast, four multiplies, a subtract, an add, a
    stack and a cast back per tensor; SiLU(gate) * up as two. Kinds not listed: one kernel."""

    model_config = _FROZEN

    counts: dict[Literal["rope", "act", "attn_norm", "mlp_norm", "norm", "final_norm", "residual_add",
                         "partial_add"], int]
    # The bytes those kernels move together, as a multiple of the one fused kernel's (eager RoPE
    # reads and writes fp32 intermediates between its kernels).
    bytes_factor: dict[Literal["rope", "act"], float] = {}
    source: str = Field(min_length=3)


def _seconds(us) -> float:
    """Seconds of an optional microseconds field (None: 0)."""
    return us.value * 1e-6 if us is not None else 0.0


class Framework(BaseModel):
    """One framework's kernel-path and cache settings (see the module docstring)."""

    model_config = _FROZEN

    name: str
    description: str = ""
    kv_cache: Choice[Literal["static", "dynamic"]]
    kv_reads: Choice[Literal["repeat_interleave", "per_kv_head"]]
    # generated: a linear with one row (M = 1) is a generated reduction kernel streaming the
    # weights, fused with the ``fused_into_single_token_linear`` ops; library: a cuBLAS GEMM at every M.
    single_token_linear: Choice[Literal["generated", "library"]]
    fused_into_single_token_linear: FusedKinds
    # A library GEMM split along K (laddersim.costs.op_costs.splits_k) runs a second kernel
    # summing the partials; False where the GEMM tables already time the framework's own call.
    splitk_reduce_kernel: Choice[bool]
    # Does the framework copy each collective's input on the compute stream first? (How many
    # copies, and their source, is the profile's framework.collective_input_copies.)
    collective_input_copy: Choice[bool]
    # nccl: the profile's NCCL model; multimem: the profile's multimem table where it ships one.
    allreduce_library: Choice[Literal["nccl", "multimem"]]
    # Prefill attention throughput relative to the profile's attention_compute_efficiency.
    prefill_attention_speedup: Positive
    # custom: AllReduces up to ``small_allreduce_max_bytes`` run the framework's own one-/two-shot
    # kernel, timed by the profile's table whose library names a "custom all-reduce" (vLLM's
    # CustomAllreduce); nccl / None: the ``allreduce_library`` at every size.
    small_allreduce: Choice[Literal["nccl", "custom"]] | None = None
    small_allreduce_max_bytes: Choice[int] | None = None
    # fused (default): one FlashAttention-class kernel, ``prefill_attention_speedup`` applies;
    # math / math_fp32: torch's math SDPA, scores materialised per query head over the attended
    # positions, masked softmax, two batched GEMMs (fp32 ones after the upcast torch >= 2.5 does):
    # laddersim.costs.math_attention. sdpa_mem_efficient: eager torch SDPA with a boolean mask,
    # K/V repeat_interleave'd copies, the memory-efficient (CUTLASS fMHA) kernel over the whole
    # static cache: laddersim.costs.sdpa_attention.
    prefill_attention: Choice[Literal["fused", "math", "math_fp32", "sdpa_mem_efficient"]] | None = None
    # The same for a decode step: math / math_fp32 are Inductor's lowering of the math path for
    # one query row (scores, softmax and values as generated reductions reading the cache);
    # sdpa_mem_efficient the same eager kernels as in prefill, for one query per sequence.
    decode_attention: Choice[Literal["fused", "math", "math_fp32", "sdpa_mem_efficient"]] | None = None
    # last (default): the LM head runs on each sequence's last position in prefill; all: on
    # every prompt position (gpt-fast's Transformer.forward returns the logits of every token).
    prefill_logits: Choice[Literal["last", "all"]] | None = None
    # Eager frameworks: kernels per memory-bound op kind (default one each; see OpKernels).
    op_kernels: OpKernels | None = None
    # The AllReduce implementations its TP all-reduce tries, in order (NCCL after them): the
    # first that runs on the group, machine and dtype and takes the message size prices it
    # (laddersim.costs.allreduce_impls.pick). None: ``allreduce_library`` and ``small_allreduce``.
    allreduce: Choice[list[AllReduceName]] | None = None
    # Per collective, beyond the NCCL kernel: the hand-off between the compute stream and the
    # collective's own stream (an eager ``dist.all_reduce`` captured in a CUDA graph records an
    # event on one stream and waits on it from the other, both ways): half delays the collective
    # (its stream waits on the producer's event), half the compute stream (which waits on the
    # collective's event before the consumer), which no overlap hides. None: nothing beyond the
    # profile's framework.collective_sync_us.
    collective_handoff_us: NonNegative | None = None
    # The passes the framework replays as CUDA graphs (a network collective there waits for the
    # host node NCCL adds: laddersim.costs.graph_proxy). None: none.
    cuda_graph_passes: Choice[list[Literal["prefill", "decode"]]] | None = None
    # How its collectives are launched: graph (replayed inside a CUDA graph: no host launch per
    # collective) or eager (each one launched from the host, the profile's
    # ``collectives.eager_launch_us`` on its critical path; laddersim.costs.allreduce). None: as the
    # profile simulates (its ``collectives.mode``).
    collective_launch: Choice[Literal["graph", "eager"]] | None = None
    # The GEMM library its linears run (the prefix of a profile GEMM table's ``library``, e.g.
    # "TRT-LLM"): that table prices them where the profile ships one (laddersim.costs.gemm_tables).
    # None: the profile's model table.
    gemm_library: Choice[str] | None = None
    # True: the MLP's gate and up projections run as two GEMMs (None/False: one stacked GEMM).
    split_gate_up: Choice[bool] | None = None
    # Host time per forward pass the GPU waits through, beyond the profile's
    # ``framework.step_overhead_us``: an engine whose scheduler, input preparation, sampler output
    # and detokenization run between steps, not overlapped with them (vLLM's V0 engine before
    # multi-step scheduling). None: nothing beyond the profile's.
    step_host_us: NonNegative | None = None
    # The quantized linears (``--quant fp8``) whose input the producing kernel writes already
    # quantized (TensorRT fuses a quantize layer into the layer before it): no quantize kernels of
    # their own where the GEMM is priced without a measured table (laddersim.costs.op_costs). None:
    # every quantized linear quantizes its input in its own kernels.
    quantize_fused: Choice[list[Literal["qkv", "o_proj", "gate_up", "qkv_gate_up", "down"]]] | None = None

    def quantize_fused_into(self, kind: str) -> bool:
        """Does the kernel producing ``kind``'s input write it quantized (``quantize_fused``)?"""
        return self.quantize_fused is not None and kind in self.quantize_fused.value

    def step_host_s(self) -> float:
        return _seconds(self.step_host_us)

    def collective_handoff_s(self) -> float:
        return _seconds(self.collective_handoff_us)

    def collective_handoff_half_s(self) -> float:
        """One side's share of the hand-off: the collective's stream's, or the compute stream's."""
        return self.collective_handoff_s() / 2

    def kernels_for(self, kind: str) -> int:
        """Kernels one ``kind`` op launches (1 unless ``op_kernels`` says otherwise)."""
        return self.op_kernels.counts.get(kind, 1) if self.op_kernels is not None else 1

    def bytes_factor_for(self, kind: str) -> float:
        """Bytes one ``kind`` op moves relative to its fused kernel (1 unless ``op_kernels`` says)."""
        return self.op_kernels.bytes_factor.get(kind, 1.0) if self.op_kernels is not None else 1.0
    # A traced stack's kernels per class (``laddersim calibrate kernels``): laddersim.model.kernel_calibration.
    kernel_calibration: KernelCalibration | None = None
    # Host time per sequence that samples in a step, beyond ``step_host_us``: the scheduler, the
    # sequence's input metadata, its sampled token copied to the host and turned into Python
    # objects, detokenization. Where the scheduler does not overlap the GPU (``scheduler_overlap``
    # not true: vLLM's V0 engine, V1 without async scheduling) the GPU idles through it, priced with
    # the step's sampling op (the op the serving simulator prices at the iteration's sampling
    # sequences); where it overlaps, the serving step takes the longer of its GPU and host times
    # (laddersim.costs.host_bound). None: nothing.
    step_host_per_sequence_us: NonNegative | None = None

    # Host time per sequence that samples in an iteration of the online server (the serving
    # simulator, laddersim.traffic), beyond ``step_host_per_sequence_us``, with the GPU idle: an API
    # server sharing the engine's thread, whose per-request work (each request's output object, its
    # stream, its handler woken) runs between steps (vLLM V0's AsyncLLMEngine in the API server's
    # asyncio event loop). ``simulate``'s static batch is the offline engine and does not pay it.
    server_host_per_sequence_us: NonNegative | None = None

    def host_per_sequence_s(self) -> float:
        """Per-sequence host seconds of a step, overlapped with the GPU or not."""
        return _seconds(self.step_host_per_sequence_us)

    def step_host_per_sequence_s(self) -> float:
        """Per-sequence host seconds the GPU idles through (the scheduler does not overlap them)."""
        return 0.0 if self.overlaps_host() else self.host_per_sequence_s()

    def server_host_per_sequence_s(self) -> float:
        return _seconds(self.server_host_per_sequence_us)
    # The host side of a serving engine's step (laddersim.costs.host_bound). A decode-only step of
    # up to ``cuda_graph_max_batch`` sequences replays a captured CUDA graph (its launch is in the
    # profile's ``framework.step_overhead_us``); a larger decode step, and every step with prompt
    # tokens, launches its kernels one by one from the host, ``eager_kernel_host_us`` each, while
    # the GPU runs those already launched. None: no host side priced (the step is its GPU time).
    cuda_graph_max_batch: Choice[int] | None = None
    # Host time to launch one kernel of an eager step. None: the profile's
    # ``collectives.eager_launch_us`` (an eager call's host launch, measured as eager minus graph).
    eager_kernel_host_us: NonNegative | None = None
    # True: the scheduler prepares step N+1 (and processes step N-1's outputs) while the GPU runs
    # step N, so a step takes the longer of its GPU time and its host time; False: the host's
    # per-step work runs with the GPU idle, after the step. None: as False.
    scheduler_overlap: Choice[bool] | None = None

    def overlaps_host(self) -> bool:
        return self.scheduler_overlap is not None and bool(self.scheduler_overlap.value)

    def prices_host_side(self) -> bool:
        """Does the framework price its steps' host side (laddersim.costs.host_bound)?"""
        return self.cuda_graph_max_batch is not None or (self.overlaps_host() and self.host_per_sequence_s() > 0.0)

    @property
    def prefill_attention_path(self) -> str:
        return self.prefill_attention.value if self.prefill_attention else "fused"

    @property
    def decode_attention_path(self) -> str:
        return self.decode_attention.value if self.decode_attention else "fused"

    def attention_path(self, phase_name: str) -> str:
        """The attention path of a ``prefill`` or ``decode`` pass."""
        return self.prefill_attention_path if phase_name == "prefill" else self.decode_attention_path

    @property
    def prefill_logits_positions(self) -> str:
        return self.prefill_logits.value if self.prefill_logits else "last"


def framework_names() -> list[str]:
    """The shipped frameworks (the package's data files: listed once per process)."""
    return list(_shipped_names())


@lru_cache(maxsize=1)
def _shipped_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in FRAMEWORKS_DIR.glob("*.yaml")))


def is_framework_file(name: str) -> bool:
    """Does ``name`` name a framework file of the user's (``laddersim calibrate kernels`` writes
    one) rather than a shipped framework?"""
    return name.endswith((".yaml", ".yml")) and Path(name).is_file()


def known_framework(name: str) -> bool:
    return name in _shipped_names() or is_framework_file(name)


def load_framework(name: str) -> Framework:
    """A framework by name (``gpt-fast``, ``vllm``) or a framework file's path (``.yaml``; read
    again when the file changes)."""
    if is_framework_file(name):
        path = Path(name).resolve()
        return _load_path(str(path), path.stat().st_mtime_ns)
    return _load_shipped(name)


@lru_cache(maxsize=None)
def _load_shipped(name: str) -> Framework:
    path = FRAMEWORKS_DIR / f"{name}.yaml"
    if not path.exists():
        raise UserInputError(f"framework: unknown '{name}'; allowed: {', '.join(framework_names())}, "
                             "or a framework .yaml file")
    return build(Framework, read_yaml_mapping(path, "framework"), f"framework {path.name}")


@lru_cache(maxsize=64)
def _load_path(path: str, _mtime_ns: int) -> Framework:
    return build(Framework, read_yaml_mapping(path, "framework"), f"framework {Path(path).name}")
