"""Mixture-of-experts costs from the mechanism: experts hit at batch B and top-k (closed form
against a Monte Carlo draw), the busiest expert under skew, the grouped GEMM at one token, the
fused-MoE kernel table, and Ladder's overlap of the MoE AllReduce."""

from __future__ import annotations

import numpy as np
import pytest

from laddersim.costs.moe_costs import moe_op_times_s
from laddersim.costs.moe_routing import expected_experts_hit, expert_load, monte_carlo_load, padded_rows
from laddersim.costs.pass_shapes import Phase
from laddersim.hardware.profile import load_profile
from laddersim.model.shape import from_hf_config
from laddersim.model.workload import Workload
from laddersim.schedules.program import build_program
from laddersim.support.resources import data_path
from laddersim.validation.moe_kernels import KERNEL_TABLE, kernel_table_rows

MODELS = data_path("validation", "moe", "models")
MIXTRAL = MODELS / "mistralai--Mixtral-8x7B-v0.1.json"


@pytest.mark.parametrize("tokens,experts,top_k", [(1, 8, 2), (3, 8, 2), (16, 128, 8), (64, 128, 8), (8, 16, 4)])
@pytest.mark.parametrize("routing", ["uniform", "power_law"])
def test_expected_experts_hit_matches_a_monte_carlo_draw(tokens, experts, top_k, routing):
    hit, busiest = monte_carlo_load(tokens, experts, top_k, routing, draws=300, seed=1)
    load = expert_load(tokens, experts, top_k, routing)
    assert load.hit == pytest.approx(hit, rel=0.03, abs=0.1)
    # the busiest expert: exact under heavy skew, a Gaussian-extreme estimate under uniform routing
    assert load.busiest == pytest.approx(busiest, rel=0.2)


def test_closed_forms_at_the_edges():
    assert expected_experts_hit(1, 8, 2) == pytest.approx(2.0)  # one token hits exactly top-k experts
    assert expected_experts_hit(4, 8, 2) == pytest.approx(8 * (1 - 0.75 ** 4))
    assert expected_experts_hit(1000, 8, 2) == pytest.approx(8.0)  # a large batch hits every expert
    assert expected_experts_hit(4, 8, 2, "balanced") == 8.0 and expected_experts_hit(2, 8, 2, "balanced") == 4.0
    # skew hits fewer distinct experts than uniform routing, and loads the busiest more
    assert expected_experts_hit(16, 128, 8, "power_law") < expected_experts_hit(16, 128, 8, "uniform")
    assert expert_load(64, 128, 8, "power_law").busiest > 2 * expert_load(64, 128, 8, "uniform").busiest
    # padding: 2 tokens x top-2 over 4 experts of 16-row tiles
    assert padded_rows(expert_load(2, 8, 2, "balanced"), 16) == 4 * 16


def test_grouped_gemm_at_one_token_is_one_expert_gemv_times_the_experts_hit():
    hw = load_profile("h100-sxm-nvswitch")
    model = from_hf_config(MIXTRAL)
    gpu, tp, b = hw.gpu, 2, 2
    stream_bw = gpu.memory_bandwidth_bytes_per_s * gpu.gemm_memory_efficiency.value
    for framework in ("vllm", "gpt-fast"):
        work = Workload(batch=1, prompt_len=8, gen_len=8, framework=framework)
        times = moe_op_times_s(model, hw, work, tp, Phase("decode", 1, 1))
        i_r = 14336 // tp
        one_expert_gate_up = 2 * i_r * 4096 * b / stream_bw
        assert times["moe_gate_up"] == pytest.approx(gpu.kernel_launch_s + 2 * one_expert_gate_up)
        assert times["moe_down"] == pytest.approx(gpu.kernel_launch_s + 2 * one_expert_gate_up / 2)
        assert times["moe_shared"] == 0.0


def test_more_tokens_read_more_experts_until_all_are_hit():
    hw = load_profile("h100-sxm-nvswitch")
    model = from_hf_config(MIXTRAL)
    work = Workload(batch=1, prompt_len=8, gen_len=8, framework="vllm")
    gate_up = [moe_op_times_s(model, hw, work, 2, Phase("decode", t, 1))["moe_gate_up"] for t in (1, 2, 4, 16, 64)]
    assert gate_up == sorted(gate_up) and gate_up[3] == pytest.approx(gate_up[4], rel=0.02)  # all 8 hit
    assert gate_up[3] / gate_up[0] == pytest.approx(4.0, rel=0.05)  # 8 experts read against 2


