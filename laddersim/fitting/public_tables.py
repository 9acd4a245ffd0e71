"""Fits of profile parameters to the profile's shipped measured tables.

Run as ``laddersim profiles fit NAME``: prints the fitted values as YAML fragments to paste into
the profile; every fitted number's source string names this command. Fits use only the shipped
compact tables (``hardware_profiles/tables``), so they are reproducible from a fresh clone.

* intra-node: per GPU count, the minimum over up to 4 protocol terms (latency + moved bytes / busbw),
  least squares on log(model / measured) with a soft-L1 loss, from three fixed starting points;
* GEMM: compute efficiency, memory efficiency, p-norm blend order and kernel floor of
  ``laddersim.costs.gemm``, same loss, over the rows of the first GEMM table with n, k >= 512;
* network: base and per-step latency and busbw of the inter-node tier, and the per-NIC ring
  busbw, over the multi-node rows of the tables the profile lists without ``expect_miss``.

``fit_shm_transport`` fits the constants of a host-staged SHM ring (``collectives.transport.shm``,
as ``laddersim.costs.transport`` prices it) to the public nccl-tests tables with GPU P2P unavailable
or disabled (``tools/fits/fit_shm_transport.py`` prints it):

* LL hop latency: least squares of ``t(smallest sizes) = NCCL's ring LL base + 2(n-1) hops`` over
  every table's latency floor (its least time at <= 1 KiB);
* LL busbw: per table, the least-squares slope of time against moved bytes ``2(n-1)/n S`` over
  8-128 KiB (LL's regime: below Simple's crossover), the median over the tables;
* Simple busbw of H100: the median busbw of the DGX H100 4-GPU P2P-disabled rows (1-8 GiB).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from laddersim.fitting.curve_fits import PROTOCOL_FIT_MIN_BYTES, fit_network_rows, protocol_tier_fit
from laddersim.costs.gemm import gemm_time_s
from laddersim.costs.nccl_tuning import BASE_LATENCY_US
from laddersim.hardware.comm_specs import TierFit
from laddersim.hardware.profile import HardwareProfile, profiles_dir
from laddersim.hardware.sourced import Sourced
from laddersim.hardware.table_files import read_gemm_table_csv
from laddersim.profiles_check.sources import CHECK_MAX_BYTES

def fit_intra_node(profile: HardwareProfile) -> list[TierFit]:
    fits = []
    for table, frame in profile.allreduce_tables:
        if table.use != "model":
            continue
        for (gpus, nodes), rows in frame.groupby(["gpus", "nodes"]):
            if nodes != 1 or gpus < 2 or any(f.gpus == gpus for f in fits):
                continue
            rows = rows[(rows["size_bytes"] >= PROTOCOL_FIT_MIN_BYTES) & (rows["size_bytes"] <= 2 * CHECK_MAX_BYTES)]
            fits.append(protocol_tier_fit(
                gpus, rows["size_bytes"], rows["time_us"],
                f"fit: laddersim profiles fit {profile.name} -> min of protocol lines fitted to "
                f"{table.file} rows gpus={gpus} nodes=1, {int(rows['size_bytes'].min())} B..."
                f"{int(rows['size_bytes'].max()) >> 20} MiB ({len(rows)} rows; {table.library}, {table.mode})"))
    return sorted(fits, key=lambda f: f.gpus)


GEMM_FIT_MIN_NK = 512  # the shapes the simulator asks about: every Llama projection at TP <= 8
GEMM_FIT_PARAMETERS = ("gemm_compute_efficiency", "gemm_memory_efficiency", "gemm_blend_order", "kernel_launch_us")


def fit_gemm(profile: HardwareProfile) -> dict[str, float]:
    """Fitted GEMM parameters of ``profile.gpu`` against its first GEMM table."""
    gpu = profile.gpu
    table = gpu.gemm_tables[0]
    fitted, _, frame = fit_gemm_rows(gpu, read_gemm_table_csv(profile_path(profile, table.file)))
    return {**fitted, "sustained_tflops": sustained_tflops(frame), "rows": len(frame), "file": table.file}


def fit_gemm_rows(gpu, frame: pd.DataFrame, floor_us: float | None = None) -> tuple[dict[str, float], float, pd.DataFrame]:
    """The roofline's efficiencies, blend order and, unless ``floor_us`` holds it, kernel floor
    (``laddersim.costs.gemm``) fitted to the rows of a GEMM table (``m,n,k,time_us``) with n, k >=
    ``GEMM_FIT_MIN_NK`` (least squares on log(model / measured), soft-L1): the fitted values, the
    rms log error, and the rows used."""
    frame = frame[(frame["n"] >= GEMM_FIT_MIN_NK) & (frame["k"] >= GEMM_FIT_MIN_NK)]
    m, n, k = (frame[c].to_numpy(float) for c in ("m", "n", "k"))
    t = frame["time_us"].to_numpy() * 1e-6
    names = GEMM_FIT_PARAMETERS if floor_us is None else GEMM_FIT_PARAMETERS[:3]
    held = {} if floor_us is None else {"kernel_launch_us": Sourced(value=float(floor_us), source="fit")}

    def residual(p):
        update = {name: Sourced(value=float(v), source="fit") for name, v in zip(names, np.exp(p))}
        return np.log(gemm_time_s(gpu.model_copy(update={**update, **held}), m, n, k, 2) / t)

    res = least_squares(residual, np.log([0.7, 0.8, 3.0, 3.0][:len(names)]), loss="soft_l1", f_scale=0.1)
    digits = {"gemm_compute_efficiency": 3, "gemm_memory_efficiency": 3, "gemm_blend_order": 2, "kernel_launch_us": 2}
    fitted = {name: round(float(v), digits[name]) for name, v in zip(names, np.exp(res.x))}
    return fitted, float(np.sqrt(np.mean(residual(res.x) ** 2))), frame


SUSTAINED_M = 8192  # the table's longest GEMMs: tens of ms of back-to-back work per timed run
SUSTAINED_NK = (4096, 16384)  # the projections of 8B-405B models at TP 1-8


def sustained_tflops(frame: pd.DataFrame) -> float:
    """Median achieved TFLOP/s of the table's largest-m rows with n and k in ``SUSTAINED_NK``: the
    rate at which a long run of compute-bound GEMMs settles (``GpuSpec.sustained_tflops``)."""
    lo, hi = SUSTAINED_NK
    rows = frame[(frame["m"] == SUSTAINED_M) & frame["n"].between(lo, hi) & frame["k"].between(lo, hi)]
    if rows.empty:
        return float("nan")
    flops = 2.0 * rows["m"] * rows["n"] * rows["k"]
    return round(float((flops / (rows["time_us"] * 1e-6)).median() / 1e12), 1)


def fit_network(profile: HardwareProfile) -> dict[str, float] | None:
    """Inter-node tier fitted to the multi-node rows of the profile's expected-to-pass tables."""
    if profile.network is None:
        return None
    rows = []
    for table, frame in profile.allreduce_tables:
        if table.expect_miss:
            continue
        multi = frame[(frame["nodes"] > 1) & (frame["size_bytes"] <= CHECK_MAX_BYTES)]  # the judged window
        rows += [(int(r.gpus), int(r.nodes), float(r.size_bytes), float(r.time_us)) for r in multi.itertuples()]
    if not rows:
        return None
    data = pd.DataFrame(rows, columns=["gpus", "nodes", "size_bytes", "time_us"])
    small = bool((data["size_bytes"] < 1 << 20).any())
    return fit_network_rows(profile, data, latency=small, bandwidth=True)


