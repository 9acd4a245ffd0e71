"""A calibration run directory to a hardware profile with provenance (``calibrate fit``).

Writes ``RUN_DIR/profile.yaml`` (validated through ``HardwareProfile``) and the measured
AllReduce medians as ``RUN_DIR/tables/allreduce.csv`` (the project's table format). Every number
says where it came from: fitted to which file of which run by which command, measured directly,
or copied from the base profile (what the run did not measure: network tier of a single-node
run, framework overheads, attention efficiency, datasheet peaks of a different device).
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from laddersim.calibrate.curve_fits import (
    PROTOCOL_FIT_MIN_BYTES,
    bandwidth_efficiency,
    fit_ring_tier,
    fit_roofline,
    protocol_tier_fit,
)
from laddersim.calibrate.environment import library_name, read_manifest
from laddersim.calibrate.fit_host import host_overhead
from laddersim.calibrate.grid import human_bytes
from laddersim.calibrate.monotone import MONOTONE_NOTE, nondecreasing_in_size, shared_cores
from laddersim.calibrate.schema import SCHEMAS
from laddersim.calibrate.plausibility import check_allreduce_bandwidth, check_points
from laddersim.calibrate.store import PointStore, measurement_path
from laddersim.errors import UserInputError
from laddersim.hardware.comm_specs import (
    AlphaBeta,
    CollectiveSpec,
    InterferencePoint,
    InterferenceSpec,
    NetworkSpec,
    TierFit,
)
from laddersim.hardware.compute_specs import FrameworkSpec, GpuSpec, NodeSpec, PEAK_FIELD_BY_DTYPE
from laddersim.hardware.profile import HardwareProfile, load_profile, parse_profile
from laddersim.hardware.sourced import MeasuredTable, Sourced
from laddersim.provenance import laddersim_version, profile_sha256

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "double": 8, "float": 4,
               "half": 2, "int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
               "fp8_e4m3": 1, "fp8_e5m2": 1}
DTYPE_PREFERENCE = ("bfloat16", "float16", "float32", "float64")
MIN_GEMM_POINTS = 4


class _Fit:
    """Shared context: the run, its manifest and rows, the base profile, how to cite them."""

    def __init__(self, run_dir: str, name: str, base: str):
        self.run_dir = run_dir
        self.name = name
        self.manifest = read_manifest(run_dir)
        self.base_name = base
        self.base = load_profile(base)
        self.command = f"laddersim calibrate fit {run_dir} --name {name} --base {base}"
        self.frames = {b: _frame(run_dir, b) for b in SCHEMAS}
        check_allreduce_bandwidth(self.frames["allreduce"].to_dict("records"),
                                  measurement_path(run_dir, "allreduce"), self.base)
        self.is_cuda = self.manifest.get("device") == "cuda"
        self.library = library_name(self.manifest)

    def cite(self, benchmark: str, detail: str) -> str:
        return (f"fit: calibration run {self.run_dir} measurements/{benchmark}.csv, {detail}; "
                f"`{self.command}`")

    def copied(self, value: Sourced, what: str = "") -> Sourced:
        """``value`` of the base profile; ``what`` is " (why)" or empty (see ``copied_reason``)."""
        return Sourced(value=value.value, source=f"{COPIED_PREFIX}{self.base_name}{what}: {value.source}")


COPIED_PREFIX = "copied from base profile "


def copied_reason(value: Sourced, base: str) -> str | None:
    """Why a fit copied ``value`` from base profile ``base`` (the "(why)" of its source, else
    "not measured"), or None when the value was measured or fitted."""
    prefix = f"{COPIED_PREFIX}{base}"
    if not value.source.startswith(prefix + " (") and not value.source.startswith(prefix + ":"):
        return None
    rest = value.source[len(prefix):]
    return rest[2:].split("):", 1)[0] if rest.startswith(" (") else "not measured"


# Warnings from reading the run (a cut-short last line): printed once the fit has succeeded, so a
# fit that then fails prints its one error line alone.
_READ_WARNINGS: list[str] = []


def _frame(run_dir: str, benchmark: str) -> pd.DataFrame:
    store = PointStore(measurement_path(run_dir, benchmark), SCHEMAS[benchmark],
                       warn=lambda message: _READ_WARNINGS.append(
                           message.replace("and its point will be measured again", "and not fitted")))
    rows = store.load(repair=False)
    check_points(rows, measurement_path(run_dir, benchmark), read_manifest(run_dir).get("backend"))
    return pd.DataFrame(rows, columns=list(SCHEMAS[benchmark].columns))


def _pick_dtype(dtypes, preferred: str | None = None) -> str:
    present = list(dict.fromkeys(dtypes))
    for dtype in ((preferred,) if preferred else ()) + DTYPE_PREFERENCE:
        if dtype in present:
            return dtype
    return sorted(present)[0]


# ---- AllReduce -------------------------------------------------------------------------------

def allreduce_table(frame: pd.DataFrame, mode: str, preferred_dtype: str | None) -> pd.DataFrame:
    """gpus, nodes, size_bytes, time_us, dtype: one dtype per group shape (preferred first)."""
    rows = frame[frame["mode"] == mode]
    parts = []
    for (g, nodes), shape in rows.groupby(["group_size", "nodes"], sort=True):
        dtype = _pick_dtype(shape["dtype"], preferred_dtype)
        chosen = shape[shape["dtype"] == dtype].sort_values("size_bytes")
        parts.append(pd.DataFrame({"gpus": g, "nodes": nodes, "size_bytes": chosen["size_bytes"],
                                   "time_us": chosen["time_us"], "dtype": dtype}))
    if not parts:
        return pd.DataFrame(columns=["gpus", "nodes", "size_bytes", "time_us", "dtype"])
    return pd.concat(parts, ignore_index=True)


def _write_table(fit: _Fit, table: pd.DataFrame, mode: str, timing: str, path: Path) -> str:
    reps = fit.frames["allreduce"]["reps"]
    stat = "/".join(sorted(set(fit.frames["allreduce"]["stat"])))
    date = fit.manifest.get("date_utc", "unknown date")
    shapes = ", ".join(f"{g} ranks x {n} node(s) {d}" for (g, n, d), _ in
                       table.groupby(["gpus", "nodes", "dtype"], sort=True))
    header = [
        f"# AllReduce time per call ({stat} over {int(reps.min())}-{int(reps.max())} timed calls"
        f"{MONOTONE_NOTE if shared_cores(fit.manifest) else ''}), {mode}/{timing}",
        f"# source: calibration run {fit.run_dir} measurements/allreduce.csv ({fit.library}, "
        f"{fit.manifest.get('device_name', '?')}, {date})",
        f"# run command: {fit.manifest.get('command_line', '?')}",
        f"# rows: {shapes}",
        f"# written by: {fit.command}",
    ]
    body = table[["gpus", "nodes", "size_bytes", "time_us"]].to_csv(index=False, lineterminator="\n",
                                                                    float_format="%.6g")
    _atomic_write(path, "\n".join(header) + "\n" + body)
    return f"calibration run {fit.run_dir}: {shapes}; {fit.library}, {mode}, timing {timing}"


# A per-GPU-count protocol fit needs a curve from the latency floor to the bandwidth regime.
FIT_MIN_ROWS = 6
FIT_SPAN_BYTES = (4 * 1024, 1 << 20)  # smallest size at most, largest size at least


def _intra_fits(fit: _Fit, table: pd.DataFrame, mode: str) -> list[TierFit]:
    """Per single-node GPU count with a full curve: the minimum of protocol lines (what the
    shipped profiles carry), which follows NCCL's protocol switches where one ring line cannot.
    The simulator reads the measured table itself for that GPU count; the fit serves the
    intra-node part of a multi-node AllReduce and ``profiles check``'s model column."""
    fits = []
    for gpus, rows in table[table["nodes"] == 1].groupby("gpus"):
        rows = rows[rows["size_bytes"] >= PROTOCOL_FIT_MIN_BYTES]
        if gpus < 2 or len(rows) < FIT_MIN_ROWS or rows["size_bytes"].min() > FIT_SPAN_BYTES[0] \
                or rows["size_bytes"].max() < FIT_SPAN_BYTES[1]:
            continue
        fits.append(protocol_tier_fit(
            int(gpus), rows["size_bytes"], rows["time_us"],
            fit.cite("allreduce", f"min of protocol lines fitted to gpus={int(gpus)} nodes=1, "
                                  f"{int(rows['size_bytes'].min())}-{int(rows['size_bytes'].max())} B "
                                  f"({len(rows)} rows, {mode})")))
    return fits


