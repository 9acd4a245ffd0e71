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

GemmKind = Literal["16bit", "fp8", "fp8_block", "weight_only"]


@dataclass(frozen=True)
class Quantization:
    """One quantization of the linear layers (the LM head stays 16-bit, as vLLM and TensorRT-LLM
    keep it unless told otherwise)."""

    name: str
    gemm: GemmKind  # which GEMM runs the linears: its table kind (laddersim.costs.quantized_gemm)
    weight_bytes: float | None  # bytes per weight element, scales included; None: the dtype's
    quantize_kernels: int  # kernels quantizing each linear's input activations
    needs_fp8: bool  # runs FP8 tensor-core GEMMs (a GPU with an FP8 peak)

    def linear_weight_bytes(self, dtype_bytes: int) -> float:
        """Bytes of one linear-layer weight element."""
        return float(dtype_bytes) if self.weight_bytes is None else self.weight_bytes


QUANTIZATIONS: dict[str, Quantization] = {q.name: q for q in (
    Quantization("none", "16bit", None, 0, False),
    Quantization("fp8", "fp8", 1.0, 2, True),
    # One float32 scale per 128 x 128 block: 4 / 16384 byte per weight.
    Quantization("fp8-block", "fp8_block", 1.0 + 4.0 / (128 * 128), 1, True),
    Quantization("int8-weight", "weight_only", 1.0, 0, False),
    Quantization("int4-weight", "weight_only", 0.5 + 2.0 / 128, 0, False),
)}


def quantization(name: str) -> Quantization:
    """The record of ``name`` (one of ``QUANTS``)."""
    return QUANTIZATIONS[name]


def linear_weights_per_layer_per_rank(model, tp: int) -> int:
    """Weight elements of one layer's quantized linears on one rank (QKV, O, gate/up, down; their
    biases, the norms, the embedding and the LM head stay 16-bit). ``model``: a ModelShape."""
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
