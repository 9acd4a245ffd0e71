"""validate on static-batch tables of other engines and GPUs: engine -> framework and GPU -> profile
mapped and printed, 16-bit rows scored on tokens/s, TTFT and TPOT, the others skipped with the reason."""

from __future__ import annotations

import subprocess
import sys

import pytest

from laddersim.simulation.simulate import make_scenario, simulate
from laddersim.validation.static_external import (SESSION_CALL_S, is_static_table, score_static, session_call_fit_s,
                                                  skipped_reasons)

HEADER = ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,engine,engine_version,hardware,dtype,"
          "tokens_per_s,ttft_s,tpot_s,source\n")


@pytest.fixture()
def table(tmp_path):
    path = tmp_path / "static.csv"
    path.write_text(HEADER
                    + "llama-3.1-8b,1,1,1,128,64,on,standard,lmdeploy-turbomind,0.1,A100-SXM4-80GB,float16,100,"
                      "0.02,0.01,x\n"
                    + "llama-3.1-8b,1,1,1,128,1,on,standard,trtllm,0.6,A100-SXM4-80GB,float16,,0.02,,x\n"
                    + "llama-3.1-8b,1,1,1,128,64,on,standard,trtllm,0.6,H100-SXM5-80GB,fp8,300,,,x\n"
                    + "llama-3.1-8b,1,1,512,4096,4096,on,standard,trtllm,0.6,A100-SXM4-80GB,float16,900,,,x\n")
    return path


def test_rows_scored_as_their_engine_and_gpu_run(table):
    score = score_static(table)
    assert is_static_table(table)
    # TurboMind 0.1 and TensorRT-LLM 0.6 (the TensorRT-engine flow): the eager-session framework
    assert list(score.rows["framework"]) == ["trtllm-session"] * 3
    assert list(score.rows["profile"]) == ["a100-sxm-nvswitch", "a100-sxm-nvswitch", "h100-sxm-nvswitch"]

    def run(prompt_len, gen_len, **extra):
        return simulate(make_scenario(model="llama-3.1-8b", hardware=extra.pop("hardware", "a100-sxm-nvswitch"), tp=1,
                                      batch=1, prompt_len=prompt_len, gen_len=gen_len, schedule="standard",
                                      dtype="float16", framework="trtllm-session", **extra)).summary()

    expected, context = run(128, 64), run(127, 2)
    first = score.rows.iloc[0]  # TurboMind: the first token is a decode step after a 127-token prefill
    step = expected["decode_step_s"]
    assert first["predicted_tpot_s"] == pytest.approx(step)
    assert first["tpot_s_error"] == pytest.approx(step / 0.01 - 1)
    ttft = context["prefill_s"] + context["decode_step_s"]
    assert first["predicted_ttft_s"] == pytest.approx(ttft)
    assert first["tokens_per_s_error"] == pytest.approx(64 / (ttft + expected["decode_s"]) / 100 - 1)
    second = score.rows.iloc[1]  # TTFT only: the other metrics are not scored
    # TensorRT-LLM 0.x's session benchmark: the prefill and the runtime's host work per call
    assert second["predicted_ttft_s"] == pytest.approx(run(128, 1)["ttft_s"] + SESSION_CALL_S)
    assert second["ttft_s_error"] == pytest.approx(second["predicted_ttft_s"] / 0.02 - 1)
    assert second["tokens_per_s_error"] != second["tokens_per_s_error"]  # NaN
    # FP8 serving (FP8 linears and KV cache over float16), TensorRT-LLM 0.6 on Hopper: K/V read per query head
    fp8 = run(128, 64, hardware="h100-sxm-nvswitch", quant="fp8", kv_cache_dtype="fp8", kv_reads="repeat_interleave")
    assert score.rows.iloc[2]["tokens_per_s_error"] == pytest.approx(64 / (fp8["total_s"] + SESSION_CALL_S) / 300 - 1)
    assert score.mappings == [
        "engine lmdeploy-turbomind -> trtllm-session kernels; hardware A100-SXM4-80GB -> a100-sxm-nvswitch",
        "engine trtllm -> trtllm-session kernels; hardware A100-SXM4-80GB -> a100-sxm-nvswitch",
        "engine trtllm -> trtllm-session kernels; hardware H100-SXM5-80GB -> h100-sxm-nvswitch"]
    reasons = skipped_reasons(score.skipped)
    assert len(reasons) == 1 and "static batch" in reasons[0]
    summary = score.summary.set_index(["hardware", "engine"])
    assert summary.loc[("A100-SXM4-80GB", "trtllm"), "ttft_s_n"] == 1
    assert summary.loc[("A100-SXM4-80GB", "lmdeploy-turbomind"), "tpot_s_n"] == 1
    assert summary.loc[("H100-SXM5-80GB", "trtllm"), "tokens_per_s_n"] == 1