def _intra_tier(fit: _Fit, table: pd.DataFrame, mode: str) -> AlphaBeta:
    single = table[table["nodes"] == 1]
    curves = {int(g): (rows["size_bytes"].to_numpy(float), rows["time_us"].to_numpy(float) * 1e-6)
              for g, rows in single.groupby("gpus") if len(rows) >= 2}
    base_tier = fit.base.collectives.intra_node
    if not curves:
        why = " (no single-node AllReduce measured)"
        return AlphaBeta(algorithm=base_tier.algorithm,
                         base_latency_us=fit.copied(base_tier.base_latency_us, why),
                         step_latency_us=fit.copied(base_tier.step_latency_us, why),
                         bus_bandwidth_gbps=fit.copied(base_tier.bus_bandwidth_gbps, why),
                         fixed_steps=base_tier.fixed_steps)
    ring = fit_ring_tier(curves)
    groups = sorted(curves)
    sizes = single["size_bytes"]
    what = (f"ring alpha-beta, least squares on time = a + b*size (relative error) per group size "
            f"g={groups[0]}..{groups[-1]}, sizes {int(sizes.min())}-{int(sizes.max())} B, {mode}, "
            f"{single['dtype'].iloc[0]}")
    per_g = "; ".join(f"g={g}: a={v[0] * 1e6:.2f} us, busbw={v[2] / 1e9:.3f} GB/s"
                      for g, v in ring.per_group.items())
    return AlphaBeta(
        algorithm="ring",
        base_latency_us=Sourced(value=ring.base_latency_s * 1e6,
                                source=fit.cite("allreduce", f"{what}: base = a_g at 2(g-1) = 0 ({per_g})")),
        step_latency_us=Sourced(value=ring.step_latency_s * 1e6,
                                source=fit.cite("allreduce", f"{what}: slope of a_g over 2(g-1) steps"
                                                + (" (one group size: 0)" if len(groups) == 1 else ""))),
        bus_bandwidth_gbps=Sourced(value=ring.bus_bandwidth_bytes_per_s / 1e9,
                                   source=fit.cite("allreduce", f"{what}: 2(g-1)/g / b at g={groups[-1]}")),
    )


