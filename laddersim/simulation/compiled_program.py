"""A schedule's program compiled once for the engine: its ops as the engine reads them (streams,
dependencies), each op's kind as an index into the distinct kinds (costs are priced per kind), each
collective's compute ops before it (what ``laddersim.costs.rank_skew`` makes it wait for) and the
stream masks the metrics read. Built in one place, once per process for each (schedule, layers,
TP, stage, phase): a sweep repeats a handful of programs over many points, and serving's iteration
timers one program over many iterations."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from laddersim.costs.rank_skew import compute_before_collectives
from laddersim.schedules.program import Program, build_program
from laddersim.schedules.stages import Stage
from laddersim.simulation.results import StreamMasks


@dataclass(frozen=True, eq=False)
class CompiledProgram:
    """One rank's program as the engine runs it (frozen, shared: compared by identity)."""

    program: Program
    masks: StreamMasks  # compute, overhead and comm ops (the metrics)
    streams: tuple[str, ...]  # "compute" or "comm" per op
    deps: tuple[tuple[int, ...], ...]  # cross-stream dependencies per op
    kind_names: tuple[str, ...]  # the distinct op kinds, in the order of the per-kind arrays
    kind_of_op: np.ndarray  # each op's index in ``kind_names``
    before: np.ndarray  # (ops, kinds): each collective's compute ops since the previous one (rank skew)

    @property
    def n_ops(self) -> int:
        return len(self.streams)

    def is_kind(self, kind: str) -> np.ndarray:
        """Which ops are of ``kind``."""
        return np.array([k == kind for k in self.program.kinds])


@lru_cache(maxsize=128)
def compile_program(schedule: str, n_layers: int, tp: int, stage: Stage | None = None, phase: str = "decode",
                    kind_names: tuple[str, ...] | None = None,
                    mlp_layout: tuple[str, ...] | None = None, expert_alltoall: bool = False) -> CompiledProgram:
    """The program of ``schedule`` over ``n_layers`` layers at ``tp`` (a pipeline ``stage``'s
    prefill runs other ops than its decode step: no token ids to receive). ``kind_names``: the
    order of the per-kind arrays (a superset of the program's kinds shared by several programs);
    by default the program's kinds in order of first use. ``mlp_layout``: each layer's MLP module
    kind (``ModelShape.mlp_layout``; None: dense). ``expert_alltoall``: the data-parallel-attention
    layout's program (``build_program``; ``tp`` the attention's)."""
    program = build_program(schedule, n_layers, tp, phase, stage, mlp_layout, expert_alltoall)
    names = tuple(dict.fromkeys(program.kinds)) if kind_names is None else kind_names
    index = {name: i for i, name in enumerate(names)}
    kind_of_op = np.array([index[k] for k in program.kinds], dtype=int)
    streams = tuple(op.stream for op in program.ops)
    return CompiledProgram(program, StreamMasks.of(program), streams, tuple(op.deps for op in program.ops), names,
                           kind_of_op, compute_before_collectives(streams, kind_of_op, len(names)))
