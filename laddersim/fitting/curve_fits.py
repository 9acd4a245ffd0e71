"""Curve fits behind ``calibrate fit`` and ``profiles fit`` (deterministic).

* ``fit_line_relative``: time = a + b * size by least squares on the *relative* error (weights
  1/time), so the latency floor and the bandwidth slope both count, not just the largest sizes.
* ``fit_ring_tier``: NCCL-style ring alpha-beta (laddersim.costs.collectives.alpha_beta_time_s)
  from per-group-size lines: busbw_g = 2(g-1)/g / b_g; a_g = base + 2(g-1) * step.
* ``fit_roofline``: the GEMM model of laddersim.costs.gemm,
  t = launch + (t_compute^p + t_memory^p)^(1/p), by search over (p, tile_m, launch) with the two
  efficiencies solved in closed form for each: (t - launch)^p = u * C^p + v * M^p is linear in
  u = compute_eff^-p, v = memory_eff^-p. The pick minimises the RMS log error.
* ``fit_protocol_terms``: an AllReduce curve as the minimum over up to 4 protocol lines
  (latency + moved bytes / busbw, as NCCL's tuner picks per size), soft-L1 least squares on
  log(model / measured) from three fixed starting points.
* ``fit_network_rows``: a profile's inter-node parameters (laddersim.costs.nccl_algorithms) to
  multi-node AllReduce rows, bounded soft-L1 least squares on log(model / measured) from the
  profile's values and from them halved and doubled; both a calibration run's network tier
  (``laddersim.fitting.collectives``) and a profile's public tables (``public_tables``) fit with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from laddersim.costs.allreduce import allreduce_time_s
from laddersim.hardware.comm_specs import ProtocolTerm, TierFit
from laddersim.hardware.profile import HardwareProfile
from laddersim.hardware.sourced import Sourced

BLEND_ORDERS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
TILES_M = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0)
EFFICIENCY_BOUNDS = (1e-3, 10.0)  # "peak" may be a measured maximum, so > 1 is possible
# Where the bandwidth is the best a memory kernel achieved (calibrate's memory benchmark, read +
# write bytes), a GEMM moving its operands at more than twice that is no measurement: its memory
# term was not pinned by the points (compute-bound shapes), and the bound keeps a what-if at other
# shapes from streaming weights at 10x anything the machine did (up to 556 GB/s fitted on a CPU
# whose best copy ran 56 GB/s).
MEASURED_BANDWIDTH_EFFICIENCY_MAX = 2.0


def fit_line_relative(x, y) -> tuple[float, float]:
    """(a, b) minimising sum(((a + b x) - y) / y)^2, with a >= 0 and b >= 0."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    w = 1.0 / y
    design = np.column_stack([w, x * w])
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    if a < 0:  # no latency floor to speak of: a line through the origin
        a, b = 0.0, float(np.sum(x / y) / np.sum((x / y) ** 2))
    if b < 0:  # no bandwidth term (flat curve): a constant
        a, b = float(np.sum(1 / y) / np.sum(1 / y**2)), 0.0
    return float(a), float(b)


@dataclass(frozen=True)
class RingTier:
    base_latency_s: float
    step_latency_s: float
    bus_bandwidth_bytes_per_s: float
    per_group: dict  # g -> (a_s, b_s_per_byte, busbw_bytes_per_s)


def fit_ring_tier(curves: dict[int, tuple[np.ndarray, np.ndarray]], busbw_from: int | None = None) -> RingTier:
    """``curves``: group size -> (sizes_bytes, times_s). Busbw from ``busbw_from`` (default the
    largest group), latency split into base + steps by a line through a_g over 2(g-1)."""
    per_group = {}
    for g, (sizes, times) in sorted(curves.items()):
        a, b = fit_line_relative(sizes, times)
        if b <= 0:  # flat (noisy) curve: no slope to read; bound busbw by the largest size's time
            largest = int(np.argmax(sizes))
            b = float(times[largest] / sizes[largest])
            a = 0.0 if a > times.min() else a
        per_group[g] = (a, b, 2.0 * (g - 1) / g / b)
    groups = sorted(per_group)
    steps = np.array([2.0 * (g - 1) for g in groups])
    a_values = np.array([per_group[g][0] for g in groups])
    base, step = float(a_values.mean()), 0.0
    if len(groups) >= 2:
        step, base = (float(v) for v in np.polyfit(steps, a_values, 1))
        if step < 0 or base < 0:  # latency does not grow with the group: constant
            base, step = float(a_values.mean()), 0.0
    else:
        base = float(a_values[0] - 0.0)
    chosen = busbw_from if busbw_from in per_group else groups[-1]
    return RingTier(base, step, per_group[chosen][2], per_group)