# An import keeps the base profile's small-message model without a message at most this large,
# and its large-message model without one at least LARGE_MESSAGE_BYTES (issue 17).
SMALL_MESSAGE_BYTES = 64 * 1024
LARGE_MESSAGE_BYTES = 64 * 1024 * 1024


def extrapolation_warning(sizes_bytes) -> str | None:
    """One warning line naming the message sizes a multi-node fit could not measure, or None."""
    sizes = np.asarray(sizes_bytes, dtype=float)
    missing = []
    if not (sizes <= SMALL_MESSAGE_BYTES).any():
        missing.append(f"none <= {human_bytes(SMALL_MESSAGE_BYTES)} (smallest {human_bytes(sizes.min())}): "
                       "fabric latencies and LL cap kept from the base profile")
    if not (sizes >= LARGE_MESSAGE_BYTES).any():
        missing.append(f"none >= {human_bytes(LARGE_MESSAGE_BYTES)} (largest {human_bytes(sizes.max())}): "
                       "network bandwidths kept from the base profile")
    return ("warning: multi-node AllReduce sizes: " + "; ".join(missing)) if missing else None


def _network(fit: _Fit, table: pd.DataFrame, intra: AlphaBeta, gpus_per_node: int) -> NetworkSpec | None:
    """The base profile's network (NCCL algorithm model, laddersim.costs.nccl_algorithms) with what
    the multi-node rows measure refitted: the fabric's latencies only from messages <= 64 KiB, its
    bandwidths only from messages >= 64 MiB; the rest stays the base's, re-sourced as copied."""
    base_net = fit.base.network
    multi = table[(table["nodes"] > 1) & (table["gpus"] == table["nodes"] * gpus_per_node)]
    why = " (only one node measured)" if multi.empty else " (not measured by this run)"
    if base_net is None:
        if multi.empty:
            return None
        raise UserInputError(f"base: {fit.base_name} has no network to refit to the multi-node rows of "
                             f"{fit.run_dir}; allowed: a base profile with a network (e.g. h100-sxm-nvswitch)")
    tier = base_net.allreduce.model_copy(update={
        f: fit.copied(getattr(base_net.allreduce, f), why)
        for f in ("base_latency_us", "step_latency_us", "bus_bandwidth_gbps")})
    copied = base_net.model_copy(update={
        **{f: fit.copied(v, why) for f, v in base_net if isinstance(v, Sourced)}, "allreduce": tier})
    if multi.empty:
        return copied
    from laddersim.profiles_check.fit import fit_network_rows

    sizes = multi["size_bytes"].to_numpy(float)
    latency, bandwidth = bool((sizes <= SMALL_MESSAGE_BYTES).any()), bool((sizes >= LARGE_MESSAGE_BYTES).any())
    probe = fit.base.model_copy(update={"network": copied, "collectives": fit.base.collectives.model_copy(
        update={"intra_node": intra, "tables": []})})
    values = fit_network_rows(probe, multi[["gpus", "nodes", "size_bytes", "time_us"]], latency, bandwidth)
    fitted = [name for name in values["fitted"].split(", ") if name]
    what = (f"NCCL algorithm model (laddersim.costs.nccl_algorithms) fitted to {len(multi)} multi-node rows "
            f"({', '.join(sorted({f'{g}x{n}' for g, n in values['groups']}))}): {', '.join(fitted) or 'nothing'}")
    cite = {name: Sourced(value=round(float(values[name]), 4), source=fit.cite("allreduce", what)) for name in fitted}
    tier_fields = ("base_latency_us", "step_latency_us", "bus_bandwidth_gbps")
    return copied.model_copy(update={
        **{k: v for k, v in cite.items() if k not in tier_fields},
        "allreduce": tier.model_copy(update={k: v for k, v in cite.items() if k in tier_fields})})


