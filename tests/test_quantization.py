"""Quantized inference (laddersim.model.quantization, laddersim.costs.quantized_gemm) and the
families' own ops (laddersim.costs.family_ops): each mechanism against a hand-computed case."""

from __future__ import annotations

import json

import numpy as np
import pytest

from laddersim.cli import main
from laddersim.costs.gemm import memory_bound_time_s
from laddersim.costs.kernel_counts import op_kernels
from laddersim.costs.memory_fit import memory_use
from laddersim.costs.op_costs import Phase, op_times_s
from laddersim.costs.quantized_gemm import quantized_linear_time_s
from laddersim.errors import UserInputError
from laddersim.hardware.profile import load_profile
from laddersim.model.shape import PRESETS, ModelShape
from laddersim.model.workload import Workload
from laddersim.simulation.simulate import make_scenario

H100 = load_profile("h100-sxm-nvswitch")
LLAMA_8B = PRESETS["llama-3.1-8b"]
DECODE = Phase("decode", 1, 1)


def work(**kw) -> Workload:
    return Workload(batch=1, prompt_len=128, gen_len=8, framework="vllm", kv_cache="dynamic",
                    kv_reads="per_kv_head", **kw)


@pytest.mark.parametrize("m, n, k, original_us", [
    # AIConfigurator h100_sxm vllm 0.24.0 gemm_perf.parquet, gemm_dtype fp8 (latency ms x 1e3):
    # the rows at m = 8192 (above the decode window the compact table keeps them as they are).
    (8192, 8192, 8192, 836.1),
    (8192, 4096, 4096, 299.4),
    (8192, 6144, 4096, 415.0),
    (1024, 4096, 4096, 39.2),
])
def test_fp8_gemm_time_is_read_from_the_profiles_fp8_table(m, n, k, original_us):
    seconds, source = quantized_linear_time_s(H100, work(quant="fp8"), m, n, k, H100.gpu.peak_flops_per_s)
    assert source == "SILICON"
    assert seconds * 1e6 == pytest.approx(original_us, rel=1e-3)


def test_fp8_without_a_table_is_the_fp8_roofline_plus_its_quantize_kernels():
    l40s = load_profile("l40s-pcie")  # FP8 tensor cores, no FP8 table
    w = work(quant="fp8")
    seconds, source = quantized_linear_time_s(l40s, w, 64, 4096, 4096, l40s.gpu.peak_flops_per_s)
    from laddersim.costs.gemm import gemm_time_s

    gemm = float(gemm_time_s(l40s.gpu, 64, 4096, 4096, 1, None, l40s.gpu.peak_flops_per_s_for("fp8")))
    # dynamic per-tensor: a max reduction reads the input, the conversion reads it and writes FP8
    quantize = float(memory_bound_time_s(l40s.gpu, 64 * 4096 * 2 * 2 + 64 * 4096, kernels=2))
    assert source == "SOL" and seconds == pytest.approx(gemm + quantize)


def test_an_fp8_models_bytes_by_hand():
    # Llama-3.1-8B at TP 1: per layer the linears hold 4096 x (4096 + 2 x 1024) (QKV) + 4096 x 4096
    # (O) + 3 x 4096 x 14336 (gate/up, down) = 218,103,808 weights, one byte each in FP8; the
    # embedding and LM head (2 x 128256 x 4096), the norms (2 x 4096 a layer, 4096 final) stay 16-bit.
    linears = 32 * 218_103_808
    rest = 2 * 128_256 * 4096 + 32 * 2 * 4096 + 4096
    fp8 = memory_use(LLAMA_8B, H100, work(quant="fp8", kv_cache_dtype="fp8"), 1)
    bf16 = memory_use(LLAMA_8B, H100, work(), 1)
    assert fp8.weights_bytes == linears * 1 + rest * 2
    assert bf16.weights_bytes == (linears + rest) * 2
    # KV: 2 (K, V) x 32 layers x 8 KV heads x 128 per token, one byte in an FP8 cache
    assert fp8.kv_cache_bytes == 136 * 2 * 32 * 8 * 128 * 1
    assert bf16.kv_cache_bytes == 2 * fp8.kv_cache_bytes
    int4 = memory_use(LLAMA_8B, H100, work(quant="int4-weight"), 1)
    assert int4.weights_bytes == pytest.approx(linears * (0.5 + 2 / 128) + rest * 2)


