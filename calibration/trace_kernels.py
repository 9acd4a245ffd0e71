"""A profiler trace's kernels: their classes, their names without a compiled graph's numbering,
the kernels of a step (GPU: CUDA activities; CPU: Inductor's generated kernels and the other
top-level ops), and one layer's kernels as the difference of two layer counts. Used by
``kernel_trace.py``; the classes are those of ``laddersim.costs.kernel_counts`` plus ``other``."""

from __future__ import annotations

import re

import torch

from calibration.op_trace import VIEW_OPS, top_level

KERNEL_CLASSES = ("library_gemm", "splitk_reduce", "generated", "attention", "collective", "copy", "other")
# Name fragments of each class (lower case), tried in this order: GPU kernel names (cuBLAS,
# CUTLASS, Triton, NCCL, CUDA copies) and their CPU twins (aten ops, Inductor's C++ kernels).
_CLASS_TOKENS = (
    # Generated first: Inductor names a kernel after the ops it fuses, e.g. cpp_fused_add_all_reduce
    # (parallel's partial sum fused with the AllReduce's input copy) is a generated kernel.
    ("generated", ("triton_", "cpp_fused", "cpp_kernel")),
    ("splitk_reduce", ("splitkreduce", "splitk_reduce")),
    ("collective", ("nccl", "c10d::", "allreduce", "all_reduce", "allgather", "all_gather")),
    ("attention", ("flash", "fmha", "attention", "scaled_dot_product")),
    # nvjet_*: cuBLAS/cuBLASLt's Hopper GEMM kernels (e.g. nvjet_sm90_tst_128x64_64x8_1x2_h_bz_coopB_NNT).
    ("library_gemm", ("gemm", "gemv", "cutlass", "xmma", "s16816", "cublas", "nvjet", "aten::mm", "aten::addmm",
                      "aten::bmm", "aten::linear", "aten::matmul", "mkldnn")),
    ("copy", ("memcpy", "memset", "aten::copy_", "aten::clone", "aten::fill_", "aten::zero_")),
)
_TRAILING_INDEX = re.compile(r"_\d+$")  # Inductor numbers its kernels: triton_poi_fused_add_3
_GRAPH_PREFIX = re.compile(r"^graph_\d+_")  # CPU kernel events: graph_0_cpp_fused_...
def kernel_class(name: str) -> str:
    """The class of a kernel (GPU) or of its CPU twin (an op or a generated C++ kernel)."""
    lowered = name.lower()
    for cls, tokens in _CLASS_TOKENS:
        if any(t in lowered for t in tokens):
            return cls
    return "other"


def signature(name: str) -> str:
    """A kernel's name without the numbering that differs between compiled graphs."""
    return _TRAILING_INDEX.sub("", _GRAPH_PREFIX.sub("", name))



# ---- one decode step's kernels ----------------------------------------------------------------

def _is_kernel_event(event) -> bool:
    """A CPU twin's kernel: an aten/c10d op or one of Inductor's generated C++ kernels."""
    return event.name.startswith(("aten::", "c10d::")) or "cpp_fused" in event.name


def cpu_kernels(prof) -> list[tuple[str, float]]:
    """(name, us) of the caller thread's kernels: Inductor's generated ones, and every top-level
    aten/c10d op that is not a view (inside a compiled graph, its extern calls)."""
    return [(e.name, e.time_range.elapsed_us()) for e in top_level(prof, _is_kernel_event)
            if e.name not in VIEW_OPS]


def gpu_kernels(prof) -> list[tuple[str, float]]:
    """(name, us) of every device activity: kernels, copies, memsets."""
    return [(e.name, e.time_range.elapsed_us()) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def per_layer(low: dict[str, tuple[int, float]], high: dict[str, tuple[int, float]],
              layers: int) -> tuple[dict[str, tuple[float, float]], bool]:
    """One layer's {signature: (calls, us)}: the kernels ``layers`` more layers add, divided by
    ``layers``; and whether every count divided exactly (the layers launch the same kernels)."""
    out, regular = {}, True
    for key in sorted(set(low) | set(high)):
        calls = high.get(key, (0, 0.0))[0] - low.get(key, (0, 0.0))[0]
        us = high.get(key, (0, 0.0))[1] - low.get(key, (0, 0.0))[1]
        if calls % layers:
            regular = False
        if calls:
            out[key] = (calls / layers, us / layers)
    return out, regular


def class_totals(kernels: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """{kernel class: (calls, us)} summed over signatures."""
    out = {cls: [0.0, 0.0] for cls in KERNEL_CLASSES}
    for key, (calls, us) in kernels.items():
        entry = out[kernel_class(key)]
        entry[0] += calls
        entry[1] += us
    return {cls: (c, u) for cls, (c, u) in out.items()}
