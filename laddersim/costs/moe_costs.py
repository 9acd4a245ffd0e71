"""Time of the op kinds of one mixture-of-experts MLP on one rank, experts split by tensor
parallelism (the Ladder Residual authors' ``moe_TP.py``, vLLM's fused MoE without expert
parallelism): the replicated router, every expert column/row-split ``tp`` ways, one grouped GEMM
per projection.

The ops of the ``moe`` module (``laddersim.model.layer_ops.MODULE_OPS``), in launch order:

* ``moe_router``: the router linear, ``tokens x dim x n_experts``, replicated on every rank
  (a library GEMM from the profile's tables);
* ``moe_topk``: softmax and top-k over the router's scores, and the sort of the (token, slot)
  pairs by expert (vLLM ``topk_softmax`` and ``moe_align_block_size``: ``MoEPath.topk_kernels``);
* ``moe_gate_up``, ``moe_down``: the grouped GEMMs (``grouped_gemm_time_s``);
* ``moe_act``: SiLU(gate) * up over the ``tokens x top_k`` rows;
* ``moe_shared``: the shared experts, a dense SwiGLU MLP every token runs (TP-split);
* ``moe_combine``: the top-k outputs weighted and summed per token (vLLM ``moe_sum``).

A grouped GEMM streams the weights of the experts it reads and computes the rows it is given,
each expert's segment padded to the kernel's row tile: ``launch + max(weight bytes / (HBM x
gemm_memory_efficiency), padded rows x 2 N K / (peak x gemm_compute_efficiency))``, the GPU's
GEMM efficiencies being the profile's fit to its GEMM tables. Which experts it reads is the
kernel path's (``MOE_PATHS``): a fused MoE kernel reads each expert hit once (``expert_load``), a
gather of each token's expert weights (gpt-fast ``ConditionalFeedForward``: ``self.w1[expert_indices]``)
reads them once per (token, slot).
"""

from __future__ import annotations

from dataclasses import dataclass

from laddersim.costs.gemm import memory_bound_time_s
from laddersim.costs.gemm_tables import library_gemm_time_s
from laddersim.costs.moe_routing import padded_rows, rank_load
from laddersim.costs.quantized_gemm import quantize_time_s, quantized_linear_time_s
from laddersim.costs.pass_shapes import Phase
from laddersim.hardware.profile import HardwareProfile
from laddersim.model.shape import ModelShape
from laddersim.model.workload import Workload

# The share of the profile's dense GEMM compute efficiency (its fit to the cuBLAS tables) a fused
# MoE grouped GEMM reaches once compute-bound: fit: PYTHONPATH=$PWD python
# tools/fits/fit_moe_compute_share.py (grid 0.50-1.00 in steps of 0.05 minimising the median |error|
# over laddersim/data/validation/moe/aic_moe_h100_sxm_vllm_0.24.0_bf16.csv, EP 1, 336 rows: 5.3% at
# 1.00, 4.9% at 0.70; its 4096-8192-token rows -27% at 1.00, -7% at 0.70).
COMPUTE_SHARE = 0.70


@dataclass(frozen=True)
class MoEPath:
    """How a framework runs the routed experts: whether each expert hit is read once (a fused MoE
    kernel) or once per (token, slot) (weights gathered per token), the grouped GEMM's row tile,
    and the kernels of the routing and combine ops."""

    name: str
    reads_per_slot: bool
    block_m: int
    topk_kernels: int
    compute_share: float  # of the profile's dense GEMM compute efficiency the grouped GEMM reaches
    source: str


MOE_PATHS = {
    "fused_moe": MoEPath(
        "fused_moe", reads_per_slot=False, block_m=16, topk_kernels=4, compute_share=COMPUTE_SHARE,
        source="vllm-project/vllm vllm/model_executor/layers/fused_moe/fused_moe.py and "
               "moe_align_block_size.py: topk_softmax; the sorted ids' fill, moe_align_block_size and "
               "its count-and-sort kernel (four kernels before the GEMMs; segments padded to "
               "BLOCK_SIZE_M; 16 is the smallest tile of the "
               "tuned configs/E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json), two fused_moe_kernel "
               "calls, silu_and_mul, moe_sum"),
    "gather": MoEPath(
        "gather", reads_per_slot=True, block_m=1, topk_kernels=1, compute_share=1.0,
        source="pytorch-labs/gpt-fast mixtral-moe/model.py MOEFeedForward: gate, softmax, torch.topk "
               "(one generated kernel under torch.compile), ConditionalFeedForward gathers "
               "w1/w2/w3[expert_indices] per token into einsums"),
}


def moe_path_for(framework: str) -> MoEPath:
    """The MoE kernel path of a framework: gpt-fast's gather for the gpt-fast family, vLLM's
    fused MoE for the rest."""
    return MOE_PATHS["gather"] if framework.startswith("gpt-fast") else MOE_PATHS["fused_moe"]


def grouped_gemm_time_s(hw: HardwareProfile, experts_read: float, rows_padded: float, n: int, k: int,
                        dtype_bytes: float, peak_flops_per_s: float, compute_share: float = 1.0) -> float:
    """Seconds of one grouped GEMM reading ``experts_read`` experts' ``k x n`` weights and
    computing ``rows_padded`` rows: one kernel, the slower of streaming the weights and the FLOPs."""
    gpu = hw.gpu
    stream = experts_read * n * k * dtype_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value)
    compute = 2.0 * rows_padded * n * k / (peak_flops_per_s * gpu.gemm_compute_efficiency.value * compute_share)
    return gpu.kernel_launch_s + max(stream, compute)