def _timing(fit: _Fit, mode: str) -> str:
    """How the run timed its AllReduce points of ``mode`` (``MeasuredTable.timing``).

    ``calibrate run`` (calibration/allreduce_bench.py) times an eager point as one call after a
    barrier with CUDA events around it, so the host launch is inside (``single``); a graph point
    is a replay of back-to-back captured calls (``loop``). nccl-tests times ``iters`` back-to-back
    calls, eager or graph, each launch overlapping the previous collective (``loop``).
    """
    if mode == "graph" or fit.manifest.get("source") == "nccl-tests":
        return "loop"
    return "single"


def _collectives(fit: _Fit, tables_dir: Path) -> tuple[CollectiveSpec, pd.DataFrame, str]:
    """(collectives, primary table, the measured mode it was taken from)."""
    frame = fit.frames["allreduce"]
    base = fit.base.collectives
    measured_modes = set(frame["mode"])
    primary = "graph" if "graph" in measured_modes else "eager"
    preferred = _compute_dtype(fit)
    tables: list[MeasuredTable] = []
    primary_table = allreduce_table(frame, primary, preferred)
    # The simulated regime's table is allreduce.csv; a GPU run's eager table rides along.
    files = [(primary, "allreduce.csv")] + ([("eager", "allreduce_eager.csv")]
                                            if primary == "graph" and "eager" in measured_modes else [])
    for mode, file in files:
        table = allreduce_table(frame, mode, preferred)
        if table.empty:
            continue
        if shared_cores(fit.manifest):  # the table the engine reads; the tier fit keeps the points
            table = nondecreasing_in_size(table, ("gpus", "nodes", "dtype"))
        timing = _timing(fit, mode)
        what = _write_table(fit, table, mode, timing, tables_dir / file)
        tables.append(MeasuredTable(file=f"tables/{file}", source=what, mode=mode, library=fit.library,
                                    timing=timing))
    # The regime simulated is the one the primary table was timed in: a single eager call pays
    # the host launch (eager); a graph replay or a back-to-back loop hides it, as compiled
    # (CUDA-graph) decode does (graph, like every shipped profile with nccl-tests tables). So the
    # table is simulated as measured, with no eager_launch_us added or removed.
    regime = "eager" if _timing(fit, primary) == "single" else "graph"
    intra = _intra_tier(fit, primary_table, primary)
    eager_launch = fit.copied(base.eager_launch_us)
    if measured_modes >= {"eager", "graph"} and _timing(fit, "eager") == "single":
        # eager minus graph is the launch only when the eager point is a single timed call.
        eager = allreduce_table(frame, "eager", preferred)
        merged = primary_table.merge(eager, on=["gpus", "nodes", "size_bytes"], suffixes=("_g", "_e"))
        small = merged[merged["size_bytes"] <= 64 * 1024]
        if not small.empty:
            eager_launch = Sourced(
                value=max(0.0, float(np.median(small["time_us_e"] - small["time_us_g"]))),
                source=fit.cite("allreduce", f"median of eager minus graph time at {len(small)} points <= 64 KiB"))
    spec = CollectiveSpec(mode=regime, eager_launch_us=eager_launch, intra_node=intra, tables=tables,
                          intra_node_fits=_intra_fits(fit, primary_table, primary),
                          # NVLS needs an NVSwitch; a CPU (gloo) run's nominal fabric is pcie
                          algorithms=[a for a in base.algorithms if fit.is_cuda or a not in ("nvls", "nvls_tree")])
    return spec, primary_table, primary


# ---- GEMM, memory, interference --------------------------------------------------------------

def _compute_dtype(fit: _Fit) -> str | None:
    gemm = fit.frames["gemm"]
    return _pick_dtype(gemm["dtype"]) if not gemm.empty else None


