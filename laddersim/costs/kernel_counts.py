"""How many kernels of each class every op kind launches, as ``laddersim.costs.op_costs`` prices it.

The cost model charges kernels: a floor each plus their bytes. These are the kernels it charges,
per op kind and class, so a profiler trace of a real step (``calibration/kernel_trace.py``, which
classes a trace's kernels the same way) can be set against the program, layer by layer:

* ``library_gemm``: a linear run as a library call (cuBLAS), one per linear (stacked weights: one);
* ``generated``: a kernel the framework's compiler generates: a single-token linear lowered to a
  reduction (``single_token_linear: generated``), every memory-bound op (norms, RoPE, activation,
  adds, embedding) unless fused into that linear (``fused_into_single_token_linear``); a family's
  own memory-bound op (Qwen3's q/k RMSNorm, counted with ``rope``: laddersim.costs.family_ops); the
  kernels quantizing a quantized linear's input (counted with that linear:
  laddersim.model.quantization);
* ``splitk_reduce``: the partial sums' reduce kernel after a linear split along K;
* ``attention``: the attention core (on the math SDPA path in prefill: two batched library
  GEMMs and the generated kernels around them, ``laddersim.costs.math_attention``; on eager
  SDPA's path the memory-efficient kernel, its cache writes and mask kernels generated ones,
  ``laddersim.costs.sdpa_attention``);
* ``copy``: a collective's input copy on the compute stream (``collective_input_copies``), and
  eager SDPA's K/V ``repeat_interleave`` copies;
* ``collective``: an AllReduce or the logits' AllGather (on the communication stream).

Sampling (a measured constant) and the step's fixed overhead launch no kernel counted here.
"""

from __future__ import annotations

import collections

from laddersim.costs.attention_kernels import attention_kernels
from laddersim.costs.quantized_gemm import is_quantized_linear
from laddersim.costs.mla_costs import mla_op_kernels
from laddersim.costs.moe_costs import moe_op_kernels
from laddersim.costs.pass_shapes import Phase, linear_shapes, logits_rows, single_token_path, splitk_reduce
from laddersim.model.framework import load_framework
from laddersim.hardware.profile import HardwareProfile
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload

KERNEL_CLASSES = ("library_gemm", "generated", "splitk_reduce", "attention", "copy", "collective")
MEMORY_BOUND_KINDS = ("embedding", "attn_norm", "mlp_norm", "norm", "final_norm", "rope", "act",
                      "residual_add", "partial_add")


def op_kernels(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int,
               phase: Phase) -> dict[str, dict[str, float]]:
    """``{op kind: {kernel class: kernels}}`` for one pass, the kernels the cost model charges."""
    fw = load_framework(work.framework)
    generated, fused = single_token_path(fw, phase.tokens)
    out: dict[str, dict[str, float]] = {kind: {} if kind in fused else {"generated": fw.kernels_for(kind)}
                                       for kind in MEMORY_BOUND_KINDS}
    for kind, (m, n, _, _) in linear_shapes(model, tp, phase, logits_rows(fw, phase)).items():
        if is_quantized_linear(work, kind):  # the quantization's GEMM after its input's quantize kernels
            quantize = 0 if fw.quantize_fused_into(kind) else work.quantization.quantize_kernels
            out[kind] = {"library_gemm": 1, **({"generated": quantize} if quantize else {})}
            continue
        out[kind] = {"generated" if (generated and m == 1) else "library_gemm": 1}
        if splitk_reduce(fw, hw.gpu, m, n):
            out[kind]["splitk_reduce"] = 1
    if model.qk_norm and "qk_norm" not in fused:  # the q/k RMSNorm kernel before RoPE
        out["rope"] = {**out["rope"], "generated": out["rope"].get("generated", 0) + fw.kernels_for("qk_norm")}
    out |= {"attention": _attention_kernels(model, hw, work, tp, phase, fw), "sampling": {}, "step_overhead": {}}
    copies = hw.framework.collective_input_copies.value if (tp > 1 and fw.collective_input_copy.value) else 0.0
    out["collective_launch"] = {"copy": copies} if (copies and "collective_input_copy" not in fused) else {}
    out["allreduce"] = out["allgather_logits"] = {"collective": 1}
    if model.moe is not None:
        out |= moe_op_kernels(model, work)
    if model.mla is not None:  # latent attention's projections (laddersim.costs.mla_costs)
        out |= mla_op_kernels(model, work, phase.tokens, phase.name == "decode", generated)
    return out


def _attention_kernels(model, hw, work, tp, phase, fw) -> dict[str, float]:
    """One attention kernel, or on the math SDPA path its kernels (laddersim.costs.math_attention):
    in prefill batched GEMMs and generated kernels, in decode generated reductions."""
    if fw.attention_path(phase.name) == "fused":
        return {"attention": 1}
    counts: collections.Counter = collections.Counter()
    for kernel in attention_kernels(model, hw, work, tp, phase):
        counts[kernel.kernel_class] += kernel.count
    return {cls: n for cls, n in counts.items() if n}


def kernels_per_layer(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int, phase: Phase,
                      program) -> dict[str, float]:
    """``{kernel class: kernels}`` of one layer of ``program`` (a schedule's program of this pass,
    ``laddersim.schedules.program.build_program``: its middle layer; in ladder a layer's outputs
    are added further up, still counted with it), every class present."""
    per_kind = op_kernels(model, hw, work, tp, phase)
    layer = model.n_layers // 2
    totals: collections.Counter = collections.Counter(dict.fromkeys(KERNEL_CLASSES, 0.0))
    for op in program.ops:
        if op.layer == layer:
            totals.update(per_kind[op.kind])
    return dict(totals)