def moe_op_times_s(model: ModelShape, hw: HardwareProfile, work: Workload, tp: int, phase: Phase,
                   routing: str = "uniform", compute_share: float | None = None,
                   ep: int | None = None) -> dict[str, float]:
    """Seconds of every MoE op kind (``laddersim.model.layer_ops.MODULE_OPS["moe_shared"]``) of one
    MoE layer on one rank (``moe_shared`` 0 without shared experts); ``compute_share`` replaces
    the kernel path's (a fit's grid). ``ep`` (default the model's ``moe.ep``): the ``tp`` ranks
    split the experts ``ep`` ways and each expert ``tp / ep`` ways (AIConfigurator's ``moe_tp x
    moe_ep``): the busiest rank's share of the experts and rows (``rank_load``); the tokens reach
    every rank as under TP (attention TP, vLLM's expert parallelism without data-parallel
    attention), so the communication is the TP AllReduce's."""
    moe = model.moe
    assert moe is not None, "moe_op_times_s needs a mixture-of-experts model"
    gpu = hw.gpu
    path = moe_path_for(work.framework)
    b = work.dtype_bytes
    t, d = phase.tokens, model.dim
    ep = moe.ep if ep is None else ep
    if ep < 1 or tp % ep or moe.n_experts % ep:
        raise ValueError(f"ep {ep} must divide tp {tp} and the {moe.n_experts} experts")
    i_r = moe.expert_intermediate // (tp // ep)
    peak = gpu.peak_flops_per_s_for(work.dtype)
    # A quantization (laddersim.model.quantization) stores the experts at its bytes per weight; an
    # FP8 (NVFP4) one runs the grouped GEMMs on those tensor cores after quantizing each one's input (vLLM
    # fused_experts with Fp8MoEMethod: scaled_fp8_quant of the hidden states and of the activation;
    # TensorRT-LLM's FP8 MoE plugin likewise). The router stays 16-bit.
    quant = work.quantization
    w_bytes = quant.linear_weight_bytes(b)
    gemm_peak = gpu.peak_flops_per_s_for(quant.tensor_cores) if quant.tensor_cores else peak
    load = rank_load(t, moe.n_experts, moe.top_k, routing, ep)
    rows = load.rows
    # Every rank sorts all tokens x top_k (token, slot) pairs; under expert parallelism the pairs
    # of other ranks' experts (id -1 in vLLM's expert_map) still get a row of zeros written by the
    # grouped GEMMs (fused_moe.py ``write_zeros_to_output``) and run through the activation and
    # the sum: those ops see all the rows, the GEMMs compute the local ones.
    all_rows = t * moe.top_k if not path.reads_per_slot else rows
    zeros = max(0, all_rows - rows)
    share = path.compute_share if compute_share is None else compute_share
    if path.reads_per_slot:
        experts_read, rows_padded = float(rows), float(rows)
    else:
        experts_read, rows_padded = load.hit, padded_rows(load, path.block_m)
    times = {
        "moe_router": library_gemm_time_s(hw, t, moe.n_experts, d, b, peak)[0],
        # scores read, weights and ids written, the sorted ids and their padding
        "moe_topk": float(memory_bound_time_s(gpu, t * moe.n_experts * 4 + 3 * rows * 4, kernels=path.topk_kernels)),
        "moe_gate_up": grouped_gemm_time_s(hw, experts_read, rows_padded, 2 * i_r, d, w_bytes, gemm_peak, share)
        + float(memory_bound_time_s(gpu, zeros * 2 * i_r * b, kernels=0)) + quantize_time_s(hw, work, t, d),
        "moe_act": float(memory_bound_time_s(gpu, 3 * all_rows * i_r * b)),
        "moe_down": grouped_gemm_time_s(hw, experts_read, rows_padded, d, i_r, w_bytes, gemm_peak, share)
        + float(memory_bound_time_s(gpu, zeros * d * b, kernels=0)) + quantize_time_s(hw, work, all_rows, i_r),
        "moe_combine": float(memory_bound_time_s(gpu, (all_rows + t) * d * b)),
        "moe_shared": 0.0,
    }
    if moe.shared_intermediate:
        s_r = moe.shared_intermediate // tp
        linear = ((lambda m, n, k: quantized_linear_time_s(hw, work, m, n, k, peak)[0]) if quant.name != "none"
                  else (lambda m, n, k: library_gemm_time_s(hw, m, n, k, b, peak)[0]))
        times["moe_shared"] = (linear(t, 2 * s_r, d) + float(memory_bound_time_s(gpu, 3 * t * s_r * b))
                               + linear(t, d, s_r))
    return times


def moe_op_kernels(model: ModelShape, work: Workload) -> dict[str, dict[str, float]]:
    """``{op kind: {kernel class: kernels}}`` of the MoE ops, as ``moe_op_times_s`` charges them."""
    path = moe_path_for(work.framework)
    shared = model.moe is not None and model.moe.shared_intermediate > 0
    quantize = work.quantization.quantize_kernels  # each grouped GEMM's input quantized first
    grouped = {"grouped_gemm": 1, "generated": quantize} if quantize else {"grouped_gemm": 1}
    return {
        "moe_router": {"library_gemm": 1},
        "moe_topk": {"generated": path.topk_kernels},
        "moe_gate_up": grouped,
        "moe_act": {"generated": 1},
        "moe_down": dict(grouped),
        "moe_shared": {"library_gemm": 2, "generated": 1} if shared else {},
        "moe_combine": {"generated": 1},
    }
