"""Expert parallelism over data-parallel attention: the smallest expert-parallel size at which an
MoE model too big for one TP group fits. The layout itself and what each of its GPUs holds are
``laddersim.model.dp_attention``'s (re-exported here).
"""

from __future__ import annotations

from laddersim.errors import DoesNotFitError
from laddersim.model.dp_attention import DpAttentionLayout, bytes_per_gpu, params_per_gpu, weight_bytes_per_gpu
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload

__all__ = ["DpAttentionLayout", "bytes_per_gpu", "params_per_gpu", "smallest_fitting_layout", "weight_bytes_per_gpu",
           "with_smallest_ep"]


def smallest_fitting_layout(model: ModelShape, hw, work: Workload, attn_tp: int,
                            max_gpus: int = 1 << 12) -> DpAttentionLayout | None:
    """The fewest replicas of TP ``attn_tp`` whose ``ep`` divides the experts and whose GPUs each
    hold ``bytes_per_gpu`` within the usable memory; None for a dense model or where none fits."""
    if model.moe is None:
        return None
    capacity = hw.gpu.memory_capacity_bytes * hw.gpu.usable_memory_fraction.value
    for dp in range(1, max_gpus // attn_tp + 1):
        layout = DpAttentionLayout(attn_tp, dp)
        if model.moe.n_experts % layout.ep:
            continue
        if bytes_per_gpu(model, layout, work) <= capacity:
            return layout
    return None


def with_smallest_ep(error: DoesNotFitError, model: ModelShape, hw, work: Workload, tp: int) -> DoesNotFitError:
    """``error`` (a model that does not fit its TP group at EP 1) with the smallest expert-parallel
    layout that fits named, in the engines' flags; ``error`` itself for a dense model or where no
    layout fits."""
    layout = smallest_fitting_layout(model, hw, work, tp)
    if layout is None or layout.ep == 1:
        return error
    return DoesNotFitError(
        f"{error}; with data-parallel attention it fits at ep {layout.ep} ({layout.dp} attention replicas of tp "
        f"{tp}, {model.moe.n_experts // layout.ep} whole experts per GPU: vLLM --data-parallel-size {layout.dp} "
        f"--tensor-parallel-size {tp} --enable-expert-parallel, SGLang --tp {layout.ep} --dp {layout.dp} "
        "--enable-dp-attention" + (f"; laddersim simulate --dp-attention --tp {tp} --ep {layout.ep})"
                                   if layout.ep <= hw.node.gpus_per_node else ")"))
