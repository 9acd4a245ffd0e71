"""Mixture-of-experts shapes read from the published config.json files: every config parses to the
shape its model card states (laddersim/data/validation/moe/PROVENANCE.md), every expert counts in
the parameters, and what is not priced is refused in one line."""

from __future__ import annotations

import json

import pytest

from laddersim.errors import UserInputError
from laddersim.model.moe import moe_fields
from laddersim.model.shape import from_hf_config
from laddersim.support.resources import data_path

MODELS = data_path("validation", "moe", "models")

# file: layers, hidden, heads, KV heads, experts, top-k, expert intermediate, shared experts,
# MoE layers, dense-layer intermediate, attention window; published total parameters (billions)
SHAPES = {
    "Qwen--Qwen3-235B-A22B.json": (94, 4096, 64, 4, 128, 8, 1536, 0, 94, 12288, 0, 235),
    "Qwen--Qwen3-30B-A3B.json": (48, 2048, 32, 4, 128, 8, 768, 0, 48, 6144, 0, 30.5),
    "databricks--dbrx-instruct.json": (40, 6144, 48, 8, 16, 4, 10752, 0, 40, 10752, 0, 132),
    "meta-llama--Llama-4-Maverick-17B-128E-Instruct.json": (48, 5120, 40, 8, 128, 1, 8192, 1, 24, 16384, 8192, 400),
    "meta-llama--Llama-4-Scout-17B-16E-Instruct.json": (48, 5120, 40, 8, 16, 1, 8192, 1, 48, 16384, 8192, 108),
    "mistralai--Mixtral-8x22B-v0.1.json": (56, 6144, 48, 8, 8, 2, 16384, 0, 56, 16384, 0, 141),
    "mistralai--Mixtral-8x7B-v0.1.json": (32, 4096, 32, 8, 8, 2, 14336, 0, 32, 14336, 0, 46.7),
    "openai--gpt-oss-120b.json": (36, 2880, 64, 8, 128, 4, 2880, 0, 36, 2880, 128, 117),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_moe_config_parses_to_its_published_shape(name):
    shape = from_hf_config(MODELS / name)
    layers, dim, heads, kv, experts, top_k, width, shared, moe_layers, dense, window, billions = SHAPES[name]
    moe = shape.moe
    assert (shape.n_layers, shape.dim, shape.n_heads, shape.n_kv_heads) == (layers, dim, heads, kv)
    assert (moe.n_experts, moe.top_k, moe.expert_intermediate, moe.n_shared_experts) == (experts, top_k, width, shared)
    assert (len(moe.moe_layers), shape.intermediate_size, shape.sliding_window) == (moe_layers, dense, window)
    # every expert of every layer in the parameters (published totals, 1.5% for the model cards'
    # rounding and Llama 4's vision tower, which is not counted)
    assert shape.total_params() / 1e9 == pytest.approx(billions, rel=0.015 if "Llama-4" not in name else 0.02)


def test_llama4_maverick_interleaves_moe_every_second_layer_and_gpt_oss_has_sliding_layers():
    maverick = from_hf_config(MODELS / "meta-llama--Llama-4-Maverick-17B-128E-Instruct.json")
    assert maverick.moe.moe_layers == tuple(range(1, 48, 2))
    assert maverick.mlp_layout()[:4] == ("mlp", "moe_shared", "mlp", "moe_shared")
    raw = json.loads((MODELS / "openai--gpt-oss-120b.json").read_text())
    assert raw["layer_types"].count("sliding_attention") == 18


def test_deepseek_v3_moe_part_parses_with_its_latent_attention():
    path = MODELS / "deepseek-ai--DeepSeek-V3.json"
    moe = moe_fields(json.loads(path.read_text()), path)["moe"]
    assert (moe.n_experts, moe.top_k, moe.expert_intermediate, moe.n_shared_experts) == (256, 8, 2048, 1)
    assert moe.moe_layers == tuple(range(3, 61))  # first_k_dense_replace 3
    shape = from_hf_config(path)
    assert (shape.mla.kv_lora_rank, shape.mla.q_lora_rank, shape.mla.qk_rope_head_dim) == (512, 1536, 64)
    assert (shape.mla.qk_nope_head_dim, shape.mla.v_head_dim, shape.intermediate_size) == (128, 128, 18432)


def test_a_dense_config_keeps_no_moe_and_its_parameters(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 256,
           "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = from_hf_config(tmp_path / "config.json")
    assert shape.moe is None and shape.mlp_layout() is None
    assert shape.params_per_rank(2) == 2 * shape.layer_params_per_rank(2) + 2 * 500 * 256 + 256


def test_memory_counts_all_experts_split_by_tp():
    mixtral = from_hf_config(MODELS / "mistralai--Mixtral-8x7B-v0.1.json")
    per_expert = 3 * 4096 * 14336
    dense_mlp = per_expert  # the Llama layer's MLP counted by layer_params_per_rank
    assert mixtral.moe_extra_params_per_rank(1) == 32 * (8 * per_expert + 4096 * 8 - dense_mlp)
    assert mixtral.moe_extra_params_per_rank(2) == 32 * (8 * per_expert // 2 + 4096 * 8 - dense_mlp // 2)


def test_tp_must_split_every_expert(tmp_path):
    raw = json.loads((MODELS / "Qwen--Qwen3-30B-A3B.json").read_text())
    raw["moe_intermediate_size"] = 770  # 770 = 2 x 5 x 7 x 11: TP 4 cannot split it
    (tmp_path / "config.json").write_text(json.dumps(raw))
    shape = from_hf_config(tmp_path / "config.json")
    with pytest.raises(UserInputError, match="expert intermediate size 770"):
        shape.check_tp(4)
    assert 4 not in shape.allowed_tps() and 2 in shape.allowed_tps()
