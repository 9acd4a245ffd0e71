"""``fit``: a profile fitted to your own runs (laddersim.fitting.rows), what it predicts for every
schedule with 95% intervals (laddersim.fitting.row_predictions), and the report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from laddersim.api.common import profile_of, with_choices
from laddersim.api.validation_task import reproduce_command, setup_options

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile

# A held-out figure counts as worse than the base profile's beyond this many points (rounding).
WORSE_BY_PP = 0.005


@with_choices
def fit(measured: str | Path | pd.DataFrame, hardware: str | Path | HardwareProfile, *,
        hardware_p2p_off: str | Path | HardwareProfile = "h100-sxm-p2p-off", with_upper_bound: bool = False,
        with_ladder: bool = False, out: str | Path | None = None, out_p2p_off: str | Path | None = None,
        dtype: str | None = None, kv_cache: str | None = None, kv_reads: str | None = None,
        framework: str | None = None, allreduce: str | None = None, report: str | Path | None = None,
        progress: bool = False) -> pd.DataFrame:
    """``laddersim fit``: fit framework overhead and the collective floor (with ``with_ladder``, the
    interference fractions too) of ``hardware`` to the measured rows and return what the fitted
    profile predicts, one row per measured setting and schedule: ``predicted_tokens_per_s`` with
    its 95% interval (``tokens_per_s_low/high``), ``predicted_speedup`` with its interval, and the
    ``measured`` values.

    ``measured``: a CSV path or a DataFrame of ``standard`` runs of one machine (columns as
    ``validate``'s); ``hardware``: the base profile of rows with p2p=on, ``hardware_p2p_off`` of
    rows with p2p=off (default h100-sxm-p2p-off); ``with_upper_bound``, ``with_ladder``: also fit
    those rows (they see the AllReduce apart from the compute). ``out``: write the fitted P2P-on
    profile there (NEW.yaml or a directory), the P2P-off one to ``out_p2p_off`` (default: beside
    it, -p2p-off). ``dtype``, ``framework`` ({FRAMEWORKS} or a framework .yaml), ``kv_cache``,
    ``kv_reads``, ``allreduce``: as ``validate``'s (default: each row's dtype and framework columns,
    else float16 and gpt-fast; given, they override the columns).
    ``report``: also write the report there (a directory, with measured.csv, which its Reproduce
    line names); ``progress``: the count of evaluations on stderr.

    ``frame.attrs``: ``parameters`` (the fitted numbers), ``profiles`` (the fitted profiles by p2p
    setting, "on"/"off"), ``warnings`` (one text each), ``fit_summary`` (errors on the fitted
    rows), ``held_out_summary`` (errors of the other schedules, or None), ``speedup_vs_base`` (per
    model, the held-out speedup errors with the fitted and the base profile), ``written`` (the
    profile files) and ``report`` (the index.md written, or None)."""
    import pandas as pd

    from laddersim.errors import UserInputError
    from laddersim.fitting.row_predictions import predictions
    from laddersim.fitting.rows import p2p_off_path, save_profile
    from laddersim.support.io_write import check_output
    from laddersim.validation.core import ValidationSetup, check_rows, error_summary, read_measured
    from laddersim.validation.report import MEASURED_FILE, write_measured, write_report

    if not isinstance(measured, pd.DataFrame) and not str(measured).strip():  # '' would be the built-in table
        raise UserInputError("measured: '' is not a path; allowed: a CSV file")
    table = measured if isinstance(measured, pd.DataFrame) else read_measured(measured)
    schedules = ("standard",) + (("upper_bound",) if with_upper_bound else ()) + (("ladder",) if with_ladder else ())
    p2p = set(table["p2p"])
    base = {"on": profile_of(hardware)}
    if "off" in p2p:
        base["off"] = profile_of(hardware_p2p_off)
    setup = ValidationSetup(base["on"], base.get("off", hardware_p2p_off), dtype, kv_cache, kv_reads, framework,
                            allreduce)
    targets = {}
    if out is not None:
        targets["on"] = check_output(out, "out", "file" if Path(out).suffix in (".yaml", ".yml") else "dir")
        if not targets["on"].name:
            raise UserInputError(f"out: '{out}' names no file or directory; allowed: NEW.yaml or a directory")
        targets["off"] = Path(out_p2p_off) if out_p2p_off else p2p_off_path(targets["on"])
        # Every input before the first evaluation: output paths, then each row's model, profile,
        # TP, memory and node count (a bad row would otherwise surface after minutes of fitting).
        for key, flag in (("on", "out"), ("off", "out-p2p-off")):
            check_output(targets[key], flag, "file" if targets[key].suffix in (".yaml", ".yml") else "dir")
    if report is not None:
        check_output(report, "report", "dir")
    check_rows(table, setup)
    command = "laddersim.api.fit"
    if report is not None:
        extra = ["--out", str(out)] if out is not None else []
        extra += ["--out-p2p-off", str(out_p2p_off)] if out_p2p_off is not None else []
        extra += ["--with-upper-bound"] * with_upper_bound + ["--with-ladder"] * with_ladder
        options = setup_options(setup) | {"hardware": getattr(hardware, "name", hardware),
                                          "hardware_p2p_off": getattr(hardware_p2p_off, "name", hardware_p2p_off)}
        command = reproduce_command("fit", Path(report) / MEASURED_FILE, fit, options, extra)
    result = _fitted(table, {k: v for k, v in base.items() if k in p2p}, setup, schedules, command, progress)
    frame = predictions(result, table, setup)
    written = [str(save_profile(profile, targets[key]))
               for key, profile in sorted(result.profiles.items(), key=lambda kv: kv[0] != "on") if key in targets]
    speedup_vs_base, worse = _held_out_against_base(frame, result.base_rows, schedules)
    warnings = list(result.warnings)
    if worse:
        # A fit must never make the base profile's answer worse: the rows it was given cannot show
        # it (it is never worse on them), the held-out schedules can.
        warnings.append("on the held-out schedules the fitted profile predicts speedups worse than the base "
                        f"profile ({'; '.join(worse)}): the fitted rows pin what a step costs, not how much of "
                        "an AllReduce a schedule hides; prefer the base profile's speedups, or fit those rows "
                        "too (--with-ladder, --with-upper-bound)")
    held_out = result.all_rows[~result.all_rows["schedule"].isin(schedules)]
    index = None
    if report is not None:
        write_measured(table, report)
        index = str(write_report(result.all_rows, report, command, fit=(schedules, result.parameters)))
    frame.attrs.update(parameters=dict(result.parameters), profiles=dict(result.profiles), warnings=warnings,
                       fit_summary=error_summary(result.fit_rows),
                       held_out_summary=error_summary(held_out, "schedule") if len(held_out) else None,
                       speedup_vs_base=speedup_vs_base, written=written, report=index)
    return frame


def _fitted(table, base, setup, schedules, command, progress: bool):
    """``fit_profiles`` with, when ``progress``, the count of evaluations on one stderr line."""
    from laddersim.fitting.rows import fit_profiles

    shown = [False]

    def count(n: int) -> None:
        shown[0] = True
        print(f"\rfit: {n} evaluations", end="", file=sys.stderr, flush=True)

    try:
        return fit_profiles(table, base, setup, schedules, command, count if progress else None)
    finally:
        if shown[0]:
            print(file=sys.stderr)  # an error after the progress line starts on a line of its own


def _held_out_against_base(table, base_rows, schedules: tuple[str, ...]) -> tuple[object, list[str]]:
    """Per model, the held-out schedules' speedup errors with the fitted profile beside the base
    profile's (no fit) on the same rows, and the models where the fit made either figure worse."""
    from laddersim.fitting.row_predictions import held_out_speedup_summary

    fitted = held_out_speedup_summary(table, schedules)
    if not len(fitted):
        return fitted, []
    base = held_out_speedup_summary(base_rows, schedules).drop(columns="rows")
    merged = fitted.merge(base, on="model", how="left", suffixes=("", "_base"))
    worse = [f"{r.model}: median {r.speedup_median_abs_err_pp:.2f} pp (base {r.speedup_median_abs_err_pp_base:.2f}), "
             f"worst {r.speedup_worst_abs_err_pp:.2f} pp (base {r.speedup_worst_abs_err_pp_base:.2f})"
             for r in merged.itertuples(index=False)
             if r.speedup_median_abs_err_pp > r.speedup_median_abs_err_pp_base + WORSE_BY_PP
             or r.speedup_worst_abs_err_pp > r.speedup_worst_abs_err_pp_base + WORSE_BY_PP]
    return merged, worse