def _primary_rows(frame: pd.DataFrame, dtype: str | None) -> pd.DataFrame:
    if frame.empty:
        return frame
    mode = "graph" if "graph" in set(frame["mode"]) else "eager"
    rows = frame[frame["mode"] == mode]
    return rows[rows["dtype"] == (dtype or _pick_dtype(rows["dtype"]))]


def _gpu(fit: _Fit) -> GpuSpec:
    base = fit.base.gpu
    m = fit.manifest
    dtype = _compute_dtype(fit)
    gemm = _primary_rows(fit.frames["gemm"], dtype)
    memory = _primary_rows(fit.frames["memory"], dtype)
    same_device = fit.is_cuda and _same_device(m.get("device_name", ""), base.name)
    device_name = m.get("device_name") or base.name
    if fit.manifest.get("source") == "nccl-tests":
        same_device = True  # only collectives were measured; the whole GPU comes from the base
    if same_device or gemm.empty:
        peak = fit.copied(base.peak_tflops, "" if same_device else " (no GEMM measured)")
    else:
        best = gemm.loc[gemm["tflops"].idxmax()]
        peak = Sourced(value=float(best["tflops"]), source=fit.cite(
            "gemm", f"best measured GEMM rate (m={best['m']} n={best['n']} k={best['k']}, {dtype}, "
                    f"{best['mode']}), used as the peak because {device_name} has no datasheet entry here"))
    if same_device or memory.empty:
        bandwidth = fit.copied(base.memory_bandwidth_gbps, "" if same_device else " (no memory kernels measured)")
    else:
        best = memory.loc[memory["gbps"].idxmax()]
        bandwidth = Sourced(value=float(best["gbps"]), source=fit.cite(
            "memory", f"best achieved bandwidth ({best['kernel']} {best['size_bytes']} B, {best['mode']}), "
                      "used as the peak"))
    if fit.is_cuda and m.get("device_memory_bytes"):
        memory_gb = Sourced(value=m["device_memory_bytes"] / 1e9,
                            source=f"measured: torch.cuda.get_device_properties total_memory, run {fit.run_dir}")
    elif not fit.is_cuda and m.get("memory_total_bytes"):
        per_rank = m["memory_total_bytes"] / max(1, m.get("ranks_per_node", 1)) / 1e9
        memory_gb = Sourced(value=per_rank, source=f"measured: /proc/meminfo MemTotal / {m.get('ranks_per_node', 1)} "
                                                   f"ranks per node, run {fit.run_dir}")
    else:
        memory_gb = fit.copied(base.memory_gb)
    # The other dtypes' peaks: the base's datasheet values for the same device; for another device
    # only the measured dtype's (its best GEMM rate, as for peak_tflops).
    other_fields = ("peak_tflops_fp8", "peak_tflops_fp32")
    other_peaks = {}
    if same_device or gemm.empty:
        other_peaks = {f: fit.copied(getattr(base, f)) for f in other_fields if getattr(base, f) is not None}
    elif PEAK_FIELD_BY_DTYPE.get(dtype) in other_fields:
        other_peaks = {PEAK_FIELD_BY_DTYPE[dtype]: peak}
    fields = dict(
        name=device_name, peak_tflops=peak, memory_bandwidth_gbps=bandwidth, memory_gb=memory_gb, **other_peaks,
        attention_compute_efficiency=fit.copied(base.attention_compute_efficiency, " (not measured)"),
        usable_memory_fraction=fit.copied(base.usable_memory_fraction),
    )
    # The model's own GEMMs, where calibrate measured enough of them, are what the simulated runs
    # run: the roofline is fitted to those (a roofline fitted to a generic grid too is off by tens
    # of percent at the model's decode shapes on a CPU, whose caches it cannot represent).
    model_gemm = gemm[gemm["origin"].fillna("generic") != "generic"] if "origin" in gemm else gemm.iloc[:0]
    fitted = model_gemm if len(model_gemm) >= MIN_GEMM_POINTS else gemm
    which = "the model's " if fitted is model_gemm else ""  # "fitted to the model's 10 GEMMs"
    if len(fitted) >= MIN_GEMM_POINTS:
        times_s = fitted["time_us"].to_numpy(float) * 1e-6
        # The model's GEMMs weigh as the time they take (a step's error in seconds is the LM
        # head's, not the small projections'); a generic grid's alike.
        roof = fit_roofline(fitted["m"], fitted["n"], fitted["k"], times_s, DTYPE_BYTES[dtype],
                            peak.value * 1e12, bandwidth.value * 1e9, weights=times_s if which else None)
        what = (f"roofline t = launch + (t_compute^p + t_memory^p)^(1/p) (laddersim.costs.gemm) fitted "
                f"to {which}{len(fitted)} GEMMs ({dtype}, {fitted['mode'].iloc[0]}"
                f"{', each weighted by its time' if which else ''}) against peak "
                f"{peak.value:.4g} TFLOP/s, {bandwidth.value:.4g} GB/s; RMS log error "
                f"{roof.rms_log_error:.3f}")
        fields.update(
            gemm_compute_efficiency=Sourced(value=roof.compute_efficiency, source=fit.cite("gemm", what)),
            gemm_memory_efficiency=Sourced(value=roof.memory_efficiency, source=fit.cite("gemm", what)),
            gemm_blend_order=Sourced(value=roof.blend_order, source=fit.cite("gemm", what)),
            gemm_tile_m=Sourced(value=roof.tile_m, source=fit.cite("gemm", what)),
            kernel_launch_us=Sourced(value=roof.launch_s * 1e6, source=fit.cite("gemm", f"{what}: launch term")))
    else:
        why = f" (fewer than {MIN_GEMM_POINTS} GEMMs measured)"
        fields.update(gemm_compute_efficiency=fit.copied(base.gemm_compute_efficiency, why),
                      gemm_memory_efficiency=fit.copied(base.gemm_memory_efficiency, why),
                      gemm_blend_order=fit.copied(base.gemm_blend_order, why),
                      gemm_tile_m=fit.copied(base.gemm_tile_m, why),
                      kernel_launch_us=fit.copied(base.kernel_launch_us, why))
    if not memory.empty:
        launch_s = fields["kernel_launch_us"].value * 1e-6
        eff = bandwidth_efficiency(memory["moved_bytes"], memory["time_us"].to_numpy(float) * 1e-6,
                                   launch_s, bandwidth.value * 1e9)
        kernels = ",".join(sorted(set(memory["kernel"])))
        fields["elementwise_memory_efficiency"] = Sourced(value=eff, source=fit.cite(
            "memory", f"median achieved bandwidth of {kernels} over points longer than 5x the kernel "
                      f"floor, / {bandwidth.value:.4g} GB/s"))
    else:
        fields["elementwise_memory_efficiency"] = fit.copied(base.elementwise_memory_efficiency, " (not measured)")
    return GpuSpec(**fields)


