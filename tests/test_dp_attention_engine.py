"""The data-parallel-attention layout in the event engine: its program (dispatch and combine as
communication-stream all-to-alls), the standard schedule's decode step equal to the closed form,
ladder never slower and equal where the all-to-all is free, the one-line refusals, and the dense
and TP x EP programs untouched."""

from __future__ import annotations

import subprocess
import sys

import pytest

from laddersim.model.dp_attention import DpAttentionLayout
from laddersim.model.layer_ops import MODULE_OPS
from laddersim.planning.ep_step import dp_attention_decode_step_s
from laddersim.schedules.program import build_program
from laddersim.simulation.simulate import make_scenario, simulate

QWEN = "qwen3-235b-a22b"  # 94 layers, every one MoE, 128 experts top 8, no shared expert
H200 = "h200-sxm-nvswitch"


def _scenario(tp: int, ep: int, schedule: str = "standard", batch: int = 16, model: str = QWEN, **kw):
    return make_scenario(model=model, hardware=H200, tp=tp, ep=ep, batch=batch, prompt_len=1024, gen_len=64,
                         schedule=schedule, framework="vllm", kv_cache="dynamic", dp_attention=True, **kw)


def test_program_sends_each_moe_layers_tokens_out_and_back_by_all_to_all():
    layers = ("mlp", "moe", "moe_shared")
    program = build_program("standard", 3, 2, mlp_layout=layers, expert_alltoall=True)
    ops = program.ops
    dispatch = [op for op in ops if op.kind == "ep_dispatch"]
    combine = [op for op in ops if op.kind == "ep_combine"]
    assert [op.layer for op in dispatch] == [1, 2] and [op.layer for op in combine] == [1, 2]
    assert all(op.stream == "comm" for op in dispatch + combine)
    for op in dispatch:  # sent once routed; the next op (the experts') waits for it
        assert ops[op.deps[0]].kind == "moe_topk" and ops[op.index + 1].deps == (op.index,)
    for op in combine:  # after the weighted sum; the residual add waits for it
        assert ops[op.deps[0]].kind == "moe_combine"
        assert ops[op.index + 1].kind == "residual_add" and ops[op.index + 1].deps == (op.index,)
    # the MoE modules have no AllReduce; attention and the dense MLP keep theirs at the replica's TP
    assert sorted(op.layer for op in ops if op.kind == "allreduce") == [0, 0, 1, 2]
    # no experts, or the layout off: the program is the one without all-to-alls
    assert build_program("ladder", 3, 2, expert_alltoall=True) == build_program("ladder", 3, 2)
    assert not any(op.kind.startswith("ep_") for op in build_program("ladder", 3, 2, mlp_layout=layers).ops)


