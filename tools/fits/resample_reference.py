"""Rebuild the compact measured tables under ``hardware_profiles/tables/`` from the original
public tables, in the ``reference_data/`` folder that the environment variable ``LADDERSIM_SHARED``
names (``laddersim.profiles_check.sources``: each source's file); ``laddersim profiles report`` uses
the same original rows where LADDERSIM_SHARED is set.

AllReduce and point-to-point send/recv: for every registered source (laddersim.profiles_check.sources) and group shape, one row
per power-of-two size from 512 B to 1 GiB: the median of the original rows whose size is within
5% of it (exact for power-of-two sweeps; a few neighbouring rows for Vidur's 8 KiB grid).
GEMM: for each (n, k) pair, one row per power-of-two m (1 to 8192). Above m = 64 it is the
original rows at that m (duplicates' median). At decode sizes (m <= 64) it is the median of the
original rows with m within a factor sqrt(2) of it (``resample_gemm``). Those rows are bimodal
from one m to the next: in AIConfigurator's vLLM H100 table, n = 16384 and k = 8192 take 88.5,
105.3, 89.7, 89.2, 100.7 and 105.2 us at m = 1 to 6. The two modes are the library's kernel
heuristics or the state of the run, not a property of m, and another library version (the
benchmark being predicted) does not share them. A time that is flat in m while memory-bound is
better taken as the typical value of its neighbourhood than as a single row.

Each file starts with ``#`` lines naming the public origin of the source file (repository @
commit : file, ``laddersim.profiles_check.origins``), the rows taken, the library version and
the timing method. Output is deterministic. Usage: ``python tools/fits/resample_reference.py``.

The NVFP4 GEMM rows are not among the local originals; ``--nvfp4-parquet PATH`` names AIConfigurator's
B200 vLLM 0.24.0 ``gemm_perf.parquet`` (``NVFP4_ORIGIN``, read from that commit, e.g. ``git show
<commit>:<path> > PATH``) and writes only ``aic_gemm_nvfp4_b200_sxm_vllm_0.24.0.csv``, resampled as
the FP8 rows are: ``python tools/fits/resample_reference.py --nvfp4-parquet PATH``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.profiles_check.origins import public_origin
from laddersim.profiles_check.sources import (
    ALLREDUCE_SOURCES, GEMM_SOURCES, QUANTIZED_GEMM_SOURCES, SENDRECV_SOURCES, read_allreduce_source,
    read_gemm_source, read_quantized_gemm_source, reference_data_root,
)

OUT = Path(__file__).resolve().parents[2] / "hardware_profiles" / "tables"
TARGET_SIZES = [2.0**e for e in range(9, 31)]  # 512 B .. 1 GiB
GEMM_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
GEMM_WINDOW_MAX_M = 64  # decode sizes: median over m within a factor sqrt(2)
NVFP4_KEY = "aic_gemm_nvfp4_b200_sxm_vllm_0.24.0"
NVFP4_ORIGIN = ("ai-dynamo/aiconfigurator @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce : "
                "aic-core/src/aiconfigurator_core/systems/data/b200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet (nvfp4, m <= 8192)")
NVFP4_NOTE = ("vllm 0.24.0 NVFP4 GEMM (compressed-tensors W4A4, FP4 weights with an FP8 scale per 16, "
              "FlashInferCuteDslNvFp4LinearKernel for every row, per-16 activation quantization included) under a "
              "CUDA graph, 1 weight copy (collector/vllm/collect_gemm.py at that commit: outside_loop_count 1 for nvfp4)")


def resample_gemm(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (n, k) and power-of-two m (see the module docstring): columns m, n, k, time_us."""
    out = []
    for (n, k), rows in frame.groupby(["n", "k"], sort=True):
        for m in GEMM_M:
            if m <= GEMM_WINDOW_MAX_M:
                near = rows[np.abs(np.log(rows["m"] / m)) <= np.log(2.0) / 2 + 1e-9]
            else:
                near = rows[rows["m"] == m]
            if len(near):
                out.append({"m": m, "n": n, "k": k, "time_us": round(float(near["time_us"].median()), 4)})
    return pd.DataFrame(out, columns=["m", "n", "k", "time_us"])


