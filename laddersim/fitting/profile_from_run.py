"""A calibration run directory to a hardware profile with provenance (``calibrate fit``).

Writes ``RUN_DIR/profile.yaml`` (validated through ``HardwareProfile``) and the measured
AllReduce medians as ``RUN_DIR/tables/allreduce.csv`` (the project's table format). Every number
says where it came from: fitted to which file of which run by which command, measured directly,
or copied from the base profile (what the run did not measure: network tier of a single-node
run, framework overheads, attention efficiency, datasheet peaks of a different device).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import yaml

from laddersim.fitting.curve_fits import (
    EFFICIENCY_BOUNDS, MEASURED_BANDWIDTH_EFFICIENCY_MAX, bandwidth_efficiency, fit_roofline,
)
from laddersim.fitting.collectives import collectives_spec, engine_table, network_spec
from laddersim.fitting.run_context import (
    DTYPE_BYTES, READ_WARNINGS, FitContext, atomic_write, collectives_on_host_cores, compute_dtype, pick_dtype,
)
from laddersim.fitting.host import host_overhead
from laddersim.fitting.ladder_chain import MIN_COMM_SLOWDOWN
from laddersim.fitting.modules import module_anchored
from laddersim.fitting.step_allreduce import (
    collective_issue_us, ladder_chain_rows, pooled_allreduce, with_resolved_rates,
)
from laddersim.errors import UserInputError
from laddersim.hardware.comm_specs import InterferencePoint, InterferenceSpec
from laddersim.hardware.compute_specs import FrameworkSpec, GpuSpec, NodeSpec, PEAK_FIELD_BY_DTYPE
from laddersim.hardware.profile import HardwareProfile, parse_profile
from laddersim.hardware.sourced import Sourced
from laddersim.hardware.calibration_extent import LOAD_SEPARATOR
from laddersim.support.provenance import laddersim_version, profile_sha256

MIN_GEMM_POINTS = 4


# ---- GEMM, memory, interference --------------------------------------------------------------

ROOFLINE_AT_BOUND = "memory efficiency held at its bound"


def roofline_warnings(profile) -> list[str]:
    """One line where the GEMM roofline's memory efficiency ended at its bound (calibrate fit
    prints it: the measured GEMMs left the memory term free)."""
    spec = profile.gpu.gemm_memory_efficiency
    if ROOFLINE_AT_BOUND not in spec.source:
        return []
    return [f"warning: gpu.gemm_memory_efficiency: {spec.value:g}, the {ROOFLINE_AT_BOUND}: the measured GEMMs "
            "do not pin weight streaming (their times fit as well with the memory term at its bound); a what-if at "
            "other shapes reads the bound, not a measurement"]


def _primary_rows(frame: pd.DataFrame, dtype: str | None) -> pd.DataFrame:
    if frame.empty:
        return frame
    mode = "graph" if "graph" in set(frame["mode"]) else "eager"
    rows = frame[frame["mode"] == mode]
    return rows[rows["dtype"] == (dtype or pick_dtype(rows["dtype"]))]


def _gpu(fit: FitContext) -> GpuSpec:
    base = fit.base.gpu
    m = fit.manifest
    dtype = compute_dtype(fit)
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
        bandwidth = fit.copied(base.memory_bandwidth_gb_per_s, "" if same_device else " (no memory kernels measured)")
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
    # The peak a measured rate of this dtype: nothing is known of the device's other dtypes.
    measured_dtype = {} if (same_device or gemm.empty) else {"measured_dtype": {"value": dtype, "source": fit.cite(
        "gemm", f"every GEMM of the run was timed in {dtype} (calibrate run --dtype); {device_name} has no "
                "datasheet peaks here for other dtypes")}}
    fields = dict(
        name=device_name, peak_tflops=peak, memory_bandwidth_gb_per_s=bandwidth, memory_gb=memory_gb, **other_peaks,
        **measured_dtype,
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
        measured_bandwidth = not (same_device or memory.empty)
        memory_max = MEASURED_BANDWIDTH_EFFICIENCY_MAX if measured_bandwidth else EFFICIENCY_BOUNDS[1]
        roof = fit_roofline(fitted["m"], fitted["n"], fitted["k"], times_s, DTYPE_BYTES[dtype],
                            peak.value * 1e12, bandwidth.value * 1e9, weights=times_s if which else None,
                            memory_efficiency_max=memory_max)
        what = (f"roofline t = launch + (t_compute^p + t_memory^p)^(1/p) (laddersim.costs.gemm) fitted "
                f"to {which}{len(fitted)} GEMMs ({dtype}, {fitted['mode'].iloc[0]}"
                f"{', each weighted by its time' if which else ''}) against peak "
                f"{peak.value:.4g} TFLOP/s, {bandwidth.value:.4g} GB/s; RMS log error "
                f"{roof.rms_log_error:.3f}")
        if roof.memory_efficiency >= memory_max * (1 - 1e-9):
            what += (f"; {ROOFLINE_AT_BOUND} ({memory_max:g} x the {'measured ' if measured_bandwidth else ''}"
                     f"bandwidth): these GEMMs do not pin the memory term")
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


def interference_spec(fit: FitContext) -> InterferenceSpec:
    rows = fit.frames["interference"]
    base = fit.base.interference
    if rows.empty:  # the base's fractions are the full-size ones of its channel rule: copy both
        return InterferenceSpec(compute_slowdown=fit.copied(base.compute_slowdown, " (not measured)"),
                                comm_slowdown=fit.copied(base.comm_slowdown, " (not measured)"),
                                comm_slowdown_part=base.comm_slowdown_part,
                                **_base_channel_rule(fit, " (not measured)"))
    points = ", ".join(f"{r.size_bytes} B with m={r.m} n={r.n} k={r.k}" for r in rows.itertuples())
    # Ladder chains (CPU ranks) may end sooner than their AllReduces waited on: their comm rate
    # below 0 is kept (laddersim.fitting.ladder_chain); anywhere else below 0 is a measurement problem.
    chains = not ladder_chain_rows(rows, not fit.is_cuda).empty  # collectives on the compute cores
    comm_floor = MIN_COMM_SLOWDOWN if chains else 0.0
    what = (f"median over {len(rows)} points ({points}), a median below 0 held at 0 (calibrate fit warns: "
            "a measurement problem)" + ("; the AllReduce's below 0 kept (down to "
                                        f"{MIN_COMM_SLOWDOWN:g}): beside compute it ends sooner than waited on, "
                                        "laddersim/fitting/ladder_chain.py" if chains else ""))
    if fit.resolved_chains:
        what += (f"; {fit.resolved_chains} ladder chain(s) solved against the table's AllReduce at their size "
                 "(laddersim/fitting/step_allreduce.py)")
    by_size = []
    sizes = sorted(set(int(v) for v in rows["size_bytes"]))
    if len(sizes) > 1:
        for size in sizes:
            at = rows[rows["size_bytes"] == size]
            by_size.append(InterferencePoint(
                size_bytes=size,
                compute_slowdown=max(0.0, float(at["compute_slowdown"].median())),
                comm_slowdown=max(comm_floor, float(at["comm_slowdown"].median())),
                source=fit.cite("interference", f"median over the {len(at)} computes at {size} B; below 0 held "
                                                 "at 0 (calibrate fit warns)" + ("" if not chains else
                                                 f", the AllReduce's kept down to {MIN_COMM_SLOWDOWN:g}"))))
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
        comm_slowdown=Sourced(value=max(comm_floor, float(rows["comm_slowdown"].median())),
                              source=fit.cite("interference", f"AllReduce slowdown during GEMMs, {what}")),
        by_size=by_size, **rule)


def _base_channel_rule(fit: FitContext, why: str) -> dict:
    """The base profile's NCCL channel rule as ``InterferenceSpec`` fields copied with ``why``
    (none when the base has no rule)."""
    base = fit.base.interference
    if base.collective_channels is None:
        return {}
    return {"collective_channels": fit.copied(base.collective_channels, why),
            "channel_bytes_per_rank": fit.copied(base.channel_bytes_per_rank, why)}


# ---- the profile ------------------------------------------------------------------------------

def _layers_of(model: str) -> int | None:
    """The layer count of a ladder chain's model (None where its config cannot be read)."""
    from laddersim.model.shape import load_model_shape

    try:
        return load_model_shape(model).n_layers
    except (UserInputError, OSError, ValueError):
        return None


