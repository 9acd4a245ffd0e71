"""The eager-session era of TensorRT-LLM and TurboMind (framework ``trtllm-session``) and the
framework settings it states: collectives launched from the host, the framework's own GEMM table,
gate and up as two GEMMs, RoPE inside attention; and the static tables' engine/version rule."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.costs.allreduce import allreduce_time_s, launch_correction_s
from laddersim.costs.gemm_tables import library_gemm_time_s, model_gemm_table
from laddersim.costs.op_costs import framework_linear_shapes, op_times_s
from laddersim.costs.pass_shapes import Phase
from laddersim.hardware.profile import load_profile
from laddersim.hardware.table_files import read_gemm_table_csv
from laddersim.model.framework import framework_names, load_framework
from laddersim.simulation.simulate import make_scenario
from laddersim.validation.static_external import _framework, first_token_from_decode_step

SESSION = load_framework("trtllm-session")
A100 = load_profile("a100-sxm-nvswitch")


def test_an_eager_framework_pays_the_profiles_host_launch_per_collective():
    """Golden: on a graph-mode profile every AllReduce of the eager session costs the profile's
    ``eager_launch_us`` (A100: 16 us) more than the same framework launched from a graph."""
    graph = SESSION.model_copy(update={"collective_launch": None})
    assert A100.collectives.mode == "graph" and A100.collectives.eager_launch_us.value == 16
    for tp, size in ((2, 8192.0), (4, 65536.0), (8, 4.0 * 2**20)):
        eager_s = allreduce_time_s(A100, tp, size, SESSION)
        assert eager_s - allreduce_time_s(A100, tp, size, graph) == pytest.approx(16e-6, abs=1e-12)
    # a graph-launching framework on an eager profile has the launch removed
    eager_profile = A100.model_copy(update={"collectives": A100.collectives.model_copy(update={"mode": "eager"})})
    graphed = SESSION.model_copy(update={"collective_launch": SESSION.collective_launch.model_copy(
        update={"value": "graph"})})
    assert launch_correction_s(eager_profile, graphed) == pytest.approx(-16e-6)
    assert launch_correction_s(eager_profile, SESSION) == 0.0


def test_only_the_session_states_its_launch():
    """Every other shipped framework launches as its profile simulates (no correction)."""
    for name in framework_names():
        fw = load_framework(name)
        assert (launch_correction_s(A100, fw) != 0.0) == (name == "trtllm-session"), name


def test_the_sessions_allreduce_is_nccl_at_every_size():
    """TensorRT-LLM 0.x built without use_custom_all_reduce and TurboMind 0.1 run NCCL."""
    graph = SESSION.model_copy(update={"collective_launch": None})
    nccl_only = load_framework("gpt-fast").model_copy(update={"collective_handoff_us": None})
    for size in (4096.0, 2.0**20, 64.0 * 2**20):
        assert allreduce_time_s(A100, 4, size, graph) == pytest.approx(allreduce_time_s(A100, 4, size, nccl_only))


def test_a_frameworks_gemm_library_picks_its_table():
    """Golden rows: TensorRT-LLM's linears are read from AIConfigurator's TRT-LLM 1.0.0 A100 table
    (m = 1, n = k = 4096: its row), the other frameworks' from the profile's model (SGLang) table."""
    assert model_gemm_table(A100, "TRT-LLM").file == "tables/aic_gemm_a100_sxm_trtllm_1.0.0.csv"
    assert model_gemm_table(A100, None).file == "tables/aic_gemm_a100_sxm_sglang_0.5.10.csv"
    assert model_gemm_table(A100, "no such library") is model_gemm_table(A100)
    peak = A100.gpu.peak_flops_per_s_for("float16")
    for library, file in (("TRT-LLM", "aic_gemm_a100_sxm_trtllm_1.0.0.csv"),
                          (None, "aic_gemm_a100_sxm_sglang_0.5.10.csv")):
        rows = read_gemm_table_csv(f"{A100.base_dir}/tables/{file}")
        row = rows[(rows.m == 1) & (rows.n == 4096) & (rows.k == 4096)].iloc[0]
        seconds, source = library_gemm_time_s(A100, 1, 4096, 4096, 2, peak, library)
        assert source == "SILICON" and seconds == pytest.approx(row.time_us * 1e-6, rel=1e-9)
    assert load_framework("trtllm").gemm_library.value == "TRT-LLM"


def test_gate_and_up_run_as_two_gemms_and_rope_inside_attention():
    """The session's gate_up is two GEMMs of half the width (each the table's time at that width),
    and its RoPE launches no kernel of its own (its bytes only)."""
    scenario = make_scenario(model="llama-3.1-8b", hardware="a100-sxm-nvswitch", tp=1, batch=1, prompt_len=128,
                             gen_len=8, schedule="standard", dtype="float16", framework="trtllm-session")
    phase = Phase("decode", 1, 1)
    shapes = framework_linear_shapes(SESSION, scenario.model, 1, phase)
    m, n, k, parts = shapes["gate_up"]
    assert parts == (n // 2, n // 2) and n == 2 * 14336
    times = op_times_s(scenario.model, A100, scenario.workload, 1, phase, np.array([128.0]))
    peak = A100.gpu.peak_flops_per_s_for("float16")
    half = library_gemm_time_s(A100, 1, n // 2, k, 2, peak, "TRT-LLM")[0]
    assert float(times["gate_up"][0]) == pytest.approx(2 * half)
    assert float(times["rope"][0]) < A100.gpu.kernel_launch_s  # no floor: fused into the attention kernel
    assert framework_linear_shapes(load_framework("trtllm"), scenario.model, 1, phase)["gate_up"][3] == ()


@pytest.mark.parametrize(("engine", "version", "framework"), [
    ("trtllm", "0.5", "trtllm-session"), ("trtllm", "0.6.1", "trtllm-session"),
    ("tensorrt-llm", "0.12.0", "trtllm-session"), ("trtllm", "1.0.0rc3", "trtllm"), ("trtllm", "1.3.0rc20", "trtllm"),
    ("lmdeploy-turbomind", "0.1.0a1", "trtllm-session"), ("vllm", "0.12.0", "vllm")])
def test_an_engine_version_maps_to_its_framework(engine, version, framework):
    assert _framework(engine, version) == framework


def test_turbomind_makes_its_first_token_in_a_decode_step():
    """By hand: prefill of prompt - 1 tokens 30 ms and the step over the last prompt token 12 ms
    (the run of prompt - 1 tokens and 2 generated), then 7 more decode steps of 10 ms, batch 2 x 8
    tokens: TTFT 42 ms, the run 42 + 70 = 112 ms, 16 / 0.112 tokens/s; a one-token prompt: TTFT the
    step alone."""
    summary = {"prompt_len": 128, "gen_len": 8, "batch": 2, "decode_step_s": 0.010, "decode_s": 0.070,
               "prefill_s": 0.031, "ttft_s": 0.031, "total_s": 0.101, "tokens_per_s": 16 / 0.101}
    asked = []

    class Fake:
        def summary(self):
            return {"prefill_s": 0.030, "decode_step_s": 0.012}

    def scenario_of(prompt_len, gen_len):
        asked.append((prompt_len, gen_len))
        return None

    out = first_token_from_decode_step(summary, scenario_of, lambda _: Fake())
    assert asked == [(127, 2)]
    assert out["ttft_s"] == pytest.approx(0.042) and out["total_s"] == pytest.approx(0.112)
    assert out["tokens_per_s"] == pytest.approx(16 / 0.112)
    one = first_token_from_decode_step({**summary, "prompt_len": 1}, scenario_of, lambda _: Fake())
    assert one["ttft_s"] == pytest.approx(0.012) and one["prefill_s"] == 0.0 and asked[-1] == (1, 2)


LLAMA_2 = {  # architecture fields of the Hugging Face config.json of meta-llama/Llama-2-{7b,70b}-hf
    "llama-2-7b": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32,
                   "intermediate_size": 11008},
    "llama-2-70b": {"num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8,
                    "intermediate_size": 28672}}
# InternLM/lmdeploy @ 3e391df4673326f79363eebe030876861a9b7090 : docs/en/benchmark/a100_fp16.md (TurboMind
# v0.1.0a1, 8x A100-80G, fp16): batch, tp, prompt, output, throughput (out tok/s), FTL ave (s), 50% (s).
LMDEPLOY_A100_ROWS = [("llama-2-7b", 1, 1, 128, 128, 102.21, 0.022, 0.010),
                      ("llama-2-7b", 1, 1, 2048, 128, 86.1, 0.139, 0.010),
                      ("llama-2-70b", 4, 1, 128, 128, 33.63, 0.074, 0.029),
                      ("llama-2-70b", 4, 1, 2048, 2048, 31.9, 0.405, 0.031),
                      ("llama-2-70b", 4, 16, 128, 2048, 482.99, 0.403, 0.033)]


def write_llama_2_models(folder) -> None:
    """``LLAMA_2``'s configs as ``<name>.json`` files in ``folder``."""
    import json

    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
            "max_position_embeddings": 4096, "tie_word_embeddings": False, "rms_norm_eps": 1e-05,
            "rope_theta": 10000.0, "torch_dtype": "float16", "hidden_act": "silu", "head_dim": 128}
    folder.mkdir(parents=True, exist_ok=True)
    for name, fields in LLAMA_2.items():
        (folder / f"{name}.json").write_text(json.dumps({**base, **fields}))