@dataclass(frozen=True)
class Roofline:
    compute_efficiency: float
    memory_efficiency: float
    blend_order: float
    tile_m: float
    launch_s: float
    rms_log_error: float


def roofline_time_s(fit: Roofline, m, n, k, dtype_bytes, peak_flops_per_s, bandwidth_bytes_per_s):
    """Same formula as laddersim.costs.gemm.gemm_time_s, on arrays."""
    m, n, k = (np.asarray(v, float) for v in (m, n, k))
    m_padded = np.ceil(m / fit.tile_m) * fit.tile_m
    t_compute = 2.0 * m_padded * n * k / (peak_flops_per_s * fit.compute_efficiency)
    t_memory = dtype_bytes * (m * k + n * k + m * n) / (bandwidth_bytes_per_s * fit.memory_efficiency)
    p = fit.blend_order
    return fit.launch_s + (t_compute**p + t_memory**p) ** (1.0 / p)


def _solve_efficiencies(c0, m0, body, p, root_w=None, memory_max: float = EFFICIENCY_BOUNDS[1]):
    """Efficiencies given the p and the launch-free times ``body`` (relative least squares, each
    row weighted by ``root_w``, the square root of its weight). With the memory efficiency held
    at ``memory_max``, the compute one is solved again for it."""
    root_w = np.ones_like(body) if root_w is None else root_w
    design = np.column_stack([c0**p, m0**p]) / body[:, None] ** p * root_w[:, None]
    (u, v), *_ = np.linalg.lstsq(design, root_w, rcond=None)
    lo, hi = EFFICIENCY_BOUNDS
    me = min(float(np.clip(v ** (-1.0 / p), lo, hi)) if v > 0 else hi, memory_max)
    if me == memory_max and memory_max < hi:  # held at the bound: refit the compute term alone
        rest = root_w - design[:, 1] * me ** (-p)
        u = float(design[:, 0] @ rest / max(design[:, 0] @ design[:, 0], 1e-300))
    ce = np.clip(u ** (-1.0 / p), lo, hi) if u > 0 else hi
    return float(ce), float(me)


def fit_roofline(m, n, k, times_s, dtype_bytes: int, peak_flops_per_s: float,
                 bandwidth_bytes_per_s: float, tiles=TILES_M, orders=BLEND_ORDERS, weights=None,
                 memory_efficiency_max: float = EFFICIENCY_BOUNDS[1]) -> Roofline:
    """The roofline parameters with the least RMS log error over the points, each weighted by
    ``weights`` (default: alike; ``rms_log_error`` is the weighted one), the memory efficiency at
    most ``memory_efficiency_max``."""
    m, n, k, t = (np.asarray(v, float) for v in (m, n, k, times_s))
    w = np.ones_like(t) if weights is None else np.asarray(weights, float)
    w = w / w.sum()
    root_w = np.sqrt(w)
    moved = dtype_bytes * (m * k + n * k + m * n)
    m0 = moved / bandwidth_bytes_per_s  # memory time at efficiency 1
    best = None
    t_min = float(t.min())
    for p in orders:
        for tile in tiles:
            c0 = 2.0 * np.ceil(m / tile) * tile * n * k / peak_flops_per_s
            launches = np.linspace(0.0, 0.98 * t_min, 50)
            for _ in range(5):  # coarse grid, then finer ones around the best launch
                scored = []
                for launch in launches:
                    ce, me = _solve_efficiencies(c0, m0, t - launch, p, root_w, memory_efficiency_max)
                    fit = Roofline(ce, me, p, tile, float(launch), 0.0)
                    pred = roofline_time_s(fit, m, n, k, dtype_bytes, peak_flops_per_s, bandwidth_bytes_per_s)
                    scored.append((float(np.sqrt(np.sum(w * np.log(pred / t) ** 2))), float(launch), ce, me))
                err, launch, ce, me = min(scored)
                step = launches[1] - launches[0]
                launches = np.clip(np.linspace(launch - step, launch + step, 21), 0.0, 0.98 * t_min)
            candidate = Roofline(ce, me, p, tile, launch, err)
            if best is None or err < best.rms_log_error - 1e-12:
                best = candidate
    return best


