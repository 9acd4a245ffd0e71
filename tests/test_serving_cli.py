"""`laddersim serving`: the JSON contract, per-request files, byte-identical reruns, traces, and
bad serving options as one error line with exit code 2."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from laddersim.cli import main

CONTRACT_KEYS = {"schedule", "rate", "requests", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                 "e2e_p50_s", "e2e_p99_s", "throughput_tokens_per_s", "goodput_req_per_s", "preemptions"}
BASE = ["serving", "--model", "llama-3.1-70b", "--hardware", "h100-sxm-p2p-off", "--tp", "8",
        "--requests", "60", "--prompt-len", "256", "--gen-len", "uniform:8:32", "--no-progress"]


def run_cli(args, capsys):
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_contract_and_request_files_are_byte_identical(capsys, tmp_path):
    args = BASE + ["--rate", "4", "--ttft-slo-s", "0.3", "--tpot-slo-s", "0.02", "--json", "--seed", "7"]
    code, out, err = run_cli(args + ["--out", str(tmp_path / "a")], capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["schedule"] for r in rows] == ["standard", "ladder"]
    for row in rows:
        assert CONTRACT_KEYS <= set(row)
        assert row["rate"] == 4.0 and row["requests"] == 60
    frame = pd.read_parquet(tmp_path / "a" / "requests.parquet")
    assert len(frame) == 120 and set(frame["schedule"]) == {"standard", "ladder"}
    ladder = frame[frame["schedule"] == "ladder"]
    assert (ladder["ttft_s"] - (ladder["first_token_s"] - ladder["arrival_s"])).abs().max() < 1e-12
    assert ladder["tpot_s"].median() == pytest.approx(rows[1]["tpot_p50_s"])
    code, again, _ = run_cli(args + ["--out", str(tmp_path / "b")], capsys)
    assert code == 0 and again == out
    for name in ("requests.parquet", "requests.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_table_with_capacity_and_cost(capsys):
    code, out, err = run_cli(BASE + ["--rate", "4", "--ttft-slo-s", "0.5", "--capacity", "--target-rate", "30"],
                             capsys)
    assert code == 0, err
    assert "TTFT p50 ms" in out and "goodput req/s" in out
    assert "ladder: capacity" in out and "GPUs" in out


def test_trace_file(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0.5,100,8\n0.0,300,4\n0.2,50,1\n")
    code, out, err = run_cli(BASE[:7] + ["--trace", str(trace), "--schedule", "ladder", "--json"], capsys)
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["requests"] == 3 and row["rate"] is None
    assert row["throughput_tokens_per_s"] > 0


@pytest.mark.parametrize("extra, field", [
    (["--rate", "1", "--max-running", "0"], "max-running"),
    (["--rate", "1", "--prompt-len", "long"], "prompt-len"),
    (["--rate", "1", "--gen-len", "uniform:9:3"], "gen-len"),
    (["--rate", "1", "--slo-attainment", "1.5"], "slo-attainment"),
    (["--rate", "1", "--capacity"], "ttft-slo-s"),
    (["--rate", "1", "--target-rate", "5"], "target-rate"),
    (["--rate", "1", "--max-batched-tokens", "200"], "max-batched-tokens"),
    ([], "rate"),
    (["--rate", "-2"], "rate"),
    (["--rate", "1", "--schedule", "zigzag"], "schedule"),
    (["--trace", "/nonexistent/t.csv"], "trace"),
    (["--rate", "1", "--framework", "tensorrt"], "framework"),
])
def test_bad_options_are_one_line_exit_2(capsys, extra, field):
    code, out, err = run_cli(BASE + extra, capsys)
    assert code == 2
    assert err.count("\n") == 1 and field in err and "Traceback" not in err


def test_framework_picks_the_kernels_serving_runs(capsys):
    """--framework: gpt-fast's math SDPA prefill (fp32 scores) and every-position LM head against
    vLLM's FlashAttention-3 and last-position logits: a lone request's TTFT is each framework's
    batch-1 prefill of `laddersim simulate` on the paged cache, its TPOT the batch-1 decode step,
    each with the serving engine's host work for its one sequence (vLLM's follows the step: no
    async scheduling, laddersim.costs.host_bound; the prefill's kernel launches stay within its GPU time)."""
    from laddersim.simulation.simulate import make_scenario, simulate
    rows = {}
    for framework in ("gpt-fast", "vllm"):
        args = BASE[:7] + ["--rate", "0.01", "--requests", "3", "--prompt-len", "1024", "--gen-len", "4",
                           "--schedule", "standard", "--json", "--no-progress", "--framework", framework]
        code, out, err = run_cli(args, capsys)
        assert code == 0, err
        rows[framework] = json.loads(out)[0]
        assert rows[framework]["framework"] == framework
        static = simulate(make_scenario(model="llama-3.1-70b", hardware="h100-sxm-p2p-off", tp=8, batch=1,
                                        prompt_len=1024, gen_len=4, schedule="standard", kv_cache="dynamic",
                                        kv_reads="per_kv_head", framework=framework)).summary()
        # vLLM's per-sequence host work (the GPU idles through it) is in both: the sampling op's
        assert rows[framework]["ttft_p50_s"] == pytest.approx(static["prefill_s"], rel=1e-9)
        assert rows[framework]["tpot_p50_s"] == pytest.approx(static["tpot_s"], rel=1e-9)
    assert rows["vllm"]["ttft_p50_s"] < rows["gpt-fast"]["ttft_p50_s"]


