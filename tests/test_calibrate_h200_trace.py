"""A framework file calibrated from a real TP 1 trace predicts other TPs and schedules (#30: "judged
on shapes and TPs the trace does not contain"): the paper's benchmark model traced on one H200
(tests/data/kernel_trace_h200_paper, from reports/kernel_trace/h200_paper_config). The TP 2 and TP 8
shards are held out: nothing is fitted to them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from laddersim.fitting.kernel_trace import class_cost, kernel_floor_us
from laddersim.cli import main
from laddersim.model.framework import load_framework
from laddersim.simulation.kernel_view import kernel_table

DATA = Path(__file__).parent / "data" / "kernel_trace_h200_paper"
HW = "h200-sxm-nvswitch"
MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("h200") / "h200-paper.yaml")
    assert main(["calibrate", "kernels", str(DATA / "tp1"), "--hardware", HW, "--out", out]) == 0
    return out


def _trace(name: str, schedule: str, batch: int) -> tuple[float, dict[str, float]]:
    """The trace's per-layer device time (every class) and kernels per class, one schedule and batch."""
    rows = pd.read_csv(DATA / name)
    rows = rows[(rows["schedule"] == schedule) & (rows["batch"] == batch) & (rows["kernel_class"] != "step (wall clock)")]
    counts = {c: n for c, n in zip(rows["kernel_class"], rows["kernels_per_layer"]) if n}
    return float(rows["us_per_layer"].sum()), counts


def _layer(traced: str, tp: int, batch: int, schedule: str = "standard") -> pd.DataFrame:
    return kernel_table(MODEL, HW, tp, batch, schedule=schedule, framework=traced)


@pytest.mark.parametrize("batch", [1, 4])
def test_tp1_is_reproduced_exactly(traced, batch):
    layer_us, counts = _trace("tp1/per_layer.csv", "standard", batch)
    frame = _layer(traced, 1, batch)
    assert frame.attrs["layer_us"] == pytest.approx(layer_us, abs=0.01)
    assert {c: n for c, n in frame.groupby("class")["count"].sum().items() if n} == pytest.approx(counts)


# Held out: (trace file, schedule, TP, batch) -> the bound the TP 1 file's prediction meets (measured:
# TP 8 b1 49.4 us vs 52.5 traced, -6%; TP 2 b4 standard 126.4 vs 100.9, +25%; parallel 116.6 vs 89.6, +30%:
# the TP 1 trace's batch-4 math attention costs 74 us a layer, the TP 2 shard's 21 us for half the K/V).
HELD_OUT = [("heldout/tp8_per_layer.csv", "standard", 8, 1, 0.10),
            ("heldout/tp2_per_layer.csv", "standard", 2, 4, 0.27),
            ("heldout/tp2_per_layer.csv", "parallel", 2, 4, 0.32)]


@pytest.mark.parametrize("name,schedule,tp,batch,bound", HELD_OUT)
def test_other_tps_and_schedules_from_the_tp1_file(traced, name, schedule, tp, batch, bound):
    layer_us, counts = _trace(name, schedule, batch)
    frame = _layer(traced, tp, batch, schedule)
    assert frame.attrs["layer_us"] == pytest.approx(layer_us, rel=bound)
    # the compiled stack fuses the collectives' input copies away (the shards ran none)
    assert "copy" not in set(frame["class"])
    got = frame.groupby("class")["count"].sum()
    for cls in ("library_gemm", "splitk_reduce"):  # parallel: one fused QKV + gate/up GEMM, as traced
        assert got.get(cls, 0) == counts.get(cls, 0)


def test_the_file_records_what_the_trace_says(traced):
    fw = load_framework(traced)
    assert fw.collective_input_copy.value is False and "compile" in fw.collective_input_copy.source
    calib = fw.kernel_calibration
    assert calib.dtype_bytes == 2 and "float16" in calib.source
    one = calib.regime_for(1).classes["generated"]
    # 13 kernels x the profile's 3.86 us floor would leave the bytes 5.4 TB/s, above the H200's 4.8
    assert one.bandwidth_gbps <= 4800 and one.floor_us < 13 * calib.floor_us
    four = calib.regime_for(4).classes
    # the batch-4 pointwise kernels (about 1-1.7 us each) are their own floors
    assert four["generated"].floor_us < 9 * calib.floor_us
    assert four["library_gemm"].floor_us == pytest.approx(4 * calib.floor_us)


def test_schedules_change_the_layer_by_the_cost_models_kernels(traced):
    standard = _layer(traced, 2, 4).groupby("class")[["count", "us"]].sum()
    parallel = _layer(traced, 2, 4, "parallel").groupby("class")[["count", "us"]].sum()
    assert standard.loc["library_gemm", "count"] - parallel.loc["library_gemm", "count"] == 1
    assert standard.loc["generated", "count"] - parallel.loc["generated", "count"] == 1  # one norm fewer
    assert parallel.loc["generated", "us"] < standard.loc["generated", "us"]


def test_kernel_floors_and_the_bandwidth_cap():
    assert kernel_floor_us(1, 1.2, 3.86) == pytest.approx(1.2)  # a kernel faster than the floor: all floor
    assert kernel_floor_us(2, 40.0, 3.86) == pytest.approx(7.72)
    assert kernel_floor_us(-1, -1.3, 3.86) == 0.0 and kernel_floor_us(1, -2.3, 3.86) == 0.0
    # 100 MB in 30 us less 10 us of floors would be 5 TB/s: streamed at the 4.8 TB/s peak instead
    cost = class_cost(5, 30.0, 10.0, "weights", 100e6, 4800, "trace: t", 3.86)
    assert cost.bandwidth_gbps == pytest.approx(4800) and cost.floor_us == pytest.approx(30 - 100 / 4.8, abs=1e-3)
    assert cost.floor_us + 100e6 / (cost.bandwidth_gbps * 1e9) * 1e6 == pytest.approx(30.0, abs=1e-3)
    under = class_cost(4, 60.0, 15.0, "weights", 100e6, 4800, "trace: t", 3.86)
    assert under.floor_us == 15.0 and under.bandwidth_gbps == pytest.approx(100e6 / 45e-6 / 1e9, rel=1e-6)
    fixed = class_cost(1, 2.0, 1.0, "fixed", 0.0, 4800, "trace: t", 3.86)
    assert fixed.bandwidth_gbps is None and fixed.floor_us is None


def test_a_file_without_recorded_floors_prices_one_profile_floor_per_kernel(traced, tmp_path):
    """Files written before the floors were recorded: each kernel floors at the profile's floor."""
    import re

    old = tmp_path / "old.yaml"
    old.write_text(re.sub(r"\n {8}floor_us: [0-9.]+(?=\n)", "", Path(traced).read_text()))  # the classes' only
    calib = load_framework(str(old)).kernel_calibration
    gemm = calib.regime_for(4).classes["library_gemm"]
    assert gemm.floor_us is None and gemm.floors_us(calib.floor_us) == pytest.approx(4 * 3.86)
    one = calib.regime_for(1).classes["generated"]
    # TP 1 batch 1: 13 profile floors plus the bytes at the (capped) recorded bandwidth
    expected = 13 * 3.86 + (_layer(traced, 1, 1).attrs["layer_us"] - load_framework(traced).kernel_calibration
                            .regime_for(1).classes["generated"].floor_us)
    assert _layer(str(old), 1, 1).attrs["layer_us"] == pytest.approx(expected, abs=0.01)
    assert one.floor_us is None
