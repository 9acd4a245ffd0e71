"""Does the scenario fit in GPU memory? Weights, KV cache, activations and the attention path's
own buffers per GPU against usable capacity."""

from __future__ import annotations

from dataclasses import dataclass

from laddersim.costs.math_attention import math_decode_peak_bytes, math_prefill_peak_bytes
from laddersim.costs.sdpa_attention import sdpa_peak_bytes
from laddersim.errors import DoesNotFitError
from laddersim.model.framework import load_framework
from laddersim.hardware.profile import HardwareProfile
from laddersim.support.memo import IdentityMemo
from laddersim.model.shape import ModelShape
from laddersim.model.stage import Stage, whole_model
from laddersim.model.workload import Workload

LSE_BYTES = 4  # FlashAttention keeps each query row's softmax log-sum-exp in fp32 per head


@dataclass(frozen=True)
class MemoryUse:
    weights_bytes: float
    kv_cache_bytes: float
    activations_bytes: float
    capacity_bytes: float
    attention_bytes: float = 0.0  # the attention path's peak of one layer (attention_peak_bytes)
    attention_path: str = "fused"  # the path of the pass that peaks, e.g. "prefill math_fp32"
    mlp_transient_bytes: float = 0.0  # the MLP's gate/up output, part of activations_bytes

    @property
    def total_bytes(self) -> float:
        """Everything live at the peak: the MLP's gate/up output and the attention's buffers belong
        to different modules of a layer, never live together, so the larger of the two counts."""
        return (self.weights_bytes + self.kv_cache_bytes + self.activations_bytes
                + max(0.0, self.attention_bytes - self.mlp_transient_bytes))

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


def attention_peak_bytes(model: ModelShape, work: Workload, tp: int) -> tuple[float, str]:
    """Bytes one layer's attention allocates at its peak on one rank, on the framework's path for
    the prefill (the whole prompt over the attended positions: the static cache's ``max_seq_len``,
    or a dynamic cache's prompt) and the largest decode step, and which pass and path that is.
    The math path materialises scores per query head (laddersim.costs.math_attention); eager SDPA
    with a mask, K and V expanded per query head and the mask's bias (laddersim.costs.sdpa_attention); a fused
    (FlashAttention-class) kernel writes only its output and each row's log-sum-exp. Layers run one
    after the other, so one layer's buffers is the peak."""
    fw = load_framework(work.framework)
    h, hd, b = model.heads_per_rank(tp), model.head_dim, work.batch
    s = work.prompt_len
    prefill_path, decode_path = fw.prefill_attention_path, fw.decode_attention_path
    cache_len = work.max_seq_len if work.kv_cache == "static" else s
    sdpa = {"batch": b, "heads": h, "kv_heads": model.kv_heads_per_rank(tp), "head_dim": hd,
            "dtype_bytes": work.dtype_bytes, "repeat_kv": work.kv_reads == "repeat_interleave"}
    if prefill_path == "fused":
        prefill = float(b * s * h * (hd * work.dtype_bytes + LSE_BYTES))
    elif prefill_path == "sdpa_mem_efficient":
        prefill = sdpa_peak_bytes(queries=s, cache_len=cache_len, **sdpa)
    else:
        prefill = math_prefill_peak_bytes(variant=prefill_path, batch=b, prompt_len=s, cache_len=cache_len,
                                          heads=h, head_dim=hd, dtype_bytes=work.dtype_bytes)
    if decode_path == "fused":
        decode = float(b * h * (hd * work.dtype_bytes + LSE_BYTES))
    elif decode_path == "sdpa_mem_efficient":
        decode = sdpa_peak_bytes(queries=1, cache_len=work.max_seq_len, **sdpa)
    else:
        decode = math_decode_peak_bytes(variant=decode_path, batch=b, cache_len=work.max_seq_len,
                                        heads=h, dtype_bytes=work.dtype_bytes)
    return (prefill, f"prefill {prefill_path}") if prefill >= decode else (decode, f"decode {decode_path}")


def memory_use(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int, stage: Stage | None = None,
               in_flight: int = 1) -> MemoryUse:
    """Bytes one GPU needs. The KV cache holds ``max_seq_len`` positions per sequence; the
    activation term is the largest transient of a prefill (gate/up output plus the logits); the
    attention's buffers (``attention_peak_bytes``) replace the gate/up output where they are larger
    (the MLP's and the attention's transients are not live together, the rest is).
    A pipeline ``stage`` holds its own layers' weights and KV cache (``ModelShape.stage_params_per_rank``),
    and only the last stage the logits; with ``in_flight`` micro-batches of ``work.batch`` its KV cache
    holds every one's sequences, its transients one micro-batch's."""
    b = work.dtype_bytes
    stage = stage or whole_model(model.n_layers)
    weights = model.stage_params_per_rank(tp, stage.n_layers, stage.first, stage.last) * b
    kv = in_flight * work.batch * work.max_seq_len * model.kv_bytes_per_token_per_rank(tp, b) * stage.n_layers // model.n_layers
    prefill_tokens = work.batch * work.prompt_len
    mlp_transient = prefill_tokens * 2 * model.intermediate_per_rank(tp) * b
    activations = mlp_transient + prefill_tokens * 4 * model.dim * b
    if stage.last:
        activations += work.batch * model.vocab_size * 4
    capacity = hw.gpu.memory_capacity_bytes * hw.gpu.usable_memory_fraction.value
    attention, path = attention_peak_bytes(model, work, tp)
    return MemoryUse(weights, kv, activations, capacity, attention, path, mlp_transient)


# memory_use reads the profile's GPU only: remembered by it and the framework (a sweep's what-ifs
# keep the GPU; a framework file read anew is another object).
_kept_uses = IdentityMemo(4096)


def check_fits(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int, stage: Stage | None = None,
               in_flight: int = 1) -> MemoryUse:
    """``memory_use``, or one line saying what does not fit (a pipeline stage: which, and its layers)."""
    use = _kept_uses.get((hw.gpu, load_framework(work.framework), model, work), (tp, stage, in_flight),
                         lambda: memory_use(model, hw, work, tp, stage, in_flight))
    if not use.fits:
        gib = 2**30
        where = (f"tp={tp}, pp={stage.count} stage {stage.index} (layers {stage.first_layer}-{stage.end_layer - 1})"
                 if stage is not None and stage.count > 1 else f"tp={tp}")
        raise DoesNotFitError(
            f"memory: {model.name} at {where}, batch={in_flight * work.batch}, seq={work.max_seq_len} needs "
            f"{use.total_bytes / gib:.1f} GiB per GPU (weights {use.weights_bytes / gib:.1f}, "
            f"KV cache {use.kv_cache_bytes / gib:.1f}, activations {use.activations_bytes / gib:.1f}, "
            f"{work.framework} {use.attention_path} attention {use.attention_bytes / gib:.1f}) "
            f"but {hw.name} has {use.capacity_bytes / gib:.1f} GiB usable; raise tp or pp or lower batch/lengths"
            + (" (or a framework with fused attention, e.g. --framework vllm)" if "math" in use.attention_path
               and use.attention_bytes > max(use.weights_bytes, use.kv_cache_bytes, use.activations_bytes)
               else "")
        )
    return use
