"""The host side of a serving engine's step: a step takes the longer of its GPU time and the time
the host needs to launch it and do its per-step work.

Under a CUDA graph a decode step is one launch (the profile's ``framework.step_overhead_us``,
already in the GPU time). A step the framework does not capture (prompt tokens in it, or more
decoding sequences than ``cuda_graph_max_batch``) is launched kernel by kernel; the GPU runs each
kernel as soon as it is launched, so the step ends when the later of the two streams does:

    launch_s = kernels * eager_kernel_host_us        (eager steps; 0 under a graph)
    work_s   = sequences * step_host_per_sequence_us
    step_s   = max(gpu_s, launch_s + work_s)

Where the scheduler overlaps the GPU (``scheduler_overlap``: the host prepares step N+1 while the
GPU runs step N) the per-sequence work runs beside the GPU. Where it does not, the GPU idles through
it: it is already in ``gpu_s`` (the step's sampling op, laddersim.costs.op_costs), and the same
maximum says that the launches, issued after it, end no earlier than it plus them.
A framework without a graph limit or overlapped host work (gpt-fast, vllm-v0, the session
frameworks) keeps its GPU time.
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
    return launch_s, sequences * fw.host_per_sequence_s()


def bounded_step_s(gpu_s, launch_s: float, work_s: float):
    """A step's seconds from its GPU seconds (a float or an array) and its host parts (module
    docstring)."""
    return np.maximum(gpu_s, launch_s + work_s)


class HostSide:
    """The host side of one scenario's steps (``model``, ``hw``, ``work`` at ``tp`` under ``fw``, a
    framework that prices one: ``Framework.prices_host_side``; ``kind_counts``: the program's ops
    of each kind), its kernels per pass memoized."""

    def __init__(self, model: ModelShape, hw: HardwareProfile, work: Workload, tp: int, fw: Framework,
                 kind_counts: dict[str, int]):
        self._model, self._hw, self._work, self._tp, self._fw = model, hw, work, tp, fw
        self._kind_counts = kind_counts
        self._kernels: dict[tuple[int, bool], float] = {}  # (tokens, prefill) -> kernels a pass launches

    def kernels(self, phase: Phase, prefill: bool) -> float:
        """Kernels a pass of ``phase`` launches (memoized by its tokens and ``prefill``)."""
        key = (phase.tokens, prefill)
        if key not in self._kernels:
            self._kernels[key] = pass_kernels(self._model, self._hw, self._work, self._tp, phase, self._kind_counts)
        return self._kernels[key]

    def step_s(self, gpu_s, phase: Phase, sequences: int, prefill: bool):
        """The step's seconds (``gpu_s``: a float or an array of steps of the same shape) with its
        host side."""
        launch_s, work_s = host_parts_s(self._fw, self._hw, self.kernels(phase, prefill), sequences, prefill)
        return bounded_step_s(gpu_s, launch_s, work_s)
