"""The one entry for a collective's time: an AllReduce (``allreduce_time_s``) and the logits
AllGather (``allgather_time_s``), priced by the implementation the framework runs for the
message. Every caller outside ``laddersim.costs`` asks here.

The implementations are records (``laddersim.costs.allreduce_impls``: NCCL, NVLS multicast,
PyTorch's intra-node kernels, the custom one-/two-shot kernels of vLLM, TensorRT-LLM and SGLang)
and ``implementation_for`` applies the one rule: the framework names its implementations in order
(its ``allreduce``; a workload's forced ``allreduce`` replaces them by one, taken at every size
the implementation takes), and the first that runs on the group, machine and dtype and takes
the message size prices it, from the profile's table of it or from its algorithm; NCCL closes
every list (its algorithms, protocols, measured tables and fits: ``laddersim.costs.collectives``).
A framework file without ``allreduce`` runs ``nvls`` where its ``allreduce_library`` is
``multimem`` and ``vllm-custom`` where its ``small_allreduce`` is ``custom``.

A table implementation takes the profile's intra-node what-if factors as the NCCL tables do
(``laddersim.costs.scaling``) and has the table's host launch removed or added as for NCCL's.
While a custom kernel overlaps compute its CTAs hold their SMs (``allreduce_slowdowns``). A
framework that launches its collectives otherwise than the profile simulates (its
``collective_launch``: eager C++ runtimes without CUDA graphs) has the profile's host launch added
to each (``launch_correction_s``).

The logits AllGather: from the profile's measured AllGather tables (``collectives.
allgather_tables``, sized by the gathered bytes; ``calibration/allgather_bench.py``) where one
covers the group and size, else as an AllReduce of half the gathered bytes on NCCL (a ring
AllGather moves half of what an AllReduce of the same buffer does; vLLM gathers the logits with
torch.distributed, not its custom kernel).
"""

from __future__ import annotations

from laddersim.costs.allreduce_impls import (
    IMPLEMENTATIONS, MULTIMEM, NCCL, NCCL_PICK, Pick, custom_slowdowns, custom_time_s, pick, table_time_s,
)
from laddersim.costs.collectives import mode_correction_s, nccl_allreduce_s, scaled_table_s, slowdowns
from laddersim.costs.gemm_tables import SILICON, SOL
from laddersim.costs.scaling.view import links
from laddersim.hardware.profile import HardwareProfile
from laddersim.model.framework import load_framework
from laddersim.support.memo import IdentityMemo


def candidates(framework, custom: bool = True, forced: str | None = None) -> tuple[str, ...]:
    """The implementations ``framework`` tries, in the order of its rule (NCCL last); ``custom=False``:
    a collective it does not route through its custom kernels (NVLS kept); ``forced``: the one
    implementation a workload names instead."""
    if forced is not None and custom:
        return (forced, NCCL.name)
    if framework is None:
        return (NCCL.name,)
    if framework.allreduce is not None:
        names = tuple(framework.allreduce.value)
    else:
        names = (("nvls",) if framework.allreduce_library.value == "multimem" else ()) + (
            ("vllm-custom",) if framework.small_allreduce is not None and framework.small_allreduce.value == "custom"
            else ())
    if not custom:
        names = tuple(n for n in names if IMPLEMENTATIONS[n].needs_multicast)
    return (*names, NCCL.name)


def implementation_for(hw: HardwareProfile, framework, tp: int, size_bytes: float, custom: bool = True, *,
                       dtype: str = "bfloat16", forced: str | None = None) -> tuple[Pick, float | None]:
    """The implementation the rule picks for one AllReduce of ``size_bytes`` over ``tp`` ranks, and
    its seconds (None for NCCL, priced by ``nccl_allreduce_s``, and for NVLS without a table)."""
    chosen = pick(hw, candidates(framework, custom, forced), tp, size_bytes, dtype,
                  by_name=forced is not None and custom)
    return chosen, custom_time_s(hw, chosen, tp, size_bytes)


