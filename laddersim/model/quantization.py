"""Quantized inference as the kernels run it: one small named record per quantization a user names.

A record says what the linear layers' weights weigh, which GEMM runs them and which kernels
quantize their inputs. Everything else of the pass (embedding, norms, RoPE, attention, sampling,
the LM head, the AllReduce messages) stays at the workload's 16-bit ``dtype``; the KV cache is at
that dtype too unless ``kv_cache_dtype`` is ``fp8`` (then its bytes halve). Adding a quantization
is a new record here (and, for a new GEMM kind, a profile table for it).

* ``none``: 16-bit weights and GEMMs (the workload's dtype).
* ``fp8``: FP8 weights with one scale per tensor, activations quantized dynamically per tensor
  before each linear (vLLM ``Fp8LinearMethod``; TensorRT-LLM FP8 checkpoints likewise quantize
  weights per tensor), the FP8 scaled GEMM. The quantization is two kernels per linear input:
  vllm-project/vllm @ 006ccf0ea309e73ee3b7dc3bbb7017fa2bf7b721 csrc/quantization/fp8/common.cu,
  ``dynamic_scaled_fp8_quant`` launches ``segmented_max_reduction`` (the absolute max into the
  scale) then ``scaled_fp8_quant_kernel`` (the FP8 copy).
* ``fp8-block``: FP8 weights with a scale per 128 x 128 block (DeepSeek-V3 / Qwen3-FP8
  checkpoints), activations quantized per token group of 128 in one kernel before each linear:
  vllm-project/vllm @ 364d01925de309b50c726941ad93a2c0a2487df8
  vllm/model_executor/layers/quantization/utils/fp8_utils.py (``per_token_group_quant_fp8``),
  the block-scaled GEMM (DeepGEMM / CUTLASS).
* ``nvfp4``: FP4 (E2M1) weights, two to a byte, with one FP8 (E4M3) scale per 16 elements along k
  and one FP32 scale per tensor: 0.5 + 1/16 byte per weight (the per-tensor scale negligible):
  vllm-project/vllm @ 85f1f913cf8d26e0c6ca0ad09792cb45470069bf
  vllm/model_executor/layers/quantization/compressed_tensors/schemes/compressed_tensors_w4a4_nvfp4.py
  (``weight_packed`` uint8 [n, k / 2], ``weight_scale`` float8_e4m3fn [n, k / group_size 16],
  ``weight_global_scale`` float32). Activations are quantized to NVFP4 per block of 16 with a
  static (calibrated) global scale in one kernel before each linear (``apply_weights``:
  ``scaled_fp4_quant``, then the FP4 GEMM, ``flashinfer_scaled_fp4_mm`` / ``cutlass_scaled_fp4_mm``),
  which writes half a byte per element and one FP8 scale per 16. TensorRT-LLM runs the same kernel
  (``torch.ops.trtllm.fp4_quantize``) unless the producer wrote its output in FP4 already
  (NVIDIA/TensorRT-LLM @ 00bbf71e796406ea8593a77cbfb828356182db16 tensorrt_llm/_torch/modules/linear.py,
  ``NVFP4LinearMethod._input_prepare``: an ``Fp4QuantizedTensor`` input is used as is; a framework
  states that as ``quantize_fused``). The GEMM runs on Blackwell's FP4 tensor cores (a GPU with
  ``peak_tflops_fp4``); vLLM requires compute capability 10.0 (``get_min_capability`` 100).
* ``int8-weight`` / ``int4-weight``: weight-only (W8A16 / W4A16, e.g. GPTQ or AWQ checkpoints on
  Marlin kernels): weights streamed at 1 byte / half a byte plus their scales, dequantized inside the
  GEMM, which computes at 16 bit; activations are not quantized (no extra kernel). int4 carries one
  16-bit scale per group of 128 weights (GPTQ/AWQ ``group_size`` 128, the common default), 1/64 byte
  per weight; int8's scale is per output channel (negligible, counted as 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from laddersim.support.choices import KV_CACHE_DTYPES, QUANTS  # noqa: F401  (the names; records below)

GemmKind = Literal["16bit", "fp8", "fp8_block", "fp4", "weight_only"]
# The tensor cores a quantization's GEMM runs on: the GPU needs that peak (``GpuSpec.peak_flops_per_s_for``).
TensorCores = Literal["fp8", "fp4"]
# Bytes of one NVFP4 element: an E2M1 nibble and a sixteenth of its block's E4M3 scale (module docstring).
NVFP4_BYTES = 0.5 + 1.0 / 16


@dataclass(frozen=True)
class Quantization:
    """One quantization of the linear layers (the LM head stays 16-bit, as vLLM and TensorRT-LLM
    keep it unless told otherwise)."""

    name: str
    gemm: GemmKind  # which GEMM runs the linears: its table kind (laddersim.costs.quantized_gemm)
    weight_bytes: float | None  # bytes per weight element, scales included; None: the dtype's
    quantize_kernels: int  # kernels quantizing each linear's input activations
    tensor_cores: TensorCores | None  # the low-precision tensor cores its GEMMs run on; None: 16-bit
    activation_bytes: float = 1.0  # bytes per element of a quantized input (FP8: 1)

    def linear_weight_bytes(self, dtype_bytes: int) -> float:
        """Bytes of one linear-layer weight element."""
        return float(dtype_bytes) if self.weight_bytes is None else self.weight_bytes


QUANTIZATIONS: dict[str, Quantization] = {q.name: q for q in (
    Quantization("none", "16bit", None, 0, None),
    Quantization("fp8", "fp8", 1.0, 2, "fp8"),
    # One float32 scale per 128 x 128 block: 4 / 16384 byte per weight.
    Quantization("fp8-block", "fp8_block", 1.0 + 4.0 / (128 * 128), 1, "fp8"),
    Quantization("nvfp4", "fp4", NVFP4_BYTES, 1, "fp4", activation_bytes=NVFP4_BYTES),
    Quantization("int8-weight", "weight_only", 1.0, 0, None),
    Quantization("int4-weight", "weight_only", 0.5 + 2.0 / 128, 0, None),
)}


def quantization(name: str) -> Quantization:
    """The record of ``name`` (one of ``QUANTS``)."""
    return QUANTIZATIONS[name]


def linear_weights_per_layer_per_rank(model, tp: int) -> int:
    """Weight elements of one layer's quantized linears on one rank (QKV, O, gate/up, down; their
    biases, the norms, the embedding and the LM head stay 16-bit). ``model``: a ModelShape."""
    if model.mla is not None:  # latent attention's projections (its two latent norms stay 16-bit)
        attention = model.mla.attention_params_per_rank(model.dim, model.n_heads, tp)
        return attention - model.mla.q_lora_rank - model.mla.kv_lora_rank + 3 * model.dim * model.intermediate_per_rank(tp)
    hd = model.head_dim
    qkv_width = (model.heads_per_rank(tp) + 2 * model.kv_heads_per_rank(tp)) * hd
    return model.dim * qkv_width + model.heads_per_rank(tp) * hd * model.dim + 3 * model.dim * model.intermediate_per_rank(tp)


def moe_linear_weights_per_rank(model, tp: int) -> int:
    """``ModelShape.moe_extra_params_per_rank`` less the routers: the expert weights a quantization
    stores at its bytes (vLLM and TensorRT-LLM keep the router linear 16-bit). 0 for a dense model."""
    if model.moe is None:
        return 0
    return model.moe_extra_params_per_rank(tp) - len(model.moe.moe_layers) * model.dim * model.moe.n_experts


def weight_bytes_per_rank(model, tp: int, layers: int, first: bool, last: bool, dtype_bytes: int,
                          quant: Quantization) -> float:
    """Bytes of the weights one rank of a stage of ``layers`` layers holds (``ModelShape.stage_params_per_rank``),
    the linears at ``quant``'s bytes, the rest at ``dtype_bytes``."""
    total = model.stage_params_per_rank(tp, layers, first, last) * dtype_bytes
    if quant.weight_bytes is None:
        return float(total)
    # a mixture of experts' expert weights (beyond the dense MLP they replace), at the model's mean per layer
    linear = layers * linear_weights_per_layer_per_rank(model, tp) + \
        moe_linear_weights_per_rank(model, tp) * layers // model.n_layers
    return float(total - linear * (dtype_bytes - quant.weight_bytes))