def _same_device(measured: str, base_name: str) -> bool:
    """Datasheet peaks of the base apply when its model number (H100, A100...) is in the name."""
    tokens = [t for t in base_name.replace("(", " ").replace(")", " ").split()
              if any(c.isdigit() for c in t) and any(c.isalpha() for c in t) and not t.endswith("GB")]
    return bool(tokens) and tokens[0].lower() in measured.lower()


def _interference(fit: _Fit) -> InterferenceSpec:
    rows = fit.frames["interference"]
    base = fit.base.interference
    if rows.empty:  # the base's fractions are the full-size ones of its channel rule: copy both
        return InterferenceSpec(compute_slowdown=fit.copied(base.compute_slowdown, " (not measured)"),
                                comm_slowdown=fit.copied(base.comm_slowdown, " (not measured)"),
                                comm_slowdown_part=base.comm_slowdown_part,
                                **_base_channel_rule(fit, " (not measured)"))
    points = ", ".join(f"{r.size_bytes} B with m={r.m} n={r.n} k={r.k}" for r in rows.itertuples())
    what = (f"median over {len(rows)} points ({points}), a median below 0 held at 0 (calibrate fit warns: "
            "a measurement problem)")
    by_size = []
    sizes = sorted(set(int(v) for v in rows["size_bytes"]))
    if len(sizes) > 1:
        for size in sizes:
            at = rows[rows["size_bytes"] == size]
            by_size.append(InterferencePoint(
                size_bytes=size,
                compute_slowdown=max(0.0, float(at["compute_slowdown"].median())),
                comm_slowdown=max(0.0, float(at["comm_slowdown"].median())),
                source=fit.cite("interference", f"median over the {len(at)} computes at {size} B; below 0 held "
                                                 "at 0 (calibrate fit warns)")))
    compute = max(0.0, float(rows["compute_slowdown"].median()))
    rule: dict = {}
    if not by_size and fit.is_cuda and base.collective_channels is not None:
        # One size measured on GPUs: NCCL's channel rule (the base's channel count) carries it to
        # the other sizes; the measured fraction is that of the channels its message got.
        ranks = int(rows["group_size"].median())
        share = base.channel_share(sizes[0], ranks)
        compute /= share
        what += f"; / {share:g}, the channel share of {sizes[0]} B on {ranks} ranks"
        rule = _base_channel_rule(fit, " (NCCL's channel rule, interference measured at one size)")
    return InterferenceSpec(
        compute_slowdown=Sourced(value=compute,
                                 source=fit.cite("interference", f"GEMM slowdown during AllReduce, {what}")),
        comm_slowdown=Sourced(value=max(0.0, float(rows["comm_slowdown"].median())),
                              source=fit.cite("interference", f"AllReduce slowdown during GEMMs, {what}")),
        by_size=by_size, **rule)


