"""The one entry for a collective's time: an AllReduce (``allreduce_time_s``) and the logits
AllGather (``allgather_time_s``), priced by the implementation the framework runs for the
message. Every caller outside ``laddersim.costs`` asks here.

An implementation is a record (``AllReduceImplementation``: its name, where it runs, the group
sizes it accepts, the measured table that prices it, its size limit) and ``implementation_for`` is
the one rule that picks among a framework's candidates (``candidates``), the first that applies
and whose table covers the message:

* ``multimem``: a multimem (NVLS, symmetric-memory) AllReduce kernel, where the framework's
  ``allreduce_library`` is ``multimem`` (laddersim/data/frameworks/vllm.yaml): from the profile's
  table whose ``library`` starts with ``multimem``, from its smallest size up (above its largest,
  time grows with size at the last point's bandwidth);
* ``custom``: the framework's own one-/two-shot kernel for small messages (``small_allreduce:
  custom``, vLLM's CustomAllreduce), on 2, 4, 6 or 8 GPUs of one node, up to
  ``small_allreduce_max_bytes``, within the sizes of the profile's table whose library names a
  "custom all-reduce";
* ``nccl``: NCCL's algorithms and protocols, its measured tables and fits
  (``laddersim.costs.collectives``): every size and group shape, the fallback of every framework.

A table implementation takes the profile's intra-node what-if factors as the NCCL tables do
(``laddersim.costs.scaling``) and has the table's host launch removed or added as for NCCL's.
Adding an implementation is a new record in ``IMPLEMENTATIONS`` and its place in
``candidates``.

The logits AllGather: from the profile's measured AllGather tables (``collectives.
allgather_tables``, sized by the gathered bytes; ``calibration/allgather_bench.py``) where one
covers the group and size, else as an AllReduce of half the gathered bytes on NCCL (a ring
AllGather moves half of what an AllReduce of the same buffer does; vLLM gathers the logits with
torch.distributed, not its custom kernel).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


from laddersim.costs.collectives import mode_correction_s, nccl_allreduce_s, scaled_table_s
from laddersim.costs.gemm_tables import SILICON, SOL
from laddersim.costs.scaling.view import links
from laddersim.hardware.profile import HardwareProfile
from laddersim.support.memo import IdentityMemo


@dataclass(frozen=True, slots=True)
class AllReduceImplementation:
    """One way to run an AllReduce: ``name``; ``runs_on`` (``one_node``: a kernel reading its
    peers' memory, every rank on one node; ``any``: any group shape); ``world_sizes``: the group
    sizes it accepts (None: any); ``library_pattern``: a regular expression that the ``library`` of
    the profile's AllReduce tables pricing it matches (None: NCCL's own model and tables);
    ``from_smallest_up``: the table prices every size from its smallest up (else only within its
    sizes); ``max_bytes_field``: the framework field that bounds the message size (None: none)."""

    name: str
    runs_on: str
    world_sizes: tuple[int, ...] | None = None
    library_pattern: str | None = None
    from_smallest_up: bool = False
    max_bytes_field: str | None = None


NCCL = AllReduceImplementation("nccl", runs_on="any")
MULTIMEM = AllReduceImplementation("multimem", runs_on="one_node", library_pattern=r"^multimem",
                                   from_smallest_up=True)
# World sizes: vLLM's CustomAllreduce._SUPPORTED_WORLD_SIZES (vllm-project/vllm
# vllm/distributed/device_communicators/custom_all_reduce.py @ 0ad80649d366); other sizes run NCCL.
CUSTOM = AllReduceImplementation("custom", runs_on="one_node", world_sizes=(2, 4, 6, 8),
                                 library_pattern=r"(?i)custom all-reduce",
                                 max_bytes_field="small_allreduce_max_bytes")
IMPLEMENTATIONS = {impl.name: impl for impl in (NCCL, MULTIMEM, CUSTOM)}


def candidates(framework, custom: bool = True) -> tuple[AllReduceImplementation, ...]:
    """The implementations ``framework`` may run, in the order its rule tries them (NCCL last);
    ``custom=False``: a collective it does not route through its small-message kernel."""
    if framework is None:
        return (NCCL,)
    tried = []
    if framework.allreduce_library.value == "multimem":
        tried.append(MULTIMEM)
    if custom and framework.small_allreduce is not None and framework.small_allreduce.value == "custom":
        tried.append(CUSTOM)
    return (*tried, NCCL)


def implementation_for(hw: HardwareProfile, framework, tp: int, size_bytes: float,
                       custom: bool = True) -> tuple[AllReduceImplementation, float | None]:
    """The implementation the rule picks for one AllReduce of ``size_bytes`` over ``tp`` ranks, and
    its table's seconds (None for NCCL, priced by ``nccl_allreduce_s``)."""
    one_node = tp > 1 and hw.nodes_for(tp) == 1
    for impl in candidates(framework, custom):
        if impl.library_pattern is None:
            return impl, None
        if (impl.runs_on == "one_node" and not one_node) or (impl.world_sizes and tp not in impl.world_sizes):
            continue
        limit = getattr(framework, impl.max_bytes_field) if impl.max_bytes_field else None
        if limit is not None and size_bytes > limit.value:
            continue
        seconds = _one_node_table_s(hw, tp, size_bytes, impl)
        if seconds is not None:
            return impl, seconds
    return NCCL, None