def test_an_fp8_kv_cache_halves_the_decode_attentions_kv_reads():
    kv_lens = np.array([4096.0, 16384.0])
    auto = op_times_s(LLAMA_8B, H100, work(), 1, DECODE, kv_lens)["attention"]
    fp8 = op_times_s(LLAMA_8B, H100, work(kv_cache_dtype="fp8"), 1, DECODE, kv_lens)["attention"]
    gpu = H100.gpu
    stream = gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value
    halved = kv_lens * 2 * 8 * 128 * 1 / stream  # the K/V bytes at one byte (the queries unchanged)
    np.testing.assert_allclose(auto - fp8, halved, rtol=1e-9)


@pytest.mark.parametrize("quant, quantize_kernels", [
    ("fp8", 2), ("fp8-block", 1), ("int8-weight", 0), ("int4-weight", 0), ("none", 0)])
def test_the_quantize_kernels_are_counted_per_linear_input(quant, quantize_kernels):
    counts = op_kernels(LLAMA_8B, H100, work(quant=quant), 1, DECODE)
    for kind in ("qkv", "o_proj", "gate_up", "down"):
        assert counts[kind].get("generated", 0) == quantize_kernels
        assert counts[kind]["library_gemm"] == 1
    assert counts["lm_head"] == {"library_gemm": 1}  # the LM head stays 16-bit


def test_the_kernels_table_lists_the_quantize_kernels(capsys):
    assert main(["kernels", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "1",
                 "--framework", "vllm", "--quant", "fp8"]) == 0
    out = capsys.readouterr().out
    for kind in ("qkv", "o_proj", "gate_up", "down"):
        assert any(line.split()[:3] == [f"{kind}.quantize", "generated", "2"] for line in out.splitlines())


def test_a_measured_linear_shorter_than_its_parts_shares_its_time_between_them():
    """H200, Llama-3.1-70B at TP 8, batch 4: the measured FP8 o_proj (8192 x 1024, the vLLM table's
    time includes its input's quantization) is shorter than its two quantize kernels and the FP8
    GEMM's roofline together, so the kernels view shares that time in their proportion: both
    parts shown, their sum the linear's time."""
    from laddersim.costs.gemm import gemm_time_s
    from laddersim.costs.quantized_gemm import quantize_time_s, quantized_class_split_s

    h200 = load_profile("h200-sxm-nvswitch")
    w = work(quant="fp8")
    seconds, source = quantized_linear_time_s(h200, w, 4, 8192, 1024, h200.gpu.peak_flops_per_s)
    quantize = quantize_time_s(h200, w, 4, 1024)
    gemm = float(gemm_time_s(h200.gpu, 4, 8192, 1024, 1, None, h200.gpu.peak_flops_per_s_for("fp8")))
    assert source != "SOL" and quantize + gemm > seconds
    split = quantized_class_split_s(h200, w, seconds, (4, 8192, 1024, None))
    assert split["generated"] == pytest.approx(seconds * quantize / (quantize + gemm))
    assert split["library_gemm"] > 0 and sum(split.values()) == pytest.approx(seconds)
    roomy = quantized_class_split_s(h200, w, 10 * (quantize + gemm), (4, 8192, 1024, None))
    assert roomy["generated"] == pytest.approx(quantize)  # a longer time: the quantize kernels at their price


def test_weight_only_streams_fewer_bytes_and_computes_at_16_bit():
    w16, w4 = work(), work(quant="int4-weight")
    peak = H100.gpu.peak_flops_per_s
    from laddersim.costs.gemm_tables import library_gemm_time_s

    small16, _ = library_gemm_time_s(H100, 1, 14336 * 2, 4096, 2, peak)
    small4, _ = quantized_linear_time_s(H100, w4, 1, 14336 * 2, 4096, peak)
    launch = H100.gpu.kernel_launch_s
    ratio = (4096 * 2 + 28672 * 4096 * (0.5 + 2 / 128) + 28672 * 2) / (2 * (4096 + 28672 * 4096 + 28672))
    assert small4 == pytest.approx(launch + (small16 - launch) * ratio)
    big16, _ = library_gemm_time_s(H100, 8192, 8192, 8192, 2, peak)
    big4, _ = quantized_linear_time_s(H100, w4, 8192, 8192, 8192, peak)
    assert big4 >= 2 * 8192**3 / (peak * H100.gpu.gemm_compute_efficiency.value)  # never above the 16-bit rate
    assert w16.weight_bytes == 2 and small4 < small16


