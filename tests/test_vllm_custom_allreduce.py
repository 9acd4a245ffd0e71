"""#32 item 8: under --framework vllm, decode-size AllReduces run vLLM's one-/two-shot custom
kernel, priced from the profile's vLLM custom all-reduce table, not the NCCL model."""

from __future__ import annotations

import pytest

from laddersim.costs.allreduce import allreduce_source, allreduce_time_s
from laddersim.model.framework import load_framework
from laddersim.hardware.profile import load_profile
from laddersim.simulation.simulate import make_scenario, simulate

HW = "h100-sxm-nvswitch"


def test_decode_size_allreduce_is_the_custom_table():
    hw = load_profile(HW)
    vllm, nccl = load_framework("vllm"), load_framework("gpt-fast")
    seconds, source = allreduce_time_s(hw, 8, 16384, vllm), allreduce_source(hw, 8, 16384, vllm)
    # tables/aic_h100_sxm_vllm_0.24.0_graph.csv: 8 GPUs, 16 KiB, 5.3101 us (CUDA graph, like the profile)
    assert seconds * 1e6 == pytest.approx(5.3101, abs=1e-3) and source == "SILICON"
    assert allreduce_time_s(hw, 8, 16384, nccl) > 3 * seconds  # the NCCL model: ~19 us
    for tp in (2, 4):  # no multimem table: the custom kernel up to vLLM's max_size, monotone in size
        times = [allreduce_time_s(hw, tp, size, vllm) for size in (4096, 65536, 1 << 20, 8 << 20)]
        assert times == sorted(times) and times[-1] < allreduce_time_s(hw, tp, 8 << 20, nccl)
    # 8 GPUs: the multimem table (TokenWeave's, from 1 MiB) where it covers the size, the custom kernel below
    multimem = load_profile(HW).allreduce_arrays
    assert any(t.library.startswith("multimem") for t, _ in multimem)
    assert allreduce_time_s(hw, 8, 4 << 20, vllm) != pytest.approx(30.8125e-6, rel=0.05)


def test_above_max_size_the_custom_kernel_is_not_used():
    hw = load_profile(HW)
    vllm = load_framework("vllm")
    limit = vllm.small_allreduce_max_bytes.value
    # TP 4 has no multimem table: above vLLM's max_size it is the NCCL model, as for gpt-fast
    gpt_fast = load_framework("gpt-fast")
    assert allreduce_time_s(hw, 4, 2 * limit, vllm) == allreduce_time_s(hw, 4, 2 * limit, gpt_fast)
    assert allreduce_source(hw, 4, 2 * limit, vllm) == allreduce_source(hw, 4, 2 * limit, gpt_fast)


def test_ladder_speedup_under_vllm_follows_from_it():
    """A cheaper small AllReduce leaves less for ladder to hide: at TP 8 batch 1 ladder still
    gains, by no more per layer than the custom kernel's two AllReduces cost."""
    def step_s(framework: str, schedule: str) -> float:
        scenario = make_scenario(model="llama-3.1-8b", hardware=HW, tp=8, batch=1, prompt_len=1024, gen_len=64,
                                 schedule=schedule, dtype="bfloat16", framework=framework)
        return simulate(scenario).summary()["decode_step_s"]

    hw = load_profile(HW)
    standard, ladder = step_s("vllm", "standard"), step_s("vllm", "ladder")
    assert ladder < standard
    # what ladder hides per layer is at most the two AllReduces it overlaps, now ~2 x 5.3 us, each
    # with the start-up behind its producer (collective_sync_us) that delays it
    per_layer_gain = (standard - ladder) / 32
    sync_s = hw.framework.collective_sync_us.value * 1e-6
    assert per_layer_gain <= 2 * (allreduce_time_s(hw, 8, 8192, load_framework("vllm")) + sync_s) + 5e-6
