"""laddersim.costs.kernel_counts: the kernels the cost model charges, per op kind and per layer.

The counts are what a GPU trace of a real step (calibration/kernel_trace.py) is set against, so
they must be the kernels the prices hold: on a profile priced by the roofline alone, raising the
GPU's kernel floor by d raises every compute-stream op kind's time by d x its kernels, exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.costs.kernel_counts import KERNEL_CLASSES, kernels_per_layer, op_kernels
from laddersim.costs.op_costs import Phase, op_times_s, splits_k
from laddersim.schedules.program import build_program
from laddersim.hardware.sourced import Sourced
from laddersim.model.shape import load_model_shape
from laddersim.model.workload import Workload

COMPUTE_STREAM = ("library_gemm", "generated", "splitk_reduce", "attention", "copy")


def _with_floor(profile, floor_us: float):
    gpu = profile.gpu.model_copy(update={"kernel_launch_us": Sourced(value=floor_us, source="test"),
                                         "gemm_tables": []})  # the roofline alone: every GEMM pays the floor
    return profile.model_copy(update={"gpu": gpu})


@pytest.mark.parametrize("framework", ["gpt-fast", "gpt-fast-flash", "vllm"])
@pytest.mark.parametrize(("tp", "batch"), [(1, 1), (8, 1), (8, 4), (2, 64)])
def test_each_kinds_time_grows_with_the_kernel_floor_by_its_kernel_count(h100, framework, tp, batch):
    model = load_model_shape("llama-3.1-8b")
    work = Workload(batch=batch, prompt_len=64, gen_len=4, framework=framework)
    phase = Phase("decode", batch, 1)
    low, high = _with_floor(h100, 3.0), _with_floor(h100, 5.0)
    kv = np.array([64.0])
    t_low = op_times_s(model, low, work, tp, phase, kv)
    t_high = op_times_s(model, high, work, tp, phase, kv)
    counts = op_kernels(model, low, work, tp, phase)
    for kind, kernels in counts.items():
        if kind in ("allreduce", "allgather_logits"):
            continue  # the communication stream: priced by the collective model, not the GPU's floor
        charged = sum(kernels.get(c, 0) for c in COMPUTE_STREAM)
        if kind == "qkv_gate_up" and kernels.get("library_gemm"):
            charged += 1  # one GEMM that costs its two parts, floors included (stacking saves a launch only)
        grown_us = float(t_high[kind][0] - t_low[kind][0]) * 1e6
        assert grown_us == pytest.approx(2.0 * charged, abs=1e-6), (kind, kernels)


def test_a_layer_of_each_schedule_golden(h100):
    """Llama-3.1-8B, gpt-fast, TP 8: batch 1 runs every linear as a generated reduction, batch 4
    as cuBLAS calls split along K (each output fills far fewer than four waves of the SMs)."""
    model = load_model_shape("llama-3.1-8b")
    one = kernels_per_layer(model, h100, Workload(batch=1, prompt_len=64, gen_len=4), 8, Phase("decode", 1, 1),
                            build_program("standard", model.n_layers, 8, "decode"))
    # qkv, o_proj, gate_up, down; norms x2, RoPE, SiLU x up, residual adds x2; the math decode
    # attention's scores, softmax and values reductions; one copy before each AllReduce.
    assert one == {"library_gemm": 0, "generated": 13, "splitk_reduce": 0, "attention": 0, "copy": 2,
                   "collective": 2}
    work = Workload(batch=4, prompt_len=64, gen_len=4)
    four = {s: kernels_per_layer(model, h100, work, 8, Phase("decode", 4, 1), build_program(s, model.n_layers, 8, "decode"))
            for s in ("standard", "ladder", "parallel", "upper_bound", "desync_half")}
    assert all(splits_k(h100.gpu, 4, n) for n in (768, 4096, 7168, 768 + 7168))
    assert four["standard"] == {"library_gemm": 4, "generated": 9, "splitk_reduce": 4, "attention": 0, "copy": 2,
                                "collective": 2}
    assert four["ladder"] == four["standard"]  # the same kernels, overlapped
    # parallel: one norm, the stacked QKV + gate/up, the partial sum, one residual add, one AllReduce.
    assert four["parallel"] == {"library_gemm": 3, "generated": 8, "splitk_reduce": 3, "attention": 0, "copy": 1,
                                "collective": 1}
    assert four["upper_bound"] == {**four["standard"], "copy": 0, "collective": 0}
    assert four["desync_half"] == {**four["standard"], "copy": 1, "collective": 1}
    assert set(four["standard"]) == set(KERNEL_CLASSES)


def test_adding_layers_adds_each_layers_kernels(h100):
    """Every layer of a program launches the same kernels, so a model twice as deep launches
    the per-step kernels once and each layer's twice as often."""
    model = load_model_shape("llama-3.1-8b")
    work = Workload(batch=4, prompt_len=64, gen_len=4)
    phase = Phase("decode", 4, 1)
    per_kind = op_kernels(model, h100, work, 8, phase)

    def step_total(n_layers: int, schedule: str) -> float:
        return sum(sum(per_kind[op.kind].values()) for op in build_program(schedule, n_layers, 8).ops)

    for schedule in ("standard", "ladder", "parallel"):
        program = build_program(schedule, model.n_layers, 8, phase.name)
        layer = sum(kernels_per_layer(model, h100, work, 8, phase, program).values())
        assert step_total(6, schedule) - step_total(3, schedule) == pytest.approx(3 * layer)


def test_a_prefill_gemm_is_not_split_along_k(h100, capsys):
    """Issue 38: cuBLAS splits K for weight-streaming (decode) GEMMs only: every splitKreduce kernel
    of the H100/H200 traces is at M <= 64, thinning as M grows. 8B TP 2, a 1024-token prefill:
    o_proj, down and QKV (512, 512 and 384 output tiles, under four waves) were charged a reduce
    each; M = 1024 is above the H100's weight-streaming ridge (~275 rows), so none is."""
    from laddersim.costs.pass_shapes import weight_streaming_rows
    from tests.cli_run import run_cli

    ridge = weight_streaming_rows(h100.gpu)
    assert 250 < ridge < 300  # 989.4 TFLOP/s x 0.814 over 3350 GB/s x 0.873
    assert splits_k(h100.gpu, 64, 4096) and splits_k(h100.gpu, int(ridge), 4096)
    assert not splits_k(h100.gpu, int(ridge) + 1, 4096) and not splits_k(h100.gpu, 1024, 4096)
    model = load_model_shape("llama-3.1-8b")
    prefill = op_kernels(model, h100, Workload(batch=1, prompt_len=1024, gen_len=8), 2, Phase("prefill", 1, 1024))
    assert not any("splitk_reduce" in classes for classes in prefill.values())
    code, out, _ = run_cli(["kernels", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
                            "--phase", "prefill", "--json"], capsys)
    assert code == 0 and '"splitk_reduce"' not in out
    code, out, _ = run_cli(["kernels", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
                            "--batch", "4", "--json"], capsys)
    assert code == 0 and '"splitk_reduce"' in out  # decode at M = 4 still splits


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_the_standard_layer_counts_the_costs_read_are_the_standard_programs(tp):
    """The costs read one standard layer's op counts from the model (no program built there): the
    same kinds, in the same order, as the middle layer of the schedule's standard program."""
    import collections

    from laddersim.model.layer_ops import standard_layer_op_counts

    for layers in (4, 32, 80):
        program = build_program("standard", layers, tp, "decode")
        counted = collections.Counter(op.kind for op in program.ops if op.layer == layers // 2)
        assert list(standard_layer_op_counts(tp).items()) == list(counted.items())