def test_trace_missing_column_is_one_line(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival,prompt_len,output_len\n0,1,1\n")
    code, _, err = run_cli(BASE[:7] + ["--trace", str(trace)], capsys)
    assert code == 2 and err.count("\n") == 1 and "arrival_s" in err


def test_plan_for_a_rate_ranks_by_replicas_from_serving_capacity(capsys):
    args = ["plan", "--model", "llama-3.1-70b", "--profiles", "h100-sxm-p2p-off", "--tp", "8", "--rate", "12",
            "--ttft-slo-s", "0.5", "--tpot-slo-s", "0.03", "--prompt-len", "256", "--gen-len", "32",
            "--requests", "60", "--json", "--no-progress"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert {r["schedule"] for r in rows} == {"standard", "ladder"}
    for row in rows:
        assert row["replicas"] * row["capacity_req_per_s"] >= 12 > (row["replicas"] - 1) * row["capacity_req_per_s"]
        assert row["gpus"] == 8 * row["replicas"]
    assert [r["usd_per_hour"] for r in rows] == sorted(r["usd_per_hour"] for r in rows)
    by = {r["schedule"]: r for r in rows}
    assert by["ladder"]["capacity_req_per_s"] >= by["standard"]["capacity_req_per_s"]
    code, _, err = run_cli(args[:9] + ["--no-progress"], capsys)  # a rate without a TTFT SLO
    assert code == 2 and err.count("\n") == 1 and "ttft-slo-s" in err


def test_sweep_over_rate_and_serving_options(capsys, tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("models: [llama-3.1-70b]\nhardware: [h100-sxm-p2p-off]\ntp: [8]\nprompt_len: [256]\n"
                    "gen_len: [16]\nschedules: [standard, ladder]\nserving:\n  rate: [3, 6]\n"
                    "  chunked_prefill: [false, true]\n  requests: 40\n  ttft_slo_s: 0.3\n")
    out = tmp_path / "out"
    code, stdout, err = run_cli(["sweep", str(grid), "--out", str(out), "--workers", "1", "--no-progress"], capsys)
    assert code == 0, err
    assert "8 points (8 computed" in stdout
    frame = pd.read_parquet(out / "results.parquet")
    assert len(frame) == 8 and set(frame["status"]) == {"ok"}
    assert sorted(set(zip(frame["rate"], frame["chunked_prefill"]))) == [(3.0, False), (3.0, True), (6.0, False),
                                                                         (6.0, True)]
    assert frame["ttft_p99_s"].notna().all() and frame["goodput_req_per_s"].notna().all()
    first = (out / "results.csv").read_bytes()
    code, stdout, _ = run_cli(["sweep", str(grid), "--out", str(out), "--workers", "1", "--no-progress"], capsys)
    assert "8 reused" in stdout and (out / "results.csv").read_bytes() == first
    grid.write_text(grid.read_text().replace("requests: 40", "requests: 40\n  max_running: [0]"))
    code, _, err = run_cli(["sweep", str(grid), "--out", str(out), "--no-progress"], capsys)
    assert code == 2 and err.count("\n") == 1 and "max_running" in err


def test_a_kernel_calibration_framework_is_refused_in_one_line(capsys, tmp_path):
    """A calibrated framework file prices one static batch's decode steps (at its prompt length),
    which serving's mixed iterations cannot use: one line naming --framework, exit 2."""
    from pathlib import Path
    trace = Path(__file__).parent / "data" / "kernel_trace_synthetic"
    out = str(tmp_path / "traced.yaml")
    assert main(["calibrate", "kernels", str(trace), "--hardware", "h100-sxm-nvswitch", "--out", out]) == 0
    capsys.readouterr()
    code, _, err = run_cli(BASE + ["--rate", "1", "--framework", out], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: framework: ") and "Traceback" not in err


def test_a_grid_priced_attention_is_refused_in_one_line(capsys):
    """gpt-fast-graph's memory-efficient attention is priced by its grid over one static batch (a
    batch of B sequences in one wave costs what one does), not the per-sequence share serving's
    iteration timer adds up: one line naming --framework and the frameworks it can serve, exit 2."""
    code, _, err = run_cli(BASE + ["--rate", "1", "--framework", "gpt-fast-graph"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: framework: 'gpt-fast-graph'")
    assert err.rstrip().endswith("allowed: gpt-fast, gpt-fast-flash, sglang, trtllm, trtllm-session, vllm, vllm-v0")
