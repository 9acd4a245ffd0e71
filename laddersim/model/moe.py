"""Mixture-of-experts layers: which layers route their tokens to experts, how many experts, how
many each token picks, each expert's width, the shared experts, and how the Hugging Face configs of
the published MoE families say so.

A routed expert is a SwiGLU MLP of width ``expert_intermediate`` (gate and up ``dim x I``, down
``I x dim``); the router is one ``dim x n_experts`` linear; a shared expert is a SwiGLU MLP every
token runs (``shared_intermediate`` wide in all). Layers not listed in ``moe_layers`` are dense,
with the model's ``intermediate_size``.

The keys read per family (huggingface/transformers @ 9ee3f431, ``models/<family>/configuration_*.py``
and ``modeling_*.py``):

* Mixtral, gpt-oss: ``num_local_experts``, ``num_experts_per_tok``, ``intermediate_size`` per expert;
  every layer MoE.
* Qwen3-MoE: ``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``; layer ``i`` is MoE
  when ``i`` is not in ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0``
  (Qwen3MoeDecoderLayer); its dense layers ``intermediate_size`` wide; no shared expert.
* DBRX: nested ``ffn_config.moe_num_experts``, ``moe_top_k``, ``ffn_hidden_size``; every layer MoE.
* Llama 4 (``text_config``): ``num_local_experts``, ``num_experts_per_tok``, ``intermediate_size``
  per expert and for the one shared expert, ``intermediate_size_mlp`` for the dense layers; layer
  ``i`` is MoE when ``(i + 1) % interleave_moe_layer_step == 0`` (Llama4TextConfig ``moe_layers``).
* DeepSeek-V3 / Kimi K2: ``n_routed_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``,
  ``n_shared_experts`` (each ``moe_intermediate_size`` wide), ``first_k_dense_replace`` dense layers
  (``intermediate_size`` wide) then MoE every ``moe_layer_freq``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from laddersim.errors import UserInputError


class MoESpec(BaseModel):
    """The mixture-of-experts part of a decoder. Sizes are element counts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_experts: int = Field(gt=1, le=1 << 14)
    top_k: int = Field(gt=0, le=1 << 10)
    expert_intermediate: int = Field(gt=0, le=1 << 22)
    n_shared_experts: int = Field(default=0, ge=0, le=64)
    shared_intermediate: int = Field(default=0, ge=0, le=1 << 22, description="all shared experts' width")
    moe_layers: tuple[int, ...] = Field(description="indices of the layers whose MLP is the MoE")
    # Expert parallelism inside the TP group: the experts placed ``ep`` ways (contiguous blocks),
    # each split ``tp / ep`` ways; the attention stays TP over all ``tp`` ranks.
    ep: int = Field(default=1, ge=1, le=1 << 14)

    @model_validator(mode="after")
    def _check(self) -> "MoESpec":
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds n_experts ({self.n_experts})")
        if (self.n_shared_experts > 0) != (self.shared_intermediate > 0):
            raise ValueError("n_shared_experts and shared_intermediate must be both zero or both positive")
        if self.n_experts % self.ep:
            raise ValueError(f"ep ({self.ep}) must divide the {self.n_experts} experts")
        if not self.moe_layers or list(self.moe_layers) != sorted(set(self.moe_layers)) or self.moe_layers[0] < 0:
            raise ValueError("moe_layers must be distinct, ascending, non-negative layer indices")
        return self

    def layer_params_per_rank(self, dim: int, tp: int) -> int:
        """Parameters of one MoE layer's MLP on one rank: the replicated router, this rank's
        ``n_experts / ep`` experts each split ``tp / ep`` ways, the shared experts split ``tp`` ways."""
        experts = self.n_experts // self.ep
        routed = experts * 3 * dim * (self.expert_intermediate // max(1, tp // self.ep))
        return dim * self.n_experts + routed + 3 * dim * (self.shared_intermediate // tp)

    def placed(self, ep: int, name: str) -> "MoESpec":
        """These experts placed ``ep`` ways, or one line naming the expert counts allowed."""
        if ep < 1 or self.n_experts % ep:
            allowed = [d for d in range(1, self.n_experts + 1) if self.n_experts % d == 0]
            raise UserInputError(f"ep: {ep} does not divide the {self.n_experts} experts of {name}; "
                                 f"allowed: {', '.join(map(str, allowed))}")
        return self if ep == self.ep else self.model_copy(update={"ep": ep})

    def check_tp(self, tp: int, name: str) -> None:
        """Raise UserInputError unless ``ep`` divides ``tp`` and ``tp / ep`` splits every expert's width."""
        if tp % self.ep:
            raise UserInputError(f"ep: {self.ep} does not divide tp {tp}; allowed: a divisor of tp that divides "
                                 f"the {self.n_experts} experts of {name}")
        if self.expert_intermediate % (tp // self.ep):
            raise UserInputError(f"tp: {tp} / ep {self.ep} does not divide the expert intermediate size "
                                 f"{self.expert_intermediate} of {name}")
        if self.shared_intermediate and self.shared_intermediate % tp:
            raise UserInputError(f"tp: {tp} does not divide the shared-expert intermediate size "
                                 f"{self.shared_intermediate} of {name}")


# The published MoE configs shipped with laddersim (laddersim/data/validation/moe/models, their
# provenance in PROVENANCE.md there), by the name a model option takes.
SHIPPED_CONFIGS = {
    "mixtral-8x7b": "mistralai--Mixtral-8x7B-v0.1.json",
    "mixtral-8x22b": "mistralai--Mixtral-8x22B-v0.1.json",
    "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B.json",
    "qwen3-235b-a22b": "Qwen--Qwen3-235B-A22B.json",
    "dbrx": "databricks--dbrx-instruct.json",
    "gpt-oss-120b": "openai--gpt-oss-120b.json",
    "llama-4-scout": "meta-llama--Llama-4-Scout-17B-16E-Instruct.json",
    "llama-4-maverick": "meta-llama--Llama-4-Maverick-17B-128E-Instruct.json",
    "deepseek-v3": "deepseek-ai--DeepSeek-V3.json",
}


def _int(raw: dict, key: str, path: Path, default: int | None = None) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"model: {path}: {key}: {value!r} is not an integer; allowed: a positive integer")
    return value


def _layers(n_layers: int, is_moe) -> tuple[int, ...]:
    return tuple(i for i in range(n_layers) if is_moe(i))


def dbrx_as_hf(raw: dict) -> dict:
    """A DBRX config under the Llama key names (``d_model``, ``n_layers``, ``n_heads``,
    ``attn_config.kv_n_heads``, ``max_seq_len``); its experts stay in ``ffn_config``."""
    attn = raw.get("attn_config") if isinstance(raw.get("attn_config"), dict) else {}
    ffn = raw.get("ffn_config") if isinstance(raw.get("ffn_config"), dict) else {}
    out = dict(raw, hidden_size=raw.get("d_model"), num_hidden_layers=raw.get("n_layers"),
               num_attention_heads=raw.get("n_heads"), num_key_value_heads=attn.get("kv_n_heads"),
               intermediate_size=ffn.get("ffn_hidden_size"))
    if raw.get("max_seq_len") is not None:
        out["max_position_embeddings"] = raw["max_seq_len"]
    return out


def moe_fields(raw: dict, path: Path) -> dict | None:
    """The ``ModelShape`` fields a config's mixture of experts sets (``moe`` and, where the dense
    layers have their own width, ``intermediate_size``); None for a dense config. ``raw`` is the
    decoder's config (Llama 4's ``text_config``)."""
    kind = raw.get("model_type")
    n_layers = _int(raw, "n_layers" if kind == "dbrx" else "num_hidden_layers", path)
    out: dict = {}
    if kind == "dbrx":
        ffn = raw.get("ffn_config")
        if not isinstance(ffn, dict):
            raise UserInputError(f"model: {path}: ffn_config: {ffn!r} is not an object with moe_num_experts, "
                                 "moe_top_k, ffn_hidden_size")
        experts, top_k = _int(ffn, "moe_num_experts", path), _int(ffn, "moe_top_k", path)
        width = _int(ffn, "ffn_hidden_size", path)
        spec = dict(n_experts=experts, top_k=top_k, expert_intermediate=width,
                    moe_layers=_layers(n_layers, lambda i: True))
        out["intermediate_size"] = width
    elif "n_routed_experts" in raw:  # DeepSeek-V2/V3, Kimi K2
        first_dense = _int(raw, "first_k_dense_replace", path, 0)
        freq = _int(raw, "moe_layer_freq", path, 1)
        width = _int(raw, "moe_intermediate_size", path)
        shared = _int(raw, "n_shared_experts", path, 0) or 0
        spec = dict(n_experts=_int(raw, "n_routed_experts", path), top_k=_int(raw, "num_experts_per_tok", path),
                    expert_intermediate=width, n_shared_experts=shared, shared_intermediate=shared * width,
                    moe_layers=_layers(n_layers, lambda i: i >= first_dense and i % freq == 0))
    elif kind == "qwen3_moe" or kind == "qwen2_moe" or "num_experts" in raw:
        step = _int(raw, "decoder_sparse_step", path, 1)
        only_mlp = raw.get("mlp_only_layers") or []
        if not isinstance(only_mlp, list) or not all(isinstance(i, int) for i in only_mlp):
            raise UserInputError(f"model: {path}: mlp_only_layers: {only_mlp!r} is not a list of layer indices")
        shared_width = _int(raw, "shared_expert_intermediate_size", path, 0) or 0  # Qwen2-MoE
        spec = dict(n_experts=_int(raw, "num_experts", path), top_k=_int(raw, "num_experts_per_tok", path),
                    expert_intermediate=_int(raw, "moe_intermediate_size", path),
                    n_shared_experts=1 if shared_width else 0, shared_intermediate=shared_width,
                    moe_layers=_layers(n_layers, lambda i: i not in only_mlp and step > 0 and (i + 1) % step == 0))
    elif "num_local_experts" in raw:  # Mixtral, gpt-oss, Llama 4
        width = _int(raw, "intermediate_size", path)
        spec = dict(n_experts=_int(raw, "num_local_experts", path), top_k=_int(raw, "num_experts_per_tok", path),
                    expert_intermediate=width, moe_layers=_layers(n_layers, lambda i: True))
        if kind in ("llama4_text", "llama4"):
            step = _int(raw, "interleave_moe_layer_step", path, 1)
            spec.update(n_shared_experts=1, shared_intermediate=width,
                        moe_layers=_layers(n_layers, lambda i: step > 0 and (i + 1) % step == 0))
            out["intermediate_size"] = _int(raw, "intermediate_size_mlp", path)
    else:
        return None
    if spec["n_experts"] <= 1:
        return None
    try:
        out["moe"] = MoESpec(**spec)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "experts"
        raise UserInputError(f"model: {path}: mixture of experts: {where}: {err['msg']}") from None
    return out