def resample_allreduce(frame: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (gpus, nodes), rows in frame.groupby(["gpus", "nodes"], sort=True):
        for target in TARGET_SIZES:
            near = rows[np.abs(np.log(rows["size_bytes"] / target)) <= np.log(1.05)]
            if len(near):
                out.append({"gpus": gpus, "nodes": nodes, "size_bytes": int(target),
                            "time_us": round(float(near["time_us"].median()), 4), "source_rows": len(near)})
    return pd.DataFrame(out)


def _write(path: Path, header: list[str], frame: pd.DataFrame) -> None:
    text = "".join(f"# {line}\n" for line in header) + frame.to_csv(index=False, lineterminator="\n")
    path.write_text(text)


def read_nvfp4_parquet(path: Path) -> pd.DataFrame:
    """Rows ``m, n, k, time_us`` of the NVFP4 GEMMs in AIConfigurator's GEMM parquet (m <= 8192)."""
    raw = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
    raw = raw[(raw["gemm_dtype"] == "nvfp4") & (raw["m"] <= GEMM_M[-1])]
    frame = pd.DataFrame({"m": raw["m"].astype(int), "n": raw["n"].astype(int), "k": raw["k"].astype(int),
                          "time_us": raw["latency"] * 1e3})
    return frame.sort_values(["n", "k", "m"], kind="stable").reset_index(drop=True)


def write_nvfp4(path: Path) -> int:
    frame = resample_gemm(read_nvfp4_parquet(path))
    _write(OUT / f"{NVFP4_KEY}.csv", [
        f"source: {NVFP4_ORIGIN}",
        f"rows: gemm_dtype == 'nvfp4', m <= 8192; us = latency*1e3; m in {{{', '.join(map(str, GEMM_M))}}}: up to "
        f"m = {GEMM_WINDOW_MAX_M} the median of the rows with m within a factor sqrt(2), above it the rows at that m",
        f"note: {NVFP4_NOTE}",
        "resampled by tools/fits/resample_reference.py --nvfp4-parquet",
    ], frame)
    print(f"{NVFP4_KEY}: {len(frame)} rows")
    return 0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--nvfp4-parquet":
        return write_nvfp4(Path(sys.argv[2]))
    root = reference_data_root()
    if root is None:
        print("error: no original measurement files: set LADDERSIM_SHARED to the folder holding reference_data/",
              file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    for key, src in {**ALLREDUCE_SOURCES, **SENDRECV_SOURCES}.items():
        compact = resample_allreduce(read_allreduce_source(key, root))
        _write(OUT / f"{key}.csv", [
            f"source: {public_origin(src.path)}",
            f"rows: {src.rows}",
            f"library: {src.library}; mode: {src.mode}; timing: {src.timing}",
            f"note: {src.note}" if src.note else "note: -",
            "resampled by tools/fits/resample_reference.py: per (gpus, nodes), one row per power-of-two size,",
            "median of the original rows within 5% of it (source_rows = how many)",
        ], compact)
        print(f"{key}: {len(compact)} rows")
    for key, src in GEMM_SOURCES.items():
        frame = resample_gemm(read_gemm_source(key, root))
        _write(OUT / f"{key}.csv", [
            f"source: {public_origin(src.path)}",
            f"rows: {src.rows}; m in {{{', '.join(map(str, GEMM_M))}}}: up to m = {GEMM_WINDOW_MAX_M} the median "
            "of the rows with m within a factor sqrt(2) (decode sizes, bimodal from one m to the next), "
            "above it the rows at that m (median of duplicates)",
            f"note: {src.note}",
            "resampled by tools/fits/resample_reference.py",
        ], frame)
        print(f"{key}: {len(frame)} rows")
    for key, src in QUANTIZED_GEMM_SOURCES.items():  # the same resampling of the FP8 rows
        frame = resample_gemm(read_quantized_gemm_source(key, root))
        _write(OUT / f"{key}.csv", [
            f"source: {public_origin(src.path)}",
            f"rows: {src.rows}; m in {{{', '.join(str(m) for m in GEMM_M if m >= src.min_m)}}}: up to m = "
            f"{GEMM_WINDOW_MAX_M} the median of the rows with m within a factor sqrt(2), above it the rows at that m",
            f"note: {src.note}",
            "resampled by tools/fits/resample_reference.py",
        ], frame)
        print(f"{key}: {len(frame)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
