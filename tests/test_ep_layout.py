"""Expert parallelism over data-parallel attention: the all-to-all priced from the profile's
measured table (golden rows) or its links, what each GPU holds, the smallest EP that fits, and
the one-line refusal naming it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from laddersim.costs.gemm_tables import SILICON, SOL
from laddersim.costs.moe_alltoall import alltoall_table_path, alltoall_time_s, dispatch_bytes
from laddersim.hardware.profile import load_profile
from laddersim.model.shape import load_model_shape
from laddersim.planning.ep_layout import DpAttentionLayout, bytes_per_gpu, params_per_gpu, smallest_fitting_layout
from laddersim.simulation.scenario import make_scenario


def _work(quant: str = "none", batch: int = 8):
    return make_scenario(model="deepseek-v3", hardware="h200-sxm-nvswitch", tp=8, batch=batch, prompt_len=1024,
                         gen_len=64, schedule="standard", framework="vllm", quant=quant).workload


@pytest.mark.parametrize("profile, gpus, size, us", [
    # hardware_profiles/tables/aic_h200_sxm_nccl_2.29.2_alltoall.csv and the H100's, rows as shipped
    ("h200-sxm-nvswitch", 8, 268435456, 770.82),
    ("h200-sxm-nvswitch", 8, 262144, 14.09),
    ("h200-sxm-nvswitch", 2, 1024, 6.40),
])
def test_alltoall_is_the_measured_table_at_its_rows(profile, gpus, size, us):
    seconds, source = alltoall_time_s(load_profile(profile), gpus, size)
    assert source == SILICON and seconds == pytest.approx(us * 1e-6, rel=1e-12)


def test_alltoall_between_rows_is_log_log_and_without_a_table_from_the_links(capsys):
    h200 = load_profile("h200-sxm-nvswitch")
    lo, _ = alltoall_time_s(h200, 8, 262144)
    mid, _ = alltoall_time_s(h200, 8, 3 * 262144 // 2)
    hi, _ = alltoall_time_s(h200, 8, 2 * 262144)
    assert lo < mid < hi
    a100 = load_profile("a100-sxm-nvswitch")
    assert alltoall_table_path(a100) is None
    tier = a100.collectives.intra_node
    size = 1 << 24
    seconds, source = alltoall_time_s(a100, 8, size)
    expected = (tier.base_latency_us.value + 7 * tier.step_latency_us.value) * 1e-6 \
        + size * 7 / 8 / (tier.bus_bandwidth_gb_per_s.value * 1e9)
    assert source == SOL and seconds == pytest.approx(expected, rel=1e-12)
    alltoall_time_s(a100, 4, size)
    assert capsys.readouterr().err.count("\n") <= 1  # one note per profile at most
    assert dispatch_bytes(64, 8, 7168, 1) == 64 * 8 * 7168


def test_each_gpu_holds_its_replicas_share_and_ep_whole_experts():
    v3 = load_model_shape("deepseek-v3")
    expert = 3 * 7168 * 2048
    for attn_tp, dp in ((1, 8), (8, 2), (4, 4)):
        layout = DpAttentionLayout(attn_tp, dp)
        total, experts = params_per_gpu(v3, layout)
        assert experts == 58 * (256 // layout.ep) * expert
        # everything else is the model at TP attn_tp less its routed experts
        assert total - experts == v3.params_per_rank(attn_tp) - 58 * 256 * expert // attn_tp
    # summed over the GPUs, every expert is held once
    assert params_per_gpu(v3, DpAttentionLayout(1, 8))[1] * 8 == 58 * 256 * expert


def test_smallest_ep_that_fits_and_the_refusal_names_it():
    v3, h200 = load_model_shape("deepseek-v3"), load_profile("h200-sxm-nvswitch")
    # FP8 weights (671 GB): one GPU cannot hold them; 8 replicas of TP 1, 32 experts per GPU can
    assert smallest_fitting_layout(v3, h200, _work("fp8"), 1) == DpAttentionLayout(1, 8)
    # 16-bit (1.34 TB): TP 8 at EP 1 needs 158 GiB a GPU; EP 16 over two replicas fits
    layout = smallest_fitting_layout(v3, h200, _work(), 8)
    assert layout == DpAttentionLayout(8, 2)
    assert bytes_per_gpu(v3, layout, _work()) <= h200.gpu.memory_capacity_bytes * h200.gpu.usable_memory_fraction.value
    assert bytes_per_gpu(v3, DpAttentionLayout(8, 1), _work()) > h200.gpu.memory_capacity_bytes
    assert smallest_fitting_layout(load_model_shape("llama-3.1-8b"), h200, _work(), 1) is None  # dense


def test_cli_refuses_a_model_too_big_at_ep_1_in_one_line_naming_the_smallest_ep():
    run = subprocess.run([sys.executable, "-m", "laddersim", "simulate", "--model", "deepseek-v3", "--hardware",
                          "h200-sxm-nvswitch", "--tp", "8", "--batch", "8", "--prompt-len", "1024", "--gen-len", "64",
                          "--framework", "vllm", "--schedule", "standard"], capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert "fits at ep 16" in run.stderr and "--enable-dp-attention" in run.stderr
    dense = subprocess.run([sys.executable, "-m", "laddersim", "simulate", "--model", "llama-3.1-405b", "--hardware",
                            "h100-sxm-nvswitch", "--tp", "1", "--schedule", "standard"], capture_output=True, text=True)
    assert dense.returncode == 2 and "data-parallel" not in dense.stderr


def test_plan_names_the_data_parallel_attention_layout_when_no_split_fits():
    run = subprocess.run([sys.executable, "-m", "laddersim", "plan", "--model", "deepseek-v3", "--profiles",
                          "h200-sxm-nvswitch", "--tp", "8", "--batch", "8", "--schedule", "standard", "--prompt-len",
                          "1024", "--gen-len", "64", "--no-progress", "--min-user-tokens-per-s", "10"],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "no configuration meets the target" in run.stdout  # nothing simulated fits
    line = next(x for x in run.stdout.splitlines() if "EP 16" in x)
    assert "2 replicas of TP 8 on 16 GPUs, 16 whole experts per GPU" in line and "does not simulate" in line


def test_a_moe_layers_dispatch_and_combine_are_two_table_all_to_alls():
    from laddersim.costs.moe_alltoall import ep_layer_comm_s

    h200 = load_profile("h200-sxm-nvswitch")
    # 16 tokens a GPU, top 8, dim 7168, bf16: 16 x 8 x 7168 x 2 = 1835008 B per all-to-all
    seconds, source = ep_layer_comm_s(h200, 8, 16, 8, 7168, 2)
    one, _ = alltoall_time_s(h200, 8, 1835008)
    assert source == SILICON and seconds == 2 * one
    assert alltoall_time_s(h200, 8, 1 << 20)[0] < one < alltoall_time_s(h200, 8, 1 << 21)[0]


def test_plan_prices_a_one_node_layouts_dispatch_and_combine_from_the_table():
    # --ep 1: no expert-parallel split, nor layout, is simulated; the verdict names the layout that fits
    run = subprocess.run([sys.executable, "-m", "laddersim", "plan", "--model", "qwen3-235b-a22b", "--profiles",
                          "h200-sxm-nvswitch", "--tp", "1", "--batch", "8", "--schedule", "standard", "--prompt-len",
                          "1024", "--gen-len", "64", "--no-progress", "--min-user-tokens-per-s", "10", "--ep", "1"],
                         capture_output=True, text=True)
    line = next(x for x in run.stdout.splitlines() if "EP 4" in x)
    # 2 tokens a GPU (8 sequences over 4 replicas), top 8, dim 4096, bf16: 262144 B, a table row
    assert "4 replicas of TP 1 on 4 GPUs, 32 whole experts per GPU" in line
    us = 2 * alltoall_time_s(load_profile("h200-sxm-nvswitch"), 4, 2 * 8 * 4096 * 2)[0] * 1e6
    assert f"decode dispatch + combine {us:.0f} us per MoE layer (SILICON)" in line


def test_layout_step_at_one_replica_is_the_engines_tp_ep_step_with_all_to_alls_for_the_allreduce():
    """With one replica (attention TP = EP) the closed form is the engine's standard decode step at
    TP 8 x EP 8, the MoE's AllReduce replaced by its dispatch and combine."""
    import numpy as np

    from laddersim.api import simulate
    from laddersim.costs.moe_alltoall import ep_layer_comm_s
    from laddersim.costs.op_costs import op_times_s
    from laddersim.costs.pass_shapes import Phase
    from laddersim.planning.ep_step import dp_attention_decode_step_s

    s = make_scenario(model="qwen3-235b-a22b", hardware="h200-sxm-nvswitch", tp=8, batch=16, prompt_len=1024,
                      gen_len=64, schedule="standard", framework="vllm", kv_cache="dynamic")
    context = 1024 + 64 // 2
    step = dp_attention_decode_step_s(s.model, s.hardware, s.workload, DpAttentionLayout(8, 1), context)
    comm, _ = ep_layer_comm_s(s.hardware, 8, 2, 8, 4096, 2)
    ops = op_times_s(s.model.with_ep(8), s.hardware, s.workload, 8, Phase("decode", 16, 1), np.array([context]))
    allreduce = float(ops["allreduce"][0] + ops["collective_launch"][0])
    engine = simulate("qwen3-235b-a22b", "h200-sxm-nvswitch", tp=8, ep=8, batch=16, prompt_len=1024, gen_len=64,
                      framework="vllm", kv_cache="dynamic", schedules=["standard"])
    assert step - 94 * comm + 94 * allreduce == pytest.approx(float(engine["decode_step_s"].iloc[0]), rel=1e-9)
    # data-parallel attention over 8 replicas of TP 1: the same experts, no attention AllReduce
    assert dp_attention_decode_step_s(s.model, s.hardware, s.workload, DpAttentionLayout(1, 8), context) > 0