def allreduce_time_s(hw: HardwareProfile, tp: int, size_bytes, framework=None, *, nodes: int | None = None,
                     measured: bool = True, custom: bool = True, dtype: str = "bfloat16", forced: str | None = None):
    """Seconds of one AllReduce of ``size_bytes`` per rank over ``tp`` ranks.

    Without ``framework`` (and ``forced``): NCCL's (array-friendly), over ``nodes`` nodes (default:
    as many as the profile's node size needs); ``measured=False``: NCCL's parametric model alone
    (fits and checks). With them: one message (a float), by the implementation the rule picks
    (``implementation_for``; ``dtype`` the workload's); on NCCL the framework's stream hand-off is
    added (``laddersim.model.framework``): of its two cross-stream dependencies, the collective's
    stream waiting on the compute stream's event delays the collective (here); the compute stream
    waiting on the collective's event delays the consumer (``op_costs``' ``collective_launch``).
    """
    if framework is None and forced is None:
        return nccl_allreduce_s(hw, tp, size_bytes, nodes=nodes, measured=measured)
    _, seconds = implementation_for(hw, framework, tp, size_bytes, custom, dtype=dtype, forced=forced)
    launch = launch_correction_s(hw, framework) if tp > 1 else 0.0
    if seconds is not None:
        return max(seconds + launch, 0.0)
    handoff = framework.collective_handoff_half_s() if tp > 1 and framework is not None else 0.0
    return max(float(nccl_allreduce_s(hw, tp, size_bytes)) + handoff + launch, 0.0)


def launch_correction_s(hw: HardwareProfile, framework) -> float:
    """Host launch to add to a collective where ``framework`` launches it otherwise than the profile
    simulates (its ``collective_launch`` eager on a graph-mode profile: + ``eager_launch_us``; graph
    on an eager one: -); 0 where it states none or the same."""
    stated = None if framework is None or framework.collective_launch is None else framework.collective_launch.value
    if stated is None or stated == hw.collectives.mode:
        return 0.0
    sign = 1.0 if stated == "eager" else -1.0
    return sign * hw.collectives.eager_launch_us.value * 1e-6


def allreduce_slowdowns(hw: HardwareProfile, tp: int, size_bytes: float, framework=None, *, custom: bool = True,
                         dtype: str = "bfloat16", forced: str | None = None) -> tuple[float, float]:
    """(compute_slowdown, comm_slowdown) while this collective overlaps compute: a custom kernel's
    SMs (``allreduce_impls.custom_slowdowns``), else NCCL's (``collectives.slowdowns``)."""
    if tp > 1 and (framework is not None or forced is not None):
        chosen, _ = implementation_for(hw, framework, tp, size_bytes, custom, dtype=dtype, forced=forced)
        held = custom_slowdowns(hw, chosen, tp, size_bytes)
        if held is not None:
            return held
    return slowdowns(hw, tp, size_bytes)


def op_slowdowns(hw: HardwareProfile, work, tp: int, kind: str, size_bytes: float) -> tuple[float, float]:
    """``allreduce_slowdowns`` of one collective op of ``work`` (a Workload) by its kind: the
    AllReduce by the implementation its framework's rule (or its forced one) picks, the others
    (the logits AllGather) NCCL's."""
    if kind != "allreduce":
        return slowdowns(hw, tp, size_bytes)
    return allreduce_slowdowns(hw, tp, size_bytes, load_framework(work.framework), dtype=work.dtype,
                                forced=work.allreduce)


def allreduce_label(hw: HardwareProfile, tp: int, size_bytes: float, framework=None, *, dtype: str = "bfloat16",
                    forced: str | None = None) -> str:
    """The implementation (and kernel) that runs one AllReduce: ``nccl``, ``nvls``, ``vllm-custom one-shot``..."""
    if tp <= 1:
        return "none"
    if framework is None and forced is None:
        return NCCL_PICK.label
    return implementation_for(hw, framework, tp, size_bytes, dtype=dtype, forced=forced)[0].label


