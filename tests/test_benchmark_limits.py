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
