"""Serving at a fixed concurrency (laddersim.traffic.closed_loop), the engines' schedulers, goodput
never above throughput, the SLO attainment a plan is held to, and validate on closed-loop tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_run import run_cli
from laddersim.api.serving_task import serving
from laddersim.model.shape import load_model_shape
from laddersim.planning.serving_plan import plan_for_rate
from laddersim.traffic.arrivals import LengthSpec, Requests, draw_requests
from laddersim.traffic.capacity import OfferedLoad
from laddersim.traffic.engines import ENGINES, benchmark_options, engine_options
from laddersim.traffic.options import ServingOptions, serving_options
from laddersim.traffic.run import serve, serve_closed_loop, serving_scenario, timer_for
from laddersim.traffic.scheduler import ContinuousBatcher

MODEL, HARDWARE, TP = "llama-3.1-8b", "h200-sxm-nvswitch", 2


@pytest.fixture(scope="module")
def scenario():
    return serving_scenario(load_model_shape(MODEL), HARDWARE, TP, "ladder", framework="vllm")


def _fixed(n: int, prompt: int, output: int) -> Requests:
    return Requests(np.zeros(n), np.full(n, prompt, dtype=np.int64), np.full(n, output, dtype=np.int64))


# ---- closed loop: TTFT = the wait for a slot + the chunked prefill ---------------------------

def test_ttft_is_the_slot_wait_plus_the_chunked_prefill_by_hand(scenario):
    """One slot (max_running 1), two requests in flight, a 1000-token prompt in chunks of a 384-token
    budget. Request 0 runs alone: its TTFT is its three chunk iterations (384, 384, 232 tokens), each
    priced by the iteration timer as the loop must price it. Request 1 waits for the slot until
    request 0 finishes, then has the same chunks alone: its TTFT is request 0's E2E plus its TTFT."""
    options = serving_options(max_running=1, max_batched_tokens=384, chunked_prefill=True)
    result = serve_closed_loop(scenario, _fixed(3, 1000, 6), options, concurrency=2, warmup=0)
    frame = result.frame
    timer = timer_for(scenario, options)
    by_hand, cached = 0.0, 0
    for chunk in (384, 384, 232):
        attention_s = timer.attention.seconds([], 0, [(0, cached, chunk)])
        by_hand += timer.seconds(chunk, int(cached + chunk == 1000), attention_s, prefill=True)
        cached += chunk
    assert frame["ttft_s"][0] == pytest.approx(by_hand, rel=1e-12)
    assert frame["arrival_s"][1] == 0.0  # in flight from the start, waiting for the slot
    assert frame["ttft_s"][1] == pytest.approx(frame["e2e_s"][0] + frame["ttft_s"][0], rel=1e-12)
    assert frame["arrival_s"][2] == frame["finish_s"][0]  # replaced the moment request 0 finished


def test_tpot_carries_the_prompt_chunks_sharing_its_steps(scenario):
    """The same requests alone (C 1) and eight in flight: beside other requests' prompt chunks, each
    decode step is longer, so TPOT is (and the first token waits behind the others' chunks)."""
    options = engine_options("vllm", ServingOptions())
    alone = serve_closed_loop(scenario, _fixed(12, 2048, 64), options, concurrency=1).metrics
    loaded = serve_closed_loop(scenario, _fixed(40, 2048, 64), options, concurrency=8).metrics
    assert loaded["tpot_mean_s"] > 1.2 * alone["tpot_mean_s"]
    assert loaded["ttft_mean_s"] > alone["ttft_mean_s"]
    assert alone["concurrency"] == 1 and alone["warmup_requests"] == 1 and alone["offered_rate"] is None


def test_warmup_requests_are_left_out(scenario):
    options = engine_options("vllm", ServingOptions())
    result = serve_closed_loop(scenario, _fixed(24, 512, 16), options, concurrency=8, warmup=5)
    assert len(result.frame) == 19 and result.metrics["warmup_requests"] == 5
    assert (result.frame["arrival_s"] > 0).sum() == 16  # the 3 measured of the first 8 landed at 0


def test_whole_prompts_are_not_split_under_trtllm():
    """TensorRT-LLM's default admits a context whole beside the decodes; vLLM's splits the prompt
    that does not fit what is left of the budget."""
    def first_iteration(name):
        options = engine_options(name, ServingOptions(), max_batched_tokens=100)
        batcher = ContinuousBatcher(np.array([60, 60]), np.array([4, 4]), 1000, options)
        batcher.waiting.extend_range(0, 2)
        return [(slot, cached, tokens) for slot, cached, tokens in batcher.plan().chunks]

    assert first_iteration("trtllm") == [(0, 0, 60)]
    assert first_iteration("vllm") == [(0, 0, 60), (1, 0, 40)]
    assert first_iteration("sglang") == [(0, 0, 60), (1, 0, 40)]


