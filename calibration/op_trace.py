"""Count the framework ops of one real ``ladder_bench`` decode step, per op kind of the op program.

A ``torch.profiler`` trace (CPU activity) of one decode step, as
``ladder_bench.generate_once`` runs it (forward, sampling, the loop's bookkeeping: ``ladder_forward``). Every
top-level op (an ``aten::``/``c10d::`` op not called from inside another op: what the Python
code dispatches, each paying the framework's per-op overhead once) is attributed to the op kind
of laddersim's op program (``laddersim.schedules.program``) named by the innermost
``ladder_bench`` / ``ladder_forward`` / ``ladder_model`` function around it that is a kind (``FRAME_KINDS``: they
name one function per kind), and classed (``op_class``). The functions are found by a
``sys.setprofile`` hook on the calling thread that opens a ``record_function`` range
(``ladder::<function>``) around each call of one, not by the profiler's Python stacks: its
``with_stack=True`` tracer hooks every thread, gloo's workers included, and segfaulted about once in 25
two-rank runs here while a ladder step's AllReduce ran beside its compute (torch 2.13; twice in a row
in one CI run), where the ranges have not failed.

* ``collective``: a ``c10d::`` op (the issue of an AllReduce or AllGather), kind
  ``collective_launch`` wherever it is called;
* ``view``: an op that only makes a new view of existing storage (no kernel, no allocation);
* ``compute``: every other op (a kernel, possibly tiny, and usually an allocation).

``count_ops`` returns ``{(kind, op_class): ops}`` for the step and the kinds in trace order;
``per_occurrence`` divides by the program's occurrences of each kind, which is what a profile
stores (``laddersim.costs.host_overhead``). Used by calibrate's ``ops`` benchmark and the tests.
"""

from __future__ import annotations

import collections
import os
import re
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

# Kineto (torch's profiler) prints profiler_start/stop lines on stderr at every trace unless its
# log level is above its highest (5); read at the first trace, so setting it here is enough.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from calibration import ladder_forward as lf  # noqa: E402
from calibration import ladder_comm as lcomm  # noqa: E402
from calibration import ladder_model as lmodel  # noqa: E402
from laddersim.fitting.host import format_counts  # noqa: E402
from laddersim.schedules.program import build_program  # noqa: E402

# ladder_bench function -> op kind of the program (laddersim.costs.op_costs keys).
FRAME_KINDS = {
    "step": "step_overhead", "embed": "embedding", "attn_norm": "attn_norm", "mlp_norm": "mlp_norm",
    "norm": "norm", "final_norm": "final_norm", "qkv": "qkv", "qkv_gate_up": "qkv_gate_up",
    "rope": "rope", "attention_core": "attention", "o_proj": "o_proj", "gate_up": "gate_up",
    "act": "act", "down": "down", "residual_add": "residual_add", "partial_add": "partial_add",
    "lm_head": "lm_head", "gather_vocab": "sampling", "vocab_logits": "sampling", "sample": "sampling",
}
# Ops that return a view of their input's storage: metadata only, no kernel.
VIEW_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::transpose", "aten::t", "aten::permute",
    "aten::select", "aten::slice", "aten::split", "aten::split_with_sizes", "aten::chunk",
    "aten::narrow", "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::as_strided",
    "aten::alias", "aten::detach", "aten::flatten", "aten::unflatten", "aten::view_as",
    "aten::lift_fresh", "aten::contiguous",
})
OP_CLASSES = ("compute", "view", "collective")
_FILE = re.compile(r"ladder_(?:bench|forward|model)\.py$")  # the benchmark, its passes, its model
RANGE_PREFIX = "ladder::"  # the record_function range around a call of a FRAME_KINDS function


def op_class(name: str) -> str:
    if name.startswith("c10d::"):
        return "collective"
    return "view" if name in VIEW_OPS else "compute"


def _is_op(event) -> bool:
    return event.name.startswith(("aten::", "c10d::"))


def _kind(event) -> str | None:
    """The kind of a top-level op event from its Python stack (None: not in ladder_bench code)."""
    if op_class(event.name) == "collective":
        return "collective_launch"
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(RANGE_PREFIX):
            return FRAME_KINDS[parent.name[len(RANGE_PREFIX):]]
        parent = parent.cpu_parent
    return None


class KindRanges:
    """A ``sys.setprofile`` hook: a ``record_function`` range named ``ladder::<function>`` around
    every call of a ``FRAME_KINDS`` function of the benchmark's files, on the thread that sets it."""

    def __init__(self) -> None:
        self.open: list[tuple[object, record_function]] = []

    def __call__(self, frame, event, arg) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_name in FRAME_KINDS and _FILE.search(code.co_filename):
                span = record_function(RANGE_PREFIX + code.co_name)
                span.__enter__()
                self.open.append((frame, span))
        elif event == "return" and self.open and self.open[-1][0] is frame:
            self.open.pop()[1].__exit__(None, None, None)

    def __enter__(self) -> "KindRanges":
        sys.setprofile(self)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        while self.open:
            self.open.pop()[1].__exit__(None, None, None)


