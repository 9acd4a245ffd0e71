"""A one-row linear lowered to a generated reduction (``single_token_linear: generated``), priced
by the best streaming the profile's measured GEMM table shows for its weight bytes.

gpt-fast compiles its decode step with ``torch._inductor.config.coordinate_descent_tuning = True``,
and Inductor then decomposes an ``aten.mm`` whose first operand has one row into
``(a.unsqueeze(2) * b.unsqueeze(0)).sum(1)``, a generated Triton reduction whose block sizes
coordinate descent tunes for that shape (torch/_inductor/decomposition.py, ``mm``: "Our matrix
vector multiplies only achieve peak bandwidth with coordinate descent tuning"). Such a kernel
streams the n x k weights once, whatever their aspect. A library GEMM's speed at M = 1 depends on
it: in the measured table (AIConfigurator's ``gemm_perf``, cuBLAS under a CUDA graph) M = 1 shapes
with the same weights differ by up to 1.34x (on an H100, n x k = 16384 x 6144 takes 68.0 us,
6144 x 16384 83.0 us, 201 MB each: a tall, narrow shape splits K or leaves SMs idle).

So a generated M = 1 linear costs what the table's fastest M = 1 kernels of its bytes take
(``generated_gemv_time_s``): the rows no row with at least as many weight bytes beats (the lower
envelope of measured time over bytes: the GPU's best measured streaming of that much data, its
kernel floor, ramp-up and tail included as a real kernel of that size pays them), linear in bytes
between two of them, never faster than the weights streamed at the datasheet memory bandwidth (a row
faster than that was served by L2: 52 of the L40S table's 483 M = 1 rows, up to 2.7x its datasheet
864 GB/s, whose weight copies in AIConfigurator's collector loop stay in L2; a decode step's
weights come from device memory), and never more than the library GEMM of its own shape. Past the
table's largest M = 1 weights, where the profile has no table, and in another dtype than the
table's 16 bits, it is the library GEMM (``library_gemm_time_s``). A fitted profile's time follows its fit as
the library's does (``gemm_tables.follow_fit``). Frameworks whose linears are library calls at every
M (``single_token_linear: library``: the eager gpt-fast-flash and gpt-fast-graph, vLLM) never use it.

Checked on the compiled development tables (tests/test_generated_gemv.py): their 41 batch-1 rows
were predicted 7.0% slow (median) with cuBLAS's M = 1 rows, 3.3% with this. The H100 kernel trace
(reports/kernel_trace, measured with calibration/kernel_trace.py, torch 2.11, triton 3.6) shows the decomposition at
batch 1 (every linear a ``triton_red_fused_..._mm_...`` kernel, no cuBLAS) but slower than cuBLAS
there (~1.75 TB/s of Llama-3.1-8B weights a layer against ~2.7 TB/s at batch 4); its PROVENANCE
notes that the development tables' runs (torch of late 2024) imply ~180 us a layer at batch 1
(~2.4 TB/s), where this prices Llama-3.1-8B's TP 1 linears at 2.4-3.0 TB/s: the compiler's version
moves this kernel, and the late-2024 rows are what it is checked against.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from laddersim.costs import gemm_tables
from laddersim.hardware.profile import HardwareProfile


def weight_bytes(n: int, k: int, dtype_bytes: int) -> float:
    """Bytes of a linear's n x k weights, what a one-row linear streams (its k inputs and n
    outputs, under 0.1% of them at the shapes of the tables, are left out: shapes with the same
    weights are one measurement of the same streaming)."""
    return float(dtype_bytes) * float(n) * float(k)


@lru_cache(maxsize=16)
def _envelope(path: Path, _mtime_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """The table's fastest M = 1 rows as (weight bytes ascending, seconds): the rows no row with at
    least as many weight bytes beats, the lower envelope of measured time over bytes (its times
    non-decreasing)."""
    points = gemm_tables.read_points(path)
    one = points[points[:, 0] == 1.0]
    moved = 2.0 * one[:, 1] * one[:, 2]  # the tables' 16-bit weights
    order = np.lexsort((one[:, 3], moved))
    moved, seconds = moved[order], one[order, 3] * 1e-6
    least_from_here = np.minimum.accumulate(seconds[::-1])[::-1]
    corner = seconds <= least_from_here
    corners, first = np.unique(moved[corner], return_index=True)  # one row per size: its fastest
    return corners, seconds[corner][first]


def generated_gemv_time_s(hw: HardwareProfile, n: int, k: int, dtype_bytes: int,
                          peak_flops_per_s: float) -> tuple[float, str]:
    """Seconds of one generated M = 1 reduction over ``n`` x ``k`` weights, and the source label
    (``SILICON``: read from the profile's measured GEMM table; else the library GEMM's label)."""
    library_s, label = gemm_tables.library_gemm_time_s(hw, 1, n, k, dtype_bytes, peak_flops_per_s)
    table = gemm_tables.model_gemm_table(hw)
    if table is None or dtype_bytes != 2 or not hw.base_dir:
        return library_s, label
    path = gemm_tables.table_path(hw.base_dir, table.file)
    sizes, fastest = _envelope(path, path.stat().st_mtime_ns)
    moved = weight_bytes(n, k, dtype_bytes)
    if moved > sizes[-1]:  # more bytes than any M = 1 row: no measured kernel to stand for it
        return library_s, label
    table_s = float(np.interp(moved, sizes, fastest))  # between two of the fastest rows: linear in bytes
    seconds = gemm_tables.follow_fit(hw.gpu, gemm_tables.at_table_rate(hw.gpu), table_s, 1, n, k, dtype_bytes,
                                     peak_flops_per_s)
    # A decode step streams each layer's weights from device memory once: never faster than the
    # datasheet bandwidth, whatever a table row served from L2 shows (the L40S table's small shapes,
    # whose weight copies in the collector's loop stay in L2).
    seconds = max(seconds, moved / hw.gpu.memory_bandwidth_bytes_per_s)
    return min(seconds, library_s), gemm_tables.SILICON
