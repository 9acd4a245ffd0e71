"""`laddersim simulate`: the JSON contract scripts rely on, the table, and every bad-input case."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from laddersim.cli import main

CONTRACT_KEYS = {"schedule", "model", "hardware", "tp", "nodes", "batch", "prompt_len", "gen_len",
                 "prefill_s", "decode_s", "total_s", "tokens_per_s"}
BASE = ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "8",
        "--batch", "2", "--prompt-len", "128", "--gen-len", "16"]


def run_cli(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_contract_one_object_per_schedule(capsys):
    code, out, err = run_cli(BASE + ["--schedule", "standard", "--schedule", "ladder", "--json"], capsys)
    assert code == 0
    rows = json.loads(out)
    assert [r["schedule"] for r in rows] == ["standard", "ladder"]
    for row in rows:
        assert CONTRACT_KEYS <= set(row)
        assert row["model"] == "llama-3.1-8b" and row["hardware"] == "h100-sxm-nvswitch"
        assert (row["tp"], row["nodes"], row["batch"], row["prompt_len"], row["gen_len"]) == (8, 1, 2, 128, 16)
        assert row["total_s"] == pytest.approx(row["prefill_s"] + row["decode_s"])
        assert row["tokens_per_s"] == pytest.approx(2 * 16 / row["total_s"])
    assert rows[1]["tokens_per_s"] > rows[0]["tokens_per_s"]  # ladder hides AllReduces at TP 8


def test_one_generated_token_has_no_decode_step(capsys):
    # gen_len 1: the prefill makes the only token; a per-token time of 0 would read as "free".
    args = ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
            "--prompt-len", "64", "--gen-len", "1", "--schedule", "standard"]
    code, out, _ = run_cli(args + ["--json"], capsys)
    row = json.loads(out)[0]
    assert code == 0 and row["tpot_s"] is None and row["decode_step_s"] is None and row["decode_s"] == 0.0
    assert row["tokens_per_s"] == pytest.approx(1 / row["prefill_s"])
    code, out, _ = run_cli(args, capsys)
    assert out.splitlines()[-1].split()[6] == "-"  # the ms/token column


def test_multi_node_tp_reports_nodes(capsys):
    args = ["simulate", "--model", "llama-3.1-405b", "--hardware", "h100-sxm-nvswitch", "--tp", "16",
            "--batch", "1", "--prompt-len", "64", "--gen-len", "4", "--json"]
    code, out, _ = run_cli(args, capsys)
    assert code == 0 and {r["nodes"] for r in json.loads(out)} == {2}


def test_table_output_is_readable(capsys):
    code, out, _ = run_cli(BASE + ["--schedule", "standard", "--schedule", "ladder"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert "tokens/s" in lines[0] and len(lines) == 4
    assert lines[3].split()[0] == "ladder"


def test_hf_config_json_model(tmp_path, capsys):
    cfg = {"hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 2,
           "intermediate_size": 5632, "vocab_size": 32000, "_name_or_path": "my-small-llama"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, _ = run_cli(["simulate", "--model", str(path), "--hardware", "h100-sxm-nvswitch", "--tp", "4",
                            "--gen-len", "4", "--prompt-len", "32", "--json"], capsys)
    assert code == 0 and json.loads(out)[0]["model"] == "my-small-llama"


def _malformed_profile(tmp_path: Path) -> str:
    src = Path(__file__).resolve().parents[1] / "hardware_profiles" / "h100-sxm-nvswitch.yaml"
    raw = yaml.safe_load(src.read_text())
    raw["gpu"]["peak_tflop"] = raw["gpu"].pop("peak_tflops")  # a typo
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


BAD_INPUTS = [
    (["--model", "llama-9"], "model: unknown preset 'llama-9'"),
    (["--hardware", "tpu-v9"], "hardware: unknown profile 'tpu-v9'"),
    (["--tp", "3"], "tp: 3 does not divide the 32 attention heads"),
    (["--tp", "12"], "tp: 12 does not divide the 32 attention heads"),
    (["--batch", "-4"], "batch: must be a positive integer up to 1048576, got -4"),
    (["--prompt-len", "0"], "prompt-len: must be a positive integer up to 67108864, got 0"),
    (["--gen-len", "x"], "gen-len: must be a positive integer up to 67108864, got 'x'"),
    (["--schedule", "zigzag"], "schedule: unknown 'zigzag'; allowed: standard, parallel, ladder"),
    (["--schedule", "hybrid:99"], "hybrid"),
    (["--batch", "4096", "--prompt-len", "8192", "--gen-len", "8192"], "memory: llama-3.1-8b"),
]


@pytest.mark.parametrize("extra,message", BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(extra, message, capsys):
    args = BASE + extra
    with pytest.raises(SystemExit) as exc:  # argparse-level errors exit directly
        raise SystemExit(main(args))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert message in err


def test_malformed_profile_names_the_field(tmp_path, capsys):
    code, _, err = run_cli(BASE[:3] + ["--hardware", _malformed_profile(tmp_path)] + BASE[5:], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "gpu.peak_tflop: unknown field (did you mean 'peak_tflops'?)" in err


def test_tp_beyond_one_node_without_network(tmp_path, capsys):
    src = Path(__file__).resolve().parents[1] / "hardware_profiles" / "h100-sxm-nvswitch.yaml"
    raw = yaml.safe_load(src.read_text())
    raw.pop("network")
    shutil.copytree(src.parent / "tables", tmp_path / "tables")
    path = tmp_path / "single-node.yaml"
    path.write_text(yaml.safe_dump(raw))
    code, _, err = run_cli(BASE[:3] + ["--hardware", str(path), "--tp", "16"] + BASE[7:], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "tp: 16 exceeds the 8 GPUs of one" in err and "allowed: 1..8" in err


def test_console_script_runs_in_a_subprocess():
    proc = subprocess.run([sys.executable, "-m", "laddersim", *BASE, "--schedule", "hybrid:8", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["schedule"] == "hybrid:8"
    bad = subprocess.run([sys.executable, "-m", "laddersim", *BASE, "--tp", "5"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1
