"""The per-kernel floor fitted to a GPU's GEMM table (laddersim.fitting.kernel_floor,
``tools/fits/fit_kernel_floor.py`` prints it)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from laddersim.costs.gemm import gemm_time_s
from laddersim.fitting.kernel_floor import (FLOOR_MAX_WEIGHT_BYTES, fit_gemm_at_floor, fit_kernel_floor,
                                            floor_rows)
from laddersim.hardware.profile import load_profile
from laddersim.hardware.sourced import Sourced
from laddersim.hardware.table_files import read_gemm_table_csv


def _line_table(floor_us: float, gb_per_s: float) -> pd.DataFrame:
    rows = []
    for m in (1, 4, 16, 64):
        for n in (32, 256, 1024, 4096):
            for k in (32, 512, 2048):
                rows.append((m, n, k, floor_us + 2.0 * n * k / (gb_per_s * 1e3)))
    return pd.DataFrame(rows, columns=["m", "n", "k", "time_us"])


def test_a_table_made_of_the_line_gives_its_floor_and_bandwidth_back():
    fit = fit_kernel_floor(_line_table(3.5, 900.0))
    assert fit["floor_us"] == pytest.approx(3.5, abs=0.01)
    assert fit["bandwidth_gb_per_s"] == pytest.approx(900.0, rel=1e-3)


def test_only_decode_rows_with_small_weight_reads_are_fitted():
    """m = 64 rows and weights above the limit are left out, so a slow row there moves nothing."""
    table = _line_table(3.5, 900.0)
    rows = floor_rows(table)
    assert rows["m"].max() == 16 and (2.0 * rows["n"] * rows["k"]).max() <= FLOOR_MAX_WEIGHT_BYTES
    slowed = table.assign(time_us=np.where(table["m"] == 64, table["time_us"] * 3.0, table["time_us"]))
    assert fit_kernel_floor(slowed)["floor_us"] == pytest.approx(3.5, abs=0.01)


def test_too_few_rows_are_refused():
    with pytest.raises(ValueError, match="at least 3"):
        fit_kernel_floor(pd.DataFrame({"m": [1], "n": [64], "k": [64], "time_us": [3.0]}))


def test_the_roofline_refit_gives_its_efficiencies_back_at_the_held_floor():
    gpu = load_profile("a100-sxm-nvswitch").gpu
    truth = {"gemm_compute_efficiency": 0.75, "gemm_memory_efficiency": 0.85, "gemm_blend_order": 2.0}
    true_gpu = gpu.model_copy(update={**{f: Sourced(value=v, source="test") for f, v in truth.items()},
                                      "kernel_launch_us": Sourced(value=4.0, source="test")})
    m, n, k = (np.array(a, float).ravel() for a in np.meshgrid([1, 16, 256, 4096], [512, 4096, 14336],
                                                                [512, 4096, 8192]))
    table = pd.DataFrame({"m": m, "n": n, "k": k, "time_us": gemm_time_s(true_gpu, m, n, k, 2) * 1e6})
    fit = fit_gemm_at_floor(gpu, table, 4.0)
    for field, value in truth.items():
        assert fit[field] == pytest.approx(value, rel=0.01), field
    assert fit["rms_log_error"] < 1e-3


@pytest.mark.parametrize(("profile", "floor_us"), [("a100-sxm-nvswitch", 3.94), ("h100-sxm-nvswitch", 2.90)])
def test_the_shipped_gemm_tables_give_their_floor(profile, floor_us):
    """Golden: the compact bf16 GEMM table each profile carries gives this floor (A100: SGLang
    0.5.10 under a CUDA graph; H100: vLLM 0.24.0), no higher than the profile's
    ``kernel_launch_us`` (the whole-table roofline fit's floor also absorbs the roofline's misfit)."""
    prof = load_profile(profile)
    frame = read_gemm_table_csv(f"{prof.base_dir}/{prof.gpu.gemm_tables[0].file}")
    fit = fit_kernel_floor(frame)
    assert fit["floor_us"] == pytest.approx(floor_us, abs=1e-9)
    assert fit["rows"] == 865
    assert fit["floor_us"] <= prof.gpu.kernel_launch_us.value


def test_a100_states_its_fitted_floor_and_the_command():
    """The A100 profile's ``kernel_launch_us`` is the floor its own GEMM table gives, citing the script."""
    prof = load_profile("a100-sxm-nvswitch")
    frame = read_gemm_table_csv(f"{prof.base_dir}/{prof.gpu.gemm_tables[0].file}")
    stated = prof.gpu.kernel_launch_us
    assert stated.value == pytest.approx(round(fit_kernel_floor(frame)["floor_us"], 2), abs=1e-9)
    assert "tools/fits/fit_kernel_floor.py" in stated.source
