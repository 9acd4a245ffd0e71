"""Model shapes: presets against the published parameter counts, HF configs, TP sharding rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from laddersim.errors import UserInputError
from laddersim.model.shape import PRESETS, ModelShape, load_model_shape


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


QWEN_LIKE = {"hidden_size": 3584, "num_hidden_layers": 2, "num_attention_heads": 28, "num_key_value_heads": 4,
             "intermediate_size": 18944, "vocab_size": 1000}


def test_allowed_tps_meet_every_sharding_rule_and_the_message_lists_them(tmp_path):
    # 28 heads, 4 KV heads, MLP 18944 = 2^8 * 74: 7, 14 and 28 divide the heads but break the KV
    # or MLP rule, so they must not be offered.
    path = tmp_path / "qwen-like.json"
    path.write_text(json.dumps(QWEN_LIKE))
    shape = load_model_shape(path)
    assert shape.name == "qwen-like"  # the file's stem, not its folder
    assert shape.allowed_tps() == [1, 2, 4]
    for tp in (7, 14, 28, 3):
        with pytest.raises(UserInputError, match=r"; allowed: 1, 2, 4$"):
            shape.check_tp(tp)
    for tp in shape.allowed_tps():
        shape.check_tp(tp)


def test_mixture_of_experts_read_and_zero_kv_heads_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(QWEN_LIKE, num_local_experts=8, num_experts_per_tok=2)))
    moe = load_model_shape(path).moe  # Mixtral's keys: every layer's MLP is 8 experts, top 2
    assert (moe.n_experts, moe.top_k, moe.expert_intermediate, moe.moe_layers) == (8, 2, 18944, (0, 1))
    path.write_text(json.dumps(dict(QWEN_LIKE, num_local_experts=8, num_experts_per_tok=9)))
    with pytest.raises(UserInputError, match="top_k \\(9\\) exceeds n_experts \\(8\\)"):
        load_model_shape(path)
    path.write_text(json.dumps(dict(QWEN_LIKE, num_key_value_heads=0)))
    with pytest.raises(UserInputError, match="n_kv_heads"):
        load_model_shape(path)
    path.write_text(json.dumps({k: v for k, v in QWEN_LIKE.items() if k != "num_key_value_heads"}))
    assert load_model_shape(path).n_kv_heads == 28  # no GQA field: one KV head per query head
    assert load_model_shape(tmp_path).name == tmp_path.name  # a config.json is named after its folder


SMALL_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "small-4l-512" / "config.json"


def _config(tmp_path, name, **changes):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**json.loads(SMALL_CONFIG.read_text()), **changes}))
    return folder / "config.json"


def test_a_sliding_window_is_priced_within_it_and_refused_beyond_in_one_line(tmp_path):
    from laddersim.api import simulate

    windowed = _config(tmp_path, "mistral", architectures=["MistralForCausalLM"], sliding_window=1024)
    full = _config(tmp_path, "llama")
    assert load_model_shape(windowed).sliding_window == 1024 and load_model_shape(full).sliding_window == 0
    # Within the window, windowed attention is full attention: the same times.
    a = simulate(windowed, "h100-sxm-nvswitch", tp=2, prompt_len=512, gen_len=512)
    b = simulate(full, "h100-sxm-nvswitch", tp=2, prompt_len=512, gen_len=512)
    assert list(a.tokens_per_s) == list(b.tokens_per_s)
    # Beyond it the window, not the sequence, bounds attention: refused, one line, exit 2.
    run = subprocess.run([sys.executable, "-m", "laddersim", "simulate", "--model", str(windowed), "--hardware",
                          "h100-sxm-nvswitch", "--tp", "2", "--prompt-len", "512", "--gen-len", "1024"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [
        "error: model: prompt-len + gen-len = 1536 tokens exceed the 1024-token sliding_window of mistral; laddersim "
        "prices full attention, the same only within the window; allowed: up to 1024 tokens per sequence"]
    # Qwen2 configs carry a window they do not use.
    unused = _config(tmp_path, "qwen", architectures=["Qwen2ForCausalLM"], sliding_window=1024,
                     use_sliding_window=False)
    assert load_model_shape(unused).sliding_window == 0
    with pytest.raises(UserInputError, match="sliding_window: 'big' is not a positive integer"):
        load_model_shape(_config(tmp_path, "bad", sliding_window="big"))


def test_a_serving_request_beyond_the_window_is_refused():
    from laddersim.traffic.arrivals import Requests

    shape = ModelShape(name="m", n_layers=2, dim=256, n_heads=4, n_kv_heads=4, intermediate_size=512,
                       vocab_size=1000, sliding_window=100)
    shape.check_window(60, 40)
    with pytest.raises(UserInputError, match="a request's prompt"):
        from laddersim.traffic.run import ServingOptions, serve, serving_scenario
        requests = Requests(np.array([0.0, 1.0]), np.array([10, 90]), np.array([5, 20]))
        serve(serving_scenario(shape, "h100-sxm-nvswitch", 1, "standard"), requests, ServingOptions())


@pytest.mark.parametrize("changes, named", [
    ({"architectures": ["GPT2LMHeadModel"]}, "architectures: GPT2LMHeadModel"),
    ({"architectures": ["Gemma2ForCausalLM"]}, "architectures: Gemma2ForCausalLM"),
    ({"architectures": "LlamaForCausalLM"}, "architectures: 'LlamaForCausalLM' is not a list of names"),
    ({"architectures": None, "model_type": "phi3"}, "model_type: 'phi3'"),
])
def test_an_unknown_architecture_is_refused_naming_the_supported_ones(tmp_path, changes, named):
    path = _config(tmp_path, "other", **changes)
    with pytest.raises(UserInputError) as info:
        load_model_shape(path)
    message = str(info.value)
    assert named in message and "\n" not in message
    allowed = ("allowed: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
               "MixtralForCausalLM, Qwen3MoeForCausalLM, DbrxForCausalLM, GptOssForCausalLM, "
               "Llama4ForConditionalGeneration, Llama4ForCausalLM, DeepseekV3ForCausalLM")
    types = ("model_type llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, dbrx, gpt_oss, llama4, llama4_text, "
             "deepseek_v3")
    assert "its layer's ops are not priced" in message or "is not a list of names" in message
    assert message.endswith(allowed) or f"{allowed} ({types})" in message


@pytest.mark.parametrize("architecture", ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                          "Qwen3ForCausalLM"])
def test_the_supported_architectures_load(tmp_path, architecture):
    assert load_model_shape(_config(tmp_path, "ok", architectures=[architecture])).n_layers == 4


@pytest.mark.parametrize("architecture, bias, extra_qkv_bias, qk_norm", [
    ("LlamaForCausalLM", None, False, False),
    ("LlamaForCausalLM", True, True, False),
    ("Qwen2ForCausalLM", None, True, False),  # Qwen2's q/k/v projections always carry biases
    ("Qwen3ForCausalLM", False, False, True),
    ("Qwen3ForCausalLM", True, True, True),
])
def test_each_family_adds_its_ops_to_the_layer(tmp_path, architecture, bias, extra_qkv_bias, qk_norm):
    changes = {"architectures": [architecture]} | ({} if bias is None else {"attention_bias": bias})
    shape = load_model_shape(_config(tmp_path, "fam", **changes))
    assert (shape.qkv_bias, shape.qk_norm) == (extra_qkv_bias, qk_norm)
    plain = shape.model_copy(update={"qkv_bias": False, "qk_norm": False})
    hd, tp = shape.head_dim, 2
    qkv_width = (shape.heads_per_rank(tp) + 2 * shape.kv_heads_per_rank(tp)) * hd
    # by hand: one bias per QKV output column, one norm weight per head dimension for q and for k
    added = (qkv_width if extra_qkv_bias else 0) + (2 * hd if qk_norm else 0)
    assert shape.layer_params_per_rank(tp) - plain.layer_params_per_rank(tp) == added


def test_qwen3_32b_has_its_published_parameter_count(tmp_path):
    # Qwen/Qwen3-32B's config.json (64 layers, hidden 5120, 64 q / 8 kv heads of 128, MLP 25600,
    # vocab 151936, untied); its model card: 32.8B parameters.
    path = _config(tmp_path, "qwen3", architectures=["Qwen3ForCausalLM"], num_hidden_layers=64, hidden_size=5120,
                   num_attention_heads=64, num_key_value_heads=8, head_dim=128, intermediate_size=25600,
                   vocab_size=151936, tie_word_embeddings=False)
    assert load_model_shape(path).total_params() / 1e9 == pytest.approx(32.8, rel=2e-3)


def test_attention_bias_must_be_a_boolean(tmp_path):
    with pytest.raises(UserInputError, match="attention_bias: 'yes' is not a boolean"):
        load_model_shape(_config(tmp_path, "b", attention_bias="yes"))
