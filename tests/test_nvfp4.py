"""NVFP4 serving (laddersim.model.quantization ``nvfp4``, laddersim.costs.quantized_gemm): its GEMM
from the B200 table at a grid point, the FP4 roofline without a table, the weights' bytes by hand,
its one quantize kernel per linear input, and the GPUs without FP4 tensor cores refusing it."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.cli import main
from laddersim.costs.gemm import gemm_time_s, memory_bound_time_s
from laddersim.costs.kernel_counts import op_kernels
from laddersim.costs.memory_fit import memory_use
from laddersim.costs.op_costs import Phase
from laddersim.costs.quantized_gemm import quantize_time_s, quantized_linear_time_s
from laddersim.errors import UserInputError
from laddersim.hardware.profile import load_profile
from laddersim.model.shape import PRESETS
from laddersim.simulation.simulate import make_scenario

B200 = load_profile("b200-sxm-nvswitch")
LLAMA_8B = PRESETS["llama-3.1-8b"]
DECODE = Phase("decode", 1, 1)
from test_quantization import work  # noqa: E402  (the same one-sequence vLLM workload)

NVFP4_BYTES = 0.5 + 1 / 16  # an E2M1 nibble and a sixteenth of an E4M3 block scale


@pytest.mark.parametrize("m, n, k, original_ms", [
    # ai-dynamo/aiconfigurator @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce b200_sxm/gemm/vllm/0.24.0/
    # gemm_perf.parquet, gemm_dtype nvfp4, latency (ms): rows above the decode window, kept as they are.
    (8192, 8192, 8192, 0.25759466489156085),
    (1024, 10240, 8192, 0.04577599962552389),
    (8192, 4096, 4096, 0.07784533500671387),
    (256, 5120, 8192, 0.014890667051076889),
])
def test_nvfp4_gemm_at_a_table_point_is_the_tables_time(m, n, k, original_ms):
    seconds, source = quantized_linear_time_s(B200, work(quant="nvfp4"), m, n, k, B200.gpu.peak_flops_per_s)
    assert source == "SILICON"
    assert seconds * 1e3 == pytest.approx(original_ms, rel=1e-4)


def test_nvfp4_beats_fp8_on_the_b200_tables_where_compute_bound():
    peak = B200.gpu.peak_flops_per_s
    fp4, _ = quantized_linear_time_s(B200, work(quant="nvfp4"), 8192, 8192, 8192, peak)
    fp8, _ = quantized_linear_time_s(B200, work(quant="fp8"), 8192, 8192, 8192, peak)
    assert fp4 < 0.5 * fp8  # twice the tensor-core peak, and the FP8 row ran below its own


def test_without_a_table_nvfp4_is_the_fp4_roofline_plus_its_quantize_kernel():
    gpu = B200.gpu.model_copy(update={"quantized_gemm_tables": []})
    bare = B200.model_copy(update={"gpu": gpu})
    w = work(quant="nvfp4")
    seconds, source = quantized_linear_time_s(bare, w, 64, 4096, 4096, gpu.peak_flops_per_s)
    roofline = float(gemm_time_s(gpu, 64, 4096, 4096, NVFP4_BYTES, None, 9000e12))
    # one kernel reads the 16-bit input and writes its FP4 copy with one E4M3 scale per 16
    quantize = float(memory_bound_time_s(gpu, 64 * 4096 * 2 + 64 * 4096 * NVFP4_BYTES, kernels=1))
    assert source == "SOL" and seconds == pytest.approx(roofline + quantize)
    assert quantize_time_s(bare, w, 64, 4096) == pytest.approx(quantize)
    fused, _ = quantized_linear_time_s(bare, w, 64, 4096, 4096, gpu.peak_flops_per_s, input_quantized=True)
    assert fused == pytest.approx(roofline)  # a producer wrote the input in FP4 already


def test_an_nvfp4_models_bytes_by_hand():
    # Llama-3.1-8B at TP 1: 32 layers of 218,103,808 linear weights (QKV, O, gate/up, down) at
    # 0.5 + 1/16 byte; the embedding, LM head and norms stay 16-bit.
    linears = 32 * 218_103_808
    rest = 2 * 128_256 * 4096 + 32 * 2 * 4096 + 4096
    fp4 = memory_use(LLAMA_8B, B200, work(quant="nvfp4", kv_cache_dtype="fp8"), 1)
    assert fp4.weights_bytes == pytest.approx(linears * 0.5625 + rest * 2, rel=1e-12)
    assert fp4.kv_cache_bytes == 136 * 2 * 32 * 8 * 128 * 1  # FP8 KV: one byte a K or V element


def test_one_quantize_kernel_per_linear_input(capsys):
    counts = op_kernels(LLAMA_8B, B200, work(quant="nvfp4"), 1, DECODE)
    for kind in ("qkv", "o_proj", "gate_up", "down"):
        assert counts[kind] == {"library_gemm": 1, "generated": 1}
    assert counts["lm_head"] == {"library_gemm": 1}  # the LM head stays 16-bit
    assert main(["kernels", "--model", "llama-3.1-8b", "--hardware", "b200-sxm-nvswitch", "--tp", "1",
                 "--framework", "vllm", "--quant", "nvfp4"]) == 0
    out = capsys.readouterr().out
    for kind in ("qkv", "o_proj", "gate_up", "down"):
        assert any(line.split()[:3] == [f"{kind}.quantize", "generated", "1"] for line in out.splitlines())


@pytest.mark.parametrize("hardware, gpu, allowed", [
    ("h100-sxm-nvswitch", "NVIDIA H100", "allowed: none, fp8, fp8-block, int8-weight, int4-weight"),
    ("a100-sxm-nvswitch", "NVIDIA A100", "allowed: none, int8-weight, int4-weight"),
])
def test_a_gpu_without_fp4_refuses_nvfp4_in_one_line(hardware, gpu, allowed, capsys):
    with pytest.raises(UserInputError, match=f"^quant: nvfp4 runs FP4 tensor-core GEMMs and {gpu}.*{allowed}$"):
        make_scenario(model="llama-3.1-8b", hardware=hardware, tp=1, batch=1, prompt_len=16, gen_len=4,
                      schedule="standard", quant="nvfp4")
    assert main(["simulate", "--model", "llama-3.1-8b", "--hardware", hardware, "--tp", "1", "--quant", "nvfp4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no peak_tflops_fp4" in err


def test_nvfp4_serving_on_b200_is_faster_than_fp8_at_decode():
    def tpot(quant):
        s = make_scenario(model="llama-3.1-8b", hardware="b200-sxm-nvswitch", tp=1, batch=32, prompt_len=512,
                          gen_len=64, schedule="standard", framework="vllm", quant=quant, kv_cache_dtype="fp8")
        from laddersim.simulation.simulate import simulate

        return simulate(s).summary()["decode_s"]
    assert tpot("nvfp4") < tpot("fp8")


def test_a_closed_loop_rows_nvfp4_is_nvfp4_linears_and_an_fp8_kv_cache(tmp_path):
    from laddersim.api.closed_loop_validation import validate_closed_loop
    from laddersim.model.shape import load_model_shape
    from laddersim.traffic.arrivals import Requests
    from laddersim.traffic.engines import benchmark_options
    from laddersim.traffic.options import ServingOptions
    from laddersim.traffic.run import serve_closed_loop, serving_scenario

    head = "model,tp,hardware,engine,engine_version,dtype,prompt_len,gen_len,concurrency,ttft_ms,tpot_ms,source\n"
    table = tmp_path / "closed.csv"
    table.write_text(head + "llama-3.1-8b,1,B200-SXM-180GB,vllm,0.1,nvfp4,1024,32,4,50,4,x\n"
                            "llama-3.1-8b,1,H100-SXM5-80GB,vllm,0.1,fp4,1024,32,4,50,4,x\n")
    score = validate_closed_loop(table)[0]
    assert len(score.rows) == 1 and "FP4 tensor-core" in score.skipped["reason"].iloc[0]
    n = 20 * 4  # aiperf's run: 20 x C requests from a burst of C
    requests = Requests(np.zeros(n), np.full(n, 1024, dtype=np.int64), np.full(n, 32, dtype=np.int64))
    by_hand = serve_closed_loop(serving_scenario(load_model_shape("llama-3.1-8b"), "b200-sxm-nvswitch", 1, "standard",
                                                 "bfloat16", framework="vllm", quant="nvfp4", kv_cache_dtype="fp8"),
                                requests, benchmark_options("vllm", ServingOptions(), 4, 1024, "aiconfigurator"), 4,
                                warmup=0).metrics
    assert score.rows.iloc[0]["predicted_tpot_ms"] == pytest.approx(by_hand["tpot_mean_s"] * 1e3)


def test_the_resampling_tool_takes_the_nvfp4_rows_of_the_parquet(tmp_path):
    import importlib.util
    from pathlib import Path

    import pandas as pd

    path = Path(__file__).resolve().parents[1] / "tools" / "fits" / "resample_reference.py"
    spec = importlib.util.spec_from_file_location("resample_reference", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    parquet = tmp_path / "gemm_perf.parquet"
    pd.DataFrame({"gemm_dtype": ["nvfp4", "fp8", "nvfp4", "nvfp4"], "m": [128, 128, 16384, 1024],
                  "n": [4096] * 4, "k": [4096] * 4, "latency": [0.01, 0.5, 9.0, 0.016]}).to_parquet(parquet)
    rows = tool.read_nvfp4_parquet(parquet)  # the nvfp4 rows up to m = 8192, milliseconds to microseconds
    assert rows.to_dict("list") == {"m": [128, 1024], "n": [4096, 4096], "k": [4096, 4096],
                                    "time_us": pytest.approx([10.0, 16.0])}
