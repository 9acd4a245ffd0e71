"""The AllReduce side of ``calibrate fit``: the measured medians as the project's table
(``RUN_DIR/tables/allreduce*.csv``), the intra-node tier and per-GPU-count protocol fits, the
network tier of a multi-node run, and the collectives spec that names them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.fitting.curve_fits import PROTOCOL_FIT_MIN_BYTES, fit_network_rows, fit_ring_tier, protocol_tier_fit
from laddersim.fitting.run_context import (
    FitContext, atomic_write, collectives_on_host_cores, compute_dtype, pick_dtype,
)
from laddersim.measure.grid import human_bytes
from laddersim.fitting.monotone import MONOTONE_NOTE, nondecreasing_in_size
from laddersim.errors import UserInputError
from laddersim.hardware.comm_specs import AlphaBeta, CollectiveSpec, NetworkSpec, TierFit
from laddersim.hardware.sourced import MeasuredTable, Sourced


def allreduce_table(frame: pd.DataFrame, mode: str, preferred_dtype: str | None) -> pd.DataFrame:
    """gpus, nodes, size_bytes, time_us, dtype: one dtype per group shape (preferred first)."""
    rows = frame[frame["mode"] == mode]
    parts = []
    for (g, nodes), shape in rows.groupby(["group_size", "nodes"], sort=True):
        dtype = pick_dtype(shape["dtype"], preferred_dtype)
        chosen = shape[shape["dtype"] == dtype].sort_values("size_bytes")
        parts.append(pd.DataFrame({"gpus": g, "nodes": nodes, "size_bytes": chosen["size_bytes"],
                                   "time_us": chosen["time_us"], "dtype": dtype}))
    if not parts:
        return pd.DataFrame(columns=["gpus", "nodes", "size_bytes", "time_us", "dtype"])
    return pd.concat(parts, ignore_index=True)


POOLED_NOTE = ("; at the step's message size pooled with {} ladder chain(s)' own AllReduce "
               "(measurements/interference.csv): laddersim/fitting/step_allreduce.py")


def engine_table(fit: FitContext, table: pd.DataFrame) -> pd.DataFrame:
    """The table the engine reads: non-decreasing in size where the collectives progress on the
    compute cores (their noise otherwise reaches the simulation point by point); the tier fits
    keep the measured points."""
    if collectives_on_host_cores(fit.manifest):
        return nondecreasing_in_size(table, ("gpus", "nodes", "dtype"))
    return table


def _write_table(fit: FitContext, table: pd.DataFrame, mode: str, timing: str, path: Path,
                 benchmark: str = "allreduce") -> str:
    reps = fit.frames[benchmark]["reps"]
    stat = "/".join(sorted(set(fit.frames[benchmark]["stat"])))
    what = "AllReduce time per call" if benchmark == "allreduce" else "AllGather time per call (size: gathered bytes)"
    date = fit.manifest.get("date_utc", "unknown date")
    shapes = ", ".join(f"{g} ranks x {n} node(s) {d}" for (g, n, d), _ in
                       table.groupby(["gpus", "nodes", "dtype"], sort=True))
    header = [
        f"# {what} ({stat} over {int(reps.min())}-{int(reps.max())} timed calls"
        f"{MONOTONE_NOTE if collectives_on_host_cores(fit.manifest) else ''}"
        f"{POOLED_NOTE.format(fit.pooled_chains) if fit.pooled_chains and benchmark == 'allreduce' else ''}), "
        f"{mode}/{timing}",
        f"# source: calibration run {fit.run_dir} measurements/{benchmark}.csv ({fit.library}, "
        f"{fit.manifest.get('device_name', '?')}, {date})",
        f"# run command: {fit.manifest.get('command_line', '?')}",
        f"# rows: {shapes}",
        f"# written by: {fit.command}",
    ]
    body = table[["gpus", "nodes", "size_bytes", "time_us"]].to_csv(index=False, lineterminator="\n",
                                                                    float_format="%.6g")
    atomic_write(path, "\n".join(header) + "\n" + body)
    return f"calibration run {fit.run_dir}: {shapes}; {fit.library}, {mode}, timing {timing}"


# A per-GPU-count protocol fit needs a curve from the latency floor to the bandwidth regime.
FIT_MIN_ROWS = 6
FIT_SPAN_BYTES = (4 * 1024, 1 << 20)  # smallest size at most, largest size at least


def _intra_fits(fit: FitContext, table: pd.DataFrame, mode: str) -> list[TierFit]:
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


def _intra_tier(fit: FitContext, table: pd.DataFrame, mode: str) -> AlphaBeta:
    single = table[table["nodes"] == 1]
    curves = {int(g): (rows["size_bytes"].to_numpy(float), rows["time_us"].to_numpy(float) * 1e-6)
              for g, rows in single.groupby("gpus") if len(rows) >= 2}
    base_tier = fit.base.collectives.intra_node
    if not curves:
        why = " (no single-node AllReduce measured)"
        return AlphaBeta(algorithm=base_tier.algorithm,
                         base_latency_us=fit.copied(base_tier.base_latency_us, why),
                         step_latency_us=fit.copied(base_tier.step_latency_us, why),
                         bus_bandwidth_gb_per_s=fit.copied(base_tier.bus_bandwidth_gb_per_s, why),
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
        bus_bandwidth_gb_per_s=Sourced(value=ring.bus_bandwidth_bytes_per_s / 1e9,
                                   source=fit.cite("allreduce", f"{what}: 2(g-1)/g / b at g={groups[-1]}")),
    )


# An import keeps the base profile's small-message model without a message at most this large,
# and its large-message model without one at least LARGE_MESSAGE_BYTES: a fit outside the sizes
# measured would extrapolate a line the rows never pinned.
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


def network_spec(fit: FitContext, table: pd.DataFrame, intra: AlphaBeta, gpus_per_node: int) -> NetworkSpec | None:
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
        for f in ("base_latency_us", "step_latency_us", "bus_bandwidth_gb_per_s")})
    copied = base_net.model_copy(update={
        **{f: fit.copied(v, why) for f, v in base_net if isinstance(v, Sourced)}, "allreduce": tier})
    if multi.empty:
        return copied
    sizes = multi["size_bytes"].to_numpy(float)
    latency, bandwidth = bool((sizes <= SMALL_MESSAGE_BYTES).any()), bool((sizes >= LARGE_MESSAGE_BYTES).any())
    probe = fit.base.model_copy(update={"network": copied, "collectives": fit.base.collectives.model_copy(
        update={"intra_node": intra, "tables": []})})
    values = fit_network_rows(probe, multi[["gpus", "nodes", "size_bytes", "time_us"]], latency, bandwidth)
    fitted = [name for name in values["fitted"].split(", ") if name]
    what = (f"NCCL algorithm model (laddersim.costs.nccl_algorithms) fitted to {len(multi)} multi-node rows "
            f"({', '.join(sorted({f'{g}x{n}' for g, n in values['groups']}))}): {', '.join(fitted) or 'nothing'}")
    cite = {name: Sourced(value=round(float(values[name]), 4), source=fit.cite("allreduce", what)) for name in fitted}
    tier_fields = ("base_latency_us", "step_latency_us", "bus_bandwidth_gb_per_s")
    return copied.model_copy(update={
        **{k: v for k, v in cite.items() if k not in tier_fields},
        "allreduce": tier.model_copy(update={k: v for k, v in cite.items() if k in tier_fields})})


def _timing(fit: FitContext, mode: str) -> str:
    """How the run timed its AllReduce points of ``mode`` (``MeasuredTable.timing``).

    ``calibrate run`` (calibration/allreduce_bench.py) times an eager point as one call after a
    barrier with CUDA events around it, so the host launch is inside (``single``); a graph point
    is a replay of back-to-back captured calls (``loop``). nccl-tests times ``iters`` back-to-back
    calls, eager or graph, each launch overlapping the previous collective (``loop``).
    """
    if mode == "graph" or fit.manifest.get("source") == "nccl-tests":
        return "loop"
    return "single"


def collectives_spec(fit: FitContext, tables_dir: Path) -> tuple[CollectiveSpec, pd.DataFrame, str]:
    """(collectives, primary table, the measured mode it was taken from)."""
    frame = fit.frames["allreduce"]
    base = fit.base.collectives
    measured_modes = set(frame["mode"])
    primary = "graph" if "graph" in measured_modes else "eager"
    preferred = compute_dtype(fit)
    tables: list[MeasuredTable] = []
    primary_table = allreduce_table(frame, primary, preferred)
    # The simulated regime's table is allreduce.csv; a GPU run's eager table rides along.
    files = [(primary, "allreduce.csv")] + ([("eager", "allreduce_eager.csv")]
                                            if primary == "graph" and "eager" in measured_modes else [])
    for mode, file in files:
        table = allreduce_table(frame, mode, preferred)
        if table.empty:
            continue
        table = engine_table(fit, table)
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
                          allgather_tables=_allgather_tables(fit, tables_dir, primary),
                          intra_node_fits=_intra_fits(fit, primary_table, primary),
                          # NVLS needs an NVSwitch; a CPU (gloo) run's nominal fabric is pcie
                          algorithms=[a for a in base.algorithms if fit.is_cuda or a not in ("nvls", "nvls_tree")])
    return spec, primary_table, primary


def _allgather_tables(fit: FitContext, tables_dir: Path, primary: str) -> list[MeasuredTable]:
    """The logits AllGather measured in the simulated regime's mode (calibration/allgather_bench.py),
    as ``tables/allgather.csv``: the engine prices a step's gather from it (size: gathered bytes)."""
    frame = fit.frames["allgather"]
    if frame.empty or primary not in set(frame["mode"]):
        return []
    table = engine_table(fit, allreduce_table(frame, primary, compute_dtype(fit)))
    timing = _timing(fit, primary)
    what = _write_table(fit, table, primary, timing, tables_dir / "allgather.csv", benchmark="allgather")
    return [MeasuredTable(file="tables/allgather.csv", source=what, mode=primary, library=fit.library, timing=timing)]
