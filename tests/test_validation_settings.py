"""Validation tables carry their setting (issue 29, item 4): a ``framework`` column, model names
from a models folder, groups by model x P2P x framework, and the decode time P2P off adds over P2P
on for every setting measured both ways."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import laddersim.validation
from laddersim.support.resources import data_path
from laddersim.cli import main
from laddersim.validation import ValidationSetup, read_measured, validate
from laddersim.validation.labels import MODEL_P2P, with_model_p2p
from laddersim.validation.p2p_pairs import p2p_off_pairs, pair_summary

HEADER = "model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,framework,tokens_per_s,prefill_s,decode_s\n"
TINY = {"architectures": ["LlamaForCausalLM"], "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 2048}


def _table(tmp_path, rows: list[str], models: str = "models"):
    (tmp_path / models).mkdir(exist_ok=True)
    (tmp_path / models / "tiny-lm.json").write_text(json.dumps(TINY))
    path = tmp_path / "measured.csv"
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return path


ROWS = [f"tiny-lm,2,1,4,128,32,{p2p},{s},gpt-fast-flash,{tps},0.01,{dec}"
        for p2p, s, tps, dec in [("on", "standard", 1000, 0.100), ("on", "ladder", 1100, 0.090),
                                 ("off", "standard", 800, 0.130), ("off", "ladder", 950, 0.105)]]


def test_validation_modules_import_no_circle():
    """The import circle validation.core <-> validation.figure is gone: among the validation
    package's modules, every import (at module level or inside a function) goes one way."""
    folder = Path(laddersim.validation.__file__).parent
    edges = {}
    for path in folder.glob("*.py"):
        if path.stem == "__init__":
            continue
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("laddersim.validation."):
                names.add(node.module.rsplit(".", 1)[1])
        edges[path.stem] = names
    assert "core" not in edges["figure"] and "figure" not in edges["core"]

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, seen + (n,))) for n in edges.get(start, ()))
    assert not [m for m in edges if reaches(m, m)]


def test_models_folder_beside_the_table_names_the_config(tmp_path):
    frame = read_measured(_table(tmp_path, ROWS))
    assert {str(m) for m in frame["model"]} == {str(tmp_path / "models" / "tiny-lm.json")}
    assert set(frame["framework"]) == {"gpt-fast-flash"}


def test_models_dir_option_and_the_row_framework_are_used(tmp_path):
    path = _table(tmp_path, ROWS, models="elsewhere")
    frame = read_measured(path, tmp_path / "elsewhere")
    result = validate(frame, ValidationSetup("h100-sxm-nvswitch", "h100-sxm-p2p-off"))
    assert set(result["framework"]) == {"gpt-fast-flash"}  # the row's, not the setup's gpt-fast
    groups = set(with_model_p2p(result)[MODEL_P2P])
    assert groups == {"tiny-lm p2p=on gpt-fast-flash", "tiny-lm p2p=off gpt-fast-flash"}
    # The row's framework changes the prediction: gpt-fast (compiled) prices the same rows otherwise.
    other = validate(frame.assign(framework=None), ValidationSetup("h100-sxm-nvswitch", "h100-sxm-p2p-off"))
    assert set(other["framework"]) == {"gpt-fast"}
    assert not (other["predicted_tokens_per_s"].to_numpy() == result["predicted_tokens_per_s"].to_numpy()).all()