def test_fused_moe_kernel_table_median_error_within_15_percent():
    hw = load_profile("h100-sxm-nvswitch")
    rows = kernel_table_rows(hw, KERNEL_TABLE)
    assert len(rows) == 336
    assert float(np.median(np.abs(rows.error))) < 0.06  # 4.9% at the fitted compute share
    # a few golden rows (AIConfigurator vLLM 0.24.0, Mixtral-8x7B shape): 1 token at TP 1 and 8
    mixtral = rows[(rows.model_shape == "Mixtral-8x7B") & (rows.num_tokens == 1)].set_index("moe_tp_size")
    assert mixtral.loc[1, "latency_us"] == pytest.approx(258.741, abs=0.01)
    assert abs(mixtral.loc[1, "error"]) < 0.1 and abs(mixtral.loc[8, "error"]) < 0.15  # kernel floors dominate at TP 8


def test_moe_module_takes_the_mlp_place_and_ladder_overlaps_its_allreduce():
    model = from_hf_config(MIXTRAL)
    layout = model.mlp_layout()
    ladder = build_program("ladder", model.n_layers, 8, "decode", mlp_layout=layout)
    ops = {op.name: op for op in ladder.ops}
    assert "L3.moe.moe_gate_up" in ops and "L3.mlp.gate_up" not in ops
    # the MoE AllReduce of layer 3 is waited on (its residual add) only after layer 4's attention
    names = [op.name for op in ladder.ops]
    ar = ops["L3.moe.allreduce"].index
    waits = [op for op in ladder.ops if ar in op.deps]
    assert [op.name for op in waits] == ["L3.moe.residual_add"]
    assert names.index("L3.moe.residual_add") > names.index("L4.attn.o_proj")
    standard = build_program("standard", model.n_layers, 8, "decode", mlp_layout=layout)
    s_names = [op.name for op in standard.ops]
    assert s_names.index("L3.moe.residual_add") < s_names.index("L4.attn.attn_norm")


def test_a_dense_layout_is_the_dense_program():
    for schedule in ("standard", "ladder", "parallel"):
        assert build_program(schedule, 4, 2, mlp_layout=("mlp",) * 4) == build_program(schedule, 4, 2)


def test_ladder_hides_the_moe_allreduce_in_a_simulation():
    import laddersim

    rows = laddersim.simulate(model=str(MIXTRAL), hardware="h100-sxm-nvswitch", tp=8, batch=1, prompt_len=64,
                              gen_len=8, schedules=["standard", "ladder"])
    by = rows.set_index("schedule")
    assert by.loc["ladder", "tokens_per_s"] > 1.05 * by.loc["standard", "tokens_per_s"]


@pytest.mark.parametrize("ep,bound", [(2, 0.06), (4, 0.08), (8, 0.12)])
def test_expert_parallel_kernel_rows_within_their_bounds(ep, bound):
    # the same table's moe_tp x moe_ep rows (84 per EP): the busiest rank's experts and rows, and
    # the zero rows, activation and sum every rank runs over all tokens x top-k
    hw = load_profile("h100-sxm-nvswitch")
    rows = kernel_table_rows(hw, KERNEL_TABLE, ep=ep)
    assert len(rows) == 84
    assert float(np.median(np.abs(rows.error))) < bound  # 3.4%, 5.7%, 8.7%


def test_rank_load_splits_the_rows_over_expert_parallel_ranks():
    from laddersim.costs.moe_routing import rank_load

    balanced = rank_load(3, 8, 2, "balanced", ep=4)  # 6 rows over 4 ranks: the busiest takes 2
    assert (balanced.rows, balanced.hit) == (2, 2.0)
    uniform = rank_load(64, 128, 8, "uniform", ep=8)
    assert uniform.hit == pytest.approx(16.0)  # every one of the busiest rank's 16 experts is hit
    skewed = rank_load(64, 128, 8, "power_law", ep=8)  # rank 0 holds the most popular experts
    assert skewed.rows > 2 * uniform.rows


@pytest.mark.parametrize("tokens,experts,top_k,ep", [(1, 8, 2, 8), (4, 8, 2, 4), (16, 128, 8, 8), (2, 16, 4, 4)])
def test_busiest_rank_under_uniform_routing_matches_a_monte_carlo_draw(tokens, experts, top_k, ep):
    from laddersim.costs.moe_routing import rank_load

    rng = np.random.default_rng(3)
    hits, rows = [], []
    for _ in range(300):
        counts = np.zeros(experts)
        for _ in range(tokens):
            counts[rng.choice(experts, size=top_k, replace=False)] += 1
        blocks = counts.reshape(ep, -1)  # contiguous blocks of experts per rank
        hits.append(max(int((b > 0).sum()) for b in blocks))
        rows.append(blocks.sum(axis=1).max())
    load = rank_load(tokens, experts, top_k, "uniform", ep)
    assert load.hit == pytest.approx(np.mean(hits), rel=0.12)  # ranks taken as independent
    assert load.rows == pytest.approx(np.mean(rows), rel=0.12, abs=0.7)