def test_turbomind_a100_rows_within_6_percent(tmp_path):
    """Cited batch-1 and batch-16 TurboMind rows at TP 1 and TP 4, shipped A100 profile, no fit:
    tokens/s and TTFT within 6%, TPOT within 6% plus the source's 1 ms rounding."""
    from laddersim.validation.static_external import score_static

    write_llama_2_models(tmp_path / "models")
    lines = ["model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,engine,engine_version,hardware,dtype,"
             "tokens_per_s,ttft_s,tpot_s,source"]
    lines += [f"{m},{tp},1,{b},{p},{g},on,standard,lmdeploy-turbomind,0.1.0a1,A100-SXM4-80GB,float16,"
              f"{tok},{ttft},{tpot},x" for m, tp, b, p, g, tok, ttft, tpot in LMDEPLOY_A100_ROWS]
    (tmp_path / "static.csv").write_text("\n".join(lines) + "\n")
    rows = score_static(tmp_path / "static.csv").rows
    assert len(rows) == len(LMDEPLOY_A100_ROWS)
    for _, row in rows.iterrows():
        assert abs(row["tokens_per_s_error"]) <= 0.06, row.to_dict()
        assert abs(row["ttft_s_error"]) <= 0.06, row.to_dict()
        assert abs(row["predicted_tpot_s"] - row["tpot_s"]) <= 0.06 * row["tpot_s"] + 0.0005, row.to_dict()
