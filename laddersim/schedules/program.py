"""Turn a module plan into the op program one rank runs for one forward pass.

Every rank of a TP group runs the same program. Each collective is preceded on the compute
stream by a ``collective_launch`` op: what handing work to the communication stream costs the
compute stream (the framework's input copies, an eager framework's host issue); the NCCL
kernel's start-up behind its producer (the profile's ``framework.collective_sync_us``) is the
collective's own, so a schedule that overlaps the collective hides it too. Ops on one stream run in program order (like a
CUDA stream); ``deps`` lists the ops on the *other* stream an op must wait for. Collectives are
matched across ranks by op index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from laddersim.model.layer_ops import (EP_COMBINE_KIND, EP_DISPATCH_AFTER, EP_DISPATCH_KIND, EXPERT_MODULES,
                                       MODULE_OPS)
from laddersim.schedules.plan import Module, module_plan
from laddersim.schedules.stages import Stage, crossing_modules, stage_modules, whole_model

Stream = Literal["compute", "comm"]



@dataclass(frozen=True, slots=True)
class Op:
    index: int
    name: str  # display name, e.g. "L3.attn.qkv"
    kind: str  # cost key
    stream: Stream
    layer: int  # -1 for per-step ops (embedding, LM head, sampling)
    deps: tuple[int, ...] = ()  # ops on the other stream that must finish first

    @property
    def is_collective(self) -> bool:
        return self.stream == "comm"


@dataclass(frozen=True)
class Program:
    schedule: str
    phase: str
    ops: tuple[Op, ...]

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(op.kind for op in self.ops)


class _Builder:
    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, name: str, kind: str, stream: Stream, layer: int, deps: tuple[int, ...] = ()) -> int:
        self.ops.append(Op(len(self.ops), name, kind, stream, layer, deps))
        return len(self.ops) - 1


def build_program(schedule: str, n_layers: int, tp: int, phase: str = "decode", stage: Stage | None = None,
                  mlp_layout: tuple[str, ...] | None = None, expert_alltoall: bool = False) -> Program:
    """Ops of one forward pass on one rank of ``stage`` (default: the whole model, no pipeline).
    With ``tp == 1`` there are no collectives.

    A pipeline stage (``laddersim.schedules.stages``) runs its own layers. Every stage replays its
    own step (``step_overhead``). What a stage receives from the one before it is a point-to-point
    ``recv_hidden`` on its communication stream (the residual stream and the pending module
    outputs, ``stages.crossing_modules``), which the stage's first compute op and the residual adds
    of those outputs wait for; in decode the first stage receives the token ids the last one
    sampled (``recv_tokens``) before its embedding. A stage other than the last ends with its
    layers: its pending AllReduces end before its pass does, which is when it sends. The transfer
    is the receiving stage's op (one NCCL send/recv pair, counted once). ``mlp_layout``: each
    layer's MLP module kind (``laddersim.schedules.plan.module_plan``; None: dense).

    ``expert_alltoall``: the data-parallel-attention layout (``laddersim.model.dp_attention``;
    ``tp`` is then the attention's TP). Each mixture-of-experts module sends its routed tokens out by
    an ``ep_dispatch`` all-to-all on the communication stream, which its expert GEMMs wait for, and
    brings them back by an ``ep_combine`` all-to-all in place of its AllReduce (whatever ``tp``):
    the residual stream takes the combine in as it takes an AllReduce, so under ladder the combine
    of layer i overlaps the attention of layer i + 1. A schedule that drops the module's AllReduce
    (``upper_bound``) drops both all-to-alls."""
    modules = module_plan(schedule, n_layers, mlp_layout)
    stage = stage or whole_model(n_layers)
    start, end = stage_modules(modules, stage)
    b = _Builder()
    b.add("step_overhead", "step_overhead", "compute", -1)
    # pending[target module index] -> ops whose output the residual stream takes in before it
    pending: dict[int, list[tuple[Module, int]]] = {}
    first_deps: tuple[int, ...] = ()
    if stage.first:
        deps = (b.add("recv_tokens", "recv_tokens", "comm", -1),) if stage.count > 1 and phase == "decode" else ()
        b.add("embedding", "embedding", "compute", -1, deps)
    else:
        recv = b.add("recv_hidden", "recv_hidden", "comm", -1)
        first_deps = (recv,)
        for i in crossing_modules(modules, start):
            pending.setdefault(i + modules[i].lag, []).append((modules[i], recv))

    def take_in(entries: list[tuple[Module, int]]) -> None:
        for module, producer in entries:
            producer_op = b.ops[producer]
            deps = (producer,) if producer_op.is_collective else ()
            b.add(f"L{module.layer}.{module.kind}.residual_add", "residual_add", "compute", module.layer, deps)

    for i in range(start, end):
        module = modules[i]
        take_in(pending.pop(i, []))
        last = -1
        alltoall = expert_alltoall and module.allreduce and module.kind in EXPERT_MODULES
        for kind in MODULE_OPS[module.kind]:
            last = b.add(f"L{module.layer}.{module.kind}.{kind}", kind, "compute", module.layer, first_deps)
            first_deps = ()
            if alltoall and kind == EP_DISPATCH_AFTER:
                first_deps = (b.add(f"L{module.layer}.{module.kind}.{EP_DISPATCH_KIND}", EP_DISPATCH_KIND, "comm",
                                    module.layer, (last,)),)
        if alltoall:
            last = b.add(f"L{module.layer}.{module.kind}.{EP_COMBINE_KIND}", EP_COMBINE_KIND, "comm", module.layer,
                         (last,))
        elif module.allreduce and tp > 1:
            launch = b.add(f"L{module.layer}.{module.kind}.collective_launch", "collective_launch", "compute",
                           module.layer)
            last = b.add(f"L{module.layer}.{module.kind}.allreduce", "allreduce", "comm", module.layer, (launch,))
        pending.setdefault(i + module.lag, []).append((module, last))
    if not stage.last:  # a lag-1 output is added inside its layer; the rest cross to the next stage
        for target in sorted(pending):
            take_in([entry for entry in pending[target] if entry[0].lag == 1])
        return Program(schedule, phase, tuple(b.ops))
    for target in sorted(pending):
        take_in(pending[target])

    b.add("final_norm", "final_norm", "compute", -1)
    b.add("lm_head", "lm_head", "compute", -1)
    deps: tuple[int, ...] = ()
    if tp > 1:
        launch = b.add("collective_launch", "collective_launch", "compute", -1)
        deps = (b.add("allgather_logits", "allgather_logits", "comm", -1, (launch,)),)
    b.add("sampling", "sampling", "compute", -1, deps)
    return Program(schedule, phase, tuple(b.ops))