def build_profile(run_dir: str, name: str, base: str) -> HardwareProfile:
    fit = FitContext(run_dir, name, base)
    m = fit.manifest
    if all(frame.empty for frame in fit.frames.values()):
        raise UserInputError(f"fit: {run_dir} has no measured points yet; run `laddersim calibrate run --out {run_dir}`")
    # The step's AllReduce measured twice on shared cores: one pooled estimate (step_allreduce).
    chains = ladder_chain_rows(fit.frames["interference"], collectives_on_host_cores(m))
    issue_us = collective_issue_us(fit.frames["overhead"])
    fit.frames["allreduce"] = pooled_allreduce(fit.frames["allreduce"], chains, issue_us)
    fit.pooled_chains = len(chains)
    collectives, primary, primary_mode = collectives_spec(fit, Path(run_dir) / "tables")
    if not chains.empty:
        fit.frames["interference"], fit.resolved_chains = with_resolved_rates(
            fit.frames["interference"], chains, engine_table(fit, primary), primary_mode, issue_us, _layers_of)
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
        network=network_spec(fit, primary, collectives.intra_node, gpus_per_node),
        collectives=collectives,
        interference=interference_spec(fit),
        framework=_framework(fit, host),
        host_overhead=host,
        provenance=_provenance(fit),
    )
    return raw


