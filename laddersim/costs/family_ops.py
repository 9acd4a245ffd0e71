"""Bytes of the ops a model family adds to the Llama layer (laddersim.model.shape ``FAMILIES``).

* Qwen3's q/k RMSNorm: an RMSNorm over each head's ``head_dim`` on the queries and on the keys,
  before RoPE (huggingface/transformers @ 9ee3f431 src/transformers/models/qwen3/modeling_qwen3.py,
  ``Qwen3Attention.q_norm``, ``k_norm``). vLLM applies both to the views of q and k split from the
  QKV output, before RoPE, inside the compiled model (vllm-project/vllm @
  002456df36fc7a63ca4463f335a49d05634ab2ab vllm/model_executor/models/qwen3.py,
  ``Qwen3Attention.forward``; ``Qwen3Model`` is ``@support_torch_compile``, so Inductor generates
  the norms' kernel): priced as one more memory-bound kernel on the compute stream, every q and k
  head of every token read and written once, counted in the ``rope`` op it precedes.
* Qwen2's QKV bias: added in the QKV GEMM's epilogue, no kernel of its own: a linear with a 1-D
  bias runs as ``addmm``, which PyTorch sends to cuBLASLt with the bias as the GEMM's epilogue
  (pytorch/pytorch @ 960a68465f6172d22bff1a58a61f942363ff0931 aten/src/ATen/native/cuda/Blas.cpp,
  ``addmm_out_cuda_impl``: ``useLtInterface`` for a 1-D bias on CUDA >= 12.1 whatever the row
  count, then ``at::cuda::blas::gemm_and_bias``); the GEMM reads the bias vector once, its bytes at
  the GEMM's streaming rate.
"""

from __future__ import annotations

from laddersim.model.shape import ModelShape


def qk_norm_bytes(model: ModelShape, tp: int, tokens: int, dtype_bytes: int) -> float:
    """Bytes the q/k RMSNorm kernel moves on one rank: every q and k head of ``tokens`` tokens read
    and written (0 for a family without it)."""
    if not model.qk_norm:
        return 0.0
    return float(2 * tokens * (model.heads_per_rank(tp) + model.kv_heads_per_rank(tp)) * model.head_dim * dtype_bytes)


def qkv_bias_bytes(model: ModelShape, tp: int, dtype_bytes: int) -> float:
    """Bytes of the QKV biases one rank's QKV GEMM reads (0 without them)."""
    if not model.qkv_bias:
        return 0.0
    return float((model.heads_per_rank(tp) + 2 * model.kv_heads_per_rank(tp)) * model.head_dim * dtype_bytes)
