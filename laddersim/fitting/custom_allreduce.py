"""The per-phase floor of each framework's custom all-reduce kernels (``floor_us`` of the records in
``laddersim.costs.allreduce_impls``), fitted to that framework's H100 table, and the algorithm-only
price against the tables of the other GPUs (held out); ``tools/fits/fit_custom_allreduce.py`` prints it.

For every size of 16 KiB-4 MiB (powers of four) and TP 2/4/8 where the framework's rule runs a
one-shot or two-shot kernel (``kernel_for``), the floor is ``(t - moved / busbw) / phases``, with
``moved`` the bytes one rank reads from its peers and ``busbw`` the profile's NVLink bus bandwidth
(``collectives.intra_node.bus_bandwidth_gb_per_s``); the fitted floor is their median.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.costs.allreduce_impls import (
    IMPLEMENTATIONS, ONE_SHOT, TWO_SHOT, algorithm_time_s, kernel_for, kernel_moved_bytes,
)
from laddersim.hardware.profile import load_profile, profiles_dir

SIZES = [16 * 1024 * 4**i for i in range(5)]  # 16 KiB .. 4 MiB
FIT_ON = "h100"
SYSTEMS = {"h100": ("h100_sxm", "h100-sxm-nvswitch", {"vllm": "0.24.0", "trtllm": "1.3.0rc20", "sglang": "0.5.14"}),
           "h200": ("h200_sxm", "h200-sxm-nvswitch", {"vllm": "0.24.0", "trtllm": "1.3.0rc20", "sglang": "0.5.14"}),
           "b200": ("b200_sxm", "b200-sxm-nvswitch", {"vllm": "0.24.0", "trtllm": "1.3.0rc20", "sglang": "0.5.14"}),
           "a100": ("a100_sxm", "a100-sxm-nvswitch", {"vllm": "0.14.0", "trtllm": "1.0.0", "sglang": "0.5.10"})}


def points(system: str, framework: str):
    """(tp, size, kernel, measured seconds) where the framework's rule runs a custom kernel."""
    key, _, versions = SYSTEMS[system]
    path = Path(profiles_dir()) / "tables" / f"aic_{key}_{framework}_{versions[framework]}_graph.csv"
    table = pd.read_csv(path, comment="#")
    impl = IMPLEMENTATIONS[f"{framework}-custom"]
    for tp in (2, 4, 8):
        for size in SIZES:
            kernel = kernel_for(impl, tp, size)
            if kernel in (ONE_SHOT, TWO_SHOT):
                row = table[(table.gpus == tp) & (table.size_bytes == size)]
                yield tp, size, kernel, float(row.time_us.iloc[0]) * 1e-6


def fit_floor_us(framework: str) -> float:
    """The fitted floor (us) of ``framework``'s custom kernels on ``FIT_ON``'s table."""
    hw = load_profile(SYSTEMS[FIT_ON][1])
    busbw = hw.collectives.intra_node.bus_bandwidth_gb_per_s.value * 1e9
    floors = [(t - kernel_moved_bytes(k, tp, s) / busbw) / (1 if k == ONE_SHOT else 2)
              for tp, s, k, t in points(FIT_ON, framework)]
    return round(float(np.median(floors)) * 1e6, 2)


def errors_by_system(framework: str, floor_us: float) -> dict[str, tuple[float, float]]:
    """Per system: (median, worst) absolute relative error of the algorithm price with ``floor_us``."""
    fitted = replace(IMPLEMENTATIONS[f"{framework}-custom"], floor_us=floor_us)
    out = {}
    for system in SYSTEMS:
        hw = load_profile(SYSTEMS[system][1])
        errors = np.abs([algorithm_time_s(hw, fitted, k, tp, s) / t - 1 for tp, s, k, t in points(system, framework)])
        out[system] = (float(np.median(errors)), float(np.max(errors)))
    return out