def trace_step(model, comm, schedule: str, batch: int, pos: int, top_k: int = 200,
               temperature: float = 0.8, warmup: int = 2) -> list[tuple[str, str, str]]:
    """(op name, kind or "?", op class) of every top-level op of one decode step, in order."""
    dev = model.output.device

    def decode_one(tok, input_pos):
        return lf.sample(lf.forward(model, tok, input_pos, schedule, comm), temperature, top_k)

    tok = torch.zeros(batch, 1, dtype=torch.long, device=dev)
    new = torch.empty(batch, warmup + 2, dtype=torch.long, device=dev)
    input_pos = torch.tensor([pos], device=dev)
    with torch.no_grad():
        for i in range(warmup):
            tok = lf.step(decode_one, tok, input_pos, new, i)
        input_pos.fill_(pos)
        with profile(activities=[ProfilerActivity.CPU]) as prof, KindRanges():
            lf.step(decode_one, tok, input_pos, new, warmup)
    return [(e.name, _kind(e) or "?", op_class(e.name)) for e in top_level(prof)]


def top_level(prof, is_op=None) -> list:
    """The calling thread's top-level op events of a profile (events for which ``is_op`` holds,
    default: aten/c10d ops, with no such event above them), in start order. Other threads are
    left out: gloo runs a collective's own work (copies of an AllGather's output) on its worker
    threads, which is the collective's time, not the caller's dispatch."""
    is_op = is_op or _is_op
    events = [e for e in prof.events() if is_op(e)]
    if not events:
        return []
    caller = collections.Counter(e.thread for e in events).most_common(1)[0][0]
    top = []
    for event in events:
        if event.thread != caller:
            continue
        parent = event.cpu_parent
        while parent is not None and not is_op(parent):
            parent = parent.cpu_parent
        if parent is None:
            top.append(event)
    return sorted(top, key=lambda e: e.time_range.start)


def top_level_ops(fn) -> int:
    """Top-level framework ops one call of ``fn`` dispatches (counted as in a step's trace)."""
    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return len(top_level(prof))


def count_ops(ops: list[tuple[str, str, str]]) -> dict[tuple[str, str], int]:
    """{(kind, op_class): ops} of a trace_step result."""
    return dict(collections.Counter((kind, cls) for _, kind, cls in ops))


def occurrences(schedule: str, n_layers: int, tp: int) -> dict[str, int]:
    """How often each compute-stream op kind occurs in the program of one decode step."""
    program = build_program(schedule, n_layers, tp)
    return dict(collections.Counter(op.kind for op in program.ops if op.stream == "compute"))


def per_occurrence(counts: dict[tuple[str, str], int], schedule: str, n_layers: int,
                   tp: int) -> dict[tuple[str, str], float]:
    """Ops per occurrence of each (kind, class) in the program (KeyError for a kind the program
    lacks, as an unattributed "?")."""
    occ = occurrences(schedule, n_layers, tp)
    return {(kind, cls): n / occ[kind] for (kind, cls), n in counts.items()}


# ---- calibrate's ``ops`` benchmark -------------------------------------------------------------

TRACE_POSITION = 16  # the decode step traced: its position (the cache holds 2 * this)


def measure(ctx, point: dict) -> dict | None:
    """Every rank runs the step (the collectives need them all); rank 0's trace is stored."""
    from laddersim.model.shape import load_model_shape

    shape = load_model_shape(point["model"])
    tp = point["tp"]
    dtype = DTYPES_BY_DEVICE["cuda" if ctx.is_cuda else "cpu"]
    model = lmodel.build_model(shape, ctx.rank, tp, point["batch"], 2 * TRACE_POSITION, 0, ctx.device, dtype)
    comm = lcomm.DistComm(ctx.groups[tp]) if tp > 1 else lcomm.NO_COMM
    ops = trace_step(model, comm, point["schedule"], point["batch"], TRACE_POSITION)
    if ctx.rank != 0:
        return None
    unattributed = [name for name, kind, _ in ops if kind == "?"]
    if unattributed:
        raise RuntimeError(f"op_trace: {len(unattributed)} ops outside ladder_bench's kinds: {unattributed[:5]}")
    per_kind = per_occurrence(count_ops(ops), point["schedule"], shape.n_layers, tp)
    return {"ops_total": len(ops), "counts": format_counts(per_kind)}


DTYPES_BY_DEVICE = {"cpu": torch.float32, "cuda": torch.float16}  # as ladder_bench's defaults (the paper's fp16 on GPU)


def describe(point: dict) -> str:
    return f"one decode step of {point['model']} {point['schedule']} tp={point['tp']}"


def result(values: dict) -> str:
    return f"{values['ops_total']} framework ops"
