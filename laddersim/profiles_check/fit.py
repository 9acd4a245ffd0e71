"""Fits of profile parameters to the profile's shipped measured tables.

Run as ``laddersim profiles fit NAME``: prints the fitted values as YAML fragments to paste into
the profile; every fitted number's source string names this command. Fits use only the shipped
compact tables (``hardware_profiles/tables``), so they are reproducible without ../shared.

* intra-node: per GPU count, the minimum over up to 4 protocol terms (latency + moved bytes / busbw),
  least squares on log(model / measured) with a soft-L1 loss, from three fixed starting points;
* GEMM: compute efficiency, memory efficiency, p-norm blend order and kernel floor of
  ``laddersim.costs.gemm``, same loss, over the rows of the first GEMM table with n, k >= 512;
* network: base and per-step latency and busbw of the inter-node tier, and the per-NIC ring
  busbw, over the multi-node rows of the tables the profile lists without ``expect_miss``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from laddersim.calibrate.curve_fits import PROTOCOL_FIT_MIN_BYTES, protocol_tier_fit
from laddersim.costs import collectives
from laddersim.costs.gemm import gemm_time_s
from laddersim.hardware.profile import HardwareProfile, Sourced, TierFit, read_gemm_table_csv
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


def fit_gemm(profile: HardwareProfile) -> dict[str, float]:
    """Fitted GEMM parameters of ``profile.gpu`` against its first GEMM table."""
    gpu = profile.gpu
    table = gpu.gemm_tables[0]
    frame = read_gemm_table_csv(profile_path(profile, table.file))
    # Fit over the shapes the simulator asks about (n, k >= 512: every Llama projection at TP <= 8).
    frame = frame[(frame["n"] >= 512) & (frame["k"] >= 512)]
    m, n, k = (frame[c].to_numpy(float) for c in ("m", "n", "k"))
    t = frame["time_us"].to_numpy() * 1e-6

    def model(p):
        update = {name: Sourced(value=float(v), source="fit") for name, v in
                  zip(("gemm_compute_efficiency", "gemm_memory_efficiency", "gemm_blend_order", "kernel_launch_us"),
                      np.exp(p))}
        return gemm_time_s(gpu.model_copy(update=update), m, n, k, 2)

    x0 = np.log([0.7, 0.8, 3.0, 3.0])
    res = least_squares(lambda p: np.log(model(p) / t), x0, loss="soft_l1", f_scale=0.1)
    ce, me, p, launch = np.exp(res.x)
    return {"gemm_compute_efficiency": round(float(ce), 3), "gemm_memory_efficiency": round(float(me), 3),
            "gemm_blend_order": round(float(p), 2), "kernel_launch_us": round(float(launch), 2),
            "rows": len(frame), "file": table.file}


def fit_network(profile: HardwareProfile) -> dict[str, float] | None:
    """Inter-node tier fitted to the multi-node rows of the profile's expected-to-pass tables."""
    if profile.network is None:
        return None
    rows = []
    for table, frame in profile.allreduce_tables:
        if table.expect_miss:
            continue
        multi = frame[frame["nodes"] > 1]
        rows += [(int(r.gpus), int(r.nodes), float(r.size_bytes), float(r.time_us)) for r in multi.itertuples()]
    if not rows:
        return None
    data = pd.DataFrame(rows, columns=["gpus", "nodes", "size_bytes", "time_us"])
    net = profile.network

    # Without small messages (and with one node-count per GPU count) the tree tier is not
    # identifiable: keep the profile's cited latency and busbw, fit only the flat-ring terms.
    fit_latency = bool((data["size_bytes"] < 1 << 20).any())
    fixed = np.log([net.allreduce.base_latency_us.value, net.allreduce.step_latency_us.value,
                    net.allreduce.bus_bandwidth_gbps.value])

    def with_params(p):
        p = np.asarray(p) if fit_latency else np.concatenate([fixed, p])
        base, step, busbw, ring, net_hop, intra_hop = np.exp(p)
        tier = net.allreduce.model_copy(update={
            "base_latency_us": Sourced(value=float(base), source="fit"),
            "step_latency_us": Sourced(value=float(step), source="fit"),
            "bus_bandwidth_gbps": Sourced(value=float(busbw), source="fit")})
        network = net.model_copy(update={
            "allreduce": tier, "ring_nic_bus_bandwidth_gbps": Sourced(value=float(ring), source="fit"),
            "ring_net_step_latency_us": Sourced(value=float(net_hop), source="fit"),
            "ring_intra_step_latency_us": Sourced(value=float(intra_hop), source="fit")})
        return profile.model_copy(update={"network": network})

    def residuals(p):
        prof = with_params(p)
        out = []
        for (gpus, nodes), grp in data.groupby(["gpus", "nodes"]):
            model = collectives.model_allreduce_s(prof, gpus, nodes, grp["size_bytes"].to_numpy()) * 1e6
            out.append(np.log(model / grp["time_us"].to_numpy()))
        return np.concatenate(out)

    x0 = np.log([10.0, 2.0, 45.0, 45.0, 5.0, 1.0] if fit_latency else [45.0, 5.0, 1.0])
    res = least_squares(residuals, x0, loss="soft_l1", f_scale=0.05)
    base, step, busbw, ring, net_hop, intra_hop = np.exp(res.x if fit_latency else np.concatenate([fixed, res.x]))
    return {"base_latency_us": round(float(base), 2), "step_latency_us": round(float(step), 2),
            "bus_bandwidth_gbps": round(float(busbw), 2), "tree_fitted": fit_latency, "ring_nic_bus_bandwidth_gbps": round(float(ring), 2),
            "ring_net_step_latency_us": round(float(net_hop), 2),
            "ring_intra_step_latency_us": round(float(intra_hop), 2),
            "latency_fitted": fit_latency, "rows": len(data), "groups": sorted({(g, n) for g, n, _, _ in rows})}


def profile_path(profile: HardwareProfile, file: str) -> Path:
    return Path(profile.base_dir) / file
