"""The AllReduce kernel a framework runs, where it is not NCCL's (a small hook beside
``laddersim.costs.collectives``, which owns the NCCL model).

``allreduce_library: multimem`` (laddersim/data/frameworks/vllm.yaml): a multimem (NVLS,
symmetric-memory) AllReduce kernel. Where the hardware profile ships a measured table of it
(``collectives.tables`` entry whose ``library`` starts with ``multimem``) for the group size, its
time is interpolated in log size (the table's host launch removed or added as for NCCL tables);
below the table's smallest size, or without one, the profile's NCCL model is used (above its
largest, time grows with size at the last point's bandwidth).

``small_allreduce: custom`` (vllm.yaml): messages up to ``small_allreduce_max_bytes`` run the
framework's own one-/two-shot kernel (vLLM's CustomAllreduce), interpolated from the profile's
table of it (a ``collectives.tables`` entry whose library names a "custom all-reduce"), where the
multimem table does not cover the size: decode-size AllReduces no longer fall back to the NCCL
model below the multimem table.

The logits AllGather (``logits_allgather_time_s``): from the profile's measured AllGather tables
(``collectives.allgather_tables``, sized by the gathered bytes; ``calibration/allgather_bench.py``)
where one covers the group and size, else as an AllReduce of half the gathered bytes (a ring
AllGather moves half of what an AllReduce of the same buffer does).

Each of these tables takes the profile's intra-node ``what_if`` scales as the NCCL tables do (a
what-if override, or a fitted machine's speed: ``laddersim.fitting.row_parameters``).
"""

from __future__ import annotations


from laddersim.costs.collectives import allreduce_time_s, mode_correction_s, scaled_table_s
from laddersim.costs.gemm_tables import SILICON, SOL
from laddersim.hardware.profile import HardwareProfile
from laddersim.support.memo import IdentityMemo


def framework_allreduce_time_s(hw: HardwareProfile, fw, tp: int, size_bytes: float,
                               custom: bool = True) -> tuple[float, str]:
    """Seconds of one AllReduce of ``size_bytes`` over ``tp`` ranks under framework ``fw``, and
    the source label: ``SILICON`` where a measured table of the kernel run gives it (the
    framework's kernel, or the profile's NCCL table for a one-node group), else ``SOL`` (the
    profile's fitted NCCL model). ``custom=False``: a collective the framework does not route
    through its small-message kernel (``small_allreduce``)."""
    if tp > 1 and fw.allreduce_library.value == "multimem" and hw.nodes_for(tp) == 1:
        seconds = _one_node_table_s(hw, tp, size_bytes, lambda library: library.startswith("multimem"),
                                    up_to_largest=False)
        if seconds is not None:
            return seconds, SILICON
    small = _custom_allreduce_s(hw, fw, tp, size_bytes) if custom else None  # below the multimem table
    if small is not None:
        return small, SILICON
    nodes = hw.nodes_for(tp)
    measured = _kept_measured.get((hw.collectives,), (hw.base_dir, tp, nodes), lambda: _measured(hw, tp, nodes))
    # The framework's stream hand-off (laddersim.model.framework): of its two cross-stream dependencies, the
    # collective's stream waiting on the compute stream's event delays the collective (here); the
    # compute stream waiting on the collective's event delays the consumer, on the compute stream
    # (op_costs' collective_launch), which no overlap hides.
    handoff = fw.collective_handoff_half_s() if tp > 1 else 0.0
    return float(allreduce_time_s(hw, tp, size_bytes)) + handoff, SILICON if (measured and nodes == 1) else SOL


# Whether a group shape has a measured AllReduce table, by the profile's collectives (a sweep's
# what-ifs keep them: its points share the answer).
_kept_measured = IdentityMemo(4096)


def _measured(hw: HardwareProfile, tp: int, nodes: int) -> bool:
    """Does a table the model uses measure ``tp`` GPUs on ``nodes`` nodes (two sizes at least)?"""
    return hw.collectives.prefer == "table" and any(
        ((cols["gpus"] == tp) & (cols["nodes"] == nodes)).sum() >= 2
        for table, cols in hw.allreduce_arrays if table.use == "model")


def _custom_allreduce_s(hw: HardwareProfile, fw, tp: int, size_bytes: float) -> float | None:
    """A framework's own small-message AllReduce (``small_allreduce: custom``, vLLM's one-/two-shot
    kernels) from the profile's table of it (library naming a custom all-reduce), for a one-node
    group up to the framework's ``small_allreduce_max_bytes``; None where it does not apply."""
    if tp < 2 or fw.small_allreduce is None or fw.small_allreduce.value != "custom" or hw.nodes_for(tp) != 1:
        return None
    limit = fw.small_allreduce_max_bytes.value if fw.small_allreduce_max_bytes is not None else float("inf")
    if size_bytes > limit:
        return None
    return _one_node_table_s(hw, tp, size_bytes, lambda library: "custom all-reduce" in library.lower(),
                             up_to_largest=True)


def _one_node_table_s(hw: HardwareProfile, tp: int, size_bytes: float, uses_table, up_to_largest: bool) -> float | None:
    """Seconds from the first AllReduce table whose library ``uses_table`` accepts and which has
    rows for ``tp`` GPUs of one node from ``size_bytes`` down (and, ``up_to_largest``, up: else
    beyond its largest size at its last bandwidth), host launch corrected; None where none has."""
    for table, cols in hw.allreduce_arrays:  # numpy columns: the simulate path loads no pandas
        if not uses_table(table.library):
            continue
        rows = (cols["gpus"] == tp) & (cols["nodes"] == 1)
        sizes = cols["size_bytes"][rows]
        if len(sizes) >= 2 and sizes[0] <= size_bytes and (not up_to_largest or size_bytes <= sizes[-1]):
            seconds = float(_intra_scaled_s(hw, sizes, cols["time_s"][rows], size_bytes))
            return max(seconds + mode_correction_s(hw, table), 0.0)
    return None


def logits_allgather_time_s(hw: HardwareProfile, fw, tp: int, gathered_bytes: float) -> tuple[float, str]:
    """Seconds of the logits AllGather whose output is ``gathered_bytes`` over ``tp`` ranks, and
    its source label: ``SILICON`` from a measured AllGather table of a one-node group that covers
    the size (a single measured size: that size only), else the AllReduce of half the bytes."""
    if tp > 1 and hw.nodes_for(tp) == 1:
        for table, cols in hw.allgather_arrays:
            rows = (cols["gpus"] == tp) & (cols["nodes"] == 1)
            sizes, times = cols["size_bytes"][rows], cols["time_s"][rows]
            if len(sizes) and sizes[0] <= gathered_bytes <= sizes[-1]:
                seconds = float(times[0]) * hw.what_if.intra_latency_scale if len(sizes) == 1 \
                    else float(_intra_scaled_s(hw, sizes, times, gathered_bytes))  # one size: its floor
                return max(seconds + mode_correction_s(hw, table), 0.0), SILICON
    # vLLM gathers the logits with torch.distributed (NCCL), not its custom all-reduce kernel
    return framework_allreduce_time_s(hw, fw, tp, gathered_bytes / 2.0, custom=False)


def _intra_scaled_s(hw: HardwareProfile, sizes, times, size_bytes):
    """A one-node table's time at ``size_bytes`` with the profile's intra-node what-if scales (a
    what-if override, or a fit: ``laddersim.fitting.row_parameters``), as NCCL's own tables get them."""
    w = hw.what_if
    return scaled_table_s(sizes, times, size_bytes, w.intra_bandwidth_scale, w.intra_latency_scale)

