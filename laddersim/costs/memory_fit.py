"""Does the scenario fit in GPU memory? Weights plus KV cache per GPU against usable capacity."""

from __future__ import annotations

from dataclasses import dataclass

from laddersim.errors import DoesNotFitError
from laddersim.hardware.profile import HardwareProfile
from laddersim.model_shape import ModelShape
from laddersim.workload import Workload


@dataclass(frozen=True)
class MemoryUse:
    weights_bytes: float
    kv_cache_bytes: float
    activations_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activations_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


def memory_use(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int) -> MemoryUse:
    """Bytes one GPU needs. The KV cache holds ``max_seq_len`` positions per sequence; the
    activation term is the largest transient of a prefill (gate/up output plus the logits)."""
    b = work.dtype_bytes
    weights = model.params_per_rank(tp) * b
    kv = work.batch * work.max_seq_len * model.kv_bytes_per_token_per_rank(tp, b)
    prefill_tokens = work.batch * work.prompt_len
    activations = prefill_tokens * (2 * model.intermediate_per_rank(tp) + 4 * model.dim) * b
    activations += work.batch * model.vocab_size * 4
    capacity = hw.gpu.memory_capacity_bytes * hw.gpu.usable_memory_fraction.value
    return MemoryUse(weights, kv, activations, capacity)


def check_fits(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int) -> MemoryUse:
    use = memory_use(model, hw, work, tp)
    if not use.fits:
        gib = 2**30
        raise DoesNotFitError(
            f"memory: {model.name} at tp={tp}, batch={work.batch}, seq={work.max_seq_len} needs "
            f"{use.total_bytes / gib:.1f} GiB per GPU (weights {use.weights_bytes / gib:.1f}, "
            f"KV cache {use.kv_cache_bytes / gib:.1f}, activations {use.activations_bytes / gib:.1f}) "
            f"but {hw.name} has {use.capacity_bytes / gib:.1f} GiB usable; raise tp or lower batch/lengths"
        )
    return use
