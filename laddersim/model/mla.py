"""Multi-head latent attention (MLA; DeepSeek-V2/V3, Kimi K2): its projections, its latent KV
cache, how tensor parallelism splits it, and the GEMMs prefill and decode run.

Notation as vLLM's MLA backend (vllm-project/vllm @ 37fa5c0940ef, ``vllm/v1/attention/backends/mla/
common.py``, module docstring): hidden ``H``, heads ``N``, q latent ``Lq`` (``q_lora_rank``), kv
latent ``Lkv`` (``kv_lora_rank``), nope ``P`` (``qk_nope_head_dim``), rope ``R``
(``qk_rope_head_dim``), value ``V`` (``v_head_dim``). Per layer: ``W_DQ`` [H, Lq] and ``W_DKV|W_KR``
[H, Lkv + R] (one fused GEMM), RMSNorms over Lq and Lkv, ``W_UQ|W_QR`` [Lq, N (P + R)] (``q_b_proj``),
``W_UK|W_UV`` [Lkv, N (P + V)] (``kv_b_proj``), ``W_O`` [N V, H]. Without ``q_lora_rank`` (V2-Lite)
``q_proj`` [H, N (P + R)] replaces ``W_DQ`` and ``q_b_proj``.

The cache holds, per token and layer, ``Lkv + R`` elements (576 in DeepSeek-V3: the latent and the
shared rope key), whatever the number of heads: ``get_kv_cache_shape`` there is ``(blocks,
block_size, head_size)`` with one KV head of size 576.

Tensor parallelism as vLLM runs it (vllm-project/vllm @ b863fe5bf4e1, ``vllm/model_executor/models/
deepseek_v2.py``, ``DeepseekV2MLAAttention``): heads split (``num_local_heads = num_heads //
tp_size``), ``fused_qkv_a_proj`` replicated (``disable_tp=True``), ``q_b_proj`` and ``kv_b_proj``
column-parallel, ``o_proj`` row-parallel. The latent cache is one KV head, so every rank of the
TP group holds the whole cache of every sequence it serves; under attention data parallelism
(SGLang ``--enable-dp-attention``, vLLM ``--data-parallel-size``) each replica holds only its own
sequences' cache (the layout ``laddersim.planning.ep_layout`` sizes).

Prefill runs the compute-friendly path: ``kv_b_proj`` up-projects every position's latent to
per-head K (nope) and V, then multi-head attention with QK head dim P + R and V head dim V.
Decode runs the data-movement-friendly path (weight absorption): ``q_nope`` times ``W_UK`` per head
gives a latent query, attention is multi-query over the cached latent (QK dim Lkv + R, V dim Lkv),
and the per-head output times ``W_UV`` gives V-wide heads for ``W_O``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from laddersim.errors import UserInputError


class MLAGemm(NamedTuple):
    """One GEMM of an MLA layer on one rank: ``batch`` independent ``[m, k] x [k, n]`` products."""

    name: str
    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    @property
    def weight_elements(self) -> int:
        return self.batch * self.n * self.k


class MLASpec(BaseModel):
    """The latent-attention dimensions of a decoder (element counts)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    q_lora_rank: int = Field(ge=0, le=1 << 20, description="0: no query compression (q_proj)")
    kv_lora_rank: int = Field(gt=0, le=1 << 20)
    qk_nope_head_dim: int = Field(gt=0, le=1 << 16)
    qk_rope_head_dim: int = Field(gt=0, le=1 << 16)
    v_head_dim: int = Field(gt=0, le=1 << 16)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_width(self) -> int:
        """Cached elements per token per layer: the kv latent and the shared rope key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def attention_params_per_rank(self, dim: int, n_heads: int, tp: int) -> int:
        """One layer's attention parameters on one rank of ``tp``: the replicated down-projections
        and their norms, this rank's ``n_heads / tp`` heads of the up-projections and ``W_O``."""
        heads = n_heads // tp
        if self.q_lora_rank:
            q = dim * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * self.qk_head_dim
        else:
            q = dim * heads * self.qk_head_dim
        kv = dim * self.latent_width + self.kv_lora_rank + self.kv_lora_rank * heads * (
            self.qk_nope_head_dim + self.v_head_dim)
        return q + kv + heads * self.v_head_dim * dim

    def kv_bytes_per_token_per_layer(self, dtype_bytes: float) -> float:
        """Cache bytes one token adds to one layer on every rank that holds its sequence."""
        return self.latent_width * dtype_bytes

    def gemms(self, dim: int, n_heads: int, tp: int, tokens: int, absorbed: bool) -> tuple[MLAGemm, ...]:
        """The projections' GEMMs of one layer on one rank for ``tokens`` new tokens (not the
        attention itself): ``absorbed`` (decode) folds ``W_UK`` into the query and ``W_UV`` into
        the output per head; otherwise (prefill) ``kv_b_proj`` up-projects the new latents to K, V."""
        heads = n_heads // tp
        if self.q_lora_rank:
            out = [MLAGemm("qkv_a", tokens, self.q_lora_rank + self.latent_width, dim),
                   MLAGemm("q_b", tokens, heads * self.qk_head_dim, self.q_lora_rank)]
        else:
            out = [MLAGemm("kv_a", tokens, self.latent_width, dim), MLAGemm("q", tokens, heads * self.qk_head_dim, dim)]
        if absorbed:
            out += [MLAGemm("q_absorb_uk", tokens, self.kv_lora_rank, self.qk_nope_head_dim, heads),
                    MLAGemm("out_absorb_uv", tokens, self.v_head_dim, self.kv_lora_rank, heads)]
        else:
            out.append(MLAGemm("kv_b", tokens, heads * (self.qk_nope_head_dim + self.v_head_dim), self.kv_lora_rank))
        out.append(MLAGemm("o", tokens, dim, heads * self.v_head_dim))
        return tuple(out)


# The config keys of MLA (DeepseekV3Config, huggingface/transformers @ 9ee3f431
# ``models/deepseek_v3/configuration_deepseek_v3.py``); ``q_lora_rank`` null means no q compression.
MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def mla_fields(raw: dict, path: Path) -> dict:
    """``{"mla": MLASpec, "head_dim": v_head_dim}`` for a config with ``kv_lora_rank``; ``{}`` otherwise."""
    if not raw.get("kv_lora_rank"):
        return {}
    values = {}
    for key in MLA_KEYS:
        value = raw.get(key)
        if key == "q_lora_rank" and value is None:
            value = 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserInputError(f"model: {path}: {key}: {value!r} is not an integer; allowed: a positive integer"
                                 + (" or null" if key == "q_lora_rank" else ""))
        values[key] = value
    try:  # head_dim: each head's output width (V), what the attention writes per head
        return {"mla": MLASpec(**values), "head_dim": values["v_head_dim"]}
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UserInputError(f"model: {path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
