"""Serving a mixture-of-experts model: each iteration's MoE ops priced at its tokens (the experts
they hit), the layer extrapolation exact where every layer is alike and replaced by whole-model
runs where dense and MoE layers interleave, expert parallelism on the serving CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from laddersim.cli import main
from laddersim.costs.op_costs import op_times_s
from laddersim.traffic.iteration_shape import MixedPhase
from laddersim.traffic.iteration_time import IterationTimer
from laddersim.traffic.run import serving_scenario


def _whole_model(timer: IterationTimer, tokens: int, logits: int, a_s: float) -> float:
    seconds, compute, comm, tail_s = timer._base_at(tokens)
    whole, _ = timer._run(timer._full, seconds, compute, comm, a_s)
    return whole - tail_s + timer._tail_seconds(tokens, logits)


@pytest.mark.parametrize("schedule", ["standard", "ladder"])
def test_moe_iteration_extrapolated_from_reduced_runs_equals_the_whole_model(schedule):
    timer = IterationTimer(serving_scenario("mixtral-8x7b", "h100-sxm-nvswitch", 2, schedule, framework="vllm"))
    assert "moe_gate_up" in timer._kind_names and "gate_up" not in timer._kind_names
    for tokens, logits, a_s in ((1, 1, 2e-5), (24, 10, 1.3e-4), (2048, 3, 9e-4)):
        assert timer.gpu_seconds(tokens, logits, a_s) == pytest.approx(_whole_model(timer, tokens, logits, a_s), rel=1e-9)
    assert timer.whole_model_runs == 0


def test_interleaved_dense_and_moe_layers_run_the_whole_model():
    """Llama 4 Maverick: MoE every second layer; reduced runs of alike layers would not stand for it."""
    scenario = serving_scenario("llama-4-maverick", "h200-sxm-nvswitch", 8, "ladder", framework="vllm")
    timer = IterationTimer(scenario)
    assert timer._reduced == [] and {"moe_gate_up", "gate_up"} <= set(timer._kind_names)
    got = timer.gpu_seconds(8, 8, 1e-4)
    assert got == pytest.approx(_whole_model(timer, 8, 8, 1e-4), rel=1e-12) and timer.whole_model_runs > 0


def test_moe_iteration_follows_the_experts_its_tokens_hit():
    """Mixtral (8 experts, top 2) under the standard schedule, where the iteration is the serial
    sum: one token reads 2 experts, 64 tokens all 8; the grouped GEMMs' share grows accordingly."""
    s = serving_scenario("mixtral-8x7b", "h100-sxm-nvswitch", 2, "standard", framework="vllm")
    timer = IterationTimer(s)
    times = [op_times_s(s.model, s.hardware, s.workload, 2, MixedPhase("decode", t, 1, t), np.ones(1)) for t in (1, 64)]
    grouped = [float(t["moe_gate_up"][0] + t["moe_down"][0]) for t in times]
    assert 3.0 < grouped[1] / grouped[0] < 4.2  # ~ 8 / 2 experts' weights streamed
    one, many = timer.gpu_seconds(1, 1, 1e-5), timer.gpu_seconds(64, 64, 1e-5)
    # the grouped GEMMs' growth, plus a little from the rest of the pass (its 64 rows)
    assert 1.0 <= (many - one) / (s.model.n_layers * (grouped[1] - grouped[0])) < 1.2