def bandwidth_efficiency(moved_bytes, times_s, launch_s: float, peak_bytes_per_s: float) -> float:
    """Median of moved / (time - launch) / peak over the points where launch is < 20% of time."""
    moved, t = np.asarray(moved_bytes, float), np.asarray(times_s, float)
    keep = t > 5.0 * launch_s
    if not keep.any():
        keep = t >= t.max()
    achieved = moved[keep] / np.maximum(t[keep] - launch_s, 1e-12)
    return float(np.median(achieved) / peak_bytes_per_s)


PROTOCOL_FIT_MIN_BYTES = 512.0  # fit protocol lines down to here, so the latency floor is right
_INITIAL_BUSBW_GBPS = ((1.0, 20.0, 300.0, 500.0), (5.0, 50.0, 400.0, 450.0), (2.0, 30.0, 150.0, 300.0))


def _curve_us(params: np.ndarray, n: int, size: np.ndarray) -> np.ndarray:
    moved = 2.0 * (n - 1) / n * size
    pairs = np.exp(params).reshape(-1, 2)  # (latency_us, busbw_gbps) per term
    return np.min([lat + moved / (bw * 1e3) for lat, bw in pairs], axis=0)


def fit_protocol_terms(n: int, size_bytes, time_us, terms: int = 4) -> list[tuple[float, float]]:
    """(latency_us, busbw_gbps) per term, sorted by latency; deterministic."""
    size = np.asarray(size_bytes, dtype=float)
    t = np.asarray(time_us, dtype=float)
    best = None
    for start in _INITIAL_BUSBW_GBPS:
        x0 = np.log([[t.min() * (1 + i), start[i]] for i in range(terms)]).ravel()
        res = least_squares(lambda p: np.log(_curve_us(p, n, size) / t), x0, loss="soft_l1", f_scale=0.05)
        if best is None or res.cost < best.cost:
            best = res
    pairs = sorted((float(a), float(b)) for a, b in np.exp(best.x).reshape(-1, 2))
    # Drop terms that never win inside the fitted range (they carry no information).
    grid = np.geomspace(size.min(), size.max(), 200)
    moved = 2.0 * (n - 1) / n * grid
    lines = np.array([lat + moved / (bw * 1e3) for lat, bw in pairs])
    winners = set(np.argmin(lines, axis=0).tolist())
    return [pairs[i] for i in sorted(winners)]


def protocol_tier_fit(gpus: int, size_bytes, time_us, source: str) -> TierFit:
    """``fit_protocol_terms`` as a profile's per-GPU-count fit, terms labelled by protocol."""
    pairs = fit_protocol_terms(gpus, size_bytes, time_us)
    labels = ["ll", "ll128", "simple", "simple-large"][: len(pairs)] if len(pairs) > 1 else ["simple"]
    return TierFit(gpus=gpus, source=source,
                   # 4 significant digits: a noisy CPU table's slow line (< 0.005 GB/s) stays > 0
                   terms=[ProtocolTerm(protocol=lab, latency_us=round(a, 3), bus_bandwidth_gb_per_s=float(f"{b:.4g}"))
                          for lab, (a, b) in zip(labels, pairs)])


