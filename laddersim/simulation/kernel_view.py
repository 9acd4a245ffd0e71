"""What laddersim charges one layer, kernel by kernel (``laddersim kernels``).

The table a performance engineer reads beside a profiler trace of the same step
(``calibration/kernel_trace.py``): every kernel the cost model prices for the middle layer of a
schedule's program, with its class (``laddersim.costs.kernel_counts``), count and device time.
``layer_us`` sums the compute stream's kernels; collectives are listed but not summed (they run on
the communication stream, and how much of them a step exposes is the schedule's business).

With a calibrated framework file (``laddersim calibrate kernels``: ``kernel_calibration``), the
layer's kernels are the traced classes of the nearest traced regime, each scaled by the bytes it
streams (``laddersim.model.kernel_calibration``), plus the collectives the program adds at TP > 1;
the simulator prices such a file's decode layers the same way (``laddersim.costs.calibrated_kernels``).
A trace of decode steps says nothing of prefill: ``--phase prefill`` stays the cost model's.
"""

from __future__ import annotations

import collections
from dataclasses import replace

import numpy as np
import pandas as pd

from laddersim.costs.attention_kernels import attention_kernels
from laddersim.costs.calibrated_kernels import class_split_s, schedule_layer
from laddersim.costs.dp_attention_costs import dp_attention_op_times_s, replica_phase, replica_workload
from laddersim.costs.gemm import memory_bound_time_s
from laddersim.costs.kernel_counts import op_kernels
from laddersim.costs.op_costs import Phase, fixed_op_times, attention_time_s, linear_shapes, logits_rows
from laddersim.costs.pass_shapes import first_decode_positions
from laddersim.costs.quantized_gemm import is_quantized_linear, quantized_class_split_s
from laddersim.model.framework import load_framework
from laddersim.model.layer_ops import EP_ALLTOALL_KINDS
from laddersim.support.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN
from laddersim.schedules.program import build_program
from laddersim.simulation.simulate import make_scenario

COLUMNS = ["kernel", "class", "count", "us"]


def kernel_table(model, hardware, tp: int, batch: int, schedule: str = "standard", framework: str | None = None,
                 prompt_len: int = DEFAULT_PROMPT_LEN, phase: str = "decode", gen_len: int = DEFAULT_GEN_LEN,
                 dtype: str = "bfloat16", quant: str = "none", kv_cache_dtype: str = "auto",
                 ep: int = 1, dp_attention: bool = False) -> pd.DataFrame:
    """One layer's kernels as laddersim prices them: a DataFrame with columns ``kernel`` (the op
    kind, ``op.part`` for a kernel within an op), ``class`` (library_gemm, splitk_reduce,
    generated, attention, copy, other, collective), ``count`` (kernels in the layer) and ``us``
    (their device time in total, microseconds), one row per kernel of the middle layer of
    ``schedule``'s program on one rank of ``tp``. ``frame.attrs['layer_us']`` is the layer's
    compute-stream time (every class but ``collective``).

    ``model``: a preset or config.json path; ``hardware``: a profile name or path; ``framework``:
    a shipped framework or a framework .yaml (default gpt-fast); ``phase``: ``decode`` (the first
    decode step after a ``prompt_len`` prompt: a static cache attends all ``prompt_len + gen_len``
    positions) or ``prefill`` (the prompt of ``batch`` sequences); ``quant``, ``kv_cache_dtype``: the
    linears' quantization and the KV cache's element type (laddersim.model.quantization);
    ``dp_attention``: one GPU of the data-parallel-attention layout (``tp`` each replica's, ``ep``
    all GPUs', ``batch`` every replica's sequences; the cost model's kernels, its dispatch and
    combine listed as collectives)."""
    scenario = make_scenario(model=model, hardware=hardware, tp=tp, batch=batch, prompt_len=prompt_len, gen_len=gen_len,
                             schedule=schedule, dtype=dtype, framework=framework or "gpt-fast", quant=quant,
                             kv_cache_dtype=kv_cache_dtype, ep=ep, dp_attention=dp_attention)
    scenario.model.check_tp(tp)
    fw = load_framework(scenario.workload.framework)
    if phase not in ("decode", "prefill"):
        from laddersim.errors import UserInputError
        raise UserInputError(f"phase: '{phase}' is not a phase; allowed: decode, prefill")
    the_phase = Phase(phase, batch, prompt_len if phase == "prefill" else 1)
    if fw.kernel_calibration is not None and phase == "decode" and scenario.layout is None:
        rows = _calibrated_rows(scenario, fw.kernel_calibration, the_phase)
    else:
        rows = _priced_rows(scenario, fw, the_phase)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["us"] = frame["us"].astype(float).round(3)
    frame.attrs["layer_us"] = round(float(frame.loc[frame["class"] != "collective", "us"].sum()), 3)
    return frame


