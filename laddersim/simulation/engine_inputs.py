"""The engine's inputs, built in one place from a scenario's hardware, a compiled program and the
seconds of one op of each kind: each rank's work (per-op seconds, a collective waiting for the
slowest rank, jitter), the collectives' interference (slowdowns per kind) and the links a TP
group's collectives cross. One-scenario simulation, the sweep's batch path and serving's iteration
timer all build their runs here."""

from __future__ import annotations

import numpy as np

from laddersim.costs.allreduce import op_slowdowns
from laddersim.costs.dp_attention_costs import alltoall_bytes, dp_attention_op_times_s, replica_phase
from laddersim.costs.op_costs import collective_message_bytes
from laddersim.model.dp_attention import DpAttentionLayout
from laddersim.model.layer_ops import EP_ALLTOALL_KINDS
from laddersim.engine.work import EngineRun, RankWork
from laddersim.hardware.profile import HardwareProfile
from laddersim.simulation.compiled_program import CompiledProgram
from laddersim.support.memo import IdentityMemo

# Collectives' interference by profile, TP and message (the schedules of a sweep share them).
_kept_slowdowns = IdentityMemo(65536)


def group_links(group_nodes: tuple[int, ...]) -> dict[int, tuple[str, ...]]:
    """The links a TP group's collectives cross: each node's, and the network between nodes where
    the group spans more than one."""
    return {0: tuple(f"node{i}" for i in group_nodes) + (("network",) if len(group_nodes) > 1 else ())}


def collective_slowdowns(hw: HardwareProfile, tp: int, message_bytes: dict[str, float],
                         work) -> dict[str, tuple[float, float]]:
    """{collective kind: (compute, comm) slowdowns} of collectives of these message sizes
    (``laddersim.costs.op_costs.collective_message_bytes``) under ``work`` (a Workload: the
    AllReduce its framework's rule, or its forced ``allreduce``, picks: ``costs.allreduce.op_slowdowns``)."""
    return {kind: _kept_slowdowns.get((hw,), (tp, size, kind, work.framework, work.allreduce, work.dtype),
                                      lambda: op_slowdowns(hw, work, tp, kind, size))
            for kind, size in message_bytes.items()}


def slowdown_pairs(by_collective: dict[str, tuple[float, float]], kind_names: tuple[str, ...]) -> list:
    """(compute, comm) slowdowns of each kind of ``kind_names``; (0, 0) for the kinds that are not
    collectives (only the collectives' entries are read: the point-to-point ops of a stage boundary
    overlap nothing)."""
    return [by_collective.get(kind, (0.0, 0.0)) for kind in kind_names]


def kind_slowdowns(hw: HardwareProfile, tp: int, message_bytes: dict[str, float],
                   kind_names: tuple[str, ...], work) -> tuple[np.ndarray, np.ndarray]:
    """(compute, comm) slowdowns per kind (``kind_names`` order) of collectives of these message
    sizes under ``work`` (``collective_slowdowns``)."""
    pairs = np.array(slowdown_pairs(collective_slowdowns(hw, tp, message_bytes, work), kind_names), dtype=float)
    pairs = pairs.reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def layout_times_s(layout: DpAttentionLayout):
    """``op_costs.op_times_s``'s signature for one GPU of the data-parallel-attention ``layout``
    (``tp`` is the replica's, ``layout.attn_tp``): ``dp_attention_costs.dp_attention_op_times_s``."""
    def times_s(model, hw, work, tp, phase, kv_lens):
        return dp_attention_op_times_s(model, hw, work, layout, phase, kv_lens)
    return times_s


def layout_slowdowns(model, hw: HardwareProfile, work, layout: DpAttentionLayout, phase,
                     kind_names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(compute, comm) slowdowns per kind of one GPU of ``layout``: the replica's AllReduce and
    logits AllGather over its ``attn_tp`` GPUs (``collective_slowdowns``), and each all-to-all as
    NCCL's collective over the ``ep`` GPUs of the message an AllReduce moving as many bytes per
    rank has (``(n - 1) / n`` of the buffer leaves each rank, half what an AllReduce of it moves:
    the logits AllGather's rule, ``op_costs.collective_message_bytes``)."""
    own = replica_phase(layout, phase)
    pairs = collective_slowdowns(hw, layout.attn_tp, collective_message_bytes(model, work, layout.attn_tp, own), work)
    half = alltoall_bytes(model, work, layout, phase) / 2.0
    pairs.update(collective_slowdowns(hw, layout.ep, {kind: half for kind in EP_ALLTOALL_KINDS}, work))
    out = np.array(slowdown_pairs(pairs, kind_names), dtype=float).reshape(-1, 2)
    return out[:, 0], out[:, 1]


def op_seconds(compiled: CompiledProgram, per_kind_s: np.ndarray, skew: float) -> np.ndarray:
    """Seconds per op from seconds per kind; each collective also waits for the slowest rank
    (``skew`` seconds per second of compute before it: ``laddersim.costs.rank_skew``)."""
    durations = per_kind_s[compiled.kind_of_op]
    return durations + skew * (compiled.before @ per_kind_s) if skew else durations


def engine_run(compiled: CompiledProgram, durations_s: np.ndarray, slowdowns_by_kind: tuple[np.ndarray, np.ndarray],
               links: dict[int, tuple[str, ...]], family: str = "", n_ranks: int = 1, rng=None,
               jitter: float = 0.0) -> EngineRun:
    """One run of ``compiled`` with these per-op seconds on ``n_ranks`` ranks (each drawing a
    lognormal multiplier per op from ``rng`` where ``jitter`` > 0), its slowdowns per op."""
    works = []
    for _ in range(n_ranks):
        d = durations_s
        if jitter > 0.0:
            d = durations_s * rng.lognormal(0.0, jitter, size=durations_s.shape)
        works.append(RankWork(compiled.streams, compiled.deps, d))
    compute, comm = slowdowns_by_kind
    return EngineRun(works, compute[compiled.kind_of_op], comm[compiled.kind_of_op], links, family)
