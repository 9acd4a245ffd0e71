"""Multi-head latent attention (DeepSeek-V3, Kimi K2): the parameters equal the published totals,
the cache is the latent (not per head) and replicated over TP, the projections' GEMMs and the
absorbed decode's bytes equal hand counts, and the op program prices them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from laddersim.costs.mla_costs import (mla_attention_time_s, mla_decode_attention_bytes,
                                       mla_decode_bytes_per_token, mla_gemms, mla_linear_times_s)
from laddersim.errors import UserInputError
from laddersim.model.shape import from_hf_config, load_model_shape
from laddersim.support.resources import data_path

V3 = data_path("validation", "moe", "models", "deepseek-ai--DeepSeek-V3.json")

# DeepSeek-V3 per layer, by hand from its config (hidden 7168, 128 heads, q_lora 1536, kv_lora 512,
# nope 128, rope 64, v 128): W_DQ, q norm, W_UQ|W_QR, W_DKV|W_KR, kv norm, W_UK|W_UV, W_O.
V3_ATTENTION = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168)


def _kimi_k2(tmp_path):
    """Kimi K2's config.json values (moonshotai/Kimi-K2-Instruct on Hugging Face): the DeepSeek-V3
    architecture with 64 heads, 384 experts, one dense layer and a 163840-token vocabulary."""
    raw = json.loads(V3.read_text())
    raw.update(num_attention_heads=64, num_key_value_heads=64, n_routed_experts=384, first_k_dense_replace=1,
               vocab_size=163840, n_group=1, topk_group=1)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return from_hf_config(path)


def test_deepseek_v3_parameters_are_the_published_671b_by_hand_count():
    shape = load_model_shape("deepseek-v3")
    expert = 3 * 7168 * 2048
    moe_layer = 256 * expert + expert + 7168 * 256  # routed, shared, router
    dense_layer = 3 * 7168 * 18432
    by_hand = (61 * (V3_ATTENTION + 2 * 7168) + 3 * dense_layer + 58 * moe_layer
               + 2 * 129280 * 7168 + 7168)  # embedding, LM head, final norm
    assert shape.total_params() == by_hand
    assert shape.total_params() / 1e9 == pytest.approx(671, rel=0.001)  # DeepSeek-V3 report: 671B


def test_kimi_k2_parameters_are_the_published_one_trillion(tmp_path):
    k2 = _kimi_k2(tmp_path)
    attention = 7168 * 1536 + 1536 + 1536 * 64 * 192 + 7168 * 576 + 512 + 512 * 64 * 256 + 64 * 128 * 7168
    expert = 3 * 7168 * 2048
    by_hand = (61 * (attention + 2 * 7168) + 3 * 7168 * 18432 + 60 * (385 * expert + 7168 * 384)
               + 2 * 163840 * 7168 + 7168)
    assert k2.total_params() == by_hand
    assert 1.00e12 <= k2.total_params() <= 1.05e12  # model card: 1T total (1.03T as stored)


def test_latent_cache_is_576_elements_per_token_per_layer_whatever_the_heads_and_tp(tmp_path):
    v3, k2 = load_model_shape("deepseek-v3"), _kimi_k2(tmp_path)
    for tp in (1, 2, 8):  # one latent KV head: every rank of the TP group holds it all
        assert v3.kv_bytes_per_token_per_rank(tp, 2) == 61 * (512 + 64) * 2
        assert k2.kv_bytes_per_token_per_rank(tp, 1) == 61 * 576
    # a GQA cache of the same heads would hold 2 x 128 x 192 per token per layer: 85x more
    assert 2 * 128 * 192 / 576 == pytest.approx(85.3, abs=0.1)


def test_tp_splits_heads_and_replicates_the_down_projections():
    v3 = load_model_shape("deepseek-v3")
    replicated = 7168 * 1536 + 1536 + 7168 * 576 + 512
    split = 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    for tp in (1, 4, 8):
        assert v3.mla.attention_params_per_rank(7168, 128, tp) == replicated + split // tp
    assert v3.mla.attention_params_per_rank(7168, 128, 1) == V3_ATTENTION


def test_absorbed_decode_gemms_read_the_same_weights_as_prefill_and_do_the_hand_counted_flops():
    v3 = load_model_shape("deepseek-v3")
    decode, prefill = mla_gemms(v3, 8, 1, decode=True), mla_gemms(v3, 8, 1, decode=False)
    assert sum(g.weight_elements for g in decode) == sum(g.weight_elements for g in prefill)
    h = 16  # heads per rank at TP 8
    assert [g.name for g in decode] == ["qkv_a", "q_b", "q_absorb_uk", "out_absorb_uv", "o"]
    flops = 2 * (7168 * (1536 + 576) + 1536 * h * 192 + h * 128 * 512 + h * 512 * 128 + h * 128 * 7168)
    assert sum(g.flops for g in decode) == flops
    assert [g.name for g in prefill] == ["qkv_a", "q_b", "kv_b", "o"]
    assert next(g for g in prefill if g.name == "kv_b")[1:4] == (1, h * 256, 512)


def test_decode_bytes_per_token_match_a_hand_count():
    v3 = load_model_shape("deepseek-v3")
    context = 4096
    weights = 2 * V3_ATTENTION  # bf16, TP 1
    cache = context * 576 * 2  # one latent per position, read once for all 128 heads
    queries = 128 * (576 + 512) * 2  # each head's latent query in, latent output out
    assert mla_decode_bytes_per_token(v3, 1, context, 2, 2) == weights + cache + queries
    # an FP8 cache halves the cache term only
    assert mla_decode_bytes_per_token(v3, 1, context, 2, 1) == weights + cache // 2 + queries
    # batch 8 at TP 8: each rank reads every sequence's whole latent (replicated), its 16 heads' queries
    assert float(mla_decode_attention_bytes(v3.mla, 16, 8, context, 2, 2)) == 8 * (cache + 16 * 1088 * 2)


def test_op_program_prices_mla_projections_and_the_cache_bound_decode():
    from laddersim.costs.op_costs import attention_time_s, fixed_op_times
    from laddersim.costs.pass_shapes import Phase
    from laddersim.simulation.scenario import make_scenario

    v3 = load_model_shape("deepseek-v3")
    priced = mla_linear_times_s(v3, 8, 4, True, lambda kind, m, n, k: float(m * n * k))
    assert priced["o_proj"] == 4 * (16 * 128) * 512 + 4 * 7168 * (16 * 128)  # W_UV (batched) and W_O
    scenario = make_scenario(model="deepseek-v3", hardware="h200-sxm-nvswitch", tp=8, batch=8, prompt_len=1024,
                             gen_len=8, schedule="standard", framework="vllm", kv_cache="dynamic", quant="fp8")
    hw, work = scenario.hardware, scenario.workload
    decode = Phase("decode", 8, 1)
    lens = np.array([1024.0, 65536.0])
    times = attention_time_s(v3, hw, work, 8, decode, lens)
    assert np.array_equal(times, mla_attention_time_s(v3, hw, work, 8, decode, lens))
    bw = hw.gpu.memory_bandwidth_bytes_per_s * hw.gpu.gemm_memory_efficiency.value
    # a long context is bound by the latent read: 8 sequences x 64512 more positions x 576 elements
    assert (times[1] - times[0]) * bw == pytest.approx(8 * (65536 - 1024) * 576 * work.kv_bytes, rel=1e-9)
    ops, _ = fixed_op_times(v3, hw, work, 8, decode)
    gqa_like, _ = fixed_op_times(v3.model_copy(update={"mla": None}), hw, work, 8, decode)
    assert ops["qkv"] != gqa_like["qkv"] and ops["o_proj"] != gqa_like["o_proj"]


def test_bad_mla_field_is_refused_in_one_line(tmp_path):
    raw = json.loads(V3.read_text())
    raw["qk_rope_head_dim"] = "64"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(UserInputError) as err:
        from_hf_config(path)
    assert "qk_rope_head_dim" in str(err.value) and "\n" not in str(err.value)


def test_chunked_prefill_up_projects_the_cached_latents():
    from laddersim.costs.mla_costs import mla_prefill_attention_flops

    mla = load_model_shape("deepseek-v3").mla
    fresh = mla_prefill_attention_flops(mla, 16, 2, 512)
    chunk = mla_prefill_attention_flops(mla, 16, 2, 512, cached=1024)
    attend = 2 * 512 * 1024 * 2 * 16 * (192 + 128)  # the chunk's queries over the cached positions
    up = 2 * 2 * 1024 * 512 * 16 * (128 + 128)  # kv_b_proj over each sequence's cached latents
    assert fresh == 2 * 512 * 256 * 2 * 16 * (192 + 128)
    assert chunk - fresh == attend + up


def test_kernel_counts_charge_one_gemm_per_mla_projection():
    from laddersim.costs.kernel_counts import op_kernels
    from laddersim.costs.pass_shapes import Phase
    from laddersim.simulation.scenario import make_scenario

    scenario = make_scenario(model="deepseek-v3", hardware="h200-sxm-nvswitch", tp=8, batch=16, prompt_len=128,
                             gen_len=8, schedule="standard", framework="vllm", quant="fp8")
    v3, hw, work = scenario.model, scenario.hardware, scenario.workload
    decode = op_kernels(v3, hw, work, 8, Phase("decode", 16, 1))
    prefill = op_kernels(v3, hw, work, 8, Phase("prefill", 16, 128))
    assert decode["qkv"]["library_gemm"] == 3 and decode["o_proj"]["library_gemm"] == 2  # absorbed W_UK, W_UV
    assert prefill["qkv"]["library_gemm"] == 3 and prefill["o_proj"]["library_gemm"] == 1  # kv_b up-projection
    assert decode["attention"] == {"attention": 1}
