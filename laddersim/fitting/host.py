"""``calibrate fit``: the profile's ``host_overhead`` section and the interference sanity report.

* Per-op framework cost per op class: the ``overhead`` benchmark's median in the run's regime
  (eager on a CPU; on GPUs the eager host launch cost, simulated as ``asynchronous``).
* Framework ops per program op kind: the ``ops`` benchmark's profiler trace of one
  ``ladder_bench`` decode step per schedule; per kind the median over the schedules traced
  (each kind's count per occurrence is the same in every schedule of one code base; a kind
  whose counts differ gets a warning line).
* ``collective_progress``: ``host_cores`` when the run's collectives ran on the CPU cores that
  computed (gloo on CPU ranks), from the run's manifest.
* A measured interference slowdown below zero is a measurement problem: one warning line per
  point with the figure and its spread (the profile holds 0 for it and its source says so).
"""

from __future__ import annotations

import statistics

import pandas as pd

from laddersim.fitting.run_context import collectives_on_host_cores, read_frame
from laddersim.hardware.compute_specs import HostOps, HostOverheadSpec
from laddersim.hardware.sourced import Sourced

OP_CLASSES = ("compute", "view", "collective")


def format_counts(per_kind: dict[tuple[str, str], float]) -> str:
    """``kind.class=ops;...`` sorted: the ``counts`` column of measurements/ops.csv."""
    return ";".join(f"{kind}.{cls}={n:g}" for (kind, cls), n in sorted(per_kind.items()))


def parse_counts(text: str) -> dict[tuple[str, str], float]:
    out = {}
    for item in filter(None, str(text).split(";")):
        key, value = item.split("=")
        kind, cls = key.rsplit(".", 1)
        out[(kind, cls)] = float(value)
    return out


def host_ops(ops: pd.DataFrame) -> tuple[list[HostOps], list[str]]:
    """(one HostOps per kind, warnings) from measurements/ops.csv rows."""
    per_kind: dict[str, list[dict[str, float]]] = {}
    for row in ops.itertuples():
        by_kind: dict[str, dict[str, float]] = {}
        for (kind, cls), n in parse_counts(row.counts).items():
            by_kind.setdefault(kind, dict.fromkeys(OP_CLASSES, 0.0))[cls] = n
        for kind, classes in by_kind.items():
            per_kind.setdefault(kind, []).append(classes)
    entries, warnings = [], []
    for kind in sorted(per_kind):
        seen = per_kind[kind]
        median = {cls: statistics.median(s[cls] for s in seen) for cls in OP_CLASSES}
        if any(s != seen[0] for s in seen):
            warnings.append(f"warning: measurements/ops.csv: {kind} dispatches different op counts in different "
                            f"schedules ({seen}); the profile keeps the median {median}")
        entries.append(HostOps(kind=kind, **median))
    return entries, warnings


def host_overhead(fit) -> HostOverheadSpec | None:
    """The section from the run's ``overhead`` and ``ops`` measurements (None without both)."""
    overhead, ops = fit.frames.get("overhead"), fit.frames.get("ops")
    if overhead is None or ops is None or overhead.empty or ops.empty:
        return None
    eager = overhead[overhead["mode"] == "eager"]
    if not set(OP_CLASSES) <= set(eager["op_class"]):
        return None

    def per_op(cls: str) -> Sourced:
        row = eager[eager["op_class"] == cls].iloc[0]
        return Sourced(value=float(row["time_us"]), source=fit.cite(
            "overhead", f"{cls} ops, eager: median of {int(row['reps'])} chains of {int(row['ops_per_chain'])} "
                        f"ops per op (p10 {row['p10_us']:.3g} us, p90 {row['p90_us']:.3g} us)"
                        + ("" if cls == "collective" else ", each after the step's weight bytes streamed, slowest rank")))

    entries, _ = host_ops(ops)
    # The measured cpu_share (overhead.csv) is reported, not charged: every timing above is taken
    # on all ranks at once at the run's load, in samples as long as the run's ops, so the other
    # processes' share of the cores is already in them (dividing by it again counted it twice).
    share = {}
    sampling = eager[eager["op_class"] == "sampling"]
    if not sampling.empty:
        row = sampling.iloc[0]
        batch = (fit.manifest.get("options", {}).get("batch") or [1])[0]
        share["sampling_us"] = Sourced(value=float(row["time_us"]), source=fit.cite(
            "overhead", f"sampling: median of {int(row['reps'])} calls of the run's top-k sampling at batch {batch} "
                        f"(p10 {row['p10_us']:.3g} us, p90 {row['p90_us']:.3g} us), slowest rank"))
        share["sampling_ops"] = float(row["ops_per_chain"])
    share.update(rank_skew(fit))
    schedules = ", ".join(sorted(set(ops["schedule"])))
    models = ", ".join(sorted(set(ops["model"])))
    host_cores = collectives_on_host_cores(fit.manifest)
    return HostOverheadSpec(
        mode="eager", timing="asynchronous" if fit.is_cuda else "synchronous",
        compute_op_us=per_op("compute"), view_op_us=per_op("view"), collective_op_us=per_op("collective"),
        ops=entries,
        ops_source=fit.cite("ops", f"top-level framework ops per program op kind in a torch.profiler trace of "
                                   f"one ladder_bench decode step ({models}; {schedules}; median over "
                                   "schedules), calibration/op_trace.py"),
        collective_progress="host_cores" if host_cores else "device",
        collective_progress_source=(
            f"calibration run {fit.run_dir} run.json: {fit.library} on CPU ranks, whose worker threads "
            "progress the collectives on the cores that compute" if host_cores else
            f"calibration run {fit.run_dir} run.json: {fit.library} kernels on the GPUs"), **share)


