"""Framework (host dispatch) time of each op kind, from the profile's ``host_overhead`` section.

A program op of kind K stands for the framework ops the real run dispatches for it (counted in
a profiler trace of one decode step by ``calibration/op_trace.py``): ``compute`` ops (a kernel
and usually an allocation), ``view`` ops (metadata only) and ``collective`` issues, each at the
per-op cost calibrate measured from chains of such ops (``calibration/overhead_bench.py``; where
the model's own modules were timed, the compute ops' cost at which they price as measured,
``laddersim.fitting.modules``):

    host_s(K) = n_compute(K) * compute_op_s + n_view(K) * view_op_s + n_collective(K) * collective_op_s

Synchronous timing (CPU ranks: the calling thread runs the work too): the framework's ops are
the op's host time, and they add to the work they run. A memory-bound kind's modelled kernel floor
(``gpu.kernel_launch_us``, one per kind but ``NO_FLOOR_KINDS``) stands for the dispatch its traced
ops already pay, so ``host_s`` replaces it: ``kernel - floor + host_s``. A GEMM kind's time is the
measured call (its fitted floor holds that call's dispatch and a cold weight's first reads), so it
adds the host time of its other ops: ``kernel + max(0, host_s - compute_op_s)``. Where calibrate
measured the step's sampling as one call (``sampling_us``), the sampling kind is that call plus
the host time of the kind's other ops (the logits' concatenation and slice). All is divided by
``cpu_share``: the compute microbenchmarks' medians are of short samples that mostly ran between
two preemptions, a whole run pays every preemption by the other processes on its cores. The
collectives are not: a measured AllReduce is a whole call, its waits for the peer's and the
worker threads' turns on the cores included. Where the collectives' progress shares the
compute's cores (``collective_progress: host_cores``), the engine charges that through the
profile's interference rates, which calibrate measures that way. A measured collective is timed
on the calling thread from its call to its return, so it holds its own issue (the backend
enqueueing the work: ``collective_op_us`` per collective op of ``collective_launch``); the issue
is charged once, on the compute stream where the calling thread pays it (``collective_launch``),
and each collective kind keeps the rest, ``max(0, measured - issue)``: a blocking call still
costs the measured time, an async one (the ladder) overlaps only what follows its issue.
Asynchronous timing (eager on a GPU, the host running ahead): the op takes the longer of its
kernel time and ``host_s``. Kinds without an entry (the comm stream's collectives) are unchanged.
"""

from __future__ import annotations

import numpy as np

from laddersim.hardware.compute_specs import HostOverheadSpec
from laddersim.hardware.profile import HardwareProfile

# Kernel floors (gpu.kernel_launch_us) laddersim.costs.op_costs already charges per op kind: one
# per modelled kernel; the framework-only kinds (sampling, step_overhead, collective_launch)
# charge none.
NO_FLOOR_KINDS = frozenset({"sampling", "step_overhead", "collective_launch"})
# Library GEMM kinds (laddersim.costs.op_costs ``linear``): their time is a measured call's.
GEMM_KINDS = frozenset({"qkv", "o_proj", "gate_up", "down", "qkv_gate_up", "lm_head"})
# The comm stream's op kinds (op_costs.collective_message_bytes); their host issue is the compute
# stream's collective_launch.
COLLECTIVE_KINDS = frozenset({"allreduce", "allgather_logits"})


def host_time_s(spec: HostOverheadSpec, kind: str) -> float | None:
    """Host seconds of one op of ``kind`` (None: the kind has no entry)."""
    entry = next((e for e in spec.ops if e.kind == kind), None)
    if entry is None:
        return None
    return 1e-6 * (entry.compute * spec.compute_op_us.value + entry.view * spec.view_op_us.value
                   + entry.collective * spec.collective_op_us.value)


def with_host_overhead(hw: HardwareProfile, times: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``times`` (seconds per op kind) with the framework's host time of each kind folded in."""
    spec = hw.host_overhead
    if spec is None:
        return times
    out = dict(times)
    share = spec.cpu_share.value
    op_s = spec.compute_op_us.value * 1e-6
    for kind, kernel_s in times.items():
        host_s = host_time_s(spec, kind)
        if spec.timing == "asynchronous":
            out[kind] = kernel_s if host_s is None else np.maximum(kernel_s, host_s)
            continue
        if kind in COLLECTIVE_KINDS:  # a whole call: its issue is charged by collective_launch
            out[kind] = np.maximum(kernel_s - collective_issue_s(spec), 0.0)
            continue
        if kind == "sampling" and spec.sampling_us is not None:
            kernel_s = np.full_like(kernel_s, spec.sampling_us.value * 1e-6)
            host_s = max(0.0, (host_s or 0.0) - spec.sampling_ops * op_s)
        if host_s is not None and kind in GEMM_KINDS:
            kernel_s = kernel_s + max(0.0, host_s - op_s)
        elif host_s is not None:
            floors_s = 0.0 if kind in NO_FLOOR_KINDS else hw.gpu.kernel_launch_s
            kernel_s = kernel_s - floors_s + host_s
        out[kind] = kernel_s / share  # the rank computes only while the cores are its own
    return out


def collective_issue_s(spec: HostOverheadSpec) -> float:
    """Host seconds of one collective's issue: the collective ops of ``collective_launch``."""
    entry = next((e for e in spec.ops if e.kind == "collective_launch"), None)
    return 0.0 if entry is None else 1e-6 * entry.collective * spec.collective_op_us.value

