"""Memory-bound kernels for achievable bandwidth: copy, elementwise add, RMSNorm.

``size_bytes`` is one tensor; moved bytes count every read and write the kernel must do (copy:
2x, add: 3x, RMSNorm: 2x, the weight vector is negligible). Rank 0's device, timed as the GEMMs.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from calibration.bench_timing import DTYPES, element_count, time_alone  # noqa: E402
from laddersim.measure.grid import human_bytes  # noqa: E402

NORM_DIM = 1024  # RMSNorm row width (elements); sizes in the grid are multiples of it
MOVED_PER_BYTE = {"copy": 2, "add": 3, "rmsnorm": 2}


def _kernel(name: str, size_bytes: int, dtype, device):
    n = element_count(size_bytes, dtype)
    a = torch.ones(n, dtype=dtype, device=device)
    b = torch.ones(n, dtype=dtype, device=device)
    c = torch.empty(n, dtype=dtype, device=device)
    if name == "copy":
        return lambda: c.copy_(a)
    if name == "add":
        return lambda: torch.add(a, b, out=c)
    rows = a.view(-1, NORM_DIM) if n % NORM_DIM == 0 else a.view(1, -1)
    weight = torch.ones(rows.shape[-1], dtype=dtype, device=device)
    return lambda: F.rms_norm(rows, (rows.shape[-1],), weight, 1e-5)


def measure(ctx, point: dict) -> dict | None:
    if ctx.rank != 0:
        return None
    size = point["size_bytes"]
    values = time_alone(_kernel(point["kernel"], size, DTYPES[point["dtype"]], ctx.device), point["mode"], ctx)
    values["moved_bytes"] = MOVED_PER_BYTE[point["kernel"]] * size
    values["gbps"] = values["moved_bytes"] / (values["time_us"] * 1e-6) / 1e9
    return values


def describe(point: dict) -> str:
    return f"{point['kernel']} {human_bytes(point['size_bytes'])} {point['dtype']} {point['mode']}"


def result(values: dict) -> str:
    return f"median {values['time_us']:.1f} us, {values['gbps']:.2f} GB/s"