def rank_skew(fit) -> dict:
    """``rank_skew_fraction`` and ``rank_skew_group`` from the ``skew`` benchmark: the least-squares
    line through the origin of the mean wait for the slowest rank against the stretch of compute
    before it (laddersim.costs.rank_skew); empty without measurements."""
    rows = fit.frames.get("skew")
    if rows is None or rows.empty:
        return {}
    group = int(rows["group_size"].max())
    rows = rows[rows["group_size"] == group]
    stretch, wait = rows["stretch_us"].to_numpy(float), rows["wait_us"].to_numpy(float)
    fraction = float((stretch * wait).sum() / (stretch * stretch).sum())
    points = ", ".join(f"{w:.0f} us after {t:.0f} us" for t, w in zip(stretch, wait))
    return {"rank_skew_fraction": Sourced(value=fraction, source=fit.cite(
                "skew", f"the mean wait for the slowest of {group} ranks after stretches of the model's own decode "
                        f"modules, least-squares line through the origin ({points}; "
                        f"{int(rows['reps'].min())}+ repetitions each), calibration/skew_bench.py")),
            "rank_skew_group": group}


def negative_interference_warnings(rows: pd.DataFrame) -> list[str]:
    """One line per interference point whose median slowdown is below zero; a ladder chain's comm
    rate (a row with a model, CPU ranks) may be, and is not warned about (``fitting.ladder_chain``)."""
    lines = []
    for row in rows.itertuples():
        chain = str(getattr(row, "model", "-")) != "-"
        for what in ("compute",) if chain else ("compute", "comm"):
            value = getattr(row, f"{what}_slowdown")
            if value >= 0:
                continue
            p10, p90 = getattr(row, f"{what}_p10", None), getattr(row, f"{what}_p90", None)
            spread = f" (p10 {p10:+.1%}, p90 {p90:+.1%} over {int(row.reps)} repetitions)" if pd.notna(p10) else ""
            lines.append(f"warning: measurements/interference.csv: {what} slowdown measured {value:+.1%}{spread} at "
                         f"{int(row.size_bytes)} B: below zero is a measurement problem (overlap cannot speed "
                         "work up; a load that changed between the alone and overlapped timings), the profile "
                         "holds 0 for it; re-measure with more --repeats on a quieter machine")
    return lines


def fit_warnings(run_dir: str) -> list[str]:
    """The interference and op-count warnings of a run directory (printed by calibrate fit)."""
    lines = []
    interference, ops = read_frame(run_dir, "interference"), read_frame(run_dir, "ops")
    if not interference.empty:
        lines += negative_interference_warnings(interference)
    if not ops.empty:
        lines += host_ops(ops)[1]
    if not read_frame(run_dir, "skew").empty and (ops.empty or read_frame(run_dir, "overhead").empty):
        lines.append("warning: measurements/skew.csv: the rank skew and the module-anchored per-op cost belong to "
                     "the profile's host_overhead section, which needs the overhead and ops benchmarks too; not "
                     "fitted (add --benchmarks overhead,ops to this run)")
    return lines
