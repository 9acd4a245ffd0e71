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


def _without(tmp_path: Path, *fields: str) -> str:
    """The V0 framework file without ``fields`` (each then None: nothing beyond the profile's)."""
    data = yaml.safe_load(Path(V0).read_text())
    for field in fields:
        del data[field]
    path = tmp_path / f"vllm-v0-without-{'-'.join(fields)}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _summary(framework: str) -> dict:
    scenario = make_scenario(model="llama-3.1-8b", hardware="a100-sxm-nvswitch", tp=1, batch=4, prompt_len=64,
                             gen_len=33, schedule="standard", framework=framework)
    return simulate(scenario).summary()


def test_every_decode_step_waits_the_host_step(tmp_path: Path):
    """The same engine without its fixed host step: 32 decode steps take 32 x 2 ms less, nothing
    else changes."""
    fw = load_framework("vllm-v0")
    assert fw.step_host_s() == pytest.approx(0.002, rel=1e-12)
    no_host = _without(tmp_path, "step_host_us")
    assert load_framework(no_host).step_host_s() == 0.0
    assert _decode_s("vllm-v0") - _decode_s(no_host) == pytest.approx(32 * 0.002, rel=1e-9)


def test_the_host_step_grows_by_its_per_sequence_part(tmp_path: Path):
    """Batch 4, 64-token prompts, 33 tokens: without the per-sequence part (100 us a sampling
    sequence) the prefill takes 4 x 100 us less and the 32 decode steps 32 x 4 x 100 us less (by hand:
    0.4 ms and 12.8 ms); the online server's part is not paid by a static batch."""
    fw = load_framework("vllm-v0")
    assert fw.step_host_per_sequence_s() == pytest.approx(100e-6, rel=1e-12)
    assert fw.server_host_per_sequence_s() == pytest.approx(400e-6, rel=1e-12)
    full, no_seq = _summary("vllm-v0"), _summary(_without(tmp_path, "step_host_per_sequence_us"))
    assert full["prefill_s"] - no_seq["prefill_s"] == pytest.approx(0.4e-3, rel=1e-9)
    assert full["decode_s"] - no_seq["decode_s"] == pytest.approx(12.8e-3, rel=1e-9)
    no_server = _summary(_without(tmp_path, "server_host_per_sequence_us"))
    assert {k: v for k, v in no_server.items() if k != "framework"} == {k: v for k, v in full.items() if k != "framework"}


def test_a_served_iteration_pays_the_host_work_per_sampling_sequence(tmp_path: Path):
    """In the serving simulator an iteration pays (100 + 400) us per sequence that samples: a
    decode iteration of 8 sequences 8 x 0.5 ms = 4 ms more than without both parts, a prefill
    iteration of one 1000-token prompt 0.5 ms more (per sequence, not per prompt token)."""
    from laddersim.traffic.iteration_time import IterationTimer
    from laddersim.traffic.run import serving_scenario

    def timer(framework: str) -> IterationTimer:
        return IterationTimer(serving_scenario("llama-3.1-8b", "a100-sxm-nvswitch", 1, "standard", framework=framework))

    full = timer("vllm-v0")
    bare = timer(_without(tmp_path, "step_host_per_sequence_us", "server_host_per_sequence_us"))
    assert full.seconds(8, 8, 20e-6) - bare.seconds(8, 8, 20e-6) == pytest.approx(8 * 500e-6, rel=1e-6)
    assert full.seconds(1000, 1, 1e-3, prefill=True) - bare.seconds(1000, 1, 1e-3, prefill=True) == \
        pytest.approx(500e-6, rel=1e-6)


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
