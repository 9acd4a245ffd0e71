"""calibration/kernel_trace.py: the kernels of one decode step, per layer, from a profiler trace.

The GPU run (CUDA kernels) is what issue 19 needs; here its CPU twin runs end to end (eager aten
ops, and Inductor's generated C++ kernels under torch.compile), and the parts the GPU run shares
with it are checked on their own: kernel names to classes (real cuBLAS, Triton, NCCL names), and
one layer's kernels as the difference of two layer counts.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from calibration import kernel_trace as kt  # noqa: E402
from calibration import trace_kernels as tk  # noqa: E402

TINY = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 250, "model_type": "llama"}
SMALL = ["--batch", "2", "--steps", "2", "--max-seq", "64", "--pos", "16"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _per_layer(out: Path, schedule: str, cls: str) -> float:
    (row,) = [r for r in _rows(out / "per_layer.csv") if r["schedule"] == schedule and r["kernel_class"] == cls]
    return float(row["kernels_per_layer"])


@pytest.mark.parametrize(("name", "cls"), [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_"
     "kernel__5x_cublas", "library_gemm"),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, false, false>",
     "library_gemm"),
    ("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x6_tn", "library_gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true>",
     "splitk_reduce"),
    ("triton_red_fused_add_mean_mul_pow_rsqrt_3", "generated"),
    ("triton_per_fused__to_copy_mul_sum_7", "generated"),
    ("graph_0_cpp_fused_add_mean_mul_pow_rsqrt_0", "generated"),
    ("graph_0_cpp_fused__unsafe_view_add_all_reduce_5", "generated"),  # named after an op it fuses
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "collective"),
    ("c10d::allreduce_", "collective"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("Memcpy DtoD (Device -> Device)", "copy"),
    ("aten::mm", "library_gemm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "other"),
    # cuBLAS's Hopper GEMMs (the H100 trace of ../shared/reference_data/kernel_trace_h100), split-K ones too
    ("nvjet_sm90_tst_512x64_64x2_2x1_v_bz_coopB_TNN", "library_gemm"),
    ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT", "library_gemm"),
])
def test_kernel_names_map_to_their_class(name, cls):
    assert tk.kernel_class(name) == cls


def test_signature_drops_the_numbering_of_compiled_graphs():
    assert tk.signature("graph_3_cpp_fused_add_mean_mul_pow_rsqrt_12") == "cpp_fused_add_mean_mul_pow_rsqrt"
    assert tk.signature("triton_poi_fused_add_3") == "triton_poi_fused_add"
    assert tk.signature("aten::mm") == "aten::mm"


def test_one_layer_is_the_difference_of_two_layer_counts():
    low = {"gemm": (6, 60.0), "norm": (3, 9.0), "lm_head": (1, 50.0)}
    high = {"gemm": (14, 140.0), "norm": (7, 21.0), "lm_head": (1, 50.0), "reduce": (4, 8.0)}
    one, regular = tk.per_layer(low, high, 2)
    assert regular
    assert one == {"gemm": (4.0, 40.0), "norm": (2.0, 6.0), "reduce": (2.0, 4.0)}
    _, regular = tk.per_layer(low, {**high, "norm": (6, 18.0)}, 2)  # 3 more norms over 2 layers
    assert not regular


def test_eager_trace_counts_each_schedules_gemms_and_collectives(tiny, tmp_path):
    """The paper's benchmark model's layer, as the op program has it: standard runs QKV, O, gate and
    up fused, and down (4 GEMMs) and two AllReduces a layer; parallel one stacked input GEMM, O and
    down (3) and one AllReduce; upper_bound none. A rerun finds every point done and rewrites the
    same tables."""
    out = tmp_path / "kt"
    every = ["--schedule", "standard,parallel,ladder,upper_bound", "--predict", "h100-sxm-nvswitch"]
    assert kt.main(["--model", tiny, "--tp", "2", "--eager", *every, *SMALL, "--out", str(out)]) == 0
    assert _per_layer(out, "standard", "library_gemm") == 4
    assert _per_layer(out, "parallel", "library_gemm") == 3
    assert _per_layer(out, "standard", "collective") == 2
    assert _per_layer(out, "ladder", "collective") == 2
    assert _per_layer(out, "parallel", "collective") == 1
    assert _per_layer(out, "upper_bound", "collective") == 0
    assert all(r["regular"] == "True" for r in _rows(out / "per_layer.csv"))
    # Beside them, what laddersim's op program charges a layer (gpt-fast on an H100): the same
    # collectives, and gate and up as one GEMM as the paper's benchmark model runs them.
    model = {(r["schedule"], r["kernel_class"]): r["model_kernels_per_layer"] for r in _rows(out / "per_layer.csv")}
    assert [float(model[(s, "collective")]) for s in ("standard", "ladder", "parallel", "upper_bound")] == [2, 2, 1, 0]
    assert float(model[("standard", "library_gemm")]) == _per_layer(out, "standard", "library_gemm")
    before = {name: (out / name).read_text() for name in ("kernels.csv", "steps.csv", "per_layer.csv")}
    assert kt.main(["--model", tiny, "--tp", "2", "--eager", *every, *SMALL, "--out", str(out)]) == 0
    assert {name: (out / name).read_text() for name in before} == before
    assert "torch" in (out / "PROVENANCE.md").read_text()


def test_compiled_trace_sees_inductors_fused_kernels(tiny, tmp_path, capsys):
    """Under torch.compile the pointwise ops are fused into generated kernels: fewer kernels a
    layer than the eager step, the GEMMs still extern calls, each layer the same kernels."""
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    args = ["--model", tiny, "--schedule", "standard", *SMALL]
    assert kt.main([*args, "--eager", "--out", str(eager)]) == 0
    assert kt.main([*args, "--out", str(compiled)]) == 0
    assert _per_layer(compiled, "standard", "generated") >= 1
    assert _per_layer(eager, "standard", "generated") == 0
    assert _per_layer(compiled, "standard", "library_gemm") == 4
    total = {out: sum(float(r["kernels_per_layer"] or 0) for r in _rows(out / "per_layer.csv"))
             for out in (eager, compiled)}
    assert total[compiled] < total[eager]
    assert all(r["regular"] == "True" for r in _rows(compiled / "per_layer.csv"))
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("kernel trace: standard b2: ")


def _point_rows(out: Path, name: str, **point) -> list[dict]:
    return [r for r in _rows(out / name) if all(r[k] == v for k, v in point.items())]


def test_variants_are_points_of_their_own_and_an_older_table_reads_as_the_split_mlp_decode(tiny, tmp_path, capsys):
    """--mlp split (upstream gpt-fast: gate and up two GEMMs) and the paper's fused MLP are two
    points in one folder, told apart by the mlp column; a table written before the phase and mlp
    columns existed holds decode steps of the split MLP, and a rerun of that finds them done."""
    out = tmp_path / "kt"
    args = ["--model", tiny, "--schedule", "standard", "--eager", *SMALL, "--out", str(out)]
    assert kt.main([*args, "--mlp", "split", "--sdpa", "default"]) == 0
    assert kt.main(args) == 0
    gemms = {r["mlp"]: float(r["kernels_per_layer"]) for r in _rows(out / "per_layer.csv")
             if r["kernel_class"] == "library_gemm"}
    assert gemms == {"fused": 4.0}  # the summary is the last run's; the split point stays in kernels.csv
    split = _point_rows(out, "kernels.csv", mlp="split", layers="3", kernel="aten::linear")
    fused = _point_rows(out, "kernels.csv", mlp="fused", layers="3", kernel="aten::linear")
    assert [int(r["calls_per_step"]) for r in split + fused] == [3 * 5 + 1, 3 * 4 + 1]  # + the LM head
    assert {r["sdpa"] for r in split} == {"default"} and {r["sdpa"] for r in fused} == {"math"}
    # The same split-MLP decode points as a table of the first kernel traces (no phase, no mlp column).
    for name in ("kernels.csv", "steps.csv"):
        rows = _point_rows(out, name, mlp="split")
        fields = [f for f in rows[0] if f not in ("phase", "mlp")]
        with (out / name).open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    capsys.readouterr()
    assert kt.main([*args, "--mlp", "split", "--sdpa", "default"]) == 0
    assert "layer(s):" not in capsys.readouterr().err  # nothing traced again
    (row,) = _point_rows(out, "per_layer.csv", kernel_class="library_gemm")
    assert (row["phase"], row["mlp"], float(row["kernels_per_layer"])) == ("decode", "split", 5.0)


def test_prefill_phase_traces_the_prompt_pass(tiny, tmp_path):
    """--phase prefill: a prefill of --prompt-len tokens per pass, the same kernels a layer as a
    decode step (4 GEMMs, one attention) and the phase in every table."""
    out = tmp_path / "kt"
    assert kt.main(["--model", tiny, "--schedule", "standard", "--eager", *SMALL, "--phase", "prefill",
                    "--prompt-len", "12", "--out", str(out)]) == 0
    assert {r["phase"] for name in ("kernels.csv", "steps.csv", "per_layer.csv") for r in _rows(out / name)} \
        == {"prefill"}
    assert _per_layer(out, "standard", "library_gemm") == 4
    assert _per_layer(out, "standard", "attention") == 1
    assert "prefill" in (out / "PROVENANCE.md").read_text().splitlines()[0]


@pytest.mark.parametrize(("flag", "value", "field"), [
    ("--layers", "2,1", "--layers"), ("--layers", "1", "--layers"), ("--batch", "0", "--batch"),
    ("--schedule", "hybrid", "--schedule"), ("--tp", "3", "--tp"), ("--pos", "64", "--pos"),
    ("--model", "no-such-model", "--model"), ("--predict", "no-such-gpu", "--predict"),
    ("--prompt-len", "65", "--prompt-len"),
])
def test_bad_input_is_one_line_naming_the_flag(tiny, tmp_path, capsys, flag, value, field):
    phase = ["--phase", "prefill"] if flag == "--prompt-len" else []  # --pos is a decode step's
    args = ["--model", tiny, *SMALL, *phase, "--out", str(tmp_path / "o")]
    code = kt.main([*args, flag, value])  # a repeated flag: argparse keeps the last value
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"error: {field}:")
    assert not (tmp_path / "o" / "kernels.csv").exists()


def test_gpu_kernels_are_the_device_events_with_their_device_time():
    """The GPU path reads CUDA activities (kernels, copies, memsets) only, each with its own time;
    the CPU-side events of the same trace (launches, aten ops) are not kernels."""
    import types

    from torch.autograd import DeviceType

    def event(name, device, start, end):
        return types.SimpleNamespace(name=name, device_type=device,
                                     time_range=types.SimpleNamespace(elapsed_us=lambda: end - start))

    prof = types.SimpleNamespace(events=lambda: [
        event("cudaGraphLaunch", DeviceType.CPU, 0.0, 5.0),
        event("triton_red_fused_add_mean_mul_pow_rsqrt_0", DeviceType.CUDA, 10.0, 13.5),
        event("aten::mm", DeviceType.CPU, 1.0, 2.0),
        event("void cublasLt::splitKreduce_kernel<32, 16, int, float>", DeviceType.CUDA, 20.0, 22.0),
        event("Memset (Device)", DeviceType.CUDA, 30.0, 31.0),
    ])
    assert tk.gpu_kernels(prof) == [("triton_red_fused_add_mean_mul_pow_rsqrt_0", 3.5),
                                     ("void cublasLt::splitKreduce_kernel<32, 16, int, float>", 2.0),
                                     ("Memset (Device)", 1.0)]