def allreduce_time_s(hw: HardwareProfile, tp: int, size_bytes, framework=None, *, nodes: int | None = None,
                     measured: bool = True, custom: bool = True):
    """Seconds of one AllReduce of ``size_bytes`` per rank over ``tp`` ranks.

    Without ``framework``: NCCL's (array-friendly), over ``nodes`` nodes (default: as many as the
    profile's node size needs); ``measured=False``: NCCL's parametric model alone (fits and checks).
    With ``framework``: one message (a float), by the implementation its rule picks
    (``implementation_for``); on NCCL the framework's stream hand-off is added
    (``laddersim.model.framework``): of its two cross-stream dependencies, the collective's stream
    waiting on the compute stream's event delays the collective (here); the compute stream waiting
    on the collective's event delays the consumer (``op_costs``' ``collective_launch``).
    """
    if framework is None:
        return nccl_allreduce_s(hw, tp, size_bytes, nodes=nodes, measured=measured)
    impl, seconds = implementation_for(hw, framework, tp, size_bytes, custom)
    if seconds is not None:
        return seconds
    handoff = framework.collective_handoff_half_s() if tp > 1 else 0.0
    return float(nccl_allreduce_s(hw, tp, size_bytes)) + handoff


def allreduce_source(hw: HardwareProfile, tp: int, size_bytes: float, framework, custom: bool = True) -> str:
    """Where ``allreduce_time_s`` of one message under ``framework`` comes from: ``SILICON`` where a
    measured table of the kernel run gives it (the framework's kernel, or the profile's NCCL table
    for a one-node group), else ``SOL`` (the profile's fitted NCCL model)."""
    impl, _ = implementation_for(hw, framework, tp, size_bytes, custom)
    if impl is not NCCL:
        return SILICON
    nodes = hw.nodes_for(tp)
    measured = _kept_measured.get((hw.collectives,), (hw.base_dir, tp, nodes), lambda: _measured(hw, tp, nodes))
    return SILICON if (measured and nodes == 1) else SOL


# Whether a group shape has a measured AllReduce table, by the profile's collectives (a sweep's
# what-ifs keep them: its points share the answer).
_kept_measured = IdentityMemo(4096)


def _measured(hw: HardwareProfile, tp: int, nodes: int) -> bool:
    """Does a table the model uses measure ``tp`` GPUs on ``nodes`` nodes (two sizes at least)?"""
    return hw.collectives.prefer == "table" and any(
        ((cols["gpus"] == tp) & (cols["nodes"] == nodes)).sum() >= 2
        for table, cols in hw.allreduce_arrays if table.use == "model")


def _one_node_table_s(hw: HardwareProfile, tp: int, size_bytes: float, impl: AllReduceImplementation) -> float | None:
    """Seconds from the first AllReduce table of ``impl`` with rows for ``tp`` GPUs of one node
    that covers ``size_bytes`` (from its smallest size; up to its largest unless
    ``impl.from_smallest_up``), host launch corrected; None where none does."""
    for table, cols in hw.allreduce_arrays:  # numpy columns: the simulate path loads no pandas
        if not re.search(impl.library_pattern, table.library):
            continue
        rows = (cols["gpus"] == tp) & (cols["nodes"] == 1)
        sizes = cols["size_bytes"][rows]
        if len(sizes) >= 2 and sizes[0] <= size_bytes and (impl.from_smallest_up or size_bytes <= sizes[-1]):
            seconds = float(scaled_table_s(sizes, cols["time_s"][rows], size_bytes, links(hw).intra))
            return max(seconds + mode_correction_s(hw, table), 0.0)
    return None


def allgather_time_s(hw: HardwareProfile, tp: int, gathered_bytes: float, framework) -> float:
    """Seconds of the logits AllGather whose output is ``gathered_bytes`` over ``tp`` ranks: a
    measured AllGather table of a one-node group that covers the size (a single measured size:
    that size only), else the NCCL AllReduce of half the bytes (module docstring)."""
    seconds = _allgather_table_s(hw, tp, gathered_bytes)
    if seconds is not None:
        return seconds
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


__all__ = ["AllReduceImplementation", "IMPLEMENTATIONS", "allgather_source", "allgather_time_s", "allreduce_source",
           "allreduce_time_s", "candidates", "implementation_for"]
