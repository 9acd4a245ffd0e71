"""Which NCCL algorithm and protocol each collective of a forward pass runs (for traces and
timeline labels): the tuner's choice (``laddersim.costs.collectives.collective_choice``) at the
message each collective kind moves (``op_costs.collective_message_bytes``); and which AllReduce
implementation each phase runs (``allreduce_by_phase``: what ``simulate`` and ``plan`` name)."""

from __future__ import annotations

from laddersim.costs.allreduce import allreduce_label
from laddersim.costs.collectives import collective_choice
from laddersim.costs.op_costs import Phase, collective_message_bytes
from laddersim.hardware.profile import HardwareProfile
from laddersim.model.framework import load_framework
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload


def collective_args(model: ModelShape, hardware: HardwareProfile, work: Workload, tp: int) -> dict:
    """{(phase name, op kind): {"algorithm", "protocol", "message_bytes"}} for prefill and decode."""
    out = {}
    for phase in (Phase("prefill", work.batch, work.prompt_len), Phase("decode", work.batch, 1)):
        for kind, size in collective_message_bytes(model, work, tp, phase).items():
            algorithm, protocol = collective_choice(hardware, tp, size)
            out[(phase.name, kind)] = {"algorithm": algorithm, "protocol": protocol, "message_bytes": int(size)}
    return out


def allreduce_by_phase(model: ModelShape, hardware: HardwareProfile, work: Workload, tp: int) -> dict[str, str]:
    """{phase name: the AllReduce implementation (and kernel) its hidden-state AllReduce runs}, for
    prefill and decode: ``nccl``, ``nvls``, ``vllm-custom one-shot``, ... by the framework's rule or
    the workload's forced ``allreduce`` (``laddersim.costs.allreduce.allreduce_label``); ``none``
    without tensor parallelism."""
    out = {}
    for phase in (Phase("prefill", work.batch, work.prompt_len), Phase("decode", work.batch, 1)):
        size = collective_message_bytes(model, work, tp, phase)["allreduce"]
        out[phase.name] = allreduce_label(hardware, tp, size, load_framework(work.framework), dtype=work.dtype,
                                          forced=work.allreduce)
    return out


def label(args: dict | None) -> str:
    """Short label, e.g. ``tree/ll`` (empty without a choice)."""
    return f"{args['algorithm']}/{args['protocol']}" if args else ""