def _base_channel_rule(fit: _Fit, why: str) -> dict:
    """The base profile's NCCL channel rule as ``InterferenceSpec`` fields copied with ``why``
    (none when the base has no rule)."""
    base = fit.base.interference
    if base.collective_channels is None:
        return {}
    return {"collective_channels": fit.copied(base.collective_channels, why),
            "channel_bytes_per_rank": fit.copied(base.channel_bytes_per_rank, why)}


# ---- noisy tables ------------------------------------------------------------------------------

# A time this much below the slowest smaller size of the same curve is noise, not the hardware.
NOISY_DROP_FRACTION = 0.2
# Curves with a size axis: benchmark -> the key columns of one curve (time should grow with size).
SIZE_CURVES = {"allreduce": ("group_size", "nodes", "dtype", "mode"), "memory": ("kernel", "dtype", "mode")}


def size_decreases(sizes_bytes, times_us, drop: float = NOISY_DROP_FRACTION) -> list[tuple[int, float, int, float]]:
    """(size, time, peak size, peak time): for each running peak of the curve (a time above every
    smaller size's), its deepest later point more than ``drop`` (a fraction) below it, in size
    order. One slow outlier is one entry, not one per point after it."""
    out, peak, deepest = [], None, None
    for size, time_us in sorted(zip(sizes_bytes, times_us)):
        if peak is None or time_us > peak[1]:
            out += [deepest] if deepest else []
            peak, deepest = (int(size), float(time_us)), None
        elif time_us < (1 - drop) * peak[1] and (deepest is None or time_us < deepest[1]):
            deepest = (int(size), float(time_us), *peak)
    return out + ([deepest] if deepest else [])


def _rerun_hint(manifest: dict) -> str:
    if manifest.get("source") == "nccl-tests":
        return "re-run all_reduce_perf with more iterations (-n) and import again"
    quick = (manifest.get("options") or {}).get("quick")
    return ("re-run into a new --out " + ("without --quick or " if quick else "") + "with more --repeats "
            "(the same --out only measures missing points)")


def noisy_table_warnings(run_dir: str) -> list[str]:
    """One line per measured curve (AllReduce per group/dtype/mode, memory kernel per dtype/mode)
    whose time falls with size by more than NOISY_DROP_FRACTION: the measurements are kept as they
    are, but such a table is noise more than hardware."""
    manifest, lines = read_manifest(run_dir), []
    for benchmark, keys in SIZE_CURVES.items():
        frame = _frame(run_dir, benchmark)
        for key, curve in frame.groupby(list(keys), sort=True):
            drops = size_decreases(curve["size_bytes"], curve["time_us"])
            if not drops:
                continue
            size, time_us, smaller, smaller_us = max(drops, key=lambda d: 1 - d[1] / d[3])
            what = ", ".join(f"{c}={v}" for c, v in zip(keys, key))
            more = f" (and {len(drops) - 1} more such drop(s))" if len(drops) > 1 else ""
            lines.append(f"warning: measurements/{benchmark}.csv ({what}): {human_bytes(size)} took "
                         f"{time_us:.4g} us, {1 - time_us / smaller_us:.0%} less than {human_bytes(smaller)} "
                         f"({smaller_us:.4g} us){more}; times should grow with size, this table is noisy: "
                         f"{_rerun_hint(manifest)}")
    allreduce = _frame(run_dir, "allreduce")
    multi = allreduce[allreduce["nodes"] > 1] if not allreduce.empty else allreduce
    warning = extrapolation_warning(multi["size_bytes"]) if not multi.empty else None
    return lines + ([warning] if warning else [])


# ---- the profile ------------------------------------------------------------------------------