@pytest.mark.parametrize("tp, ep", [(8, 8), (1, 8), (2, 8), (4, 4)])
def test_standard_decode_step_is_the_closed_form(tp, ep):
    s = _scenario(tp, ep)
    assert s.layout == DpAttentionLayout(tp, ep // tp)
    row = simulate(s).summary()
    # the decode steps' mean KV length: attention is affine in it
    closed = dp_attention_decode_step_s(s.model, s.hardware, s.workload, s.layout, 1024 + 64 // 2)
    assert row["decode_step_s"] == pytest.approx(closed, rel=1e-9)
    assert (row["ep"], row["attention_replicas"], row["tp"]) == (ep, ep // tp, tp)


def test_standard_decode_step_is_the_closed_form_with_shared_experts_and_dense_layers():
    s = _scenario(1, 8, model="deepseek-v3", batch=8, quant="fp8")  # MLA, 3 dense layers, a shared expert
    row = simulate(s).summary()
    closed = dp_attention_decode_step_s(s.model, s.hardware, s.workload, s.layout, 1024 + 64 // 2)
    assert row["decode_step_s"] == pytest.approx(closed, rel=1e-9)


@pytest.mark.parametrize("tp, ep", [(8, 8), (1, 8), (2, 4)])
def test_ladder_is_never_slower_and_hides_part_of_the_combine(tp, ep):
    standard = simulate(_scenario(tp, ep)).summary()
    ladder = simulate(_scenario(tp, ep, "ladder")).summary()
    assert ladder["decode_step_s"] <= standard["decode_step_s"]
    assert ladder["exposed_comm_s"] < standard["exposed_comm_s"]


def test_ladder_equals_standard_when_the_all_to_all_is_free(monkeypatch):
    """One GPU per replica: the all-to-alls are the only communication; at zero cost ladder only
    reorders the residual adds."""
    import laddersim.costs.dp_attention_costs as costs

    monkeypatch.setattr(costs, "alltoall_time_s", lambda hw, gpus, size: (0.0, "SOL"))
    standard = simulate(_scenario(1, 8)).summary()
    ladder = simulate(_scenario(1, 8, "ladder")).summary()
    assert ladder["decode_step_s"] == pytest.approx(standard["decode_step_s"], rel=1e-12)
    assert standard["exposed_comm_s"] == 0.0


def test_tp_x_ep_without_the_layout_is_unchanged():
    plain = make_scenario(model=QWEN, hardware=H200, tp=8, ep=8, batch=16, prompt_len=1024, gen_len=64,
                          schedule="standard", framework="vllm", kv_cache="dynamic")
    assert plain.layout is None
    row = simulate(plain).summary()
    assert "ep" not in row and "dp_attention" not in row


@pytest.mark.parametrize("args, field", [
    (["--model", "llama-3.1-8b", "--tp", "1", "--ep", "8"], "dp-attention"),
    (["--model", QWEN, "--tp", "4", "--ep", "6"], "ep"),
    (["--model", QWEN, "--tp", "4", "--ep", "2"], "ep"),
    (["--model", QWEN, "--tp", "4", "--ep", "16"], "ep"),
    (["--model", QWEN, "--tp", "2", "--ep", "8", "--pp", "2"], "pp"),
    (["--model", QWEN, "--tp", "2", "--ep", "8", "--schedule", "parallel"], "schedule"),
    (["--model", "deepseek-v3", "--tp", "8", "--ep", "8"], "memory"),
])
def test_cli_refuses_what_the_layout_cannot_run_in_one_line(args, field):
    run = subprocess.run([sys.executable, "-m", "laddersim", "simulate", "--hardware", H200, "--dp-attention",
                          "--framework", "vllm", *args], capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith(f"error: {field}:")


def test_cli_and_api_run_the_layout_alike():
    from laddersim.api import simulate as api_simulate

    frame = api_simulate(QWEN, H200, tp=2, ep=8, dp_attention=True, batch=16, prompt_len=1024, gen_len=64,
                         framework="vllm", kv_cache="dynamic", schedules=["standard", "ladder"])
    run = subprocess.run([sys.executable, "-m", "laddersim", "simulate", "--model", QWEN, "--hardware", H200,
                          "--tp", "2", "--ep", "8", "--dp-attention", "--batch", "16", "--prompt-len", "1024",
                          "--gen-len", "64", "--framework", "vllm", "--kv-cache", "dynamic", "--schedule", "standard",
                          "--schedule", "ladder", "--json"], capture_output=True, text=True)
    import json

    rows = json.loads(run.stdout)
    assert [r["tokens_per_s"] for r in rows] == list(frame["tokens_per_s"])
    assert rows[1]["speedup_vs_standard"] > 1.0 and rows[0]["ep"] == 8 and rows[0]["attention_replicas"] == 4
    import os

    help_text = subprocess.run([sys.executable, "-m", "laddersim", "simulate", "--help"], capture_output=True,
                               text=True, env={**os.environ, "COLUMNS": "400"}).stdout
    assert "--enable-dp-attention" in help_text and "--data-parallel-size" in help_text


def test_sweep_points_with_the_layout_are_simulates_rows(tmp_path):
    from laddersim.api import simulate as api_simulate
    from laddersim.api import sweep

    frame = sweep(None, tmp_path / "out", workers=1, models=[QWEN], hardware=[H200], tp=[2], ep=[8], batch=[16],
                  gen_len=[16], kv_cache=["dynamic"], schedules=["standard", "ladder"], dp_attention=True)
    direct = api_simulate(QWEN, H200, tp=2, ep=8, dp_attention=True, batch=16, gen_len=16, kv_cache="dynamic",
                          schedules=["standard", "ladder"])
    rows = frame.set_index("schedule")
    assert list(rows["status"]) == ["ok", "ok"] and set(rows["attention_replicas"]) == {4}
    for _, row in direct.iterrows():
        assert rows.loc[row["schedule"], "tokens_per_s"] == row["tokens_per_s"]


def test_plan_ranks_the_layout_beside_the_tp_x_ep_splits():
    """TP 1 cannot hold Qwen3-235B on one H200; its layouts of 4 and 8 replicas can, and are ranked
    with their GPUs (ep) priced and their step simulated, each replica serving the plan's batch."""
    from laddersim.api import plan
    from laddersim.api import simulate as api_simulate

    frame = plan(QWEN, profiles=[H200], tps=[1], batches=[8], schedules=["standard", "ladder"], prompt_len=1024,
                 gen_len=64, min_user_tokens_per_s=1.0, workers=1)
    layouts = frame[frame["dp_attention"]]
    assert set(layouts["ep"]) == {4, 8} and len(layouts) == 4 and (layouts["gpus"] == layouts["ep"]).all()
    assert (layouts["batch"] == 8 * layouts["ep"]).all()  # 8 sequences per attention replica
    row = layouts[(layouts["ep"] == 4) & (layouts["schedule"] == "ladder")].iloc[0]
    direct = api_simulate(QWEN, H200, tp=1, ep=4, dp_attention=True, batch=32, prompt_len=1024, gen_len=64,
                          schedules=["ladder"], kv_cache="static")
    assert row["tpot_s"] == direct["tpot_s"].iloc[0]
    assert row["usd_per_hour"] == 4 * row["usd_per_gpu_hour"]
    splits = frame.attrs["splits"]
    verdicts = {(v.tp, v.ep, v.dp_attention): v for v in splits.itertuples()}
    assert verdicts[(1, 4, True)].meets and verdicts[(1, 4, True)].gpus_per_replica == 4
    assert verdicts[(1, 2, True)].reason.startswith("weights do not fit")  # 2 replicas: 64 experts a GPU
    assert verdicts[(1, 1, False)].reason.startswith("weights do not fit")


def test_plan_of_a_dense_model_has_no_layout():
    from laddersim.model.shape import load_model_shape
    from laddersim.hardware.profile import load_profile
    from laddersim.planning.planner import candidate_layouts

    assert candidate_layouts(load_model_shape("llama-3.1-70b"), load_profile(H200)) == []
    assert candidate_layouts(load_model_shape(QWEN), load_profile(H200), [2], [8]) == [(2, 8)]
    assert candidate_layouts(load_model_shape(QWEN), load_profile(H200), [2]) == [(2, 4), (2, 8)]


def test_ladder_overlaps_each_combine_with_the_next_layers_attention():
    """Under ladder the combine of layer i runs beside the attention of layer i + 1 (its residual
    add waits for it only before the MoE of layer i + 1); under standard nothing overlaps it."""
    from laddersim.api import timeline

    def overlapped(schedule: str) -> int:
        spans = timeline(QWEN, H200, tp=2, ep=8, dp_attention=True, batch=16, prompt_len=256, gen_len=3,
                         schedules=[schedule], steps=[0], ranks=[0], framework="vllm", kv_cache="dynamic")
        spans = spans[spans["phase"] == "decode"]
        combine = spans[spans["kind"] == "ep_combine"].set_index("layer")
        module = spans[spans["kind"].isin(MODULE_OPS["attn"])].groupby("layer")  # the attention module's ops
        start, end = module["start_s"].min(), module["end_s"].max()
        return sum(bool(combine.loc[i, "start_s"] < end[i + 1] and start[i + 1] < combine.loc[i, "end_s"])
                   for i in combine.index[:-1])

    assert overlapped("standard") == 0
    assert overlapped("ladder") == 93  # every MoE layer but the last


def test_fast_paths_are_the_reference_engine_for_the_layout():
    from laddersim.simulation.scenario import SimOptions

    for schedule in ("standard", "ladder"):
        s = _scenario(2, 8, schedule, batch=8)
        fast = simulate(s).summary()
        reference = simulate(s, SimOptions(reference=True)).summary()
        every_rank = simulate(s, SimOptions(all_ranks=True)).summary()
        assert fast == reference == every_rank


def test_all_to_alls_interfere_as_nccl_collectives_over_the_expert_group():
    """Each all-to-all slows compute beside it as an NCCL collective over the EP GPUs moving as many
    bytes per rank (half its buffer as an AllReduce message); the replica's AllReduce keeps its own."""
    from laddersim.costs.collectives import slowdowns
    from laddersim.costs.pass_shapes import Phase
    from laddersim.simulation.engine_inputs import collective_slowdowns, layout_slowdowns

    s = _scenario(2, 8)
    kinds = ("qkv", "allreduce", "ep_dispatch", "ep_combine")
    compute, comm = layout_slowdowns(s.model, s.hardware, s.workload, s.layout, Phase("decode", 16, 1), kinds)
    buffer = 16 // 4 // 2 * 8 * 4096 * 2  # 2 tokens a GPU, top 8, dim 4096, bf16
    expected = slowdowns(s.hardware, 8, buffer / 2)
    assert (compute[2], comm[2]) == (compute[3], comm[3]) == pytest.approx(expected, rel=1e-12)
    replica = collective_slowdowns(s.hardware, 2, {"allreduce": 4 * 4096 * 2.0}, s.workload)["allreduce"]
    assert (compute[1], comm[1]) == pytest.approx(replica, rel=1e-12)
    assert (compute[0], comm[0]) == (0.0, 0.0) and expected[1] > 0.0


def test_kernels_of_a_layout_layer_list_its_all_to_alls_as_collectives():
    from laddersim.api import kernels
    from laddersim.costs.moe_alltoall import alltoall_time_s
    from laddersim.hardware.profile import load_profile

    frame = kernels(QWEN, H200, tp=2, ep=8, dp_attention=True, batch=16, framework="vllm")
    rows = frame.set_index("kernel")
    one = alltoall_time_s(load_profile(H200), 8, 2 * 8 * 4096 * 2)[0]  # 2 tokens a GPU, top 8, dim 4096, bf16
    for kind in ("ep_dispatch", "ep_combine"):
        assert rows.loc[kind, "class"] == "collective" and rows.loc[kind, "us"] == round(one * 1e6, 3)
    assert list(frame["kernel"]).count("allreduce") == 1  # the attention's; the MoE has none
    order = list(frame["kernel"])
    assert order.index("moe_topk") < order.index("ep_dispatch") < order.index("moe_gate_up")
    assert order.index("moe_combine") < order.index("ep_combine")


from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=12, deadline=None)
@given(model=st.sampled_from(["mixtral-8x7b", "qwen3-30b-a3b"]),
       hardware=st.sampled_from(["h100-sxm-nvswitch", "h200-sxm-nvswitch", "a100-sxm-nvswitch"]),
       tp=st.sampled_from([1, 2, 4]), replicas=st.sampled_from([1, 2, 4, 8]), batch=st.integers(1, 48))
def test_any_layout_standard_step_is_the_closed_form_and_ladder_no_slower(model, hardware, tp, replicas, batch):
    from laddersim.errors import DoesNotFitError
    from laddersim.simulation.simulate import check_memory

    ep = tp * replicas
    assume(ep <= 8)
    kw = dict(model=model, hardware=hardware, tp=tp, ep=ep, batch=batch, prompt_len=256, gen_len=8,
              framework="vllm", kv_cache="dynamic", dp_attention=True)
    standard = make_scenario(schedule="standard", **kw)
    try:
        check_memory(standard)
    except DoesNotFitError:
        assume(False)
    row = simulate(standard).summary()
    closed = dp_attention_decode_step_s(standard.model, standard.hardware, standard.workload, standard.layout,
                                        256 + 8 // 2)
    assert row["decode_step_s"] == pytest.approx(closed, rel=1e-9)
    assert simulate(make_scenario(schedule="ladder", **kw)).summary()["decode_step_s"] <= row["decode_step_s"] * (1 + 1e-12)