def _layer_kinds(scenario, phase_name: str) -> collections.Counter:
    program = build_program(scenario.schedule, scenario.model.n_layers, scenario.tp, phase_name,
                            mlp_layout=scenario.model.mlp_layout(), expert_alltoall=scenario.layout is not None)
    layer = scenario.model.n_layers // 2
    return collections.Counter(op.kind for op in program.ops if op.layer == layer)


def _priced_rows(scenario, fw, phase: Phase) -> list[tuple]:
    model, hw, work, tp = scenario.model, scenario.hardware, scenario.workload, scenario.tp
    gpu = hw.gpu
    kv_len = first_decode_positions(work) if phase.name == "decode" else work.prompt_len
    if scenario.layout is not None:  # one GPU of a replica: its own sequences, the experts over everyone's
        times = {kind: float(np.asarray(seconds).reshape(-1)[0]) for kind, seconds in
                 dp_attention_op_times_s(model, hw, work, scenario.layout, phase, np.array([kv_len])).items()}
        phase, work = replica_phase(scenario.layout, phase), replica_workload(scenario.layout, work)
    else:
        times, _ = fixed_op_times(model, hw, work, tp, phase)
        times["attention"] = float(attention_time_s(model, hw, work, tp, phase, np.array([kv_len]))[0])
    classes = op_kernels(model, hw, work, tp, phase)
    shapes = linear_shapes(model, tp, phase, logits_rows(fw, phase))
    rows = []
    for kind, ops in _layer_kinds(scenario, phase.name).items():  # program order
        if kind in EP_ALLTOALL_KINDS:  # the layout's all-to-alls, on the communication stream
            rows.append((kind, "collective", ops, times[kind] * ops * 1e6))
            continue
        per_class = classes.get(kind, {})
        if kind == "attention" and fw.attention_path(phase.name) != "fused":
            for k in attention_kernels(model, hw, work, tp, phase):
                if k.count:
                    rows.append((f"attention.{k.name}", k.kernel_class, k.count * ops, k.seconds * ops * 1e6))
            continue
        if kind == "collective_launch":  # the input copies only: the hand-off is no kernel
            copies = per_class.get("copy", 0.0) * ops
            if copies:
                rows.append(_input_copy_row(scenario, phase, copies))
            continue
        split = (quantized_class_split_s(hw, work, times[kind], shapes[kind]) if is_quantized_linear(work, kind)
                 and kind in shapes else class_split_s(times[kind], per_class, shapes.get(kind), gpu))
        for cls, part_s in split.items():  # the reduce (or the input's quantization) first
            name = {"splitk_reduce": f"{kind}.splitk_reduce"}.get(cls, kind)
            if cls == "generated" and is_quantized_linear(work, kind):
                name = f"{kind}.quantize"
            rows.append((name, cls, per_class[cls] * ops, part_s * ops * 1e6))
    return rows


def _calibrated_rows(scenario, calib, phase: Phase) -> list[tuple]:
    """The traced classes of the nearest regime, scaled by their drivers' bytes on this shard and
    to the schedule's layer (laddersim.costs.calibrated_kernels.schedule_layer)."""
    model, work, tp = scenario.model, scenario.workload, scenario.tp
    regime = calib.regime_for(phase.batch)
    times, _ = fixed_op_times(model, scenario.hardware, work, tp, phase)
    kinds = _layer_kinds(scenario, phase.name)
    per_kind = op_kernels(model, scenario.hardware, work, tp, phase)
    layer = schedule_layer(calib, model, scenario.hardware, work, tp, phase, times, per_kind,
                           linear_shapes(model, tp, phase), _layer_kinds(replace(scenario, schedule="standard"),
                                                                         phase.name), kinds)
    rows = [(f"{cls} (trace b={regime.batch})", cls, kernels, seconds * 1e6) for cls, (kernels, seconds) in layer.items()]
    if tp > 1:  # the collectives the program adds (the trace's shard had none): priced by the profile
        if kinds.get("allreduce"):
            rows.append(("allreduce", "collective", kinds["allreduce"], times["allreduce"] * kinds["allreduce"] * 1e6))
        # op_kernels counts no copy where the framework makes none (collective_input_copy false)
        copies = per_kind["collective_launch"].get("copy", 0.0) * kinds.get("collective_launch", 0)
        if copies:
            rows.append(_input_copy_row(scenario, phase, copies))
    return rows


def _input_copy_row(scenario, phase: Phase, copies: float) -> tuple:
    """``copies`` copies of a collective's input on the compute stream (read and written once)."""
    hidden = phase.tokens * scenario.model.dim * scenario.workload.dtype_bytes
    return ("collective_input_copy", "copy", copies,
            copies * float(memory_bound_time_s(scenario.hardware.gpu, 2 * hidden)) * 1e6)