def build_profile(run_dir: str, name: str, base: str) -> HardwareProfile:
    fit = _Fit(run_dir, name, base)
    m = fit.manifest
    if all(frame.empty for frame in fit.frames.values()):
        raise UserInputError(f"fit: {run_dir} has no measured points yet; run `laddersim calibrate run --out {run_dir}`")
    collectives, primary, _ = _collectives(fit, Path(run_dir) / "tables")
    gpus_per_node = int(m.get("ranks_per_node") or fit.base.node.gpus_per_node)
    if fit.is_cuda:
        node = NodeSpec(gpus_per_node=gpus_per_node, fabric=fit.base.node.fabric,
                        description=f"{gpus_per_node} x {m.get('device_name', '?')} per node; fabric "
                                    f"copied from base profile {base}")
    else:
        node = NodeSpec(gpus_per_node=gpus_per_node, fabric="pcie",
                        description=f"{gpus_per_node} CPU ranks ({m.get('threads_per_rank', '?')} threads each) "
                                    f"on {', '.join(m.get('hosts', [m.get('host', '?')]))}, gloo over TCP "
                                    "loopback; fabric 'pcie' is nominal (the schema has no CPU fabric)")
    host = host_overhead(fit)
    raw = HardwareProfile(
        name=name,
        description=f"calibrated from {run_dir}: {m.get('device_name', '?')}, {m.get('world_size', '?')} ranks "
                    f"x {m.get('nodes', 1)} node(s), {fit.library}",
        measured=True,
        gpu=_gpu(fit),
        node=node,
        network=_network(fit, primary, collectives.intra_node, gpus_per_node),
        collectives=collectives,
        interference=_interference(fit),
        framework=_framework(fit, host),
        host_overhead=host,
        provenance=_provenance(fit),
    )
    return raw


def _framework(fit: _Fit, host) -> FrameworkSpec:
    """The base's fixed framework costs, or, with the host overhead measured (an eager run),
    zero for those its per-op costs and op counts already hold (the step loop, sampling, the
    collective's issue; an eager collective is in place, no input copy)."""
    base = fit.base.framework
    fields = ("step_overhead_us", "sampling_us", "collective_sync_us", "collective_sync_gbps", "collective_input_copies")
    if host is None:
        return base.model_copy(update={f: fit.copied(getattr(base, f), " (framework overheads not measured)")
                                       for f in fields})
    why = fit.cite("overhead", "0: held by host_overhead (per-op costs x the ops of the traced step)")
    return base.model_copy(update={f: Sourced(value=0.0, source=why) for f in fields}
                           | {"single_token_kernel_floor_us": None})


def _provenance(fit: _Fit) -> dict[str, str]:
    m = fit.manifest
    keys = ("source", "backend", "device", "device_name", "cpu_model", "world_size", "ranks_per_node",
            "nodes", "hosts", "torch", "cuda", "nccl", "driver", "modes", "date_utc", "command_line", "logs")
    out = {"kind": "calibration fit", "run_dir": str(fit.run_dir), "fit_command": fit.command,
           "base_profile": fit.base_name, "library": fit.library, "laddersim_version": laddersim_version(),
           "base_profile_sha256": profile_sha256(fit.base)}
    for key in keys:
        if key in m and m[key] not in ("", None, []):
            value = m[key]
            out[key] = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return out


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def profile_yaml(profile: HardwareProfile, run_dir: str) -> str:
    data = profile.model_dump(mode="json", exclude={"base_dir"})
    header = (f"# {profile.name}: fitted by laddersim calibrate from {run_dir}; every value cites its "
              "source\n")
    return header + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)


def fit_run(run_dir: str, name: str, base: str) -> HardwareProfile:
    """Fit, write RUN_DIR/profile.yaml (+ tables/), and return the profile as loaded back."""
    if not name or any(c in name for c in "/\\ "):
        raise UserInputError(f"name: '{name}' must be a non-empty name without spaces or slashes")
    if not Path(run_dir).is_dir():
        raise UserInputError(f"run: {run_dir} is not a directory")
    _READ_WARNINGS.clear()
    profile = build_profile(run_dir, name, base)
    text = profile_yaml(profile, run_dir)
    try:
        _atomic_write(Path(run_dir) / "profile.yaml", text)
    except OSError as exc:
        raise UserInputError(f"run: cannot write {run_dir}/profile.yaml: {exc.strerror}") from None
    loaded = parse_profile(yaml.safe_load(text), Path(run_dir), where="fitted profile")
    if not all(math.isfinite(v) for v in (loaded.gpu.gemm_compute_efficiency.value,
                                          loaded.collectives.intra_node.bus_bandwidth_gbps.value)):
        raise UserInputError(f"fit: {run_dir} gives non-finite parameters; too few or degenerate points")
    for message in dict.fromkeys(_READ_WARNINGS):
        print(f"warning: {message}", file=sys.stderr, flush=True)
    return loaded
