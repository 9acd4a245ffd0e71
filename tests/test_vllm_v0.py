"""vLLM's V0 engine (``vllm-v0``): the host step between decode steps, and the early-2024 MoE
tables it prices (vLLM pull requests 3240 and 2979)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from laddersim.model.framework import load_framework
from laddersim.simulation.simulate import make_scenario, simulate
from laddersim.support.resources import data_path

V0 = data_path("frameworks", "vllm-v0.yaml")


def _decode_s(framework: str) -> float:
    scenario = make_scenario(model="llama-3.1-8b", hardware="a100-sxm-nvswitch", tp=1, batch=4, prompt_len=64,
                             gen_len=33, schedule="standard", framework=framework)
    return simulate(scenario).summary()["decode_s"]


def test_every_decode_step_waits_the_host_step(tmp_path: Path):
    """The same engine without its host step: 32 decode steps take 32 x 4 ms less (issue 6854's
    4 ms bubble per decode step), nothing else changes."""
    data = yaml.safe_load(Path(V0).read_text())
    assert data["step_host_us"]["value"] == 4000
    del data["step_host_us"]
    no_host = tmp_path / "vllm-v0-no-host.yaml"
    no_host.write_text(yaml.safe_dump(data))
    assert load_framework("vllm-v0").step_host_s() == 0.004 and load_framework(str(no_host)).step_host_s() == 0.0
    assert _decode_s("vllm-v0") - _decode_s(str(no_host)) == pytest.approx(32 * 0.004, rel=1e-9)


def test_the_v0_engine_runs_nccl_at_every_size():
    """The custom all-reduce was off by default in vLLM from February to April 2024."""
    from laddersim.costs.allreduce import allreduce_label
    from laddersim.hardware import load_profile

    hw, fw = load_profile("a100-sxm-nvswitch"), load_framework("vllm-v0")
    for size in (16 * 1024, 1 << 20, 16 << 20):
        assert allreduce_label(hw, 2, size, fw, dtype="bfloat16").startswith("nccl"), size


def test_the_march_2024_latency_rows_within_10_percent():
    """PR 3240's benchmark_latency rows (A100 TP 2, 1000 in / 50 out, batch 1-64) on the V0 engine:
    median within 10%; without its host step every row would be priced too fast at batch 1-2."""
    from laddersim.validation.moe_rows import moe_validation_rows

    rows = moe_validation_rows()
    pr = rows[rows.table == "vllm_pr3240_mixtral_a100_tp2_latency.csv"]
    assert (pr.framework == "vllm-v0").all() and len(pr) == 7
    assert pr.error.astype(float).abs().median() < 0.10