def test_a_gpu_without_fp8_refuses_fp8_in_one_line(capsys):
    with pytest.raises(UserInputError, match="^quant: NVIDIA A100-SXM4-80GB has no FP8 tensor cores"):
        make_scenario(model="llama-3.1-8b", hardware="a100-sxm-nvswitch", tp=1, batch=1, prompt_len=16, gen_len=4, schedule="standard", quant="fp8-block")
    assert main(["simulate", "--model", "llama-3.1-8b", "--hardware", "a100-sxm-nvswitch", "--tp", "1",
                 "--quant", "fp8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no FP8 tensor cores" in err
    make_scenario(model="llama-3.1-8b", hardware="a100-sxm-nvswitch", tp=1, batch=1, prompt_len=16, gen_len=4, schedule="standard", quant="int4-weight")  # 16-bit compute


def test_dtype_fp8_is_refused_naming_quant(capsys):
    assert main(["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "1",
                 "--dtype", "fp8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: dtype: fp8") and "--quant fp8" in err


def test_fp8_serving_is_faster_than_16_bit_but_far_from_twice():
    # FP8 halves the weights' bytes, not the whole step: attention, norms and the quantize kernels remain.
    def tokens_per_s(quant):
        s = make_scenario(model="llama-3.1-70b", hardware="h100-sxm-nvswitch", tp=4, batch=32, prompt_len=1024,
                          gen_len=128, schedule="standard", framework="vllm",
                          quant=quant)
        from laddersim.simulation.simulate import simulate

        return simulate(s).summary()["tokens_per_s"]
    ratio = tokens_per_s("fp8") / tokens_per_s("none")
    assert 1.05 < ratio < 1.8


def _config(tmp_path, architecture: str, **extra) -> str:
    raw = {"architectures": [architecture], "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
           "num_key_value_heads": 4, "intermediate_size": 2816, "vocab_size": 32000, "head_dim": 64, **extra}
    path = tmp_path / f"{architecture}.json"
    path.write_text(json.dumps(raw))
    return str(path)


def test_qwen3_qk_norm_is_one_more_generated_kernel_with_its_bytes(tmp_path):
    from laddersim.model.shape import load_model_shape

    qwen3 = load_model_shape(_config(tmp_path, "Qwen3ForCausalLM"))
    plain = qwen3.model_copy(update={"qk_norm": False})
    phase = Phase("prefill", 2, 64)
    w = work()
    extra = op_times_s(qwen3, H100, w, 2, phase, np.array([64.0]))["rope"] - \
        op_times_s(plain, H100, w, 2, phase, np.array([64.0]))["rope"]
    # TP 2: 8 query and 2 KV heads of 64 per rank, 128 tokens, read and written at 2 bytes
    assert float(extra[0]) == pytest.approx(float(memory_bound_time_s(H100.gpu, 2 * 128 * (8 + 2) * 64 * 2)))
    assert op_kernels(qwen3, H100, w, 2, phase)["rope"]["generated"] == \
        op_kernels(plain, H100, w, 2, phase)["rope"]["generated"] + 1


def test_qwen2_qkv_bias_is_read_in_the_gemm_epilogue_no_kernel(tmp_path):
    from laddersim.model.shape import load_model_shape

    qwen2 = load_model_shape(_config(tmp_path, "Qwen2ForCausalLM"))
    plain = qwen2.model_copy(update={"qkv_bias": False})
    w = work()
    extra = op_times_s(qwen2, H100, w, 2, DECODE, np.array([64.0]))["qkv"] - \
        op_times_s(plain, H100, w, 2, DECODE, np.array([64.0]))["qkv"]
    gpu = H100.gpu
    assert float(extra[0]) == pytest.approx((8 + 2 * 2) * 64 * 2 / (gpu.memory_bandwidth_bytes_per_s
                                                                      * gpu.gemm_memory_efficiency.value))
    assert op_kernels(qwen2, H100, w, 2, DECODE)["qkv"] == op_kernels(plain, H100, w, 2, DECODE)["qkv"]


def test_a_validate_tables_fp8_rows_are_fp8_serving(tmp_path):
    from laddersim.validation.core import check_rows, read_measured, ValidationSetup

    table = tmp_path / "fp8.csv"
    table.write_text("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s,dtype,quant,kv_cache_dtype\n"
                     "llama-3.1-8b,1,1,8,128,128,on,standard,100,fp8,,\n"
                     "llama-3.1-8b,1,1,8,128,128,on,standard,100,bfloat16,int8-weight,\n")
    scenarios = check_rows(read_measured(table), ValidationSetup(framework="vllm"))
    first, second = (s.workload for s in scenarios)
    assert (first.dtype, first.quant, first.kv_cache_dtype) == ("float16", "fp8", "fp8")
    assert (second.dtype, second.quant, second.kv_cache_dtype) == ("bfloat16", "int8-weight", "auto")


def test_quantization_names_agree():
    from laddersim.model.quantization import QUANTIZATIONS
    from laddersim.support.choices import QUANTS

    assert tuple(QUANTIZATIONS) == QUANTS == tuple(Workload.model_fields["quant"].annotation.__args__)
    assert isinstance(LLAMA_8B, ModelShape)


def test_block_fp8_reads_its_table_where_it_is_reliable_else_the_per_tensor_one():
    peak = H100.gpu.peak_flops_per_s
    # AIConfigurator h100_sxm vllm 0.24.0, gemm_dtype fp8_block, m = n = k = 8192: 911.3 us
    block, _ = quantized_linear_time_s(H100, work(quant="fp8-block"), 8192, 8192, 8192, peak)
    assert block * 1e6 == pytest.approx(911.3, rel=1e-3)
    # a decode GEMM: the block table's rows there are host launch time (no CUDA graph); the
    # per-tensor table's time stands in for it
    small_block, source = quantized_linear_time_s(H100, work(quant="fp8-block"), 1, 8192, 8192, peak)
    small_tensor, _ = quantized_linear_time_s(H100, work(quant="fp8"), 1, 8192, 8192, peak)
    assert small_block == small_tensor and source == "SILICON"


def test_serving_takes_the_quantization(capsys):
    base = ["serving", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "1", "--framework",
            "vllm", "--rate", "2", "--requests", "40", "--prompt-len", "256", "--gen-len", "32", "--schedule",
            "standard", "--no-progress", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)[0]
    assert main(base + ["--quant", "fp8", "--kv-cache-dtype", "fp8"]) == 0
    fp8 = json.loads(capsys.readouterr().out)[0]
    assert fp8["tpot_p50_s"] < plain["tpot_p50_s"]
    assert main(base + ["--quant", "fp8", "--hardware", "a100-sxm-nvswitch"]) == 2
    assert "no FP8 tensor cores" in capsys.readouterr().err


def test_fp8_as_a_dtype_is_refused_by_validate_and_sweep(tmp_path, capsys):
    assert main(["validate", "--dtype", "fp8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: dtype: fp8") and "--quant fp8" in err
    grid = tmp_path / "grid.yaml"
    grid.write_text("models: [llama-3.1-8b]\nhardware: [h100-sxm-nvswitch]\ntp: [1]\ndtype: [fp8]\n")
    assert main(["sweep", str(grid), "--out", str(tmp_path / "out"), "--no-progress", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dtype: fp8 is not an element type" in err


# Llama-2-7B and -70B (config.json of meta-llama/Llama-2-7b-hf and Llama-2-70b-hf on Hugging Face).
LLAMA_2 = {
    "7b": ModelShape(name="llama-2-7b", n_layers=32, dim=4096, n_heads=32, n_kv_heads=32, intermediate_size=11008,
                     vocab_size=32000, max_position_embeddings=4096),
    "70b": ModelShape(name="llama-2-70b", n_layers=80, dim=8192, n_heads=64, n_kv_heads=8, intermediate_size=28672,
                      vocab_size=32000, max_position_embeddings=4096),
}


def test_trtllm_fp8_throughput_on_h100_within_ten_percent_median():
    # NVIDIA/TensorRT-LLM docs/source/performance.md at release v0.6.1, "Peak Throughput", H100 SXM
    # FP8 (FP8 weights and KV cache), output tokens/s per GPU x TP: (model, tp, batch, prompt, output, tokens/s).
    rows = [("7b", 1, 768, 128, 128, 19694), ("7b", 1, 112, 128, 2048, 6818), ("7b", 1, 80, 2048, 128, 2244),
            ("7b", 1, 48, 2048, 2048, 2740), ("70b", 2, 1024, 128, 128, 5314), ("70b", 4, 480, 128, 2048, 5944),
            ("70b", 2, 96, 2048, 128, 612), ("70b", 2, 64, 2048, 2048, 1094)]
    from laddersim.simulation.simulate import simulate

    errors = []
    for model, tp, batch, prompt, output, measured in rows:
        # TensorRT-LLM before 0.10 reads K/V per query head in generation on Hopper (its XQA
        # kernels came with 0.10: laddersim.validation.static_external).
        scenario = make_scenario(model=LLAMA_2[model], hardware="h100-sxm-nvswitch", tp=tp, batch=batch,
                                 prompt_len=prompt, gen_len=output, schedule="standard", dtype="float16",
                                 kv_reads="repeat_interleave", framework="trtllm", quant="fp8", kv_cache_dtype="fp8")
        errors.append(simulate(scenario).summary()["tokens_per_s"] / measured - 1)
    assert float(np.median(np.abs(errors))) <= 0.10
    assert max(map(abs, errors)) <= 0.15