def test_ep_places_experts_over_the_tp_group_and_bad_ep_is_one_line():
    import laddersim

    from laddersim.errors import UserInputError
    from laddersim.model.shape import load_model_shape

    qwen = load_model_shape("qwen3-30b-a3b")
    # the experts' parameters on a rank are the same whichever way the TP group splits them
    assert qwen.with_ep(4).params_per_rank(8) == qwen.params_per_rank(8)
    assert qwen.with_ep(8).moe.layer_params_per_rank(qwen.dim, 8) == qwen.moe.layer_params_per_rank(qwen.dim, 8)
    ep1, ep8 = (laddersim.simulate(model="qwen3-30b-a3b", hardware="h100-sxm-nvswitch", tp=8, ep=ep, batch=1,
                                   prompt_len=32, gen_len=4, schedules=["standard"], framework="vllm")
                for ep in (1, 8))
    # one token at EP 8: each rank reads whole experts of its own, not slices of all eight hit
    assert float(ep8.decode_s.iloc[0]) != pytest.approx(float(ep1.decode_s.iloc[0]), rel=1e-6)
    for model, tp, ep, words in (("llama-3.1-8b", 2, 2, "has no experts"), ("mixtral-8x7b", 4, 3, "allowed: 1, 2, 4, 8"),
                                 ("mixtral-8x7b", 2, 4, "does not divide tp 2")):
        with pytest.raises(UserInputError, match=words):
            laddersim.simulate(model=model, hardware="h100-sxm-nvswitch", tp=tp, ep=ep, batch=1, prompt_len=8, gen_len=2)


def test_kernels_shows_the_expert_ops_and_takes_ep():
    import laddersim

    tp8 = laddersim.kernels("mixtral-8x7b", "h100-sxm-nvswitch", tp=8, batch=1, framework="vllm")
    ep8 = laddersim.kernels("mixtral-8x7b", "h100-sxm-nvswitch", tp=8, batch=1, framework="vllm", ep=8)
    assert {"moe_router", "moe_topk", "moe_gate_up", "moe_act", "moe_down", "moe_combine"} <= set(tp8.kernel)
    assert set(tp8[tp8.kernel.isin(["moe_gate_up", "moe_down"])]["class"]) == {"grouped_gemm"}
    # one token, top-2: at TP 8 two experts' eighths are read, at EP 8 one whole expert on the busiest rank
    gate_up = {name: float(frame.set_index("kernel").loc["moe_gate_up", "us"]) for name, frame in (("tp", tp8), ("ep", ep8))}
    assert gate_up["ep"] > 3 * gate_up["tp"]


def test_fp8_experts_stream_half_the_bytes_and_fit_where_16_bit_ones_do_not():
    """FP8 experts (quant fp8): one byte a weight, so a one-token grouped GEMM (weight-bound)
    takes about half the 16-bit one's time plus its input's quantization; the memory check counts
    every expert at one byte, so Mixtral-8x7B fits one 80 GB H100 in FP8 and not in 16 bit."""
    from laddersim.costs.memory_fit import memory_use
    from laddersim.costs.quantized_gemm import quantize_time_s
    from laddersim.model.quantization import weight_bytes_per_rank

    hw = load_profile("h100-sxm-nvswitch")
    model = from_hf_config(MIXTRAL)
    bf16 = Workload(batch=1, prompt_len=16, gen_len=1, dtype="float16", framework="vllm")
    fp8 = Workload(batch=1, prompt_len=16, gen_len=1, dtype="float16", framework="vllm", quant="fp8")
    one, q = (moe_op_times_s(model, hw, w, 1, Phase("decode", 1, 1)) for w in (bf16, fp8))
    launch = hw.gpu.kernel_launch_s
    for kind, k in (("moe_gate_up", model.dim), ("moe_down", model.moe.expert_intermediate)):
        rows = 1 if kind == "moe_gate_up" else model.moe.top_k
        streamed = q[kind] - quantize_time_s(hw, fp8, rows, k) - launch
        assert streamed == pytest.approx((one[kind] - launch) / 2, rel=1e-9)
    assert q["moe_router"] == one["moe_router"]  # the router stays 16-bit
    # weights: 16-bit total less one byte for every linear weight, the experts' included
    moe = model.moe
    experts = len(moe.moe_layers) * moe.n_experts * 3 * model.dim * moe.expert_intermediate
    attention = model.n_layers * (model.dim * (model.n_heads + 2 * model.n_kv_heads) * model.head_dim
                                  + model.n_heads * model.head_dim * model.dim)
    full = model.params_per_rank(1) * 2
    assert weight_bytes_per_rank(model, 1, model.n_layers, True, True, 2, fp8.quantization) == full - experts - attention
    assert memory_use(model, hw, fp8, 1).weights_bytes < 50e9 < 80e9 < memory_use(model, hw, bf16, 1).weights_bytes