def _framework(fit: FitContext, host) -> FrameworkSpec:
    """The base's fixed framework costs, or, with the host overhead measured (an eager run),
    zero for those its per-op costs and op counts already hold (the step loop, sampling, the
    collective's issue; an eager collective is in place, no input copy; no CUDA graph, so no host
    node for a network collective)."""
    base = fit.base.framework
    fields = ("step_overhead_us", "sampling_us", "collective_sync_us", "collective_sync_gb_per_s", "collective_input_copies",
              "graph_host_node_us")
    if host is None:
        return base.model_copy(update={f: fit.copied(getattr(base, f), " (framework overheads not measured)")
                                       for f in fields})
    why = fit.cite("overhead", "0: held by host_overhead (per-op costs x the ops of the traced step)")
    return base.model_copy(update={f: Sourced(value=0.0, source=why) for f in fields}
                           | {"single_token_kernel_floor_us": None})


def _provenance(fit: FitContext) -> dict[str, str]:
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
    if m.get("load_warnings"):  # simulate and validate repeat it (laddersim.hardware.calibration_extent.load_note)
        out["load_warnings"] = LOAD_SEPARATOR.join(map(str, m["load_warnings"]))
    return out


def profile_yaml(profile: HardwareProfile, run_dir: str) -> str:
    data = profile.model_dump(mode="json", exclude={"base_dir"})
    header = (f"# {profile.name}: fitted by laddersim calibrate from {run_dir}; every value cites its "
              "source\n")
    return header + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)


# What a fit that cannot write its outputs leaves (each is replaced whole, profile.yaml last).
KEPT_ON_FAILURE = "no file is left half-written and an earlier profile.yaml is kept as it was"


def fit_run(run_dir: str, name: str, base: str) -> HardwareProfile:
    """Fit, write RUN_DIR/profile.yaml (+ tables/), and return the profile as loaded back."""
    if not name or any(c in name for c in "/\\ "):
        raise UserInputError(f"name: '{name}' must be a non-empty name without spaces or slashes")
    if not Path(run_dir).is_dir():
        raise UserInputError(f"run: {run_dir} is not a directory")
    READ_WARNINGS.clear()
    profile = build_profile(run_dir, name, base)
    text = profile_yaml(profile, run_dir)
    loaded = parse_profile(yaml.safe_load(text), Path(run_dir), where="fitted profile")
    anchored, _ = module_anchored(loaded, run_dir)  # the per-op cost as the model's modules pay it
    if anchored is not loaded:
        text = profile_yaml(profile.model_copy(update={"host_overhead": anchored.host_overhead}), run_dir)
        loaded = parse_profile(yaml.safe_load(text), Path(run_dir), where="fitted profile")
    try:
        atomic_write(Path(run_dir) / "profile.yaml", text)
    except OSError as exc:
        raise UserInputError(f"run: cannot write {run_dir}/profile.yaml: {exc.strerror}; {KEPT_ON_FAILURE}") from None
    if not all(math.isfinite(v) for v in (loaded.gpu.gemm_compute_efficiency.value,
                                          loaded.collectives.intra_node.bus_bandwidth_gb_per_s.value)):
        raise UserInputError(f"fit: {run_dir} gives non-finite parameters; too few or degenerate points")
    for message in dict.fromkeys(READ_WARNINGS):
        print(f"warning: {message}", file=sys.stderr, flush=True)
    return loaded
