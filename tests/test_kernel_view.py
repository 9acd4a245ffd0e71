"""laddersim kernels: one layer's kernels as the cost model prices them (laddersim.simulation.kernel_view)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from laddersim.cli import main
from laddersim.costs.op_costs import Phase, fixed_op_times, attention_time_s
from laddersim.simulation.kernel_view import kernel_table
from laddersim.simulation.simulate import make_scenario

MODEL, HW = "llama-3.1-8b", "h100-sxm-nvswitch"

# A golden layer per framework and phase: Llama-3.1-8B, TP 8, batch 4, prompt 1024 (+ 512 new).
GOLDEN = {
    # decode on the math path too: three generated reductions (scores, softmax, values) whose K/V
    # reads come from L2 after the group's first query head (by hand: scores 3.55 + 6.29 MB / 4.4 TB/s
    # + 0.104 MB / 2.92 TB/s = 5.016 us, values 5.015, softmax 3.55 + 2 x 0.098 MB / 2.92 TB/s = 3.617)
    ("gpt-fast", "decode"): (87.453, {"collective": 2, "copy": 2, "generated": 9,
                                      "library_gemm": 4, "splitk_reduce": 4}),
    # the math SDPA path: two batched GEMMs and four generated kernels instead of one attention kernel;
    # no split-K reduce at M = 4096 (compute-bound; it was QKV's, 384 tiles: 16.73 us, issue 38)
    ("gpt-fast", "prefill"): (1057.339, {"collective": 2, "copy": 2, "generated": 10, "library_gemm": 6}),
    ("vllm", "decode"): (56.496, {"attention": 1, "collective": 2, "generated": 6, "library_gemm": 4}),
    ("vllm", "prefill"): (543.169, {"attention": 1, "collective": 2, "generated": 6, "library_gemm": 4}),
}


@pytest.mark.parametrize("framework,phase", sorted(GOLDEN))
def test_golden_layer(framework, phase):
    frame = kernel_table(MODEL, HW, 8, 4, framework=framework, phase=phase)
    layer_us, counts = GOLDEN[(framework, phase)]
    assert frame.attrs["layer_us"] == pytest.approx(layer_us, abs=0.01)
    got = frame.groupby("class")["count"].sum().to_dict()
    assert got == pytest.approx(counts)
    # layer_us is the compute stream: every row but the collectives
    assert frame.loc[frame["class"] != "collective", "us"].sum() == pytest.approx(layer_us, abs=0.01)


def test_prefill_math_attention_rows_sum_to_the_priced_attention():
    scenario = make_scenario(model=MODEL, hardware=HW, tp=2, batch=4, prompt_len=1024, gen_len=512, schedule="standard",
                             dtype="bfloat16", framework="gpt-fast")
    phase = Phase("prefill", 4, 1024)
    priced = float(attention_time_s(scenario.model, scenario.hardware, scenario.workload, 2, phase,
                                    np.array([1024]))[0]) * 1e6
    frame = kernel_table(MODEL, HW, 2, 4, framework="gpt-fast", phase="prefill")
    rows = frame[frame["kernel"].str.startswith("attention.")]
    assert set(rows["class"]) == {"generated", "library_gemm"}
    assert rows["us"].sum() == pytest.approx(priced, rel=1e-4)


def test_decode_rows_are_the_priced_op_kinds():
    """Each op kind's rows add up to what the simulator charges that kind (TP 1: no collectives)."""
    scenario = make_scenario(model=MODEL, hardware=HW, tp=1, batch=16, prompt_len=1024, gen_len=512,
                             schedule="standard", dtype="bfloat16")
    times, _ = fixed_op_times(scenario.model, scenario.hardware, scenario.workload, 1, Phase("decode", 16, 1))
    frame = kernel_table(MODEL, HW, 1, 16)
    qkv = frame[frame["kernel"].isin(["qkv", "qkv.splitk_reduce"])]["us"].sum()
    assert qkv == pytest.approx(times["qkv"] * 1e6, abs=0.01)
    assert frame.loc[frame["kernel"] == "residual_add", "count"].item() == 2  # two adds per standard layer


def test_ladder_and_standard_layers_price_the_same_kernels_at_tp1():
    a = kernel_table(MODEL, HW, 1, 4, schedule="standard")
    b = kernel_table(MODEL, HW, 1, 4, schedule="ladder")
    assert a.attrs["layer_us"] == pytest.approx(b.attrs["layer_us"])


def test_cli_json(capsys):
    assert main(["kernels", "--model", MODEL, "--hardware", HW, "--tp", "8", "--batch", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"layer_us", "kernels"}
    assert out["layer_us"] == pytest.approx(GOLDEN[("gpt-fast", "decode")][0], abs=0.01)
    assert all(set(k) == {"name", "class", "count", "us"} for k in out["kernels"])


def test_cli_table(capsys):
    assert main(["kernels", "--model", MODEL, "--hardware", HW, "--tp", "2", "--phase", "prefill"]) == 0
    text = capsys.readouterr().out
    assert "attention.scores_bmm" in text and "layer (compute stream)" in text


@pytest.mark.parametrize("argv,needle", [
    (["--tp", "3"], "tp"),
    (["--tp", "1", "--phase", "verify"], "phase"),
    (["--tp", "1", "--framework", "nope"], "framework"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        code = main(["kernels", "--model", MODEL, "--hardware", HW, *argv])
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err