def allreduce_source(hw: HardwareProfile, tp: int, size_bytes: float, framework, custom: bool = True, *,
                     dtype: str = "bfloat16", forced: str | None = None) -> str:
    """Where ``allreduce_time_s`` of one message under ``framework`` comes from: ``SILICON`` where a
    measured table of the kernel run gives it (the framework's kernel, or the profile's NCCL table
    for a one-node group), else ``SOL`` (the profile's fitted NCCL model, or a custom kernel's
    algorithm)."""
    chosen, seconds = implementation_for(hw, framework, tp, size_bytes, custom, dtype=dtype, forced=forced)
    if chosen.impl is not NCCL and chosen.kernel != MULTIMEM:
        return SILICON if _table_priced(hw, chosen, tp, size_bytes) else SOL
    if chosen.kernel == MULTIMEM and seconds is not None:
        return SILICON
    nodes = hw.nodes_for(tp)
    measured = _kept_measured.get((hw.collectives,), (hw.base_dir, tp, nodes), lambda: _measured(hw, tp, nodes))
    return SILICON if (measured and nodes == 1) else SOL


def _table_priced(hw: HardwareProfile, chosen: Pick, tp: int, size_bytes: float) -> bool:
    return table_time_s(hw, chosen.impl, tp, size_bytes) is not None


# Whether a group shape has a measured AllReduce table, by the profile's collectives (a sweep's
# what-ifs keep them: its points share the answer).
_kept_measured = IdentityMemo(4096)


def _measured(hw: HardwareProfile, tp: int, nodes: int) -> bool:
    """Does a table the model uses measure ``tp`` GPUs on ``nodes`` nodes (two sizes at least)?"""
    return hw.collectives.prefer == "table" and any(
        ((cols["gpus"] == tp) & (cols["nodes"] == nodes)).sum() >= 2
        for table, cols in hw.allreduce_arrays if table.use == "model")


def allgather_time_s(hw: HardwareProfile, tp: int, gathered_bytes: float, framework) -> float:
    """Seconds of the logits AllGather whose output is ``gathered_bytes`` over ``tp`` ranks: a
    measured AllGather table of a one-node group that covers the size (a single measured size:
    that size only), else the NCCL AllReduce of half the bytes (module docstring)."""
    seconds = _allgather_table_s(hw, tp, gathered_bytes)
    if seconds is not None:
        return max(seconds + launch_correction_s(hw, framework), 0.0)
    return allreduce_time_s(hw, tp, gathered_bytes / 2.0, framework, custom=False)


def allgather_source(hw: HardwareProfile, tp: int, gathered_bytes: float, framework) -> str:
    """Where ``allgather_time_s`` comes from (``SILICON``: a measured table; as ``allreduce_source``)."""
    if _allgather_table_s(hw, tp, gathered_bytes) is not None:
        return SILICON
    return allreduce_source(hw, tp, gathered_bytes / 2.0, framework, custom=False)


def _allgather_table_s(hw: HardwareProfile, tp: int, gathered_bytes: float) -> float | None:
    if tp <= 1 or hw.nodes_for(tp) != 1:
        return None
    intra = links(hw).intra
    for table, cols in hw.allgather_arrays:
        rows = (cols["gpus"] == tp) & (cols["nodes"] == 1)
        sizes, times = cols["size_bytes"][rows], cols["time_s"][rows]
        if len(sizes) and sizes[0] <= gathered_bytes <= sizes[-1]:
            seconds = intra.latency_of(float(times[0])) if len(sizes) == 1 \
                else float(scaled_table_s(sizes, times, gathered_bytes, intra))  # one size: its floor
            return max(seconds + mode_correction_s(hw, table), 0.0)
    return None


__all__ = ["allgather_source", "allgather_time_s", "allreduce_label", "allreduce_source", "allreduce_time_s",
           "candidates", "allreduce_slowdowns", "implementation_for", "launch_correction_s", "op_slowdowns"]
