"""The TensorRT-engine flow's FP8 linears (framework trtllm-session): the quantize layer TensorRT
fuses into the kernel producing a linear's input costs nothing of its own; the others keep theirs."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.costs.gemm import memory_bound_time_s
from laddersim.costs.kernel_counts import op_kernels
from laddersim.costs.op_costs import Phase, op_times_s
from laddersim.costs.quantized_gemm import quantize_time_s
from laddersim.hardware.profile import load_profile
from laddersim.model.framework import FRAMEWORKS_DIR
from laddersim.model.shape import PRESETS
from laddersim.model.workload import Workload

LLAMA_8B = PRESETS["llama-3.1-8b"]
PREFILL = Phase("prefill", 1, 2048)


def unfused_framework(tmp_path) -> str:
    """trtllm-session as shipped but with every FP8 linear quantizing its input in its own kernels."""
    text = (FRAMEWORKS_DIR / "trtllm-session.yaml").read_text()
    kept = text.split("\nquantize_fused:")[0] + "\n"
    path = tmp_path / "trtllm-session-unfused.yaml"
    path.write_text(kept.replace("name: trtllm-session", "name: trtllm-session-unfused"))
    return str(path)


def fp8_work(framework: str) -> Workload:
    return Workload(batch=1, prompt_len=2048, gen_len=1, framework=framework, kv_cache="dynamic",
                    kv_reads="per_kv_head", quant="fp8", kv_cache_dtype="fp8", dtype="float16")


def test_fused_quantize_drops_its_kernels_where_the_gemm_is_priced_by_roofline(tmp_path):
    l40s = load_profile("l40s-pcie")  # FP8 tensor cores, no FP8 GEMM table: roofline + quantize kernels
    kv = np.array([2048.0])
    fused = op_times_s(LLAMA_8B, l40s, fp8_work("trtllm-session"), 1, PREFILL, kv)
    unfused = op_times_s(LLAMA_8B, l40s, fp8_work(unfused_framework(tmp_path)), 1, PREFILL, kv)
    work = fp8_work("trtllm-session")
    hidden, inter = 4096, 14336  # Llama-3.1-8B
    # dynamic per-tensor: a max reduction reads the 2048 x 4096 fp16 input, the conversion reads it and writes FP8
    quantize_hidden = float(memory_bound_time_s(l40s.gpu, 2048 * hidden * 2 * 2 + 2048 * hidden, kernels=2))
    assert quantize_time_s(l40s, work, 2048, hidden) == pytest.approx(quantize_hidden)
    assert float(unfused["qkv"][0] - fused["qkv"][0]) == pytest.approx(quantize_hidden)
    # gate and up run as two GEMMs over the same input: each had its quantize kernels
    assert float(unfused["gate_up"][0] - fused["gate_up"][0]) == pytest.approx(2 * quantize_hidden)
    assert float(unfused["down"][0] - fused["down"][0]) == pytest.approx(quantize_time_s(l40s, work, 2048, inter))
    assert float(unfused["o_proj"][0]) == pytest.approx(float(fused["o_proj"][0]))  # the attention plugin's output
    counts = op_kernels(LLAMA_8B, l40s, work, 1, PREFILL)
    assert counts["qkv"] == counts["gate_up"] == counts["down"] == {"library_gemm": 1}
    assert counts["o_proj"] == {"library_gemm": 1, "generated": 2}


def test_a_measured_fp8_table_keeps_its_time(tmp_path):
    h100 = load_profile("h100-sxm-nvswitch")  # its FP8 table's rows include the layer's own quantization
    kv = np.array([2048.0])
    fused = op_times_s(LLAMA_8B, h100, fp8_work("trtllm-session"), 1, PREFILL, kv)
    unfused = op_times_s(LLAMA_8B, h100, fp8_work(unfused_framework(tmp_path)), 1, PREFILL, kv)
    for kind in ("qkv", "o_proj", "gate_up", "down"):
        assert float(fused[kind][0]) == pytest.approx(float(unfused[kind][0]))
