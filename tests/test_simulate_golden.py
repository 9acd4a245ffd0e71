"""Closed-form goldens for whole forward passes, and the exactness of the simulator's shortcuts."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.costs.collectives import bandwidth_share
from laddersim.costs.op_costs import Phase, op_times_s
from laddersim.hardware.overrides import with_overrides
from laddersim.hardware.comm_specs import InterferencePoint, InterferenceSpec
from laddersim.hardware.sourced import Sourced
from laddersim.simulation.simulate import Scenario, SimOptions, simulate
from laddersim.model.workload import Workload

WORK = Workload(batch=2, prompt_len=64, gen_len=6)


def decode_durations(model, hw, tp, result, step=0):
    kv = WORK.kv_len_at_decode_step(step)
    costs = op_times_s(model, hw, WORK, tp, Phase("decode", WORK.batch, 1), np.array([kv]))
    return {op.index: float(costs[op.kind][0]) for op in result.program.ops}


def test_tp1_step_time_is_the_sum_of_op_times(tiny_model, h100):
    result = simulate(Scenario(tiny_model, h100, WORK, 1, "ladder"))
    assert not any(op.is_collective for op in result.program.ops)
    durations = decode_durations(tiny_model, h100, 1, result)
    assert result.decode_metrics[0, 0] == pytest.approx(sum(durations.values()), rel=1e-12)


def test_standard_step_is_compute_plus_every_allreduce(tiny_model, h100):
    result = simulate(Scenario(tiny_model, h100, WORK, 4, "standard"))
    durations = decode_durations(tiny_model, h100, 4, result)
    n_ar = sum(op.kind == "allreduce" for op in result.program.ops)
    assert n_ar == 2 * tiny_model.n_layers
    # Every AllReduce blocks: nothing overlaps, so the step is the plain sum of all ops.
    assert result.decode_metrics[0, 0] == pytest.approx(sum(durations.values()), rel=1e-12)
    assert result.decode_metrics[0, 4] == pytest.approx(result.decode_metrics[0, 3], rel=1e-12)


@pytest.mark.parametrize("latency_scale", [0.01, 0.3])
def test_ladder_with_cheap_allreduce_exposes_only_the_last_one(tiny_model, h100_no_interference, latency_scale):
    hw = with_overrides(h100_no_interference, intra_latency_scale=latency_scale, intra_bandwidth_scale=100)
    result = simulate(Scenario(tiny_model, hw, WORK, 4, "ladder"))
    durations = decode_durations(tiny_model, hw, 4, result)
    ops = result.program.ops
    ar = max(durations[op.index] for op in ops if op.kind == "allreduce")
    def module_s(kinds):
        return sum(durations[op.index] for op in ops if op.kind in kinds and op.layer == 0)
    module_compute = min(module_s({"attn_norm", "qkv", "rope", "attention", "o_proj"}),
                         module_s({"mlp_norm", "gate_up", "act", "down"}))
    assert ar < module_compute  # the premise: communication cheaper than the next module
    compute = sum(d for i, d in durations.items() if not ops[i].is_collective)
    gather = next(durations[op.index] for op in ops if op.kind == "allgather_logits")
    add = next(durations[op.index] for op in ops if op.kind == "residual_add")
    # The last MLP AllReduce has only the last attention residual add to hide behind; the logits
    # gather is blocking in every schedule.
    expected = compute + max(ar - add, 0.0) + gather
    assert result.decode_metrics[0, 0] == pytest.approx(expected, rel=1e-12)


def test_ladder_equals_standard_at_tp1(tiny_model, h100):
    a = simulate(Scenario(tiny_model, h100, WORK, 1, "standard")).summary()
    b = simulate(Scenario(tiny_model, h100, WORK, 1, "ladder")).summary()
    assert a["total_s"] == pytest.approx(b["total_s"], rel=1e-12)


def test_upper_bound_has_no_allreduce_and_desync_half_keeps_mlp_ones(tiny_model, h100):
    up = simulate(Scenario(tiny_model, h100, WORK, 4, "upper_bound")).program
    half = simulate(Scenario(tiny_model, h100, WORK, 4, "desync_half")).program
    assert not any(op.kind == "allreduce" for op in up.ops)
    assert [op.name.split(".")[1] for op in half.ops if op.kind == "allreduce"] == ["mlp"] * tiny_model.n_layers


def test_hybrid_extremes_match_standard_and_ladder(tiny_model, h100):
    n = tiny_model.n_layers
    def total(s):
        return simulate(Scenario(tiny_model, h100, WORK, 4, s)).summary()["total_s"]
    assert total("hybrid:0") == pytest.approx(total("standard"), rel=1e-12)
    assert total(f"hybrid:{n}") == pytest.approx(total("ladder"), rel=1e-12)
    assert total("ladder") <= total("hybrid:2") <= total("standard")


@pytest.mark.parametrize("schedule", ["standard", "ladder", "parallel", "hybrid:2"])
def test_step_interpolation_equals_step_by_step(tiny_model, h100, schedule):
    work = Workload(batch=4, prompt_len=100, gen_len=40, kv_cache="dynamic")
    scenario = Scenario(tiny_model, h100, work, 4, schedule)
    fast = simulate(scenario)
    exact = simulate(scenario, SimOptions(exact_steps=True))
    assert fast.simulated_steps < exact.simulated_steps
    np.testing.assert_allclose(fast.decode_metrics, exact.decode_metrics, rtol=1e-9, atol=1e-15)
    for step in (0, 7, 20, 38):
        for a, b in zip(fast.decode_spans(step), exact.decode_spans(step)):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-15)


def test_rank_symmetry_equals_simulating_every_rank(tiny_model, h100):
    scenario = Scenario(tiny_model, h100, WORK, 4, "ladder")
    one = simulate(scenario)
    every = simulate(scenario, SimOptions(all_ranks=True))
    assert one.sim_ranks == 1 and every.sim_ranks == 4
    np.testing.assert_allclose(one.decode_metrics, every.decode_metrics, rtol=1e-12)
    for rank in range(4):
        np.testing.assert_allclose(every.prefill.end_s[rank], one.prefill.end_s[0], rtol=1e-12)


def test_a_straggler_delays_everyone(tiny_model, h100):
    scenario = Scenario(tiny_model, h100, WORK, 4, "standard")
    calm = simulate(scenario).summary()["total_s"]
    noisy = simulate(scenario, SimOptions(jitter=0.2, seed=3))
    # Each collective waits for the slowest rank, so noise can only add time on average.
    assert noisy.summary()["total_s"] > calm
    waits = noisy.prefill.start_s - noisy.prefill.ready_s
    comm = np.array([op.is_collective for op in noisy.program.ops])
    assert (waits[:, comm] > 0).any()  # some rank waited for a straggler
    again = simulate(scenario, SimOptions(jitter=0.2, seed=3)).summary()
    assert again == noisy.summary()


def test_timeline_columns_and_absolute_times(tiny_model, h100):
    result = simulate(Scenario(tiny_model, h100, WORK, 2, "ladder"))
    frame = result.timeline()
    assert list(frame.columns) == ["phase", "step", "rank", "stream", "layer", "op", "kind", "start_s", "end_s"]
    assert set(frame["rank"]) == {0, 1}
    assert len(frame) == 2 * len(result.program) * WORK.gen_len  # prefill + gen_len - 1 steps
    assert frame["end_s"].max() == pytest.approx(result.summary()["total_s"], rel=1e-12)
    assert (frame["end_s"] >= frame["start_s"]).all()


def _framework(hw, **fields):
    fw = hw.framework.model_copy(update={k: Sourced(value=v, source="test value") for k, v in fields.items()})
    return hw.model_copy(update={"framework": fw})


def test_single_token_floor_replaces_the_kernel_floor_only_in_a_one_token_pass(tiny_model, h100):
    launch = h100.gpu.kernel_launch_s
    fused = _framework(h100, single_token_kernel_floor_us=0.5)
    kinds = ("attn_norm", "qkv", "rope", "o_proj", "gate_up", "act", "down", "residual_add", "lm_head")
    one = Workload(batch=1, prompt_len=64, gen_len=6)
    base = op_times_s(tiny_model, h100, one, 4, Phase("decode", 1, 1), np.array([64.0]))
    new = op_times_s(tiny_model, fused, one, 4, Phase("decode", 1, 1), np.array([64.0]))
    for kind in kinds:
        assert base[kind][0] - new[kind][0] == pytest.approx(launch - 0.5e-6, rel=1e-9), kind
    # Attention is an extern kernel in both paths; a batch-2 step takes the cuBLAS path.
    assert new["attention"][0] == base["attention"][0]
    two = op_times_s(tiny_model, fused, WORK, 4, Phase("decode", 2, 1), np.array([64.0]))
    assert two["qkv"][0] == op_times_s(tiny_model, h100, WORK, 4, Phase("decode", 2, 1), np.array([64.0]))["qkv"][0]


def test_collective_input_copy_is_one_memory_bound_kernel_before_each_collective(tiny_model, h100):
    none = _framework(h100, collective_input_copies=0.0, collective_sync_gb_per_s=0.0)
    one = _framework(h100, collective_input_copies=1.0, collective_sync_gb_per_s=0.0)
    phase = Phase("decode", WORK.batch, 1)
    message = WORK.batch * tiny_model.dim * WORK.dtype_bytes
    bandwidth = h100.gpu.memory_bandwidth_bytes_per_s * h100.gpu.elementwise_memory_efficiency.value
    copy = h100.gpu.kernel_launch_s + 2 * message / bandwidth  # read and write the message once
    at = dict(kv_lens=np.array([64.0]))
    assert (op_times_s(tiny_model, one, WORK, 4, phase, **at)["collective_launch"][0]
            - op_times_s(tiny_model, none, WORK, 4, phase, **at)["collective_launch"][0]) == pytest.approx(copy, rel=1e-9)
    assert op_times_s(tiny_model, one, WORK, 1, phase, **at)["collective_launch"][0] == 0.0  # TP 1: no collective


def _by_size(hw, points):
    spec = hw.interference.model_copy(update={"by_size": [
        InterferencePoint(size_bytes=s, compute_slowdown=c, comm_slowdown=m, source="test value") for s, c, m in points],
        "collective_channels": None})  # a profile has a curve or the channel rule
    return hw.model_copy(update={"interference": spec})


def test_interference_by_size_is_read_at_each_collectives_message(tiny_model, h100):
    message = WORK.batch * tiny_model.dim * WORK.dtype_bytes  # the decode AllReduce, 4 KiB
    sized = _by_size(h100, [(message, 0.3, 0.6), (1 << 24, 0.0, 0.0)])
    assert sized.interference.at(message) == (0.3, 0.6)
    # A what-if constant applies at every size (it drops NCCL's channel rule), as a curve does.
    constant = with_overrides(h100, compute_slowdown=0.3, comm_slowdown=0.6)
    assert constant.interference.collective_channels is None
    free = with_overrides(h100, compute_slowdown=0.0, comm_slowdown=0.0)
    ladder = {name: simulate(Scenario(tiny_model, hw, WORK, 4, "ladder")).decode_metrics
              for name, hw in (("sized", sized), ("constant", constant), ("free", free))}
    # Decode collectives carry the 4 KiB message (the logits gather overlaps nothing), so the
    # per-size curve acts as the constants read at 4 KiB, and the overlap really costs something.
    np.testing.assert_allclose(ladder["sized"], ladder["constant"], rtol=1e-12)
    assert ladder["sized"][0, 0] > ladder["free"][0, 0] * 1.001


def test_interference_at_interpolates_in_log_size_and_holds_beyond_the_ends(h100):
    sized = _by_size(h100, [(1024, 0.1, 0.2), (1 << 20, 0.4, 0.8)])
    assert sized.interference.at(32 * 1024) == pytest.approx((0.25, 0.5))  # halfway in log size
    assert sized.interference.at(16) == (0.1, 0.2) and sized.interference.at(1 << 30) == (0.4, 0.8)
    assert h100.interference.at(1 << 20) == (h100.interference.compute_slowdown.value,
                                             h100.interference.comm_slowdown.value)
    descending = [{"size_bytes": s, "compute_slowdown": 0.1, "comm_slowdown": 0.2, "source": "test value"}
                  for s in (1 << 20, 1024)]
    with pytest.raises(ValueError, match="increasing"):
        InterferenceSpec.model_validate({**h100.interference.model_dump(), "by_size": descending})
    # A what-if constant replaces that fraction at every size and keeps the other.
    what_if = with_overrides(sized, compute_slowdown=0.05)
    assert [p.compute_slowdown for p in what_if.interference.by_size] == [0.05, 0.05]
    assert what_if.interference.at(32 * 1024) == pytest.approx((0.05, 0.5))


def _interference(hw, **fields):
    return hw.model_copy(update={"interference": hw.interference.model_copy(update=fields)})


def test_bandwidth_share_is_the_time_above_the_latency_floor(h100):
    # With the fitted curve the AllReduce is the minimum over protocol lines L + 2(n-1)/n * s / B:
    # a one-byte message takes (about) the smallest latency, a 1 GiB one the widest line.
    hw = h100.model_copy(update={"collectives": h100.collectives.model_copy(update={"prefer": "fit"})})
    fit = hw.intra_node_fit(8)
    size = float(1 << 30)
    floor_us = min(t.latency_us + 2 * 7 / 8 / (t.bus_bandwidth_gb_per_s * 1e3) for t in fit.terms)  # one byte
    wide = max(fit.terms, key=lambda t: t.bus_bandwidth_gb_per_s)
    time_us = wide.latency_us + 2 * 7 / 8 * size / (wide.bus_bandwidth_gb_per_s * 1e3)
    assert bandwidth_share(hw, 8, size) == pytest.approx(1 - floor_us / time_us, rel=1e-9)
    assert bandwidth_share(hw, 8, 1.0) == 0.0 and bandwidth_share(hw, 1, size) == 0.0
    assert 0.9 < bandwidth_share(hw, 8, size) < 1.0


def test_a_bandwidth_part_slowdown_is_the_whole_slowdown_scaled_by_that_share(tiny_model, h100):
    message = WORK.batch * tiny_model.dim * WORK.dtype_bytes  # the decode AllReduce, 4 KiB
    part = _interference(h100, compute_slowdown=Sourced(value=0.1, source="test value"),
                         comm_slowdown=Sourced(value=1.5, source="test value"), comm_slowdown_part="bandwidth",
                         collective_channels=None)  # as the what-if constants below
    share = bandwidth_share(h100, 4, message)
    assert part.interference.at(message, share) == pytest.approx((0.1, 1.5 * share))
    assert part.interference.at(message) == (0.1, 1.5)  # share defaults to the whole time
    whole = with_overrides(h100, compute_slowdown=0.1, comm_slowdown=1.5 * share)
    assert whole.interference.comm_slowdown_part == "whole"
    assert whole.interference.at(message, share) == pytest.approx((0.1, 1.5 * share))
    # The decode collectives of one scenario share a message size, so the two profiles time
    # every collective alike (the logits gather has its own message, but overlaps nothing).
    ladder = {name: simulate(Scenario(tiny_model, hw, WORK, 4, "ladder")).decode_metrics
              for name, hw in (("part", part), ("whole", whole))}
    np.testing.assert_allclose(ladder["part"], ladder["whole"], rtol=1e-12)
    # A what-if comm_slowdown stretches whole collectives again.
    assert with_overrides(part, comm_slowdown=0.2).interference.comm_slowdown_part == "whole"
    assert with_overrides(part, compute_slowdown=0.2).interference.comm_slowdown_part == "bandwidth"


def test_a_latency_bound_collective_keeps_its_speed_beside_compute(tiny_model, h100):
    """Ladder decode of a 4 KiB AllReduce hardly notices a bandwidth-part slowdown that a
    bandwidth-bound prefill AllReduce pays nearly in full."""
    part = _interference(h100, compute_slowdown=Sourced(value=0.0, source="test value"),
                         comm_slowdown=Sourced(value=1.5, source="test value"), comm_slowdown_part="bandwidth",
                         collective_channels=None)  # as the what-if constants below
    free = with_overrides(h100, compute_slowdown=0.0, comm_slowdown=0.0)
    decode_message = WORK.batch * tiny_model.dim * WORK.dtype_bytes
    prefill_message = WORK.batch * WORK.prompt_len * tiny_model.dim * WORK.dtype_bytes
    assert bandwidth_share(h100, 4, decode_message) < 0.1 < bandwidth_share(h100, 4, prefill_message)
    runs = {name: simulate(Scenario(tiny_model, hw, WORK, 4, "ladder")) for name, hw in (("part", part), ("free", free))}
    assert runs["part"].decode_metrics[0, 0] == pytest.approx(runs["free"].decode_metrics[0, 0], rel=0.02)


def test_a_dtype_runs_at_its_own_tensor_core_peak():
    # A compute-bound GEMM takes peak(bf16) / peak(dtype) as long (the datasheet peaks); a GPU
    # without FP8 tensor cores cannot run fp8 at all.
    from laddersim.costs.gemm import gemm_time_s
    from laddersim.errors import UserInputError
    from laddersim.hardware.profile import load_profile
    from laddersim.simulation.simulate import make_scenario

    gpu = load_profile("h100-sxm-nvswitch").gpu
    big = (8192, 8192, 8192)
    bf16 = float(gemm_time_s(gpu, *big, 2, 0.0))
    fp8 = float(gemm_time_s(gpu, *big, 1, 0.0, gpu.peak_flops_per_s_for("fp8")))
    fp32 = float(gemm_time_s(gpu, *big, 4, 0.0, gpu.peak_flops_per_s_for("float32")))
    assert fp8 == pytest.approx(bf16 * 989.4 / 1979, rel=0.02)
    assert fp32 == pytest.approx(bf16 * 989.4 / 67, rel=0.02)
    with pytest.raises(UserInputError, match="dtype: fp8 needs gpu.peak_tflops_fp8 .*allowed: bfloat16, float16, float32"):
        make_scenario(model="llama-3.1-8b", hardware="a100-sxm-nvswitch", tp=1, batch=1, prompt_len=16, gen_len=4,
                      schedule="standard", dtype="fp8")


def test_nccl_channel_rule_gives_a_small_collective_its_share_of_the_compute_slowdown(h100):
    # h100-sxm-nvswitch: 32 channels, 4096 B per rank per channel (LL's 512 threads x 8 B). On 8
    # ranks a channel needs 32 KiB, so NCCL runs 16 KiB on 1 channel, 64 KiB on 2, 1 MiB on 32.
    spec = h100.interference
    assert spec.collective_channels.value == 32 and spec.channel_bytes_per_rank.value == 4096
    full = spec.compute_slowdown.value
    assert spec.channel_share(16 * 1024, 8) == 1 / 32
    assert spec.channel_share(64 * 1024, 8) == 2 / 32
    assert spec.channel_share(96 * 1024 - 1, 8) == 2 / 32  # NCCL drops a channel it cannot fill
    assert spec.channel_share(1 << 20, 8) == 1.0 and spec.channel_share(1 << 30, 8) == 1.0
    assert spec.channel_share(16 * 1024, 2) == 2 / 32  # a ring's threshold is per rank
    assert spec.channel_share(16 * 1024, 1) == 1.0
    assert spec.at(64 * 1024, 0.5, 8) == pytest.approx((full * 2 / 32, spec.comm_slowdown.value * 0.5))
    assert spec.at(64 * 1024, 0.5) == pytest.approx((full, spec.comm_slowdown.value * 0.5))  # no rank count
    assert spec.model_copy(update={"collective_channels": None}).at(64 * 1024, 0.5, 8)[0] == full
    # A measured per-size curve already holds the rule: a profile gives one or the other.
    points = [{"size_bytes": 1024, "compute_slowdown": 0.1, "comm_slowdown": 0.2, "source": "test value"}]
    with pytest.raises(ValueError, match="collective_channels: not with by_size"):
        InterferenceSpec.model_validate({**spec.model_dump(), "by_size": points})
    with pytest.raises(ValueError, match="a whole number of channels, got 2.5"):
        InterferenceSpec.model_validate({**spec.model_dump(), "collective_channels": {"value": 2.5, "source": "test"}})


def test_channel_rule_speeds_up_small_batch_ladder_and_leaves_standard_alone(tiny_model, h100):
    # The tiny model's decode AllReduce is 4 KiB: one channel of 32, so the GEMMs beside it lose
    # 1/32 of the full-size slowdown; standard overlaps nothing and cannot change.
    without = _interference(h100, collective_channels=None)
    runs = {(name, schedule): simulate(Scenario(tiny_model, hw, WORK, 4, schedule)).summary()["decode_s"]
            for name, hw in (("rule", h100), ("without", without)) for schedule in ("standard", "ladder")}
    assert runs[("rule", "standard")] == runs[("without", "standard")]
    assert runs[("rule", "ladder")] < runs[("without", "ladder")] * 0.999
    free = with_overrides(h100, compute_slowdown=0.0)
    assert simulate(Scenario(tiny_model, free, WORK, 4, "ladder")).summary()["decode_s"] <= runs[("rule", "ladder")]
