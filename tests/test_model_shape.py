"""Model shapes: presets against the published parameter counts, HF configs, TP sharding rules."""

from __future__ import annotations

import json

import pytest

from laddersim.errors import UserInputError
from laddersim.model_shape import PRESETS, load_model_shape


@pytest.mark.parametrize("name,billions", [("llama-3.1-8b", 8.03), ("llama-3.1-70b", 70.55), ("llama-3.1-405b", 405.85)])
def test_preset_parameter_counts_match_the_model_cards(name, billions):
    # Meta's model cards: 8.03B, 70.6B, 405.9B parameters (safetensors totals).
    assert PRESETS[name].total_params() / 1e9 == pytest.approx(billions, rel=2e-3)


def test_gqa_with_fewer_kv_heads_than_ranks_replicates_them():
    m = PRESETS["llama-3.1-405b"]  # 8 KV heads
    assert m.kv_heads_per_rank(8) == 1
    assert m.kv_heads_per_rank(16) == 1  # replicated: the paper raised 8 to 16, same per-rank cost
    assert m.kv_heads_per_rank(4) == 2
    m.check_tp(16)


def test_params_per_rank_shrink_with_tp():
    m = PRESETS["llama-3.1-70b"]
    assert m.params_per_rank(8) < m.params_per_rank(4) / 1.9


def test_hf_config_missing_field_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(UserInputError, match="num_hidden_layers"):
        load_model_shape(tmp_path)


def test_hf_config_bad_heads(tmp_path):
    cfg = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 4,
           "intermediate_size": 128, "vocab_size": 100}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserInputError, match="n_heads"):
        load_model_shape(tmp_path / "config.json")