def test_serving_cli_takes_ep_and_refuses_a_bad_one_in_one_line(capsys):
    args = ["serving", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm-nvswitch", "--tp", "4",
            "--framework", "vllm", "--rate", "4", "--requests", "20", "--prompt-len", "256", "--gen-len", "16",
            "--schedule", "ladder", "--no-progress"]
    assert main(args + ["--ep", "2", "--json"]) == 0
    ep2 = json.loads(capsys.readouterr().out)[0]
    assert main(args + ["--json"]) == 0
    ep1 = json.loads(capsys.readouterr().out)[0]
    assert ep2["requests"] == ep1["requests"] == 20 and ep2["tpot_p50_s"] != ep1["tpot_p50_s"]
    assert main(args + ["--ep", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ep: 3 does not divide the 128 experts") and "\n" not in err


def test_plan_enumerates_tp_x_ep_and_says_why_a_split_is_out(capsys):
    """An MoE model's plan simulates every expert-parallel degree its experts allow at each TP and
    prints one verdict per TP x EP split, the ones that cannot run with the reason; a dense model
    given --ep > 1 is refused in one line."""
    args = ["plan", "--model", "qwen3-30b-a3b", "--profiles", "h100-sxm-nvswitch", "--min-user-tokens-per-s", "60",
            "--batch", "4", "--tp", "4", "--schedule", "ladder", "--workers", "1", "--no-progress",
            "--price-per-gpu-hour", "2"]
    assert main(args + ["--ep", "1", "3", "4", "8"]) == 0
    out = capsys.readouterr().out
    splits = [line.strip() for line in out.splitlines() if line.startswith("  h100-sxm-nvswitch TP 4 x PP 1 x EP")
              and "data-parallel attention" not in line]
    assert len(splits) == 4
    # and the one-node data-parallel-attention layout the EP choices allow: 2 replicas of TP 4, EP 8
    assert sum(line.startswith("  h100-sxm-nvswitch TP 4 x PP 1 x EP 8 data-parallel attention (1 node, 8 GPUs)")
               for line in out.splitlines()) == 1
    assert any(line.startswith("h100-sxm-nvswitch TP 4 x PP 1 x EP 4 (1 node, 4 GPUs): meets it") for line in splits)
    assert any("EP 3: cannot run: ep: 3 does not divide the 128 experts" in line for line in splits)
    assert any("EP 8: cannot run: ep: 8 does not divide tp 4" in line for line in splits)
    from laddersim.planning.planner import candidate_eps
    from laddersim.model.shape import load_model_shape

    assert candidate_eps(load_model_shape("mixtral-8x7b"), 8) == [1, 2, 4, 8]
    assert candidate_eps(load_model_shape("llama-3.1-8b"), 8) == [1]
    assert main(["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "--min-user-tokens-per-s",
                 "60", "--ep", "2", "--workers", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: ep: 2 places experts, and llama-3.1-8b is dense; allowed: 1"


def test_sweep_takes_ep_and_keys_each_split(tmp_path):
    """A sweep's ``ep`` axis: one row per EP with its own standard baseline, the rows and keys of
    EP 1 as a grid without the axis has them (so a dense sweep is what it was), resumed whole."""
    import laddersim

    grid = dict(models=["mixtral-8x7b"], hardware=["h100-sxm-nvswitch"], tp=[4], batch=[1], gen_len=[16])
    with_ep = laddersim.sweep(None, tmp_path / "a", workers=1, ep=[1, 4], **grid)
    without = laddersim.sweep(None, tmp_path / "b", workers=1, **grid)
    assert sorted(with_ep.ep) == [1, 1, 4, 4] and "ep" not in without.columns
    one = with_ep[with_ep.ep == 1].drop(columns=["ep"]).reset_index(drop=True)
    assert one.equals(without.reset_index(drop=True))
    four = with_ep[with_ep.ep == 4].set_index("schedule")
    assert four.loc["standard", "speedup_vs_standard"] == 1.0
    assert four.loc["standard", "tokens_per_s"] != one.set_index("schedule").loc["standard", "tokens_per_s"]
    again = laddersim.sweep(None, tmp_path / "a", workers=1, ep=[1, 4], **grid)
    assert again.attrs["reused"] == 4 and again.attrs["computed"] == 0  # 2 EP x 2 schedules


def test_moe_pipeline_stage_timers_extrapolate_exactly():
    """Each stage of a TP 2 x PP 2 Mixtral replica: its reduced runs (every layer alike) stand for
    the stage's whole program."""
    from laddersim.traffic.options import ServingOptions
    from laddersim.traffic.pipelined import stage_timers

    scenario = serving_scenario("mixtral-8x7b", "h100-sxm-nvswitch", 2, "ladder", framework="vllm", pp=2)
    for timer in stage_timers(scenario, ServingOptions()):
        assert timer._reduced and "moe_down" in timer._kind_names
        for tokens, logits, a_s in ((1, 1, 2e-5), (40, 8, 2e-4)):
            assert timer.gpu_seconds(tokens, logits, a_s) == pytest.approx(_whole_model(timer, tokens, logits, a_s),
                                                                       rel=1e-9)
        assert timer.whole_model_runs == 0
