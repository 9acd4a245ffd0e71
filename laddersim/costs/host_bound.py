"""The host side of a serving engine's step: a step takes the longer of its GPU time and the time
the host needs to launch it, plus the host's per-step work where the scheduler does not overlap it.

Under a CUDA graph a decode step is one launch (the profile's ``framework.step_overhead_us``,
already in the GPU time). A step the framework does not capture (prompt tokens in it, or more
decoding sequences than ``cuda_graph_max_batch``) is launched kernel by kernel; the GPU runs each
kernel as soon as it is launched, so the step ends when the later of the two streams does:

    launch_s = kernels * eager_kernel_host_us   (eager steps; 0 under a graph)
    work_s   = sequences * host_per_sequence_us
    step_s   = max(gpu_s, launch_s + work_s)    scheduler_overlap (the host prepares step N+1 while
                                               the GPU runs step N)
    step_s   = max(gpu_s, launch_s) + work_s    otherwise (schedule, prepare, run, process outputs
                                               one after another)

A framework without these fields (gpt-fast, vllm-v0, the session frameworks) keeps its GPU time.
"""

from __future__ import annotations

import numpy as np

from laddersim.costs.kernel_counts import op_kernels
from laddersim.costs.pass_shapes import Phase
from laddersim.hardware.profile import HardwareProfile
from laddersim.model.framework import Framework
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload


def graph_replayed(fw: Framework, prefill: bool, sequences: int) -> bool:
    """Does a step with (``prefill``) or without prompt tokens and ``sequences`` sampling
    sequences replay a captured CUDA graph?"""
    if fw.cuda_graph_max_batch is None or prefill:
        return False
    return sequences <= fw.cuda_graph_max_batch.value


def pass_kernels(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int, phase: Phase,
                 kind_counts: dict[str, int]) -> float:
    """Kernels a pass launches: each op kind's kernels (laddersim.costs.kernel_counts) times the
    program's ops of that kind (``kind_counts``)."""
    per_kind = op_kernels(model, hw, work, tp, phase)
    return float(sum(kind_counts.get(kind, 0) * sum(classes.values()) for kind, classes in per_kind.items()))


def eager_kernel_host_s(fw: Framework, hw: HardwareProfile) -> float:
    """Host seconds to launch one kernel of an eager step (the framework's figure, else the
    profile's eager launch)."""
    if fw.eager_kernel_host_us is not None:
        return fw.eager_kernel_host_us.value * 1e-6
    return hw.collectives.eager_launch_us.value * 1e-6


def host_parts_s(fw: Framework, hw: HardwareProfile, kernels: float, sequences: int,
                 prefill: bool) -> tuple[float, float]:
    """(launch seconds, per-step work seconds) of a step of ``kernels`` kernels and ``sequences``
    sequences; launches only where the step runs eagerly (``graph_replayed`` False) and the
    framework names its graphs' limit."""
    eager = fw.cuda_graph_max_batch is not None and not graph_replayed(fw, prefill, sequences)
    launch_s = kernels * eager_kernel_host_s(fw, hw) if eager else 0.0
    per_sequence_s = fw.host_per_sequence_us.value * 1e-6 if fw.host_per_sequence_us is not None else 0.0
    return launch_s, sequences * per_sequence_s


def bounded_step_s(fw: Framework, gpu_s, launch_s: float, work_s: float):
    """A step's seconds from its GPU seconds (a float or an array) and its host parts (module
    docstring)."""
    overlap = fw.scheduler_overlap is not None and fw.scheduler_overlap.value
    if overlap:
        return np.maximum(gpu_s, launch_s + work_s)
    return np.maximum(gpu_s, launch_s) + work_s