def test_sglang_runs_prompt_chunks_apart_from_the_decodes():
    """SGLang (no mixed chunks): with one sequence decoding and a 150-token prompt waiting, under a
    100-token budget the next two iterations are the prompt's chunks alone (100, then 50), the
    decoding sequence waiting; vLLM's first iteration carries its decode token and a 99-token chunk."""
    def iterations(name, count):
        options = engine_options(name, ServingOptions(), max_batched_tokens=100)
        batcher = ContinuousBatcher(np.array([10, 150]), np.array([50, 4]), 1000, options)
        batcher.waiting.extend_range(0, 1)
        batcher.complete(batcher.plan(), 1.0)  # request 0 prefilled: it decodes from here
        batcher.waiting.extend_range(1, 2)
        out = []
        for _ in range(count):
            it = batcher.plan()
            out.append((list(it.decode), [(slot, cached, tokens) for slot, cached, tokens in it.chunks]))
            batcher.complete(it, 2.0)
        return out

    assert iterations("sglang", 3) == [([], [(1, 0, 100)]), ([], [(1, 100, 50)]), ([0, 1], [])]
    assert iterations("vllm", 2) == [([0], [(1, 0, 99)]), ([0], [(1, 99, 51)])]
    assert ENGINES["sglang"].token_budget == 8192 and ENGINES["trtllm"].split_prompts is False


# ---- honest under load -----------------------------------------------------------------------

@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rate=st.floats(0.5, 400.0), requests=st.integers(5, 60), ttft=st.sampled_from([None, 0.05, 0.5, 5.0]),
       tpot=st.sampled_from([None, 0.005, 0.05]), concurrency=st.sampled_from([None, 1, 4, 32]))
def test_goodput_never_exceeds_throughput(scenario, rate, requests, ttft, tpot, concurrency):
    options = serving_options(ttft_slo_s=ttft, tpot_slo_s=tpot, chunked_prefill=True)
    drawn = draw_requests(requests, rate, LengthSpec("uniform", 16, 600), LengthSpec("uniform", 2, 40), seed=3)
    if concurrency is None:
        metrics = serve(scenario, drawn, options).metrics
    else:
        metrics = serve_closed_loop(scenario, drawn, options, concurrency, warmup=0).metrics
    assert metrics["goodput_req_per_s"] is not None
    assert metrics["goodput_req_per_s"] <= metrics["throughput_req_per_s"] * (1 + 1e-12)
    if metrics["offered_rate"] is not None:
        assert metrics["goodput_req_per_s"] <= metrics["offered_rate"] * (1 + 1e-12)
    served = min(metrics["throughput_req_per_s"], metrics["offered_rate"] or np.inf)
    assert metrics["goodput_req_per_s"] == pytest.approx(metrics["slo_attainment"] * served)
    if metrics["keeps_up"] is False:  # it says so only where the queue really grew
        assert metrics["completed_by_last_arrival_req_per_s"] < metrics["offered_rate"]


def test_an_overloaded_run_says_so_in_one_line(capsys):
    code, out, err = run_cli(["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", str(TP), "--schedule",
                              "ladder", "--rate", "400", "--requests", "600", "--prompt-len", "512", "--gen-len",
                              "128", "--no-progress"], capsys)
    assert code == 0, err
    lines = [line for line in out.splitlines() if line.startswith("overloaded")]
    assert len(lines) == 1 and "of 400 req/s offered" in lines[0]
    code, out, err = run_cli(["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", str(TP), "--schedule",
                              "ladder", "--rate", "1", "--requests", "60", "--prompt-len", "512", "--gen-len",
                              "128", "--no-progress", "--json"], capsys)
    row = json.loads(out)[0]
    assert row["keeps_up"] is True and "overloaded" not in err


# ---- the command line ------------------------------------------------------------------------

