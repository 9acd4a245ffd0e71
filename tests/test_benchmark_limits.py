"""The engine limits a benchmark deployment sets (laddersim.traffic.engines.benchmark_options): the
budgets AIConfigurator's generator writes, what they do to an iteration, and validate pricing a
closed-loop row under them or under a table's own limit columns."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.errors import UserInputError
from laddersim.model.shape import load_model_shape
from laddersim.traffic.arrivals import Requests
from laddersim.traffic.engines import AICONFIGURATOR_LIMITS, benchmark_options, engine_options
from laddersim.traffic.options import ServingOptions
from laddersim.traffic.run import serve_closed_loop, serving_scenario
from laddersim.traffic.scheduler import ContinuousBatcher


def test_aiconfigurator_budgets_by_hand():
    """C 16, 1024-token prompts: vLLM 16 + 1024 + 1500 = 2540 tokens; TensorRT-LLM the same rounded
    up to 32-token blocks (2560), prompts whole; SGLang bounds a prefill batch alone (1024 + 1500),
    prompts whole, in iterations of their own. Every engine runs at most C sequences."""
    got = {name: benchmark_options(name, ServingOptions(), 16, 1024, "aiconfigurator")
           for name in ("vllm", "trtllm", "sglang")}
    assert {n: o.max_batched_tokens for n, o in got.items()} == {"vllm": 2540, "trtllm": 2560, "sglang": 2524}
    assert {o.max_running for o in got.values()} == {16}
    assert [got[n].split_prompts for n in ("vllm", "trtllm", "sglang")] == [True, False, False]
    assert got["sglang"].mix_decodes is False and got["vllm"].mix_decodes is True
    assert AICONFIGURATOR_LIMITS["trtllm"].budget(1, 100) == 1632  # 1601 rounded up to 32
    assert benchmark_options("vllm", ServingOptions(), 16, 1024) == engine_options("vllm", ServingOptions())
    with pytest.raises(UserInputError, match="limits: 'defaults'; allowed: engine-defaults, aiconfigurator"):
        benchmark_options("vllm", ServingOptions(), 16, 1024, "defaults")


def _first_iteration(options, prompts):
    batcher = ContinuousBatcher(np.array(prompts), np.full(len(prompts), 8), 10_000, options)
    batcher.waiting.extend_range(0, len(prompts))
    return [(slot, cached, tokens) for slot, cached, tokens in batcher.plan().chunks]


def test_a_burst_of_prompts_is_admitted_as_the_budget_allows():
    """Four 1024-token prompts landing together (C 4): under vLLM's default 8192-token budget all four
    prefill in one iteration; under the AIConfigurator budget (4 + 1024 + 1500 = 2528) two whole
    prompts and a 480-token chunk of the third; SGLang's (1024 + 1500 = 2524) and TensorRT-LLM's
    (2528 rounded up to 2560) two whole prompts, the third not fitting whole (chunked prefill off),
    so it waits for the next iteration."""
    defaults = engine_options("vllm", ServingOptions())
    assert _first_iteration(defaults, [1024] * 4) == [(0, 0, 1024), (1, 0, 1024), (2, 0, 1024), (3, 0, 1024)]
    vllm = benchmark_options("vllm", ServingOptions(), 4, 1024, "aiconfigurator")
    assert _first_iteration(vllm, [1024] * 4) == [(0, 0, 1024), (1, 0, 1024), (2, 0, 480)]
    sglang = benchmark_options("sglang", ServingOptions(), 4, 1024, "aiconfigurator")
    assert _first_iteration(sglang, [1024] * 4) == [(0, 0, 1024), (1, 0, 1024)]
    trtllm = benchmark_options("trtllm", ServingOptions(), 4, 1024, "aiconfigurator")
    assert _first_iteration(trtllm, [1024] * 4) == [(0, 0, 1024), (1, 0, 1024)]


def test_validate_prices_a_row_under_the_limits_named_or_its_own_columns(tmp_path):
    from laddersim.api.closed_loop_validation import validate_closed_loop

    head = "model,tp,hardware,engine,engine_version,dtype,prompt_len,gen_len,concurrency,ttft_ms,tpot_ms,source"
    table = tmp_path / "closed.csv"
    table.write_text(head + "\nllama-3.1-8b,1,H100-SXM5-80GB,vllm,0.1,bfloat16,1024,32,4,100,8,x\n")
    scenario = serving_scenario(load_model_shape("llama-3.1-8b"), "h100-sxm-nvswitch", 1, "standard",
                                framework="vllm")
    requests = Requests(np.zeros(80), np.full(80, 1024, dtype=np.int64), np.full(80, 32, dtype=np.int64))

    def by_hand(options):  # aiperf's measured phase: 20 x C requests from a burst, none left out
        return serve_closed_loop(scenario, requests, options, 4, warmup=0).metrics["ttft_mean_s"] * 1e3

    aic = validate_closed_loop(table, limits="aiconfigurator")[0]
    expected = by_hand(benchmark_options("vllm", ServingOptions(), 4, 1024, "aiconfigurator"))
    assert aic.rows["predicted_ttft_ms"].iloc[0] == pytest.approx(expected, rel=1e-12)
    assert "engine limits: aiconfigurator" in aic.mappings[-1]
    assert validate_closed_loop(table)[0].rows["predicted_ttft_ms"].iloc[0] == aic.rows["predicted_ttft_ms"].iloc[0]
    own_defaults = validate_closed_loop(table, limits="engine-defaults")[0]
    default = own_defaults.rows["predicted_ttft_ms"].iloc[0]
    assert default == pytest.approx(by_hand(engine_options("vllm", ServingOptions())), rel=1e-12)
    assert default != pytest.approx(expected, rel=1e-3)  # the budget changes how the burst is prefilled
    assert own_defaults.mappings[-1] == "engine limits: engine-defaults (each engine's own)"
    own = tmp_path / "own.csv"
    own.write_text(head + ",max_running,max_batched_tokens\n"
                          "llama-3.1-8b,1,H100-SXM5-80GB,vllm,0.1,bfloat16,1024,32,4,100,8,x,4,2528\n")
    own_ttft = validate_closed_loop(own, limits="engine-defaults")[0].rows["predicted_ttft_ms"].iloc[0]
    assert own_ttft == pytest.approx(expected, rel=1e-12)
    with pytest.raises(UserInputError, match="limits: 'x'; allowed"):
        validate_closed_loop(table, limits="x")
    bad = tmp_path / "bad.csv"
    bad.write_text(head + ",max_running\nllama-3.1-8b,1,H100-SXM5-80GB,vllm,0.1,bfloat16,1024,32,4,100,8,x,0\n")
    with pytest.raises(UserInputError, match="column max_running: allowed: positive integers or empty"):
        validate_closed_loop(bad)


def test_a_closed_loop_row_names_its_experts_layout_and_block_fp8(tmp_path):
    """An ``ep`` column places a mixture-of-experts row's experts as ``--ep`` does, and a
    ``fp8_block`` dtype (AIConfigurator's block-scaled FP8) is laddersim's ``fp8-block`` with an FP8
    KV cache: the row's TPOT is that closed loop's, by hand."""
    from laddersim.api.closed_loop_validation import validate_closed_loop

    head = "model,tp,ep,hardware,engine,engine_version,dtype,prompt_len,gen_len,concurrency,ttft_ms,tpot_ms,source"
    table = tmp_path / "moe.csv"
    table.write_text(head + "\nqwen3-30b-a3b,2,2,H100-SXM5-80GB,sglang,0.5,fp8_block,256,16,2,100,8,x\n"
                            "qwen3-30b-a3b,2,,H100-SXM5-80GB,sglang,0.5,fp8_block,256,16,2,100,8,x\n")
    rows = validate_closed_loop(table)[0].rows
    requests = Requests(np.zeros(40), np.full(40, 256, dtype=np.int64), np.full(40, 16, dtype=np.int64))

    def by_hand(ep):
        scenario = serving_scenario(load_model_shape("qwen3-30b-a3b"), "h100-sxm-nvswitch", 2, "standard", "bfloat16",
                                    framework="sglang", quant="fp8-block", kv_cache_dtype="fp8", ep=ep)
        options = benchmark_options("sglang", ServingOptions(), 2, 256, "aiconfigurator")
        return serve_closed_loop(scenario, requests, options, 2, warmup=0).metrics["tpot_mean_s"] * 1e3

    assert list(rows["predicted_tpot_ms"]) == pytest.approx([by_hand(2), by_hand(1)], rel=1e-12)
    assert rows["predicted_tpot_ms"].iloc[0] != pytest.approx(rows["predicted_tpot_ms"].iloc[1], rel=1e-4)
    bad = tmp_path / "bad.csv"
    bad.write_text(head + "\nqwen3-30b-a3b,2,0,H100-SXM5-80GB,sglang,0.5,fp8_block,256,16,2,100,8,x\n")
    with pytest.raises(UserInputError, match="column ep: allowed: positive integers or empty"):
        validate_closed_loop(bad)


def test_the_command_line_names_the_limits_and_refuses_them_for_other_tables(tmp_path, capsys):
    from cli_run import run_cli

    head = "model,tp,hardware,engine,engine_version,dtype,prompt_len,gen_len,concurrency,ttft_ms,tpot_ms,source"
    table = tmp_path / "closed.csv"
    table.write_text(head + "\nllama-3.1-8b,1,H100-SXM5-80GB,vllm,0.1,bfloat16,1024,32,4,100,8,x\n")
    code, out, err = run_cli(["validate", str(table), "--limits", "engine-defaults", "--report", str(tmp_path / "r")],
                             capsys)
    assert code == 0, err
    assert "engine limits: engine-defaults (each engine's own)" in out
    code, out, err = run_cli(["validate", str(table), "--report", str(tmp_path / "r")], capsys)
    assert "engine limits: aiconfigurator (per row" in out  # the default
    dev = tmp_path / "dev.csv"
    dev.write_text("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\n"
                   "llama-3.1-8b,1,1,1,128,8,on,standard,100\n")
    code, out, err = run_cli(["validate", str(dev), "--limits", "aiconfigurator", "--report", str(tmp_path / "d")],
                             capsys)
    assert code == 2 and err.strip().splitlines() == [err.strip().splitlines()[-1]]
    assert err.strip().startswith("error: limits: 'aiconfigurator' sets the engines' limits of closed-loop tables")
