"""Jittered decode from a sample of steps: the exact answer lies in the sampled one's interval."""

from __future__ import annotations

import json

import numpy as np
import pytest

from laddersim.cli import main
from laddersim.hardware.profile import load_profile
from laddersim.model.shape import ModelShape
from laddersim.simulation.simulate import Scenario, SimOptions, simulate
from laddersim.simulation.step_sampling import t_975
from laddersim.model.workload import Workload

MODEL = ModelShape(name="tiny", n_layers=3, dim=1024, n_heads=16, n_kv_heads=8, intermediate_size=4096,
                   vocab_size=4096)


def scenario(schedule="ladder", gen_len=61):
    work = Workload(batch=4, prompt_len=64, gen_len=gen_len, kv_cache="dynamic")
    return Scenario(MODEL, load_profile("h100-sxm-nvswitch"), work, 4, schedule)


def test_the_exact_decode_time_lies_in_the_sampled_estimates_95_percent_interval():
    inside = 0
    for seed in range(6):
        exact = simulate(scenario(), SimOptions(jitter=0.2, seed=seed, exact_steps=True)).summary()
        sampled = simulate(scenario(), SimOptions(jitter=0.2, seed=seed, sample_steps=12)).summary()
        lo, hi = sampled["decode_s_ci95"]
        assert "decode_s_ci95" not in exact
        assert sampled["sampled_steps"] == 12 and lo < sampled["decode_s"] < hi
        assert hi - lo < 0.08 * exact["decode_s"]  # informative, not vacuous
        inside += lo <= exact["decode_s"] <= hi
        tlo, thi = sampled["tokens_per_s_ci95"]
        assert tlo < sampled["tokens_per_s"] < thi
    assert inside >= 5  # a 95% interval: one miss in six is already unlikely


def test_a_sample_as_large_as_the_run_is_the_exact_run():
    few = simulate(scenario(gen_len=9), SimOptions(jitter=0.1, seed=3, sample_steps=50)).summary()
    exact = simulate(scenario(gen_len=9), SimOptions(jitter=0.1, seed=3, exact_steps=True)).summary()
    assert few == exact


def test_sampled_steps_are_the_exact_runs_steps_with_the_same_draws_in_their_place():
    sampled = simulate(scenario(gen_len=30), SimOptions(jitter=0.1, seed=1, sample_steps=5))
    assert sorted(sampled.anchors) == sorted(set(sampled.step_lo.tolist()))
    assert len(sampled.anchors) == 5
    # steps not simulated show a simulated step's spans
    start, _ = sampled.decode_spans(0)
    assert any(np.array_equal(start, a.start_s) for a in sampled.anchors.values())


@pytest.mark.parametrize("df, value", [(1, 12.706), (7, 2.365), (11, 2.201), (30, 2.042), (120, 1.980)])
def test_t_quantiles(df, value):
    assert t_975(df) == pytest.approx(value, abs=1.5e-3)


def test_cli_prints_the_interval_and_exact_steps_drops_it(capsys):
    args = ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
            "--prompt-len", "32", "--gen-len", "12", "--jitter", "0.1", "--schedule", "ladder", "--json"]
    assert main(args + ["--sample-steps", "4"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["sampled_steps"] == 4 and row["decode_s_ci95"][0] < row["decode_s"] < row["decode_s_ci95"][1]
    assert main(args + ["--exact-steps"]) == 0
    assert "decode_s_ci95" not in json.loads(capsys.readouterr().out)[0]
    assert main(args[:-1] + ["--sample-steps", "4"]) == 0
    assert "sampled steps of 11; 95% interval" in capsys.readouterr().out
