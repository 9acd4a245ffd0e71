"""The op program against a real run: framework ops of one ladder_bench decode step, per op kind.

calibration/op_trace.py counts the top-level ops of a torch.profiler trace of one decode step and
attributes them to the program's op kinds. The op program plus per-kind op counts must account
for every op of every schedule: the counts taken from the ``standard`` and ``parallel`` traces
predict the ``ladder`` and ``upper_bound`` traces exactly, and module by module the trace runs
the program's kinds in the program's order.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from calibration import ladder_bench as lb  # noqa: E402
from calibration import ladder_comm as lcomm  # noqa: E402
from calibration import ladder_model as lmodel  # noqa: E402
from calibration import op_trace  # noqa: E402
from laddersim.model.shape import ModelShape  # noqa: E402
from laddersim.schedules.program import build_program  # noqa: E402

SHAPE = ModelShape(name="tiny-trace", n_layers=2, dim=64, n_heads=4, n_kv_heads=2, intermediate_size=128,
                   vocab_size=250)
TP = 2  # the shard of rank 0 of 2; collectives issued on a one-rank gloo group (same ops)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        model = lmodel.build_model(SHAPE, 0, TP, 2, 32, 0)
        return {s: op_trace.trace_step(model, lcomm.DistComm(), s, 2, 16) for s in lb.SCHEDULES}
    finally:
        dist.destroy_process_group()


def _program_kinds(schedule: str) -> list[str]:
    return [op.kind for op in build_program(schedule, SHAPE.n_layers, TP).ops if op.stream == "compute"]


def test_every_traced_op_belongs_to_a_program_kind(traces):
    for schedule, ops in traces.items():
        kinds = {kind for _, kind, _ in ops}
        assert "?" not in kinds, [op for op in ops if op[1] == "?"][:5]
        assert kinds <= set(_program_kinds(schedule)), schedule
        assert {cls for _, _, cls in ops} <= set(op_trace.OP_CLASSES)
    # Collectives: one issue per AllReduce and one for the logits' AllGather.
    issues = {s: sum(cls == "collective" for _, _, cls in ops) for s, ops in traces.items()}
    assert issues == {"standard": 2 * SHAPE.n_layers + 1, "ladder": 2 * SHAPE.n_layers + 1,
                      "parallel": SHAPE.n_layers + 1, "upper_bound": 1}


def test_counts_of_two_schedules_predict_the_other_two_exactly(traces):
    table = {}
    for schedule in ("standard", "parallel"):
        per_kind = op_trace.per_occurrence(op_trace.count_ops(traces[schedule]), schedule, SHAPE.n_layers, TP)
        for key, n in per_kind.items():
            assert n == int(n), (schedule, key, n)  # every occurrence of a kind runs the same ops
            assert table.setdefault(key, n) == n, (schedule, key)  # and the same in both schedules
    for schedule in ("ladder", "upper_bound"):
        occurrences = op_trace.occurrences(schedule, SHAPE.n_layers, TP)
        predicted = {(kind, cls): n * occurrences[kind] for (kind, cls), n in table.items()
                     if kind in occurrences and n * occurrences[kind]}
        assert op_trace.count_ops(traces[schedule]) == predicted, schedule


def _runs(kinds: list[str]) -> list[tuple[str, int]]:
    return [(kind, len(list(group))) for kind, group in itertools.groupby(kinds)]


def test_module_by_module_the_trace_runs_the_programs_kinds_in_order(traces):
    standard = op_trace.per_occurrence(op_trace.count_ops(traces["standard"]), "standard", SHAPE.n_layers, TP)
    parallel = op_trace.per_occurrence(op_trace.count_ops(traces["parallel"]), "parallel", SHAPE.n_layers, TP)
    per_kind: dict[str, float] = {}
    for (kind, _), n in {**standard, **parallel}.items():
        per_kind[kind] = per_kind.get(kind, 0) + n
    for schedule, ops in traces.items():
        # The step's own bookkeeping runs after the forward pass, the program lists it first.
        traced = _runs([kind for _, kind, _ in ops if kind != "step_overhead"])
        expected = [(kind, int(count * per_kind[kind]))
                    for kind, count in _runs([k for k in _program_kinds(schedule) if k != "step_overhead"])]
        assert traced == expected, schedule


def test_a_chain_counts_its_own_ops():
    x = torch.ones(4)
    assert op_trace.top_level_ops(lambda: (x + 1).mul(2).view(2, 2)) == 3
