"""Fit the SHM transport constants of ``collectives.transport.shm`` to the public nccl-tests tables
with GPU P2P unavailable or disabled (hardware_profiles/tables/nccltests_shm_p2p_off_public.csv, the
RTX 4090 docker tables and the 4x RTX 5090 table nccltests_shm_rtx5090_4gpu.csv), as
laddersim.costs.transport prices an SHM ring:

* LL hop latency: least squares of ``t(smallest sizes) = 6.6 us (NCCL's ring LL base) + 2(n-1) hop``
  over every table's latency floor (its least time at <= 1 KiB);
* LL busbw: per table, the least-squares slope of time against moved bytes ``2(n-1)/n S`` over
  8-128 KiB (LL's regime: below Simple's crossover), the median over the tables;
* Simple busbw of H100: the median busbw of the DGX H100 4-GPU P2P-disabled rows (1-8 GiB).

    PYTHONPATH=$PWD python tools/fits/fit_shm_transport.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.costs.nccl_tuning import BASE_LATENCY_US

TABLES = Path(__file__).resolve().parents[2] / "hardware_profiles" / "tables"
LL_BASE_US = BASE_LATENCY_US["ring"][0]  # NCCL tuning.cc baseLatencies[Ring][LL], as the SHM ring is priced


def load() -> pd.DataFrame:
    frame = pd.read_csv(TABLES / "nccltests_shm_p2p_off_public.csv", comment="#")
    for name in ("rtx4090_2gpu_docker", "rtx4090_4gpu_docker", "shm_rtx5090_4gpu"):
        extra = pd.read_csv(TABLES / f"nccltests_{name}.csv", comment="#")
        frame = pd.concat([frame, extra.assign(table=name)[frame.columns]], ignore_index=True)
    frame["moved_bytes"] = 2.0 * (frame["gpus"] - 1) / frame["gpus"] * frame["size_bytes"]
    return frame


def fit(frame: pd.DataFrame) -> dict[str, float]:
    floors = frame[frame["size_bytes"] <= 1024].groupby(["table", "gpus"])["time_us"].min().reset_index()
    steps = 2.0 * (floors["gpus"] - 1)
    hop = float(((floors["time_us"] - LL_BASE_US) * steps).sum() / (steps ** 2).sum())
    slopes = {}
    for table, part in frame[(frame["size_bytes"] >= 8192) & (frame["size_bytes"] <= 131072)].groupby("table"):
        if len(part) >= 2:
            slope_us_per_byte = np.polyfit(part["moved_bytes"], part["time_us"], 1)[0]
            slopes[table] = 1e-3 / slope_us_per_byte  # GB/s
    h100 = frame[frame["table"] == "dgxh100_4gpu_p2p_disabled"]
    simple = float((h100["moved_bytes"] / h100["time_us"] * 1e-3).median())
    return {"ll_hop_latency_us": hop, "ll_bus_bandwidth_gbps": float(np.median(list(slopes.values()))),
            "h100_simple_bus_bandwidth_gbps": simple,
            **{f"ll_busbw[{t}]": v for t, v in sorted(slopes.items())},
            **{f"floor_us[{t},{g}]": v for t, g, v in floors.itertuples(index=False)}}


if __name__ == "__main__":
    for name, value in fit(load()).items():
        print(f"{name}: {value:.3f}")
