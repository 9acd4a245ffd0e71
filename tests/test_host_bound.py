"""The host side of a serving step (laddersim.costs.host_bound): a step takes the longer of its GPU
time and its host time (kernel launches of an eager step, per-sequence work) where the scheduler
overlaps them, adds the per-sequence work where it does not, and a decode batch above the
framework's CUDA-graph limit runs eagerly."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from laddersim.costs.host_bound import bounded_step_s, graph_replayed, host_parts_s
from laddersim.hardware import load_profile
from laddersim.hardware.sourced import Sourced
from laddersim.model.framework import FRAMEWORKS_DIR, framework_names, load_framework
from laddersim.model.shape import ModelShape
from laddersim.traffic.iteration_shape import MixedPhase
from laddersim.traffic.iteration_time import IterationTimer
from laddersim.traffic.run import serving_scenario

HOST_FIELDS = ("cuda_graph_max_batch", "eager_kernel_host_us", "scheduler_overlap", "step_host_per_sequence_us")
LLAMA_8B = ModelShape(name="llama-3.1-8b", n_layers=32, dim=4096, n_heads=32, n_kv_heads=8, intermediate_size=14336,
                      vocab_size=128256)
# A small model (short GPU steps) whose eager steps are bound by their launches.
SMALL = ModelShape(name="small", n_layers=32, dim=1024, n_heads=8, n_kv_heads=8, intermediate_size=4096,
                   vocab_size=32000)


@pytest.fixture(scope="module")
def h100():
    return load_profile("h100-sxm-nvswitch")


def _without_host_side(name: str, tmp_path: Path) -> str:
    """A framework file equal to the shipped ``name`` without its host-side fields: today's GPU time."""
    data = yaml.safe_load((FRAMEWORKS_DIR / f"{name}.yaml").read_text())
    for field in HOST_FIELDS:
        data.pop(field, None)
    path = tmp_path / f"{name}-gpu-only.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_hand_computed_host_bound_step(h100):
    # TensorRT-LLM: overlap scheduler; an eager step of 420 kernels at the profile's 16 us launch
    # and, in a copy of its record, 32 sequences at 55 us of host work each: host 6.72 + 1.76 ms
    fw = load_framework("trtllm").model_copy(
        update={"step_host_per_sequence_us": Sourced(value=55.0, source="test: a hand-computed case")})
    launch_s, work_s = host_parts_s(fw, h100, 420, 32, prefill=True)
    assert launch_s == pytest.approx(420 * 16e-6)
    assert work_s == pytest.approx(32 * 55e-6)
    assert bounded_step_s(5e-3, launch_s, work_s) == pytest.approx(8.48e-3)  # host-bound
    assert bounded_step_s(9e-3, launch_s, work_s) == pytest.approx(9e-3)  # the GPU's
    # a decode step under its CUDA graph launches nothing kernel by kernel
    assert host_parts_s(fw, h100, 420, 32, prefill=False) == (0.0, pytest.approx(32 * 55e-6))
    # vLLM 0.12: no async scheduling, the GPU idles through the per-sequence work (already in its
    # GPU seconds, the sampling op's); the launches come after it
    vllm = load_framework("vllm")
    assert vllm.step_host_per_sequence_s() == pytest.approx(21.5e-6) and not vllm.overlaps_host()
    assert fw.step_host_per_sequence_s() == 0.0 and fw.host_per_sequence_s() == pytest.approx(55e-6)
    launch_s, work_s = host_parts_s(vllm, h100, 100, 8, prefill=True)
    assert bounded_step_s(5e-3, launch_s, work_s) == pytest.approx(5e-3)
    assert bounded_step_s(1e-3, launch_s, work_s) == pytest.approx(1.6e-3 + 8 * 21.5e-6)


@pytest.mark.parametrize("name, limit", [("vllm", 512), ("sglang", 256), ("trtllm", 128)])
def test_capture_size_edge(name, limit):
    fw = load_framework(name)
    assert graph_replayed(fw, False, limit)
    assert not graph_replayed(fw, False, limit + 1)
    assert not graph_replayed(fw, True, 1)  # a step with prompt tokens runs eagerly


@pytest.mark.parametrize("name", ["vllm", "sglang", "trtllm"])
def test_step_at_the_capture_edge(name, h100, tmp_path):
    """At the framework's limit N the decode step is its GPU time with the per-sequence work; at
    N + 1 its kernels are launched from the host one by one as well."""
    fw = load_framework(name)
    limit = fw.cuda_graph_max_batch.value
    priced = IterationTimer(serving_scenario(SMALL, h100, 2, "standard", "bfloat16", framework=name))
    gpu = IterationTimer(serving_scenario(SMALL, h100, 2, "standard", "bfloat16",
                                          framework=_without_host_side(name, tmp_path)))
    a_s = 20e-6
    per_sequence_s = fw.host_per_sequence_s()
    overlap = fw.overlaps_host()
    for batch, eager in ((limit, False), (limit + 1, True)):
        gpu_s = gpu.seconds(batch, batch, a_s)
        launch_s = priced._host.kernels(MixedPhase("decode", batch, 1, batch), False) * h100.collectives.eager_launch_us.value * 1e-6 if eager else 0.0
        work_s = batch * per_sequence_s
        idle_s = 0.0 if overlap else work_s  # the GPU idles through the host work it does not overlap
        want = max(gpu_s + idle_s, launch_s + work_s)
        assert priced.seconds(batch, batch, a_s) == pytest.approx(want, rel=1e-12)
    # the edge is visible: one sequence more and the step waits for its launches (over ten a layer)
    assert priced._host.kernels(MixedPhase("decode", limit + 1, 1, limit + 1), False) > 10 * SMALL.n_layers
    assert priced.seconds(limit + 1, limit + 1, a_s) > gpu.seconds(limit + 1, limit + 1, a_s) + 1e-3
    assert priced.seconds(limit + 1, limit + 1, a_s) > priced.seconds(limit, limit, a_s) + 1e-3


def test_decode_steps_match_single_steps(h100):
    """The vectorised decode stretch prices its steps as ``seconds`` does, host side included."""
    import numpy as np

    timer = IterationTimer(serving_scenario(LLAMA_8B, h100, 2, "standard", "bfloat16", framework="trtllm"))
    a = np.array([20e-6, 21e-6, 22e-6])
    timer.seconds(128, 128, 20e-6)  # resolve the attention interval
    steps, _ = timer.decode_steps(128, a)
    for i, seconds in enumerate(steps):
        assert seconds == pytest.approx(timer.seconds(128, 128, float(a[i])), rel=1e-12)


def test_other_frameworks_keep_their_gpu_time():
    for name in framework_names():
        fw = load_framework(name)
        if name not in ("vllm", "sglang", "trtllm"):
            assert not fw.prices_host_side(), name
