"""What is being run: batch, prompt and generation lengths, dtype, KV-cache layout."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from laddersim.model.quantization import Quantization, quantization
from laddersim.support.choices import FP8_DTYPE_REFUSAL
from laddersim.support.limits import MAX_BATCH, MAX_TOKENS

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


class Workload(BaseModel):
    """One generation request batch: prefill of ``prompt_len`` tokens, then ``gen_len`` decode steps.

    ``kv_cache`` = ``static`` is gpt-fast's preallocated cache of prompt_len + gen_len positions
    that every decode step attends over in full (masked); ``dynamic`` reads only the positions
    written so far (paged / FlashDecoding engines), so attention grows each step.

    ``kv_reads`` = ``repeat_interleave`` is gpt-fast's GQA: ``k.repeat_interleave(n_head //
    n_local_heads, dim=1)`` expands K and V to every query head before attention, so each query
    head streams its own copy of the cache (fused into the attention's loads under torch.compile);
    ``per_kv_head`` is a
    GQA-aware kernel reading each KV head once for its query group.

    ``quant`` names how the linear layers are quantized (``laddersim.model.quantization``: their
    weights' bytes, their GEMM, the kernels quantizing their inputs); ``dtype`` is the 16-bit (or
    float32) type of everything else. ``kv_cache_dtype`` = ``fp8`` stores K and V in one byte
    (``auto``: the dtype's). FP8 is a quantization, not an element type of the whole pass:
    ``dtype`` = ``fp8`` is refused, naming ``quant``.

    ``framework`` names the serving framework's data file (``laddersim.model.framework``): the kernel
    path of each op; ``kv_cache`` and ``kv_reads`` default to that framework's (make_scenario).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch: int = Field(gt=0, le=MAX_BATCH)
    prompt_len: int = Field(gt=0, le=MAX_TOKENS)
    gen_len: int = Field(gt=0, le=MAX_TOKENS)
    dtype: Literal["float16", "bfloat16", "float32"] = "bfloat16"
    quant: Literal["none", "fp8", "fp8-block", "nvfp4", "int8-weight", "int4-weight"] = "none"
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    kv_cache: Literal["static", "dynamic"] = "static"
    kv_reads: Literal["repeat_interleave", "per_kv_head"] = "repeat_interleave"
    framework: str = "gpt-fast"
    # The AllReduce implementation forced over the framework's rule (laddersim.costs.allreduce_impls);
    # None: the framework's.
    allreduce: Literal["nccl", "nvls", "pytorch-intra-node", "vllm-custom", "trtllm-custom", "sglang-custom"] | None = None

    @field_validator("dtype", mode="before")
    @classmethod
    def _not_fp8(cls, dtype):
        if dtype == "fp8":
            raise ValueError(FP8_DTYPE_REFUSAL)
        return dtype

    @field_validator("framework")
    @classmethod
    def _known_framework(cls, name: str) -> str:
        from laddersim.model.framework import framework_names, known_framework  # data files, read only here

        if not known_framework(name):
            raise ValueError(f"unknown framework '{name}'; allowed: {', '.join(framework_names())}, "
                             "or a framework .yaml file")
        return name

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def quantization(self) -> Quantization:
        return quantization(self.quant)

    @property
    def weight_bytes(self) -> float:
        """Bytes of one linear-layer weight element (its scales included)."""
        return self.quantization.linear_weight_bytes(self.dtype_bytes)

    @property
    def kv_bytes(self) -> int:
        """Bytes of one K or V element in the cache."""
        return 1 if self.kv_cache_dtype == "fp8" else self.dtype_bytes

    @property
    def max_seq_len(self) -> int:
        return self.prompt_len + self.gen_len

    def kv_len_at_decode_step(self, step: int) -> int:
        """Positions attended over at decode step ``step`` (0-based; step 0 follows the prefill)."""
        if self.kv_cache == "static":
            return self.max_seq_len
        return self.prompt_len + step + 1
