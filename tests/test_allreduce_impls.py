"""AllReduce implementations as records: each pick rule at its cut-offs (from the engines' source),
a golden case per implementation from its measured table, the algorithm-only price against tables
it was not fitted to, and the one-line refusals of an implementation a machine or dtype cannot run."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from laddersim.costs.allreduce_impls import (
    ALLREDUCE_NAMES, IMPLEMENTATIONS, NCCL, ONE_SHOT, TWO_SHOT, algorithm_time_s, custom_time_s, kernel_for, pick,
    require_runs, table_time_s, why_not,
)
from laddersim.errors import UserInputError
from laddersim.hardware.profile import load_profile
from laddersim.model.framework import AllReduceName
from laddersim.support.choices import ALLREDUCES

KIB, MIB = 1024, 1024 * 1024
H100 = load_profile("h100-sxm-nvswitch")
TABLES = Path(__file__).resolve().parents[1] / "hardware_profiles" / "tables"


def kernel(name: str, tp: int, size: float, hw=H100, dtype: str = "bfloat16") -> str:
    return pick(hw, (name,), tp, size, dtype).label


def test_the_names_agree_everywhere():
    assert ALLREDUCE_NAMES == ALLREDUCES == typing.get_args(AllReduceName)


@pytest.mark.parametrize("tp, one_shot_below", [(4, 512 * KIB), (6, 256 * KIB), (8, 256 * KIB)])
def test_vllm_custom_cutoffs(tp, one_shot_below):
    # csrc/custom_all_reduce.cuh: one-shot below 512 KiB (<= 4 GPUs) / 256 KiB (<= 8), two-shot up to 8 MiB
    assert kernel("vllm-custom", tp, one_shot_below - 16) == "vllm-custom one-shot"
    assert kernel("vllm-custom", tp, one_shot_below) == "vllm-custom two-shot"
    assert kernel("vllm-custom", tp, 8 * MIB - 16) == "vllm-custom two-shot"
    assert kernel("vllm-custom", tp, 8 * MIB) == "nccl"


def test_vllm_custom_two_gpus_one_shot_and_pcie():
    assert kernel("vllm-custom", 2, 8 * MIB - 16) == "vllm-custom one-shot"
    l40s = load_profile("l40s-pcie")
    assert kernel("vllm-custom", 2, 64 * KIB, l40s) == "vllm-custom one-shot"  # 2 GPUs over PCIe with P2P
    assert kernel("vllm-custom", 4, 64 * KIB, l40s) == "nccl"  # more than 2 PCIe GPUs: no custom kernel
    assert "NVLink between every pair" in why_not(IMPLEMENTATIONS["vllm-custom"], l40s, 4, "bfloat16")
    assert kernel("vllm-custom", 3, 64 * KIB) == "nccl"  # world sizes 2/4/6/8 only


def test_pytorch_intra_node_cutoffs_and_dtypes():
    # intra_node_comm.cu: one-shot <= 256 KiB, two-shot <= 10 MiB, bf16/fp32 only (fp16: NCCL)
    assert kernel("pytorch-intra-node", 8, 256 * KIB) == "pytorch-intra-node one-shot"
    assert kernel("pytorch-intra-node", 8, 256 * KIB + 16) == "pytorch-intra-node two-shot"
    assert kernel("pytorch-intra-node", 8, 10 * MIB) == "pytorch-intra-node two-shot"
    assert kernel("pytorch-intra-node", 8, 10 * MIB + 16) == "nccl"
    assert kernel("pytorch-intra-node", 8, 16 * KIB, dtype="float16") == "nccl"
    assert kernel("pytorch-intra-node", 8, 16 * KIB, dtype="fp8") == "pytorch-intra-node one-shot"  # bf16 activations
    assert kernel("pytorch-intra-node", 2, 16 * KIB, load_profile("l40s-pcie")) == "nccl"  # NVLink every pair


def test_trtllm_custom_table_edges():
    # allreducePlugin.cpp / customAllReduceUtils.h: TP 2 one-shot < 16 MB; TP 4 < 1 MB; TP 8 < 500 KB; 8 MB workspace
    assert kernel("trtllm-custom", 2, 16e6 - 16) == "trtllm-custom one-shot"
    assert kernel("trtllm-custom", 2, 16e6) == "nccl"
    assert kernel("trtllm-custom", 4, 1e6 - 16) == "trtllm-custom one-shot"
    assert kernel("trtllm-custom", 4, 1e6) == "trtllm-custom two-shot"
    assert kernel("trtllm-custom", 8, 500e3 - 16) == "trtllm-custom one-shot"
    assert kernel("trtllm-custom", 8, 500e3) == "trtllm-custom two-shot"
    assert kernel("trtllm-custom", 8, 8e6) == "nccl"
    assert kernel("trtllm-custom", 6, 16 * KIB) == "nccl"
    assert kernel("trtllm-custom", 2, 16 * KIB, load_profile("l40s-pcie")) == "nccl"  # NCCL without NVLink
    assert kernel("trtllm-custom", 8, 16 * KIB, load_profile("h100-sxm-p2p-off")) == "nccl"  # NCCL without P2P


def test_sglang_custom_follows_its_vllm_kernels():
    assert [kernel("sglang-custom", 8, s) for s in (128 * KIB, 256 * KIB, 8 * MIB)] == \
        ["sglang-custom one-shot", "sglang-custom two-shot", "nccl"]


def test_nvls_needs_multicast_and_three_gpus():
    assert why_not(IMPLEMENTATIONS["nvls"], load_profile("a100-sxm-nvswitch"), 8, "bfloat16") is not None
    assert why_not(IMPLEMENTATIONS["nvls"], H100, 2, "bfloat16") is not None
    assert why_not(IMPLEMENTATIONS["nvls"], H100, 8, "bfloat16") is None


def test_custom_kernels_run_inside_one_node():
    assert kernel("vllm-custom", 16, 16 * KIB) == "nccl"
    assert "one node" in why_not(IMPLEMENTATIONS["vllm-custom"], H100, 16, "bfloat16")


@pytest.mark.parametrize("name, table, us", [
    ("vllm-custom", "aic_h100_sxm_vllm_0.24.0_graph", 5.3101),
    ("trtllm-custom", "aic_h100_sxm_trtllm_1.3.0rc20_graph", 3.5587),
    ("sglang-custom", "aic_h100_sxm_sglang_0.5.14_graph", 3.7485),
])
def test_golden_from_each_table(name, table, us):
    # tables/<table>.csv: 8 GPUs, 16 KiB (one 70B decode token), CUDA graph like the profile (no launch added)
    chosen = pick(H100, (name,), 8, 16 * KIB, "bfloat16")
    assert custom_time_s(H100, chosen, 8, 16 * KIB) == pytest.approx(us * 1e-6, rel=1e-9)


def test_no_table_prices_the_algorithm_and_says_so_once(capsys):
    chosen = pick(H100, ("pytorch-intra-node",), 8, 16 * KIB, "bfloat16")
    first = custom_time_s(H100, chosen, 8, 16 * KIB)
    custom_time_s(H100, chosen, 8, 32 * KIB)
    assert first == pytest.approx(algorithm_time_s(H100, chosen.impl, ONE_SHOT, 8, 16 * KIB))
    assert capsys.readouterr().err.count("priced from their algorithm") <= 1


@pytest.mark.parametrize("held_out, version", [("h200", "0.24.0"), ("a100", "0.14.0")])
def test_algorithm_price_against_tables_it_was_not_fitted_to(held_out, version):
    # vLLM's floor is fitted to the H100 table (tools/fits/fit_custom_allreduce.py); the H200 and A100
    # tables are held out: median error within 12%, every point within 35%
    profile = load_profile(f"{held_out}-sxm-nvswitch")
    table = pd.read_csv(TABLES / f"aic_{held_out}_sxm_vllm_{version}_graph.csv", comment="#")
    impl, errors = IMPLEMENTATIONS["vllm-custom"], []
    for tp in (2, 4, 8):
        for size in (16 * KIB, 64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB):
            k = kernel_for(impl, tp, size)
            measured = table[(table.gpus == tp) & (table.size_bytes == size)].time_us.iloc[0] * 1e-6
            errors.append(algorithm_time_s(profile, impl, k, tp, size) / measured - 1)
    assert np.median(np.abs(errors)) < 0.12 and np.max(np.abs(errors)) < 0.35


def test_two_shot_moves_less_than_one_shot_at_large_sizes():
    impl = IMPLEMENTATIONS["vllm-custom"]
    one, two = (algorithm_time_s(H100, impl, k, 8, 4 * MIB) for k in (ONE_SHOT, TWO_SHOT))
    assert two < one


def test_table_covers_only_its_group_sizes():
    assert table_time_s(H100, IMPLEMENTATIONS["vllm-custom"], 6, 16 * KIB) is None
    assert table_time_s(H100, NCCL, 8, 16 * KIB) is None


def test_refusals_name_why():
    with pytest.raises(UserInputError, match="bfloat16/float32 only, not float16"):
        require_runs("pytorch-intra-node", H100, 8, "float16")
    with pytest.raises(UserInputError, match="more than 2 GPUs needs NVLink"):
        require_runs("vllm-custom", load_profile("l40s-pcie"), 4, "bfloat16")
    with pytest.raises(UserInputError, match="unknown 'foo'"):
        require_runs("foo", H100, 8, "bfloat16")
    require_runs("nccl", load_profile("l40s-pcie"), 8, "float16")  # NCCL runs everywhere


def test_cli_refuses_in_one_line():
    run = subprocess.run([sys.executable, "-m", "laddersim", "simulate", "--model", "llama-3.1-8b", "--hardware",
                          "h100-sxm-nvswitch", "--tp", "8", "--gen-len", "4", "--prompt-len", "16", "--dtype",
                          "float16", "--allreduce", "pytorch-intra-node"], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == ["error: allreduce: pytorch-intra-node reduces bfloat16/float32 only, "
                                               "not float16"]


def test_a_custom_kernel_holds_its_sms_beside_compute():
    # vLLM's grid (csrc/custom_all_reduce.cuh): min(36, bytes / 16 / 512) CTAs of 512 threads, each on an SM
    # for the kernel's whole time; H100's 132 SMs: a 16 KiB message holds 2 (compute 2/130 slower), 1 MiB 36
    from laddersim.costs.allreduce_impls import custom_slowdowns, kernel_ctas

    assert (kernel_ctas(16 * KIB), kernel_ctas(1 * MIB), kernel_ctas(64 * MIB)) == (2, 36, 36)
    small = custom_slowdowns(H100, pick(H100, ("vllm-custom",), 8, 16 * KIB, "bfloat16"), 8, 16 * KIB)
    large = custom_slowdowns(H100, pick(H100, ("vllm-custom",), 8, 1 * MIB, "bfloat16"), 8, 1 * MIB)
    assert small[0] == pytest.approx(2 / 130) and large[0] == pytest.approx(36 / 96)
    assert small[1] <= large[1]  # the kernel's own stretch grows with its bandwidth-bound share
    assert custom_slowdowns(H100, pick(H100, ("nccl",), 8, 16 * KIB, "bfloat16"), 8, 16 * KIB) is None


def test_ladder_pays_for_the_sms_a_custom_kernel_holds():
    """Under ladder the AllReduce overlaps the next block's compute: with vLLM's custom kernel the
    overlapped compute loses the SMs the kernel holds (priced, not free). Without an SM count the
    profile falls back to NCCL's interference, which barely slows compute beside a 512 KiB message."""
    from laddersim.costs.allreduce import op_slowdowns
    from laddersim.simulation.simulate import make_scenario, simulate

    no_sm_count = H100.model_copy(update={"gpu": H100.gpu.model_copy(update={"sm_count": None})})

    def run(profile, schedule):
        scenario = make_scenario(model="llama-3.1-70b", hardware=profile, tp=8, batch=32, prompt_len=256, gen_len=8,
                                 schedule=schedule, framework="vllm")
        return scenario, simulate(scenario).summary()["tpot_s"]

    scenario, priced = run(H100, "ladder")
    held = op_slowdowns(H100, scenario.workload, 8, "allreduce", 32 * 8192 * 2.0)  # two-shot, 36 CTAs
    assert held[0] == pytest.approx(36 / 96)
    _, unpriced = run(no_sm_count, "ladder")
    assert priced > unpriced * 1.01
    # standard overlaps nothing: the same step either way
    assert run(H100, "standard")[1] == pytest.approx(run(no_sm_count, "standard")[1], rel=1e-9)


def test_the_shipped_floors_are_the_fit():
    from laddersim.fitting.custom_allreduce import fit_floor_us

    assert [fit_floor_us(f) for f in ("vllm", "trtllm", "sglang")] == \
        [IMPLEMENTATIONS[f"{f}-custom"].floor_us for f in ("vllm", "trtllm", "sglang")]


def test_simulate_says_which_allreduce_ran():
    from laddersim.api import allreduce_used
    from laddersim.simulation.simulate import make_scenario, simulate

    trtllm = simulate(make_scenario(model="llama-3.1-70b", hardware=H100, tp=8, batch=16, prompt_len=512, gen_len=4,
                                    schedule="standard", framework="trtllm"))
    assert allreduce_used(trtllm) == {"prefill": "nccl", "decode": "trtllm-custom one-shot"}  # 8 MiB prefill: NCCL
    forced = simulate(make_scenario(model="llama-3.1-70b", hardware=H100, tp=8, batch=1, prompt_len=64, gen_len=4,
                                    schedule="standard", framework="gpt-fast", allreduce="pytorch-intra-node"))
    assert allreduce_used(forced) == {"prefill": "pytorch-intra-node two-shot", "decode": "pytorch-intra-node one-shot"}