def profile_path(profile: HardwareProfile, file: str) -> Path:
    return Path(profile.base_dir) / file


# The public SHM tables: the file gathering several hosts' tables (a ``table`` column), then
# tables of one host each.
SHM_TABLES = ("nccltests_shm_p2p_off_public", "nccltests_rtx4090_2gpu_docker", "nccltests_rtx4090_4gpu_docker",
              "nccltests_shm_rtx5090_4gpu")
SHM_H100_TABLE = "dgxh100_4gpu_p2p_disabled"  # the H100 host among them (NCCL_P2P_DISABLE=1, PCIe Gen5)
LL_BASE_US = BASE_LATENCY_US["ring"][0]  # NCCL tuning.cc baseLatencies[Ring][LL], as the SHM ring is priced


def read_shm_tables(tables_dir: Path | None = None) -> pd.DataFrame:
    """The public SHM tables' rows (``table, gpus, size_bytes, time_us, ...``), one ``table`` name
    per host, with ``moved_bytes`` = 2(n-1)/n x size (a ring AllReduce's bytes per GPU)."""
    folder = Path(tables_dir) if tables_dir else profiles_dir() / "tables"
    frame = pd.read_csv(folder / f"{SHM_TABLES[0]}.csv", comment="#")
    for name in SHM_TABLES[1:]:
        extra = pd.read_csv(folder / f"{name}.csv", comment="#")
        frame = pd.concat([frame, extra.assign(table=name.removeprefix("nccltests_"))[frame.columns]], ignore_index=True)
    frame["moved_bytes"] = 2.0 * (frame["gpus"] - 1) / frame["gpus"] * frame["size_bytes"]
    return frame


def fit_shm_transport(frame: pd.DataFrame) -> dict[str, float]:
    """The SHM ring's fitted constants (see the module docstring) from ``read_shm_tables`` rows:
    ``ll_hop_latency_us``, ``ll_bus_bandwidth_gb_per_s``, ``h100_simple_bus_bandwidth_gb_per_s``, and
    beside them each table's LL busbw and each (table, GPUs) latency floor."""
    floors = frame[frame["size_bytes"] <= 1024].groupby(["table", "gpus"])["time_us"].min().reset_index()
    steps = 2.0 * (floors["gpus"] - 1)
    hop = float(((floors["time_us"] - LL_BASE_US) * steps).sum() / (steps ** 2).sum())
    slopes = {}
    for table, part in frame[(frame["size_bytes"] >= 8192) & (frame["size_bytes"] <= 131072)].groupby("table"):
        if len(part) >= 2:
            slope_us_per_byte = np.polyfit(part["moved_bytes"], part["time_us"], 1)[0]
            slopes[table] = 1e-3 / slope_us_per_byte  # GB/s
    h100 = frame[frame["table"] == SHM_H100_TABLE]
    simple = float((h100["moved_bytes"] / h100["time_us"] * 1e-3).median())
    return {"ll_hop_latency_us": hop, "ll_bus_bandwidth_gb_per_s": float(np.median(list(slopes.values()))),
            "h100_simple_bus_bandwidth_gb_per_s": simple,
            **{f"ll_busbw[{t}]": v for t, v in sorted(slopes.items())},
            **{f"floor_us[{t},{g}]": v for t, g, v in floors.itertuples(index=False)}}