def test_cli_prints_the_mapping_and_the_groups_and_writes_the_scores(table, tmp_path):
    import pandas as pd

    report = tmp_path / "report"
    run = subprocess.run([sys.executable, "-m", "laddersim", "validate", str(table), "--report", str(report)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "engine trtllm -> trtllm-session kernels; hardware A100-SXM4-80GB -> a100-sxm-nvswitch" in run.stdout
    assert "tpot_s_median_abs_err_pct" in run.stdout
    assert run.stderr.strip().splitlines()[-1] == f"report: {report}"
    score = score_static(table)  # the files are the score's frames, for the user's other tools
    rows, skipped = pd.read_csv(report / "static_rows.csv"), pd.read_csv(report / "static_skipped.csv")
    assert list(rows["predicted_ttft_s"]) == pytest.approx(list(score.rows["predicted_ttft_s"]), rel=1e-5)
    assert len(skipped) == 1 and list(rows.columns) == list(score.rows.columns)
    summary = pd.read_csv(report / "static_summary.csv")
    assert list(summary["rows"]) == list(score.summary["rows"])
    again = (report / "static_rows.csv").read_bytes()
    assert subprocess.run([sys.executable, "-m", "laddersim", "validate", str(table), "--report", str(report)],
                          capture_output=True).returncode == 0
    assert (report / "static_rows.csv").read_bytes() == again  # deterministic
    bad = subprocess.run([sys.executable, "-m", "laddersim", "validate", str(table), "--report", str(table)],
                         capture_output=True, text=True)  # a file, not a folder: one line, before any pricing
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [bad.stderr.strip().splitlines()[-1]]
    assert bad.stderr.startswith("error: report:")


def test_an_unknown_engine_is_one_line(tmp_path):
    path = tmp_path / "static.csv"
    path.write_text(HEADER + "llama-3.1-8b,1,1,1,128,64,on,standard,ollama,1,A100-SXM4-80GB,float16,100,,,x\n")
    run = subprocess.run([sys.executable, "-m", "laddersim", "validate", str(path)], capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.strip().splitlines()[-1].startswith("error: measured: engine 'ollama'")


# NVIDIA/TensorRT-LLM docs/source/performance.md as of v0.6.1, 'Low Latency' table (batch 1, output
# length 1, measured with TensorRT-LLM 0.5): model, TP, GPU, dtype, input length, first-token ms.
SESSION_FIRST_TOKEN_ROWS = [("llama-2-7b", 1, "H100-SXM5-80GB", "fp8", 128, 7), ("llama-2-7b", 1, "H100-SXM5-80GB", "fp8", 2048, 36),
                            ("llama-2-70b", 4, "H100-SXM5-80GB", "fp8", 128, 26), ("llama-2-70b", 4, "H100-SXM5-80GB", "fp8", 2048, 109),
                            ("llama-2-7b", 1, "L40S", "fp8", 128, 14), ("llama-2-7b", 1, "L40S", "fp8", 2048, 73),
                            ("llama-2-7b", 1, "A100-SXM4-80GB", "float16", 128, 16),
                            ("llama-2-7b", 1, "A100-SXM4-80GB", "float16", 2048, 133),
                            ("llama-2-70b", 4, "A100-SXM4-80GB", "float16", 128, 47),
                            ("llama-2-70b", 4, "A100-SXM4-80GB", "float16", 2048, 377)]


def test_session_call_overhead_does_not_depend_on_the_gpu(tmp_path):
    """The per-call host work is the runtime's, not the GPU's: fitted on any two GPUs' rows (the
    third held out) it stays within 0.5 ms of SESSION_CALL_S (2.01 / 2.39 / 2.51 ms holding out
    A100 / H100 / L40S)."""
    from tests.test_engine_eras import write_llama_2_models

    write_llama_2_models(tmp_path / "models")
    lines = [f"{m},{tp},1,1,{p},1,on,standard,trtllm,0.5,{gpu},{dtype},,{ms / 1000},,x"
             for m, tp, gpu, dtype, p, ms in SESSION_FIRST_TOKEN_ROWS]
    (tmp_path / "static.csv").write_text(HEADER + "\n".join(lines) + "\n")
    rows = score_static(tmp_path / "static.csv").rows
    for held_out in rows["hardware"].unique():
        assert session_call_fit_s(rows[rows["hardware"] != held_out]) == pytest.approx(SESSION_CALL_S, abs=0.5e-3)


def test_session_call_overhead_is_the_median_gap_of_the_first_token_rows(tmp_path):
    """SESSION_CALL_S is its fit: the median of measured minus predicted (without it) over the
    cited first-token rows, to the table's 1 ms resolution's tenth; every row's TTFT is its
    prefill plus that constant."""
    from tests.test_engine_eras import write_llama_2_models

    write_llama_2_models(tmp_path / "models")
    lines = [f"{m},{tp},1,1,{p},1,on,standard,trtllm,0.5,{gpu},{dtype},,{ms / 1000},,x"
             for m, tp, gpu, dtype, p, ms in SESSION_FIRST_TOKEN_ROWS]
    (tmp_path / "static.csv").write_text(HEADER + "\n".join(lines) + "\n")
    rows = score_static(tmp_path / "static.csv").rows
    assert len(rows) == len(SESSION_FIRST_TOKEN_ROWS)
    assert session_call_fit_s(rows) == pytest.approx(SESSION_CALL_S, abs=0.05e-3)
    first = rows.iloc[0]
    prefill = simulate(make_scenario(model=str(tmp_path / "models" / "llama-2-7b.json"), hardware="h100-sxm-nvswitch",
                                     tp=1, batch=1, prompt_len=128, gen_len=1, schedule="standard", dtype="float16",
                                     framework="trtllm-session", quant="fp8", kv_cache_dtype="fp8",
                                     kv_reads="repeat_interleave")).summary()["prefill_s"]
    assert first["predicted_ttft_s"] == pytest.approx(prefill + SESSION_CALL_S)
    # the published first-token rows per GPU, shipped profiles: FP8 within 10%, A100 fp16 within 6% (medians)
    medians = score_static(tmp_path / "static.csv").summary.set_index("hardware")["ttft_s_median_abs_err_pct"]
    assert medians["H100-SXM5-80GB"] <= 10 and medians["L40S"] <= 10 and medians["A100-SXM4-80GB"] <= 6, medians
