"""The per-kernel floor of a GPU (``gpu.kernel_launch_us``) from its measured GEMM table.

A decode-sized GEMM (m <= ``FLOOR_MAX_M``) whose weight read is small (``2 n k`` bytes <=
``FLOOR_MAX_WEIGHT_BYTES``: at most a few microseconds of HBM traffic) costs the kernel's fixed
start-up and drain plus its weight read. The fit is the line ``floor + 2 n k / bandwidth`` through
those rows (least squares on log(model / measured) with a soft-L1 loss, as the other table fits):
its intercept is the floor a kernel pays however little it does, the one every priced kernel of
a CUDA-graph step pays (norms, activations, attention, the GEMMs the table does not hold).

The whole-table GEMM roofline fit (``public_tables.fit_gemm``) also returns a floor, but there it
is one of four free parameters over rows of n, k >= 512 and absorbs the roofline's misfit in the
mid-sized shapes (waves, tile quantization), so it is not a kernel's floor. ``fit_gemm_at_floor``
refits the roofline's efficiencies and blend order with the floor held at this fit's value.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from laddersim.hardware.compute_specs import GpuSpec
from laddersim.fitting.public_tables import fit_gemm_rows

FLOOR_MAX_M = 16  # decode batch sizes: the GEMM reads its weights, m hardly matters
FLOOR_MAX_WEIGHT_BYTES = 4 << 20  # 4 MiB of bf16 weights: ~2 us of HBM at 2 TB/s, the floor's order
FLOOR_MIN_NK = 32  # the tables' smallest n and k


def floor_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of a GEMM table (``m,n,k,time_us``) the floor is fitted to."""
    weight_bytes = 2.0 * frame["n"] * frame["k"]
    keep = ((frame["m"] <= FLOOR_MAX_M) & (weight_bytes <= FLOOR_MAX_WEIGHT_BYTES)
            & (frame["n"] >= FLOOR_MIN_NK) & (frame["k"] >= FLOOR_MIN_NK))
    return frame[keep]


def fit_kernel_floor(frame: pd.DataFrame) -> dict[str, float]:
    """``floor_us`` and ``bandwidth_gb_per_s`` of the line ``floor + 2 n k / bandwidth`` through
    ``floor_rows(frame)`` (module docstring), with the number of rows."""
    rows = floor_rows(frame)
    if len(rows) < 3:
        raise ValueError(f"GEMM table: {len(rows)} rows with m <= {FLOOR_MAX_M} and 2nk <= "
                         f"{FLOOR_MAX_WEIGHT_BYTES} bytes; a floor needs at least 3")
    weight_bytes = 2.0 * rows["n"].to_numpy(float) * rows["k"].to_numpy(float)
    t_us = rows["time_us"].to_numpy(float)

    def residual(p):
        floor_us, gb_per_s = np.exp(p)
        return np.log((floor_us + weight_bytes / (gb_per_s * 1e3)) / t_us)

    res = least_squares(residual, np.log([3.0, 1000.0]), loss="soft_l1", f_scale=0.1)
    floor_us, gb_per_s = np.exp(res.x)
    return {"floor_us": round(float(floor_us), 2), "bandwidth_gb_per_s": round(float(gb_per_s), 1),
            "rows": int(len(rows))}


def fit_gemm_at_floor(gpu: GpuSpec, frame: pd.DataFrame, floor_us: float) -> dict[str, float]:
    """The roofline's compute and memory efficiency and blend order (``laddersim.costs.gemm``)
    fitted to the rows with n, k >= ``public_tables.GEMM_FIT_MIN_NK``, the kernel floor held at ``floor_us``
    (``public_tables.fit_gemm_rows``, the whole-table fit with one parameter held)."""
    fitted, rms, rows = fit_gemm_rows(gpu, frame, floor_us)
    return {**fitted, "rms_log_error": round(rms, 3), "rows": int(len(rows))}
