"""``--pp`` end to end (issue 39): simulate, sweep, validate, plan and serving from the command
line, each the API's answer, and the bad inputs as one line with exit code 2."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import laddersim
from cli_run import run_cli

H100 = "h100-sxm-nvswitch"
SMALL = ["--prompt-len", "128", "--gen-len", "8"]


def test_simulate_with_pp_is_the_apis_pipeline(capsys):
    code, out, err = run_cli(["simulate", "--model", "llama-3.1-70b", "--hardware", H100, "--tp", "4", "--pp", "2",
                              "--batch", "8", "--pp-microbatches", "2", *SMALL, "--json"], capsys)
    assert code == 0
    rows = json.loads(out)
    api = laddersim.simulate("llama-3.1-70b", H100, 4, 8, 128, 8, pp=2, pp_microbatches=2)
    assert [r["tokens_per_s"] for r in rows] == list(api["tokens_per_s"])
    assert all(r["pp"] == 2 and r["pp_microbatches"] == 2 and r["nodes"] == 1 for r in rows)
    assert all(r["pp_boundary_transport"] == "p2p_nvlink" for r in rows)
    code, out, err = run_cli(["simulate", "--model", "llama-3.1-70b", "--hardware", H100, "--tp", "4", "--pp", "2",
                              *SMALL], capsys)
    assert code == 0 and out.splitlines()[0].split()[:4] == ["schedule", "tp", "pp", "nodes"]
    assert "recv_hidden SILICON" in err  # the boundary priced from the profile's send/recv table


@pytest.mark.parametrize("argv,message", [
    (["--tp", "4", "--pp", "2", "--batch", "8", "--pp-microbatches", "3"],
     "error: pp-microbatches: 3 does not divide batch 8; allowed: 1, 2, 4, 8"),
    (["--tp", "4", "--pp", "0"], "error: pp: must be a positive integer up to 65536, got 0"),
    (["--tp", "4", "--pp-microbatches", "2", "--batch", "2"],
     "error: pp-microbatches: micro-batches need a pipeline; allowed: 1 at pp=1, or pp >= 2"),
    (["--tp", "8", "--pp", "81"], "error: pp: 81 stages for 80 layers; allowed: 1..80"),
])
def test_bad_pipeline_input_is_one_line(argv, message, capsys):
    code, out, err = run_cli(["simulate", "--model", "llama-3.1-70b", "--hardware", H100, *argv, *SMALL], capsys)
    assert code == 2 and out == "" and err.startswith(message) and err.count("\n") == 1


def test_no_network_for_a_pipeline_past_one_node_is_one_line(capsys):
    code, _, err = run_cli(["simulate", "--model", "llama-3.1-70b", "--hardware", "h100-pcie", "--tp", "8", "--pp", "2",
                            *SMALL], capsys)
    assert code == 2 and err.startswith("error: pp: 2 stages of tp=8 need 2 nodes of 8 GPUs, and h100-pcie has no")


def test_sweep_pp_axis_from_flags(tmp_path, capsys):
    code, out, _ = run_cli(["sweep", "--out", str(tmp_path / "s"), "--model", "llama-3.1-70b", "--hardware", H100,
                            "--tp", "4", "8", "--pp", "1", "2", "--batch", "4", *SMALL, "--schedule", "ladder",
                            "--workers", "1", "--no-progress"], capsys)
    assert code == 0 and "4 points" in out
    frame = pd.read_csv(tmp_path / "s" / "results.csv")
    assert sorted(zip(frame.tp, frame.pp, frame.nodes)) == [(4, 1, 1), (4, 2, 1), (8, 1, 1), (8, 2, 2)]


def test_validate_a_table_with_pp(tmp_path, capsys):
    table = tmp_path / "pp.csv"
    table.write_text("model,tp,pp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\n"
                     "llama-3.1-8b,1,2,1,1,128,8,on,standard,150\nllama-3.1-8b,1,2,1,1,128,8,off,standard,150\n")
    code, out, _ = run_cli(["validate", str(table), "--report", str(tmp_path / "r")], capsys)
    assert code == 0
    frame = pd.read_csv(tmp_path / "r" / "validation.csv")
    api = laddersim.validate(str(table))
    assert list(frame["pp"]) == [2, 2]
    assert list(frame["predicted_tokens_per_s"]) == pytest.approx(list(api["predicted_tokens_per_s"]), rel=1e-5)  # CSV rounding


def test_plan_refuses_pp1_and_plans_pp2_in_one_line_each(capsys):
    """405B on two nodes: TP 8 alone cannot hold the weights, TP 8 x PP 2 can; one line says each."""
    code, out, _ = run_cli(["plan", "--model", "llama-3.1-405b", "--profiles", H100, "--tp", "8", "--pp", "1", "2",
                            "--batch", "8", "--max-nodes", "2", "--gen-len", "16", "--min-user-tokens-per-s", "10",
                            "--schedule", "ladder", "--workers", "1", "--no-progress"], capsys)
    assert code == 0
    lines = out.splitlines()
    refused = [line for line in lines if line.startswith(f"  {H100} TP 8 x PP 1:")]
    planned = [line for line in lines if line.startswith(f"  {H100} TP 8 x PP 2 (2 nodes, 16 GPUs): meets it with ladder")]
    assert len(refused) == 1 and "weights do not fit: 9" in refused[0]
    assert len(planned) == 1 and "stage link net" in planned[0]
    frame = laddersim.plan("llama-3.1-405b", profiles=[H100], tps=[8], pps=[1, 2], batches=[8], max_nodes=2,
                           gen_len=16, min_user_tokens_per_s=10, schedules=["ladder"], workers=1)
    assert list(frame["pp"]) == [2] and list(frame["gpus"]) == [16]
    assert list(frame.attrs["splits"]["meets"]) == [True, False]


def test_serving_with_pp_is_the_apis(capsys):
    argv = ["serving", "--model", "llama-3.1-70b", "--hardware", H100, "--tp", "4", "--pp", "2", "--rate", "2",
            "--requests", "20", "--prompt-len", "256", "--gen-len", "16", "--schedule", "ladder", "--json"]
    code, out, _ = run_cli(argv, capsys)
    assert code == 0
    rows = json.loads(out)
    api = laddersim.serving("llama-3.1-70b", H100, 4, pp=2, rate=2, requests=20, prompt_len=256, gen_len=16,
                            schedules=["ladder"])
    assert rows[0]["pp"] == 2 and rows[0]["tpot_p50_s"] == api["tpot_p50_s"][0]
