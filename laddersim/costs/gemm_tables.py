"""Measured GEMM tables first, the roofline as the fallback.

A profile may ship measured GEMM times (``gpu.gemm_tables``, CSV ``m,n,k,time_us``: the
AIConfigurator ``gemm_perf`` tables, a library GEMM timed inside a CUDA graph). For a shape inside
the table's grid the time is interpolated from it, linearly in (log m, log n, log k) on log time
(a GEMM's time is a power law in each dimension between grid points: flat in m while memory-bound,
proportional to n and k); outside the grid it is the roofline scaled by the table's ratio to the
roofline at the nearest grid point. Each time says where it came from, as AIConfigurator does:

* ``SILICON``: interpolated inside a measured table;
* ``HYBRID``: outside the table's grid, the roofline anchored to the table's nearest point;
* ``SOL``: the roofline model (fitted efficiencies, ``laddersim.costs.gemm``), no table.

A profile fitted to end-to-end runs of another machine (``laddersim fit``) keeps the rates its
tables ran at (``gpu.table_rates``) beside its fitted ones: a time read from a table (``SILICON``
or ``HYBRID``) moves by the fitted kernel floor's change, and its part above the tables' floor
(none where the table is faster than that floor) by the ratio of the roofline's body (launch
apart) at the fitted efficiencies to the body at the tables' (a decode step's memory-bound GEMMs
follow the fitted memory rate, a prefill's compute-bound ones the fitted compute rate); with the
tables' own rates it is the table's time, unchanged.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from laddersim.costs.gemm import gemm_time_s
from laddersim.hardware.compute_specs import GpuSpec
from laddersim.hardware.profile import HardwareProfile
from laddersim.hardware.sourced import MeasuredTable, Sourced
from laddersim.hardware.table_files import read_gemm_table_csv, read_plain_columns

SILICON, HYBRID, SOL = "SILICON", "HYBRID", "SOL"


def model_gemm_table(hw: HardwareProfile, library: str | None = None) -> MeasuredTable | None:
    """The profile's GEMM table the simulator interpolates: the first whose ``library`` starts with
    ``library`` (a framework's own GEMM library, ``Framework.gemm_library``), else the first with
    ``use: model``."""
    if library:
        own = next((t for t in hw.gpu.gemm_tables if t.library.startswith(library)), None)
        if own is not None:
            return own
    return next((t for t in hw.gpu.gemm_tables if t.use == "model"), None)


def read_points(path: Path) -> np.ndarray:
    """The table's (m, n, k, time_us) rows, without pandas where the plain reader takes the file;
    otherwise (or with a non-finite value) through the reading layer, which says what is wrong."""
    names = ("m", "n", "k", "time_us")
    values = read_plain_columns(path, names)
    if values is not None and np.isfinite(values).all():
        return values
    return read_gemm_table_csv(path)[list(names)].to_numpy(dtype=float)


@lru_cache(maxsize=32)
def _grid(path: Path, _mtime_ns: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Axes (log m, log n, log k) and the cube of log time (s) over the table's full grid (repeated
    points: their median); grid points the table lacks are filled from their neighbours along m."""
    points = read_points(path)
    axes = tuple(np.log(_distinct(points[:, c])) for c in range(3))
    index = tuple(np.searchsorted(a, np.log(points[:, c])) for c, a in enumerate(axes))
    cube = np.full(tuple(len(a) for a in axes), np.nan)
    flat = np.ravel_multi_index(index, cube.shape)
    # The median of each cell's times at once: sorted by cell then time, a cell's middle one (odd
    # count) or the mean of its two middle ones (even), as np.median per cell gives.
    order = np.lexsort((points[:, 3], flat))
    cells, first, count = np.unique(flat[order], return_index=True, return_counts=True)
    times = points[order, 3]
    low, high = times[first + (count - 1) // 2], times[first + count // 2]
    median = np.where(count % 2 == 1, low, (low + high) / 2.0)
    cube.flat[cells] = np.log(median * 1e-6)
    finite = np.isfinite(cube)
    partial = finite.any(axis=0) & ~finite.all(axis=0)
    for j, k in zip(*np.nonzero(partial)):  # a missing (n, k) point at some m: interpolate along log m
        line = cube[:, j, k]
        known = finite[:, j, k]
        cube[:, j, k] = np.interp(axes[0], axes[0][known], line[known])
    return axes, cube


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of finite values (which would also load numpy.ma, a noticeable share
    of a small simulation's start-up, to ask whether they are masked)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


def _interpolate(axes: tuple[np.ndarray, ...], cube: np.ndarray, point: np.ndarray) -> float:
    """Multilinear interpolation of ``cube`` at ``point`` (linear extrapolation from the edge cell
    outside the grid), as scipy's RegularGridInterpolator(method="linear", fill_value=None)."""
    corners = []
    for a, x in zip(axes, point):
        if len(a) == 1:
            corners.append(((0, 1.0),))
            continue
        i = int(np.clip(np.searchsorted(a, x, side="right") - 1, 0, len(a) - 2))
        w = (x - a[i]) / (a[i + 1] - a[i])
        corners.append(((i, 1.0 - w), (i + 1, w)))
    total = 0.0
    for (i, wi) in corners[0]:
        for (j, wj) in corners[1]:
            for (k, wk) in corners[2]:
                total += wi * wj * wk * cube[i, j, k]
    return float(total)


@lru_cache(maxsize=64)
def table_path(base_dir: str, file: str) -> Path:
    return (Path(base_dir) / file).resolve()


_times: dict[tuple, tuple] = {}  # see library_gemm_time_s
TIMES_KEPT = 8192


def library_gemm_time_s(hw: HardwareProfile, m: int, n: int, k: int, dtype_bytes: int,
                        peak_flops_per_s: float, library: str | None = None) -> tuple[float, str]:
    """Seconds of one library (cuBLAS) GEMM of m x k by k x n, and its source label; a 16-bit GEMM
    runs no faster than the GPU's sustained tensor throughput (``gpu.sustained_tflops``).
    ``library``: the framework's GEMM library, whose table prices it where the profile has one
    (``model_gemm_table``).

    Remembered per GPU spec, table file (and its modification time) and shape: a sweep asks for
    the same few shapes at every point."""
    table = model_gemm_table(hw, library)
    # The tables are 16-bit GEMMs; another dtype (fp8, fp32) keeps the roofline of its own peak.
    path = stamp = None
    if table is not None and dtype_bytes == 2 and hw.base_dir:
        path = table_path(hw.base_dir, table.file)
        stamp = path.stat().st_mtime_ns
    key = (id(hw.gpu), path, stamp, m, n, k, dtype_bytes, peak_flops_per_s)
    kept = _times.get(key)
    if kept is not None and kept[0] is hw.gpu:
        return kept[1]
    table_gpu = at_table_rate(hw.gpu)
    seconds, source = _library_gemm_time_s(table_gpu, m, n, k, dtype_bytes, peak_flops_per_s, path, stamp)
    seconds = follow_fit(hw.gpu, table_gpu, seconds, m, n, k, dtype_bytes, peak_flops_per_s)
    sustained = hw.gpu.sustained_tflops
    if sustained is not None and dtype_bytes == 2:
        seconds = max(seconds, 2.0 * m * n * k / (sustained.value * 1e12))
    result = (seconds, source)
    if len(_times) >= TIMES_KEPT:
        _times.clear()
    _times[key] = (hw.gpu, result)  # the spec itself is kept too, so its id cannot be reused
    return result


def follow_fit(gpu: GpuSpec, table_gpu: GpuSpec, seconds: float, m: int, n: int, k: int, dtype_bytes: int,
               peak_flops_per_s: float) -> float:
    """``seconds`` of an m x n x k GEMM at the tables' own rates (on ``table_gpu``) moved to
    ``gpu``'s: unchanged unless a fit moved them (``GpuSpec.table_rates``; a SOL time is the fitted
    roofline itself). The fitted kernel floor's change is added, and the part above the tables'
    floor scales by the ratio of the roofline's body (launch apart) at the fitted rates to the body
    at the tables' (see the module docstring)."""
    if table_gpu is gpu:
        return seconds
    body = [float(gemm_time_s(g, m, n, k, dtype_bytes, 0.0, peak_flops_per_s)) for g in (gpu, table_gpu)]
    return (seconds + gpu.kernel_launch_s - table_gpu.kernel_launch_s
            + max(seconds - table_gpu.kernel_launch_s, 0.0) * (body[0] / body[1] - 1.0))


def at_table_rate(gpu: GpuSpec) -> GpuSpec:
    """``gpu`` at the rates its measured tables ran at (itself unless a fit moved them:
    ``GpuSpec.table_rates``)."""
    rates = gpu.table_rates
    if rates is None:
        return gpu
    source = f"the rate the measured tables ran at ({rates.source})"
    return gpu.model_copy(update={
        "table_rates": None,
        "gemm_memory_efficiency": Sourced(value=rates.gemm_memory_efficiency, source=source),
        "gemm_compute_efficiency": Sourced(value=rates.gemm_compute_efficiency, source=source),
        "kernel_launch_us": Sourced(value=rates.kernel_launch_us, source=source)})


def _library_gemm_time_s(gpu: GpuSpec, m: int, n: int, k: int, dtype_bytes: int, peak_flops_per_s: float,
                         path: Path | None, stamp: int | None) -> tuple[float, str]:
    """The time and source label of the GEMM on ``gpu`` at its tables' own rate."""
    roofline = float(gemm_time_s(gpu, m, n, k, dtype_bytes, None, peak_flops_per_s))
    if path is None:
        return roofline, SOL
    axes, cube = _grid(path, stamp)
    point = np.log([float(m), float(n), float(k)])
    inside = all(a[0] <= x <= a[-1] for a, x in zip(axes, point))
    if inside:
        return float(np.exp(_interpolate(axes, cube, point))), SILICON
    nearest = np.exp([float(np.clip(x, a[0], a[-1])) for a, x in zip(axes, point)])
    anchor_table = float(np.exp(_interpolate(axes, cube, np.log(nearest))))
    anchor_roofline = float(gemm_time_s(gpu, *nearest, dtype_bytes, None, peak_flops_per_s))
    return roofline * anchor_table / anchor_roofline, HYBRID


def table_time_s(gpu: GpuSpec, path: Path, m: int, n: int, k: int, dtype_bytes: float,
                 peak_flops_per_s: float) -> tuple[float, str]:
    """Seconds of an m x k by k x n GEMM read from the measured table at ``path`` (``SILICON``
    inside its grid; outside, ``HYBRID``: the roofline at ``dtype_bytes`` and ``peak_flops_per_s``
    anchored to the table's nearest point), at the table's own rates."""
    return _library_gemm_time_s(gpu, m, n, k, dtype_bytes, peak_flops_per_s, path, path.stat().st_mtime_ns)
