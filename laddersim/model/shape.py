"""Model shapes: Llama-style decoders (RMSNorm, RoPE, GQA attention, SwiGLU MLP, untied LM head),
the families that add an op to that layer (Qwen2's QKV biases, Qwen3's per-head q/k RMSNorm), and
the mixture-of-experts families whose MLP is routed experts (``laddersim.model.moe``).

One small frozen config plus a dict of named presets, as in gpt-fast's ``ModelArgs``; any other
shape arrives as a Hugging Face ``config.json``. Names follow the paper: ``dim``, ``n_heads``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from laddersim.errors import UserInputError
from laddersim.model.mla import MLASpec, mla_fields
from laddersim.model.moe import SHIPPED_CONFIGS, MoESpec, dbrx_as_hf, moe_fields
from laddersim.support.io_read import read_json


class ModelShape(BaseModel):
    """Shape of a Llama-style decoder. All sizes are element counts, not bytes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Upper bounds far beyond any published model; they refuse overflowing nonsense (2**64 layers).
    name: str
    n_layers: int = Field(gt=0, le=4096)
    dim: int = Field(gt=0, le=1 << 20)
    n_heads: int = Field(gt=0, le=1 << 14)
    n_kv_heads: int = Field(gt=0, le=1 << 14)
    intermediate_size: int = Field(gt=0, le=1 << 22)
    vocab_size: int = Field(gt=0, le=1 << 24)
    head_dim: int = Field(default=0, ge=0, le=1 << 16, description="0 means dim // n_heads")
    tie_embeddings: bool = False
    max_position_embeddings: int = Field(default=0, ge=0, le=1 << 30, description="context length; 0 = unknown")
    # Sliding-window attention (Mistral): each position attends to the last ``sliding_window``
    # ones. laddersim prices full attention, which is the same while a sequence fits the window;
    # a longer one is refused (``check_window``). 0: full attention.
    sliding_window: int = Field(default=0, ge=0, le=1 << 30, description="0 = full attention")
    # Biases on the Q, K and V projections (Qwen2 always; Llama and Qwen3 where ``attention_bias``
    # is true): huggingface/transformers @ 63bb7237 src/transformers/models/qwen2/modeling_qwen2.py
    # (Qwen2Attention: q/k/v ``bias=True``, o_proj ``bias=False``).
    qkv_bias: bool = False
    # An RMSNorm over each head's ``head_dim`` on the queries and on the keys, before RoPE (Qwen3):
    # huggingface/transformers @ 9ee3f431 src/transformers/models/qwen3/modeling_qwen3.py
    # (Qwen3Attention.q_norm, k_norm: ``Qwen3RMSNorm(self.head_dim)``).
    qk_norm: bool = False
    # The routed experts that replace the MLP of some or all layers; None: a dense model.
    moe: MoESpec | None = None
    # Multi-head latent attention (laddersim.model.mla) in place of GQA; None: GQA/MHA.
    mla: MLASpec | None = None

    @model_validator(mode="after")
    def _check(self) -> "ModelShape":
        if self.head_dim == 0:
            if self.dim % self.n_heads:
                raise ValueError(f"dim ({self.dim}) must be a multiple of n_heads ({self.n_heads})")
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )
        if self.moe is not None and self.moe.moe_layers[-1] >= self.n_layers:
            raise ValueError(f"moe.moe_layers: layer {self.moe.moe_layers[-1]} beyond the {self.n_layers} layers")
        return self

    def mlp_layout(self) -> tuple[str, ...] | None:
        """Each layer's MLP module kind for the op program (``laddersim.schedules.plan.MLP_KINDS``):
        ``moe`` (routed experts), ``moe_shared`` (routed and shared), ``mlp``; None for a dense model."""
        if self.moe is None:
            return None
        moe_kind = "moe_shared" if self.moe.shared_intermediate else "moe"
        layers = self.moe_layer_set()
        return tuple(moe_kind if layer in layers else "mlp" for layer in range(self.n_layers))

    def with_ep(self, ep: int) -> "ModelShape":
        """This model with its experts placed ``ep`` ways over the TP group (``MoESpec.ep``)."""
        if self.moe is None and ep != 1:
            raise UserInputError(f"ep: {ep}: {self.name} has no experts to place; allowed: 1")
        return self if self.moe is None else self.model_copy(update={"moe": self.moe.placed(ep, self.name)})

    def moe_layer_set(self) -> frozenset[int]:
        """Indices of the layers whose MLP is the mixture of experts (empty for a dense model)."""
        return frozenset(self.moe.moe_layers) if self.moe is not None else frozenset()

    # ---- tensor-parallel split -------------------------------------------------------------
    def allowed_tps(self) -> list[int]:
        """TP degrees that shard this model the way serving engines do: dividing the attention
        heads and the MLP width, and dividing or being a multiple of the KV heads."""
        widths = (self.intermediate_size,) + ((self.moe.expert_intermediate, self.moe.shared_intermediate or 1)
                                              if self.moe is not None else ())
        return [d for d in range(1, self.n_heads + 1)
                if self.n_heads % d == 0 and all(w % d == 0 for w in widths if w > 1)
                and (self.n_kv_heads % d == 0 or d % self.n_kv_heads == 0)]

    def check_tp(self, tp: int) -> None:
        """Raise UserInputError unless ``tp`` can shard this model the way serving engines do."""
        if tp < 1:
            raise UserInputError(f"tp: must be a positive integer, got {tp}")
        if self.n_heads % tp:
            raise UserInputError(f"tp: {tp} does not divide the {self.n_heads} attention heads of {self.name}; "
                                 f"{self._allowed()}")
        if self.n_kv_heads % tp and tp % self.n_kv_heads:
            raise UserInputError(f"tp: {tp} neither divides nor is a multiple of the {self.n_kv_heads} KV heads of "
                                 f"{self.name}; {self._allowed()}")
        if self.intermediate_size % tp:
            raise UserInputError(f"tp: {tp} does not divide intermediate_size {self.intermediate_size} of {self.name}; "
                                 f"{self._allowed()}")
        if self.moe is not None:
            self.moe.check_tp(tp, self.name)

    def _allowed(self) -> str:
        return f"allowed: {', '.join(map(str, self.allowed_tps()))}"

    def heads_per_rank(self, tp: int) -> int:
        return self.n_heads // tp

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads each rank holds; with fewer KV heads than ranks each rank keeps one replica."""
        return max(1, self.n_kv_heads // tp)

    def vocab_per_rank(self, tp: int) -> int:
        """Vocab-parallel LM head rows per rank (the last shard padded, as Megatron/vLLM do)."""
        return -(-self.vocab_size // tp)

    def intermediate_per_rank(self, tp: int) -> int:
        return self.intermediate_size // tp

    # ---- sizes -----------------------------------------------------------------------------
    def layer_params_per_rank(self, tp: int) -> int:
        """Parameters of one decoder layer held by one rank (QKV with its biases, O, gate/up, down,
        two norms, the q/k norms' weights)."""
        hd, mlp = self.head_dim, 3 * self.dim * self.intermediate_per_rank(tp)
        if self.mla is not None:
            return self.mla.attention_params_per_rank(self.dim, self.n_heads, tp) + mlp + 2 * self.dim
        qkv_width = (self.heads_per_rank(tp) + 2 * self.kv_heads_per_rank(tp)) * hd
        qkv = self.dim * qkv_width + (qkv_width if self.qkv_bias else 0)
        o = self.heads_per_rank(tp) * hd * self.dim
        return qkv + o + mlp + 2 * self.dim + (2 * hd if self.qk_norm else 0)

    def gathered_logits_bytes(self, batch: int, tp: int, dtype_bytes: int) -> int:
        """The vocab-parallel logits of ``batch`` sequences gathered over ``tp`` ranks: every rank's
        ``[batch, vocab_per_rank]`` part (the padded shard included)."""
        return batch * self.vocab_per_rank(tp) * tp * dtype_bytes

    def moe_extra_params_per_rank(self, tp: int) -> int:
        """What the MoE layers hold on one rank beyond the dense layers ``layer_params_per_rank``
        counts: every MoE layer's router, all its experts (each split ``tp`` ways) and shared
        experts, less the dense MLP it replaces. 0 for a dense model."""
        if self.moe is None:
            return 0
        per_layer = self.moe.layer_params_per_rank(self.dim, tp) - 3 * self.dim * self.intermediate_per_rank(tp)
        return len(self.moe.moe_layers) * per_layer

    def layers_params_per_rank(self, tp: int, layers: int) -> int:
        """Parameters of ``layers`` decoder layers on one rank: all of them exactly, fewer (a pipeline
        stage) at the model's mean per layer where MoE and dense layers interleave."""
        extra = self.moe_extra_params_per_rank(tp)
        return layers * self.layer_params_per_rank(tp) + (extra * layers) // self.n_layers

    def params_per_rank(self, tp: int) -> int:
        """All parameters one rank holds: layers (every expert of every MoE layer), embedding and
        LM head shards, final norm."""
        emb = self.vocab_per_rank(tp) * self.dim
        head = 0 if self.tie_embeddings else emb
        return self.layers_params_per_rank(tp, self.n_layers) + emb + head + self.dim

    def stage_params_per_rank(self, tp: int, layers: int, first: bool, last: bool) -> int:
        """Parameters one rank of a pipeline stage of ``layers`` layers holds: stage 0 the embedding
        shard, the last stage the LM head shard (its own copy of a tied embedding, as vLLM's last
        pipeline rank keeps one) and the final norm. The whole model (first and last) is
        ``params_per_rank``."""
        emb = self.vocab_per_rank(tp) * self.dim
        head = emb if last and not (first and self.tie_embeddings) else 0
        return self.layers_params_per_rank(tp, layers) + (emb if first else 0) + head + (self.dim if last else 0)

    def total_params(self) -> int:
        return self.params_per_rank(1)

    def context_warning(self, prompt_len: int, gen_len: int) -> str | None:
        """A one-line warning when prompt plus generation exceed the model's context length."""
        if self.max_position_embeddings and prompt_len + gen_len > self.max_position_embeddings:
            return (f"warning: prompt-len {prompt_len} + gen-len {gen_len} = {prompt_len + gen_len} tokens exceed "
                    f"the {self.max_position_embeddings}-token context of {self.name} (max_position_embeddings); "
                    "simulated anyway")
        return None

    def warn_context(self, prompt_len: int, gen_len: int) -> None:
        """Print ``context_warning`` on stderr, if any."""
        if (warning := self.context_warning(prompt_len, gen_len)) is not None:
            print(warning, file=sys.stderr)

    def check_window(self, prompt_len: int, gen_len: int, where: str = "prompt-len + gen-len") -> None:
        """Raise UserInputError where a sequence of ``prompt_len + gen_len`` tokens outgrows the
        model's sliding attention window: beyond it the window, not the sequence, bounds what each
        token attends to, which the full-attention costs do not price."""
        tokens = prompt_len + gen_len
        if self.sliding_window and tokens > self.sliding_window:
            raise UserInputError(
                f"model: {where} = {tokens} tokens exceed the {self.sliding_window}-token sliding_window of "
                f"{self.name}; laddersim prices full attention, the same only within the window; "
                f"allowed: up to {self.sliding_window} tokens per sequence")

    def kv_bytes_per_token_per_rank(self, tp: int, dtype_bytes: int) -> int:
        """KV-cache bytes one token adds on one rank, over all layers (K and V; MLA's latent)."""
        if self.mla is not None:
            return self.n_layers * self.mla.kv_bytes_per_token_per_layer(dtype_bytes)
        return 2 * self.n_layers * self.kv_heads_per_rank(tp) * self.head_dim * dtype_bytes


PRESETS: dict[str, ModelShape] = {
    # Shapes from the Llama 3.1 model cards' config.json (meta-llama/Llama-3.1-8B, -70B, -405B on
    # Hugging Face).
    "llama-3.1-8b": ModelShape(
        name="llama-3.1-8b", n_layers=32, dim=4096, n_heads=32, n_kv_heads=8,
        intermediate_size=14336, vocab_size=128256, max_position_embeddings=131072,
    ),
    "llama-3.1-70b": ModelShape(
        name="llama-3.1-70b", n_layers=80, dim=8192, n_heads=64, n_kv_heads=8,
        intermediate_size=28672, vocab_size=128256, max_position_embeddings=131072,
    ),
    "llama-3.1-405b": ModelShape(
        name="llama-3.1-405b", n_layers=126, dim=16384, n_heads=128, n_kv_heads=8,
        intermediate_size=53248, vocab_size=128256, max_position_embeddings=131072,
    ),
}

# Hugging Face config.json field -> ModelShape field.
_HF_FIELDS = {
    "num_hidden_layers": "n_layers",
    "hidden_size": "dim",
    "num_attention_heads": "n_heads",
    "intermediate_size": "intermediate_size",
    "vocab_size": "vocab_size",
}

# Hugging Face architectures whose decoder is the shape priced here (RMSNorm, RoPE, GQA attention,
# SwiGLU MLP): Llama; Mistral (the same, with a sliding window in v0.1); Qwen2 (plus QKV biases);
# Qwen3 (plus q/k RMSNorm, biases where ``attention_bias``); and the mixture-of-experts families
# whose MLP is routed SwiGLU experts (laddersim.model.moe): Mixtral, Qwen3-MoE (q/k RMSNorm), DBRX
# (LayerNorm, priced as the RMSNorm it streams the same bytes as), gpt-oss (QKV biases; its
# attention sinks, one scalar per head, not priced), Llama 4 (its decoder under ``text_config``;
# chunked attention priced as full attention within a chunk), DeepSeek-V3 and Kimi K2 (multi-head
# latent attention, laddersim.model.mla; shared experts). Their ``model_type`` values, for
# configs without ``architectures``, and what each family adds to the Llama layer.
FAMILIES = {
    "LlamaForCausalLM": ("llama", {}),
    "MistralForCausalLM": ("mistral", {}),
    "Qwen2ForCausalLM": ("qwen2", {"qkv_bias": True}),
    "Qwen3ForCausalLM": ("qwen3", {"qk_norm": True}),
    "MixtralForCausalLM": ("mixtral", {}),
    "Qwen3MoeForCausalLM": ("qwen3_moe", {"qk_norm": True}),
    "DbrxForCausalLM": ("dbrx", {}),
    "GptOssForCausalLM": ("gpt_oss", {"qkv_bias": True}),
    "Llama4ForConditionalGeneration": ("llama4", {}),
    "Llama4ForCausalLM": ("llama4_text", {}),
    "DeepseekV3ForCausalLM": ("deepseek_v3", {}),
}
SUPPORTED_ARCHITECTURES = tuple(FAMILIES)
_SUPPORTED_MODEL_TYPES = tuple(model_type for model_type, _ in FAMILIES.values())


def config_file_name(path: str | Path) -> str:
    """A config file's model name when it gives none: its stem, or its folder's for ``config.json``."""
    path = Path(path)
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def _check_architecture(raw: dict, path: Path) -> None:
    """Refuse, in one line, a config whose ``architectures`` (or, without them, ``model_type``) is
    not a decoder laddersim prices."""
    allowed = f"allowed: {', '.join(SUPPORTED_ARCHITECTURES)}"
    names = raw.get("architectures")
    if names is not None:
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise UserInputError(f"model: {path}: architectures: {names!r} is not a list of names; {allowed}")
        other = [n for n in names if n not in SUPPORTED_ARCHITECTURES]
        if other:
            raise UserInputError(f"model: {path}: architectures: {', '.join(other)}: its layer's ops are not priced "
                                 f"(laddersim prices Llama-style decoders and the families named); {allowed}")
        return
    kind = raw.get("model_type")
    if kind is not None and kind not in _SUPPORTED_MODEL_TYPES:
        raise UserInputError(f"model: {path}: model_type: {kind!r}: its layer's ops are not priced (laddersim "
                             f"prices Llama-style decoders and the families named); {allowed} "
                             f"(model_type {', '.join(_SUPPORTED_MODEL_TYPES)})")


def _family_fields(raw: dict, path: Path) -> dict:
    """What the config's family adds to the Llama layer: QKV biases (Qwen2 always; elsewhere
    ``attention_bias``, also on the output projection, whose bias an add in the same GEMM carries),
    Qwen3's q/k norms."""
    names = raw.get("architectures") or []
    kind = raw.get("model_type")
    family = next((FAMILIES[n] for n in names if n in FAMILIES),
                  next((f for f in FAMILIES.values() if f[0] == kind), ("llama", {})))
    fields = dict(family[1])
    bias = raw.get("attention_bias", False)
    if not isinstance(bias, bool):
        raise UserInputError(f"model: {path}: attention_bias: {bias!r} is not a boolean; allowed: true, false")
    if bias:
        fields["qkv_bias"] = True
    return fields


def _sliding_window(raw: dict, path: Path) -> int:
    """The config's attention window in tokens; 0 where attention is full (no ``sliding_window``,
    null, or Qwen2's ``use_sliding_window: false``)."""
    window = raw.get("sliding_window")
    if window is None or raw.get("use_sliding_window") is False:
        return 0
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise UserInputError(f"model: {path}: sliding_window: {window!r} is not a positive integer; "
                             "allowed: a positive integer, or null for full attention")
    return window


def _moe_and_windows(raw: dict, path: Path) -> dict:
    """The routed experts (``laddersim.model.moe``) and the attention windows of the MoE families:
    gpt-oss's sliding layers (``layer_types``), Llama 4's ``attention_chunk_size`` (a chunk attends
    within itself: full attention while a sequence fits one chunk)."""
    fields = moe_fields(raw, path) or {}
    types = raw.get("layer_types")
    if isinstance(types, list) and "sliding_attention" in types:
        fields["sliding_window"] = _sliding_window(raw, path)
    chunk = raw.get("attention_chunk_size")
    if isinstance(chunk, int) and not isinstance(chunk, bool) and chunk > 0:
        fields["sliding_window"] = chunk
    return fields


def from_hf_config(path: str | Path) -> ModelShape:
    """Read a Llama-style Hugging Face ``config.json`` (``SUPPORTED_ARCHITECTURES``; others are
    refused). Keys that change the cost are read or refused: ``sliding_window``, mixture-of-experts
    counts; the rest (``rope_theta``, ``rms_norm_eps``, ...) change no time and are ignored."""
    path = Path(path)
    raw = read_json(path, "model")
    if not isinstance(raw, dict):
        raise UserInputError(f"model: {path} is not a JSON object")
    _check_architecture(raw, path)
    if isinstance(raw.get("text_config"), dict):  # Llama 4: the decoder's config nests under text_config
        raw = {"_name_or_path": raw.get("_name_or_path"), **raw["text_config"]}
    if raw.get("model_type") == "dbrx":
        raw = dbrx_as_hf(raw)
    name = raw.get("_name_or_path")
    fields: dict = {"name": name if isinstance(name, str) and name else config_file_name(path)}
    for hf_key, ours in _HF_FIELDS.items():
        if hf_key not in raw:
            raise UserInputError(f"model: {path} lacks the field '{hf_key}'")
        fields[ours] = raw[hf_key]
    kv_heads = raw.get("num_key_value_heads")
    fields["n_kv_heads"] = raw["num_attention_heads"] if kv_heads is None else kv_heads  # absent: no GQA
    if raw.get("head_dim") is not None:
        fields["head_dim"] = raw["head_dim"]
    if raw.get("max_position_embeddings") is not None:
        fields["max_position_embeddings"] = raw["max_position_embeddings"]
    window = _sliding_window(raw, path)
    if window:
        fields["sliding_window"] = window
    tie = raw.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise UserInputError(f"model: {path}: tie_word_embeddings: {tie!r} is not a boolean; allowed: true, false")
    fields["tie_embeddings"] = tie
    fields.update(_family_fields(raw, path))
    fields.update(_moe_and_windows(raw, path) | mla_fields(raw, path))
    for key, value in fields.items():  # real integers: 1.5 layers, "32" or true are refused
        if key not in ("name", "tie_embeddings", "qkv_bias", "qk_norm", "moe", "mla") and (isinstance(value, bool) or not isinstance(value, int)):
            hf_key = {v: k for k, v in _HF_FIELDS.items()}.get(key, {"n_kv_heads": "num_key_value_heads"}.get(key, key))
            raise UserInputError(f"model: {path}: {hf_key}: {value!r} is not an integer; allowed: a positive integer")
    try:
        return ModelShape(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        raise UserInputError(f"model: {path}: {loc}: {err['msg']}") from None


def load_model_shape(name_or_path: str | Path) -> ModelShape:
    """A preset name (``llama-3.1-70b``) or a path to a Hugging Face ``config.json``."""
    from laddersim.support.resources import given_or_shipped

    key = str(name_or_path)
    if key in PRESETS:
        return PRESETS[key]
    if key in SHIPPED_CONFIGS:  # a published mixture-of-experts config shipped with laddersim
        from laddersim.support.resources import data_path

        return from_hf_config(data_path("validation", "moe", "models", SHIPPED_CONFIGS[key]))
    path = given_or_shipped(key)  # examples/... is also found in the installed package
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" and path.exists():
        return from_hf_config(path)
    raise UserInputError(
        f"model: unknown preset '{key}' and no such config.json; allowed: {', '.join(PRESETS)} "
        "or a path to a Hugging Face config.json"
    )