def test_concurrency_end_to_end(capsys):
    base = ["serving", "--model", MODEL, "--hardware", HARDWARE, "--tp", str(TP), "--framework", "vllm",
            "--prompt-len", "1024", "--gen-len", "32", "--requests", "40", "--no-progress"]
    code, out, err = run_cli(base + ["--concurrency", "8", "--json"], capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["schedule"] for r in rows] == ["standard", "ladder"]
    for row in rows:
        assert row["concurrency"] == 8 and row["warmup_requests"] == 8 and row["requests"] == 40
        assert row["scheduler"] == "vllm" and row["max_batched_tokens"] == 8192 and row["chunked_prefill"]
        assert row["offered_rate"] is None and row["ttft_p50_s"] > 0
    code, again, _ = run_cli(base + ["--concurrency", "8", "--json"], capsys)
    assert again == out  # deterministic
    code, out, err = run_cli(base + ["--concurrency", "8", "--scheduler", "trtllm"], capsys)
    assert code == 0 and "trtllm scheduler" in out and "whole prompts beside the decodes" in out
    assert "concurrency 8 (closed loop, after 8 warm-up requests left out)" in out
    for bad, field in ((["--concurrency", "8", "--rate", "2"], "concurrency:"), (["--warmup", "3", "--rate", "2"],
                       "warmup:"), (["--concurrency", "0"], "concurrency:"), (["--concurrency", "4", "--scheduler",
                       "tgi"], "scheduler:")):
        code, out, err = run_cli(base + bad, capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and field in lines[0] and "Traceback" not in err, (bad, err)


def test_api_concurrency_matches_the_command_line():
    frame = serving(MODEL, HARDWARE, TP, concurrency=4, requests=12, prompt_len=256, gen_len=8, schedules=["ladder"])
    assert frame["concurrency"].tolist() == [4] and frame["requests"].tolist() == [12]


# ---- plan: the pick meets the SLOs at the attainment asked ------------------------------------

@settings(max_examples=6, deadline=None)
@given(rate=st.floats(250.0, 600.0), ttft=st.sampled_from([0.04, 0.05]), tpot=st.sampled_from([None, 0.010, 0.012]),
       attainment=st.sampled_from([0.8, 0.95, 0.99, 1.0]))
def test_plan_pick_meets_the_slos_at_the_attainment(rate, ttft, tpot, attainment):
    from laddersim.hardware.profile import load_profile

    shape, profile = load_model_shape(MODEL), load_profile(HARDWARE)
    options = serving_options(ttft_slo_s=ttft, tpot_slo_s=tpot, slo_attainment=attainment)
    load = OfferedLoad(40, LengthSpec("fixed", 512), LengthSpec("fixed", 32))
    plan = plan_for_rate(shape, [(HARDWARE, profile, 2, "ladder", 1)], {HARDWARE: 1.0}, rate, options, load)
    assert len(plan.options) == 1 and plan.options[0].replicas > 1  # several replicas, each with a share
    for option in plan.options:
        assert option.slo_attainment == attainment
        share = serving(MODEL, HARDWARE, option.tp, rate=rate / option.replicas, requests=40, prompt_len=512,
                        gen_len=32, ttft_slo_s=ttft, tpot_slo_s=tpot, slo_attainment=attainment,
                        schedules=[option.schedule])
        assert share["slo_attainment"].iloc[0] >= attainment
        assert option.replicas * share["throughput_req_per_s"].iloc[0] > 0


def test_plan_prints_the_attainment(capsys):
    code, out, err = run_cli(["plan", "--model", MODEL, "--profiles", HARDWARE, "--tp", str(TP), "--schedule",
                              "ladder", "--rate", "4", "--requests", "20", "--prompt-len", "256", "--gen-len", "16",
                              "--ttft-slo-s", "0.5", "--slo-attainment", "0.99", "--no-progress"], capsys)
    assert code == 0, err
    assert "SLO attainment 0.99" in out and ">= 99% of requests meet" in out


# ---- validate: closed-loop tables --------------------------------------------------------------

def test_validate_scores_closed_loop_rows_and_lists_what_it_cannot_price(capsys, tmp_path):
    from laddersim.api.closed_loop_validation import validate_closed_loop

    models = tmp_path / "models"
    models.mkdir()
    (models / "org--tiny.json").write_text(json.dumps({
        "architectures": ["GPTNeoXForCausalLM"], "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
        "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000}))
    head = "model,tp,hardware,engine,engine_version,dtype,prompt_len,gen_len,concurrency,ttft_ms,tpot_ms,source\n"
    table = tmp_path / "closed.csv"
    table.write_text(head + "llama-3.1-8b,1,H100-SXM5-80GB,trtllm,1.0,bfloat16,1024,64,8,150,8,x\n"
                            "llama-3.1-8b,2,H100-SXM5-80GB,vllm,0.1,fp8,1024,64,8,150,8,x\n"
                            "org/tiny,1,H100-SXM5-80GB,sglang,0.5,bfloat16,1024,64,8,150,8,x\n"
                            "llama-3.1-8b,1,Z9,vllm,0.1,bfloat16,1024,64,8,150,8,x\n")
    score = validate_closed_loop(table)[0]
    assert len(score.rows) == 2 and len(score.skipped) == 2  # the fp8 row priced with FP8 linears
    row = score.rows.iloc[0]
    assert row["ttft_error"] == pytest.approx(row["predicted_ttft_ms"] / 150 - 1)
    assert row["tpot_error"] == pytest.approx(row["predicted_tpot_ms"] / 8 - 1)
    reasons = " | ".join(score.skipped["reason"])
    assert "GPTNeoXForCausalLM" in reasons and "Z9" in reasons
    def deployed(engine):  # the deployment AIConfigurator's generator writes (validate's default)
        return benchmark_options(engine, ServingOptions(), 8, 1024, "aiconfigurator")

    by_hand = serve_closed_loop(serving_scenario(load_model_shape(MODEL), "h100-sxm-nvswitch", 1, "standard",
                                                 framework="trtllm"),
                                _fixed(20 * 8, 1024, 64), deployed("trtllm"), 8, warmup=0).metrics
    assert row["predicted_ttft_ms"] == pytest.approx(by_hand["ttft_mean_s"] * 1e3)
    # an fp8 row: FP8 linears and an FP8 KV cache (AIConfigurator's fp8 precision)
    fp8 = serve_closed_loop(serving_scenario(load_model_shape(MODEL), "h100-sxm-nvswitch", 2, "standard", "bfloat16",
                                             framework="vllm", quant="fp8", kv_cache_dtype="fp8"),
                            _fixed(20 * 8, 1024, 64), deployed("vllm"), 8, warmup=0).metrics
    assert score.rows.iloc[1]["predicted_tpot_ms"] == pytest.approx(fp8["tpot_mean_s"] * 1e3)
    code, out, err = run_cli(["validate", str(table), "--report", str(tmp_path / "report")], capsys)
    assert code == 0, err
    assert "2 rows scored, 2 skipped" in out and "engine trtllm -> " in out and "trtllm scheduler" in out
    written = pd.read_csv(tmp_path / "report" / "closed_rows.csv")  # the scored rows, for the user's other tools
    assert list(written["predicted_ttft_ms"]) == pytest.approx(list(score.rows["predicted_ttft_ms"]), rel=1e-5)
    assert len(pd.read_csv(tmp_path / "report" / "closed_skipped.csv")) == 2
    assert "H100-SXM5-80GB -> h100-sxm-nvswitch" in out
    summary = score.summary.iloc[0]
    assert (summary["engine"], summary["dtype"], summary["rows"]) == ("trtllm", "bfloat16", 1)
    assert isinstance(score.summary, pd.DataFrame)


def test_plan_for_a_concurrency_meets_the_slos_in_its_own_closed_loop(capsys):
    from laddersim.hardware.profile import load_profile
    from laddersim.planning.concurrency_plan import ConcurrencyLoad, closed_loop_metrics, plan_for_concurrency

    shape, profile = load_model_shape(MODEL), load_profile(HARDWARE)
    options = engine_options("vllm", serving_options(ttft_slo_s=0.2, tpot_slo_s=0.012, slo_attainment=0.95))
    load = ConcurrencyLoad(1024, 64, 40)
    plan = plan_for_concurrency(shape, [(HARDWARE, profile, 2, "ladder", 1), (HARDWARE, profile, 4, "ladder", 1)],
                                {HARDWARE: 1.0}, 300, options, load)
    assert len(plan.options) == 2
    for option in plan.options:
        assert option.replicas * option.capacity_concurrency >= 300 and option.replicas > 1
        share = -(-300 // option.replicas)
        scenario = serving_scenario(shape, profile, option.tp, option.schedule)
        assert closed_loop_metrics(scenario, options, load, share)["slo_attainment"] >= 0.95
        beyond = closed_loop_metrics(scenario, options, load, option.capacity_concurrency + 1)
        assert beyond["slo_attainment"] < 0.95  # the capacity is the most in flight within the SLOs
    code, out, err = run_cli(["plan", "--model", MODEL, "--profiles", HARDWARE, "--tp", "2", "--concurrency", "64",
                              "--rate", "3", "--ttft-slo-s", "0.5", "--no-progress"], capsys)
    assert code == 2 and "concurrency:" in err and len(err.strip().splitlines()) == 1


def test_a_scheduler_default_gives_way_to_a_limit_given():
    rows = serving(MODEL, HARDWARE, TP, concurrency=4, requests=8, prompt_len=256, gen_len=8, schedules=["ladder"],
                   scheduler="sglang", max_batched_tokens=2048)
    assert rows["max_batched_tokens"].tolist() == [2048] and rows["max_running"].tolist() == [1024]
    assert rows["scheduler"].tolist() == ["sglang"]
    open_loop = serving(MODEL, HARDWARE, TP, rate=2.0, requests=8, prompt_len=256, gen_len=8, schedules=["ladder"])
    assert open_loop["scheduler"].tolist() == [None] and open_loop["max_running"].tolist() == [64]  # as before