def fit_network_rows(profile: HardwareProfile, data: pd.DataFrame, latency: bool, bandwidth: bool) -> dict:
    """The network parameters of ``laddersim.costs.nccl_algorithms`` fitted to multi-node rows
    (columns gpus, nodes, size_bytes, time_us); ``latency``/``bandwidth``: whether the rows can
    pin the small-message (fabric latencies, LL cap) and the large-message (bandwidths) terms."""
    net = profile.network
    rows = list(data[["gpus", "nodes"]].itertuples(index=False, name=None))
    # Only what the rows can pin is fitted (laddersim.costs.nccl_algorithms); the rest keeps the
    # profile's cited values: the fabric's latencies need messages below 1 MiB, the tree's
    # bandwidth a 2-node group of several GPUs per node, the ring's terms and the deep tree's
    # share groups on 3+ nodes. Bounds keep the fitted values physical (a NIC carries at most its
    # datasheet bandwidth; hop latencies 0.1-50 us, 500 for a network hop; a deep tree 0.1-1 of
    # the 2-node tree's bandwidth).
    tier = net.allreduce
    params = {"base_latency_us": (tier.base_latency_us.value, 0.1, 500.0, latency),
              "step_latency_us": (tier.step_latency_us.value, 0.1, 100.0, latency),
              "simple_step_latency_us": ((net.simple_step_latency_us.value if net.simple_step_latency_us
                                          else 2 * tier.step_latency_us.value), 0.1, 500.0,
                                         latency),
              "bus_bandwidth_gb_per_s": (tier.bus_bandwidth_gb_per_s.value, 5.0, net.nic_bandwidth_gb_per_s.value,
                                     # a 2-node tree differs from a ring only with several GPUs per node
                                     bandwidth and ((data["nodes"] == 2) & (data["gpus"] > 2)).any()),
              "ll_max_bus_bandwidth_gb_per_s": ((net.ll_max_bus_bandwidth_gb_per_s.value if net.ll_max_bus_bandwidth_gb_per_s
                                             else 39.0), 0.1, 39.0, latency),
              "ll128_max_bus_bandwidth_gb_per_s": ((net.ll128_max_bus_bandwidth_gb_per_s.value
                                                if net.ll128_max_bus_bandwidth_gb_per_s else 300.0), 1.0, 1e3,
                                               bandwidth and (latency or (data["nodes"] > 2).any())),
              "ring_nic_bus_bandwidth_gb_per_s": ((net.ring_nic_bus_bandwidth_gb_per_s or tier.bus_bandwidth_gb_per_s).value,
                                              1.0, net.nic_bandwidth_gb_per_s.value, bandwidth),
              "ring_net_step_latency_us": (net.ring_net_step_latency_us.value, 0.1, 500.0,
                                           latency or (data["nodes"] > 2).any()),
              "ring_intra_step_latency_us": (net.ring_intra_step_latency_us.value, 0.1, 50.0, (data["nodes"] > 2).any()),
              "tree_deep_bandwidth_share": (net.tree_deep_bandwidth_share.value, 0.1, 1.0,
                                            bandwidth and (data["nodes"] > 2).any())}
    free = [name for name, (_, _, _, fitted) in params.items() if fitted]
    if not free:
        return {**{k: v[0] for k, v in params.items()}, "fitted": "", "rows": len(data), "groups": sorted(set(rows))}

    def with_params(values: dict):
        tier_update = {k: Sourced(value=float(v), source="fit") for k, v in values.items()
                       if k in ("base_latency_us", "step_latency_us", "bus_bandwidth_gb_per_s")}
        net_update = {k: Sourced(value=float(v), source="fit") for k, v in values.items() if k not in tier_update}
        network = net.model_copy(update={**net_update, "allreduce": tier.model_copy(update=tier_update)})
        return profile.model_copy(update={"network": network})

    def values_of(x) -> dict:
        return {**{k: v[0] for k, v in params.items()}, **dict(zip(free, np.exp(x)))}

    def residuals(x):
        prof = with_params(values_of(x))
        out = []
        for (gpus, nodes), grp in data.groupby(["gpus", "nodes"]):
            model = allreduce_time_s(prof, gpus, grp["size_bytes"].to_numpy(), nodes=nodes, measured=False) * 1e6
            out.append(np.log(model / grp["time_us"].to_numpy()))
        return np.concatenate(out)

    low = np.log([params[k][1] for k in free])
    high = np.log([params[k][2] for k in free])
    x0 = np.clip(np.log([max(params[k][0], params[k][1]) for k in free]), low + 1e-9, high - 1e-9)
    # A minimum over protocols is piecewise: start from the profile's values and from them halved
    # and doubled, keep the best (deterministic).
    starts = [x0] + [np.clip(x0 + np.log(f), low + 1e-9, high - 1e-9) for f in (0.5, 2.0)]
    res = min((least_squares(residuals, x, bounds=(low, high), loss="soft_l1", f_scale=0.05) for x in starts),
              key=lambda r: r.cost)
    values = values_of(res.x)
    return {**{k: round(float(v), 3) for k, v in values.items()}, "fitted": ", ".join(free),
            "rows": len(data), "groups": sorted(set(rows))}