def test_a_bad_framework_is_one_line(tmp_path, capsys):
    path = _table(tmp_path, [r.replace("gpt-fast-flash", "trt-llm") for r in ROWS])
    assert main(["validate", str(path), "--report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "framework" in err[0] and "gpt-fast-flash" in err[0] and "trt-llm" in err[0]


def test_a_missing_models_dir_is_one_line(tmp_path, capsys):
    path = _table(tmp_path, ROWS)
    assert main(["validate", str(path), "--models", str(tmp_path / "nope"), "--report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "models" in err[0]


def test_pairs_golden():
    """Off minus on per setting and schedule; scored where the measured extra is >= 3% of on."""
    frame = pd.DataFrame({
        "model": ["m"] * 6, "framework": ["f"] * 6, "tp": [2] * 6, "nodes": [1] * 6, "batch": [1] * 6,
        "prompt_len": [8] * 6, "gen_len": [4] * 6,
        "p2p": ["on", "off", "on", "off", "on", "off"],
        "schedule": ["standard", "standard", "ladder", "ladder", "parallel", "parallel"],
        "decode_s": [1.00, 1.20, 0.90, 0.91, 0.95, 1.05],
        "predicted_decode_s": [1.00, 1.25, 0.90, 0.95, 0.95, 1.00]})
    pairs = p2p_off_pairs(frame).set_index("schedule")
    assert pairs.loc["standard", "measured_extra_s"] == pytest.approx(0.20)
    assert pairs.loc["standard", "extra_error"] == pytest.approx(0.25)
    assert not pairs.loc["ladder", "scored"]  # 0.01 s of 0.90: below 3%
    assert pairs.loc["parallel", "extra_error"] == pytest.approx(-0.5)
    summary = pair_summary(pairs.reset_index())
    assert summary["scored_pairs"] == 2 and summary["extra_decode_median_abs_err_pct"] == pytest.approx(37.5)
    assert summary["extra_decode_worst_abs_err_pct"] == pytest.approx(50.0)


def test_validate_cli_reports_groups_and_pairs(tmp_path, capsys):
    path = _table(tmp_path, ROWS)
    out = tmp_path / "report"
    assert main(["validate", str(path), "--report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "tiny-lm p2p=off gpt-fast-flash" in printed and "P2P-off extra decode time, 2 on/off pairs" in printed
    report = (out / "index.md").read_text()
    assert "## P2P off minus P2P on: extra decode time" in report


def test_an_eager_framework_prices_its_op_kernels():
    """gpt-fast-flash runs RoPE as 18 eager kernels moving 16x the fused kernel's bytes, SiLU x up
    as 2 (op_kernels); on the same profile its other memory-bound kinds cost what vLLM's do."""
    import numpy as np

    from laddersim.costs.gemm import memory_bound_time_s
    from laddersim.costs.op_costs import Phase, op_times_s
    from laddersim.model.framework import load_framework
    from laddersim.hardware.profile import load_profile
    from laddersim.model.shape import load_model_shape
    from laddersim.model.workload import Workload

    h100, model = load_profile("h100-sxm-nvswitch"), load_model_shape("llama-3.1-8b")
    phase = Phase("decode", 4, 1)
    times = {fw: op_times_s(model, h100, Workload(batch=4, prompt_len=64, gen_len=4, framework=fw), 2, phase,
                            np.array([64.0])) for fw in ("gpt-fast-flash", "vllm")}
    fw = load_framework("gpt-fast-flash")
    assert fw.kernels_for("rope") == 18 and fw.bytes_factor_for("rope") == 16 and fw.kernels_for("attn_norm") == 1
    fused_rope_bytes = 4 * (2 * (16 + 4) + 2 * 4) * 128 * 2  # batch 4, TP 2: 16 query and 4 KV heads a rank
    assert times["gpt-fast-flash"]["rope"][0] == pytest.approx(
        float(memory_bound_time_s(h100.gpu, 16 * fused_rope_bytes, kernels=18)), rel=1e-9)
    assert times["gpt-fast-flash"]["act"][0] > times["vllm"]["act"][0] + h100.gpu.kernel_launch_s * 0.99
    assert times["gpt-fast-flash"]["attn_norm"][0] == pytest.approx(times["vllm"]["attn_norm"][0], rel=1e-12)


def test_gpt_fast_flash_pays_its_stream_handoff_per_allreduce():
    """An eager dist.all_reduce captured in a graph hands off between streams both ways: each
    AllReduce costs the framework's collective_handoff_us beyond NCCL's kernel, at every size and
    TP, half of it delaying the collective (its stream waits on the compute stream's event) and half
    on the compute stream (which waits on the collective's event), which no overlap hides;
    frameworks without the field pay nothing extra; one GPU has no collective."""
    from laddersim.costs.allreduce import allreduce_time_s
    from laddersim.costs.op_costs import Phase, op_times_s
    from laddersim.model.framework import load_framework
    from laddersim.hardware.profile import load_profile
    from laddersim.model.shape import load_model_shape
    from laddersim.model.workload import Workload

    off = load_profile("h100-sxm-p2p-off")
    flash, compiled = load_framework("gpt-fast-flash"), load_framework("gpt-fast")
    assert flash.collective_handoff_s() == pytest.approx(7.35e-6) and compiled.collective_handoff_s() == 0.0
    for tp in (2, 4, 8):
        for size in (4096.0, 2.0**20):
            nccl = float(allreduce_time_s(off, tp, size))
            assert allreduce_time_s(off, tp, size, flash) == pytest.approx(nccl + 7.35e-6 / 2, rel=1e-12)
            assert allreduce_time_s(off, tp, size, compiled) == pytest.approx(nccl, rel=1e-12)
    assert allreduce_time_s(off, 1, 4096.0, flash) == 0.0
    model = load_model_shape("llama-3.1-8b")
    launch = {}
    for name in ("gpt-fast-flash", "vllm"):
        for tp in (1, 4):
            work = Workload(batch=4, prompt_len=64, gen_len=4, framework=name)
            launch[name, tp] = op_times_s(model, off, work, tp, Phase("decode", 4, 1), np.array([64.0]))[
                "collective_launch"][0]
    assert launch["gpt-fast-flash", 4] - launch["vllm", 4] == pytest.approx(7.35e-6 / 2, rel=1e-9)
    assert launch["gpt-fast-flash", 1] == launch["vllm", 1] == 0.0


def test_ladder_hides_the_collective_half_of_the_handoff_not_the_compute_half(tmp_path):
    """Standard runs every AllReduce in line, so it pays the whole hand-off (both halves); ladder
    overlaps the collective, so it pays the compute stream's half only: per decode step the
    hand-off moves standard by 2 x layers x H and ladder by about half that (TP 8, P2P on, batch 1,
    where the next module's compute covers the collective with room to spare). The same framework
    without the field is the baseline."""
    from laddersim.model.framework import FRAMEWORKS_DIR
    from laddersim.simulation.simulate import make_scenario, simulate

    text = (FRAMEWORKS_DIR / "gpt-fast-flash.yaml").read_text()
    lines = [line for line in text.splitlines() if not line.startswith("collective_handoff_us:")]
    assert len(lines) == len(text.splitlines()) - 1
    bare = tmp_path / "flash-nohandoff.yaml"
    bare.write_text("\n".join(lines).replace("name: gpt-fast-flash", "name: flash-nohandoff") + "\n")
    step = {}
    for fw in ("gpt-fast-flash", str(bare)):
        for schedule in ("standard", "ladder"):
            scenario = make_scenario(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=8, batch=1, prompt_len=64,
                                     gen_len=2, schedule=schedule, dtype="float16", framework=fw)
            step[fw, schedule] = simulate(scenario).summary()["decode_step_s"]
    h, layers = 7.35e-6, 32
    grown = {s: step["gpt-fast-flash", s] - step[str(bare), s] for s in ("standard", "ladder")}
    # both: the logits AllGather, in line in every schedule, pays its whole hand-off too; ladder: the
    # last two AllReduces, waited on before the final norm, expose their collective half.
    assert grown["standard"] == pytest.approx(2 * layers * h + h, rel=0.01)
    assert grown["ladder"] == pytest.approx(2 * layers * h / 2 + h + 2 * h / 2, rel=0.01)


_FLASH_TABLE = data_path("validation", "ladder_flash_p2p_sweep.csv")
_GRAPH_TABLE = data_path("validation", "ladder_graph_p2p_sweep.csv")


def _prefill_errors(path: Path, query: str) -> dict:
    from laddersim.validation.core import read_measured, validate

    out = validate(read_measured(path).query(query))
    return {(Path(m).name.removesuffix(".json"), g): p / s - 1 for m, g, p, s in
            zip(out["model"], out["gen_len"], out["predicted_prefill_s"], out["prefill_s"])}


def test_eager_rope_prices_the_prefill_of_gqa_and_mha_models():
    """RoPE's bytes factor was fitted to the 8B rows' prefill (gpt-fast-flash); the paper's MHA models,
    whose prefill layer is ~40% RoPE, are held out and must follow on their own framework
    (gpt-fast-graph: the same eager RoPE, the cache written by the attention path's index_put_)."""
    flash = _prefill_errors(_FLASH_TABLE, "p2p == 'on' and schedule == 'standard' and tp == 1 and batch == 16")
    assert abs(flash[("llama-3.1-8b", 512)]) < 0.05
    graph = _prefill_errors(_GRAPH_TABLE, "p2p == 'on' and schedule == 'standard' and tp == 1 and batch == 16")
    assert abs(graph[("paper-1b", 256)]) < 0.12 and abs(graph[("paper-3b", 256)]) < 0.12


def test_the_report_and_the_printed_rows_name_a_config_model_as_the_table_does(tmp_path, capsys):
    """A model read from the models folder is simulated from its path, but named as the table names
    it in what the user reads: the printed rows, the report and its CSV (no folder paths)."""
    path = _table(tmp_path, ROWS)
    assert main(["validate", str(path), "--report", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    report = (tmp_path / "r" / "index.md").read_text()
    # The Reproduce line names the report folder's measured.csv (where the user put the report).
    report = "\n".join(line for line in report.splitlines() if not line.startswith("Reproduce: "))
    written = pd.read_csv(tmp_path / "r" / "validation.csv")
    assert "tiny-lm" in out and "tiny-lm" in report and set(written["model"]) == {"tiny-lm"}
    for text in (out, report):
        assert "tiny-lm.json" not in text and str(tmp_path) not in text


def test_an_ep_column_gives_each_row_its_expert_parallel_degree(tmp_path):
    """A mixture-of-experts row's ``ep`` is read as ``--ep`` is: the prediction equals simulate's at
    that EP, and the rows of one setting at two EPs are two settings (no repeated-row refusal)."""
    from laddersim.simulation.simulate import make_scenario, simulate

    models = tmp_path / "models"
    models.mkdir()
    config = data_path("validation", "moe", "models", "mistralai--Mixtral-8x7B-v0.1.json")
    (models / "mixtral.json").write_text(Path(config).read_text())
    path = tmp_path / "measured.csv"
    path.write_text("model,tp,ep,nodes,batch,prompt_len,gen_len,p2p,schedule,hardware,framework,tokens_per_s\n"
                    "mixtral,2,1,1,4,128,16,on,standard,h100-sxm-nvswitch,vllm,500\n"
                    "mixtral,2,2,1,4,128,16,on,standard,h100-sxm-nvswitch,vllm,500\n")
    rows = validate(read_measured(path))
    for ep, row in zip((1, 2), rows.itertuples()):
        want = simulate(make_scenario(model=str(models / "mixtral.json"), hardware="h100-sxm-nvswitch", tp=2, ep=ep,
                                      batch=4, prompt_len=128, gen_len=16, schedule="standard", dtype="float16",
                                      framework="vllm")).summary()["tokens_per_s"]
        assert row.predicted_tokens_per_s == pytest.approx(want, rel=1e-12)
    assert rows["predicted_tokens_per_s"].iloc[0] != rows["predicted_tokens_per_s"].iloc[1]
