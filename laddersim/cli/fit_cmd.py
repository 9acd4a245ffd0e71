"""``laddersim fit MEASURED.csv --hardware BASE --out NEW``: fit a profile to your own runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from laddersim.api import fit
from laddersim.cli.args import add_measured_workload_args, invoked_command
from laddersim.errors import UserInputError
from laddersim.fit_predictions import held_out_speedup_summary, predictions
from laddersim.fitting import fit_profiles, p2p_off_path, save_profile
from laddersim.hardware.profile import load_profile
from laddersim.io_write import check_output
from laddersim.validation.core import ValidationSetup, check_rows, error_summary, read_measured
from laddersim.validation.report import write_report


def register(sub) -> None:
    p = sub.add_parser("fit", help="fit framework overhead, collective floor (and interference) to measured runs")
    p.add_argument("measured", help="CSV with model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s")
    p.add_argument("--hardware", required=True, help="base profile for p2p=on rows")
    p.add_argument("--out", required=True, help="where to write the fitted profile (.yaml or a directory)")
    add_measured_workload_args(p, fit)
    p.add_argument("--out-p2p-off", help="fitted profile for p2p=off rows (default: OUT with -p2p-off)")
    p.add_argument("--with-upper-bound", action="store_true", help="also fit on upper_bound rows")
    p.add_argument("--with-ladder", action="store_true",
                   help="also fit on ladder rows: they overlap AllReduce with compute, so the interference "
                        "fractions are fitted too")
    p.add_argument("--report", default="reports/fit", help="report directory (default reports/fit)")
    p.set_defaults(func=run, interrupted_note="nothing written (a fit keeps no partial state); re-run the "
                                               "same command to fit again")


def _held_out_against_base(table, base_rows, schedules: tuple[str, ...]) -> tuple[object, list[str]]:
    """Per model, the held-out schedules' speedup errors with the fitted profile beside the base
    profile's (no fit) on the same rows, and the models where the fit made either figure worse."""
    fitted = held_out_speedup_summary(table, schedules)
    if not len(fitted):
        return fitted, []
    base = held_out_speedup_summary(base_rows, schedules).drop(columns="rows")
    merged = fitted.merge(base, on="model", how="left", suffixes=("", "_base"))
    worse = [f"{r.model}: median {r.speedup_median_abs_err_pp:.2f} pp (base {r.speedup_median_abs_err_pp_base:.2f}), "
             f"worst {r.speedup_worst_abs_err_pp:.2f} pp (base {r.speedup_worst_abs_err_pp_base:.2f})"
             for r in merged.itertuples(index=False)
             if r.speedup_median_abs_err_pp > r.speedup_median_abs_err_pp_base + 0.005
             or r.speedup_worst_abs_err_pp > r.speedup_worst_abs_err_pp_base + 0.005]
    return merged, worse


def _print_predictions(table, schedules: tuple[str, ...], base_rows) -> list[str]:
    """What will Ladder give me: every schedule at every measured setting, with 95% intervals."""
    from laddersim.tables import format_table

    rows = table.assign(tps=[f"{v:.1f} [{lo:.1f}, {hi:.1f}]" for v, lo, hi in
                             zip(table["predicted_tokens_per_s"], table["tokens_per_s_low"], table["tokens_per_s_high"])],
                        speedup=[f"{v:.3f} [{lo:.3f}, {hi:.3f}]" for v, lo, hi in
                                 zip(table["predicted_speedup"], table["speedup_low"], table["speedup_high"])])
    rows = rows.astype(object).where(rows.notna(), None)  # unmeasured: '-'
    print("\npredicted with the fitted profile (95% interval from the fit's uncertainty):")
    print(format_table(rows.to_dict("records"), [
        ("model", "model", "{}"), ("p2p", "p2p", "{}"), ("tp", "tp", "{}"), ("batch", "batch", "{}"),
        ("schedule", "schedule", "{}"), ("tps", "tokens/s", "{}"), ("measured", "measured", "{:.1f}"),
        ("speedup", "speedup vs standard", "{}"), ("measured_speedup", "measured", "{:.3f}")]))
    summary, worse = _held_out_against_base(table, base_rows, schedules)
    if len(summary):
        print("\nheld-out schedules, speedup over standard vs measured (points), fitted and base profile (no fit):")
        shown = summary.rename(columns={"speedup_median_abs_err_pp": "median_pp", "speedup_worst_abs_err_pp": "worst_pp",
                                        "speedup_median_abs_err_pp_base": "base_median_pp",
                                        "speedup_worst_abs_err_pp_base": "base_worst_pp"})
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return worse


def run(args: argparse.Namespace) -> int:
    if not args.measured.strip():  # read_measured would take '' for its built-in table
        raise UserInputError("measured: '' is not a path; allowed: a CSV file")
    measured = read_measured(args.measured)
    schedules = (("standard",) + (("upper_bound",) if args.with_upper_bound else ())
                 + (("ladder",) if args.with_ladder else ()))
    p2p = set(measured["p2p"])
    base = {"on": load_profile(args.hardware)}
    if "off" in p2p:
        base["off"] = load_profile(args.hardware_p2p_off)
    setup = ValidationSetup(args.hardware, args.hardware_p2p_off, args.dtype, args.kv_cache, args.kv_reads,
                            args.framework)
    command = invoked_command("fit")
    out = check_output(args.out, "out", "file" if Path(args.out).suffix in (".yaml", ".yml") else "dir")
    if not out.name:
        raise UserInputError(f"out: '{args.out}' names no file or directory; allowed: NEW.yaml or a directory")
    out_off = Path(args.out_p2p_off) if args.out_p2p_off else p2p_off_path(out)
    # Every input before the first evaluation: output paths, then each row's model, profile,
    # TP, memory and node count (a bad row would otherwise surface after minutes of fitting).
    for target, flag in ((out, "out"), (out_off, "out-p2p-off")):
        check_output(target, flag, "file" if target.suffix in (".yaml", ".yml") else "dir")
    check_output(args.report, "report", "dir")
    check_rows(measured, ValidationSetup(base["on"], base.get("off", args.hardware_p2p_off), args.dtype,
                                         args.kv_cache, args.kv_reads))
    progressed = [False]

    def progress(n: int) -> None:
        progressed[0] = True
        print(f"\rfit: {n} evaluations", end="", file=sys.stderr, flush=True)

    try:
        result = fit_profiles(measured, {k: v for k, v in base.items() if k in p2p}, setup, schedules, command,
                              progress)
    finally:
        if progressed[0]:
            print(file=sys.stderr)  # an error after the progress line starts on a line of its own
    targets = {"on": out, "off": out_off}
    written = [save_profile(profile, targets[key])
               for key, profile in sorted(result.profiles.items(), key=lambda kv: kv[0] != "on")]
    print("fitted parameters:")
    for key, value in result.parameters.items():
        print(f"  {key} = {value:.4g}")
    print("\nresiduals on the fitted rows:")
    print(error_summary(result.fit_rows).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    held_out = result.all_rows[~result.all_rows["schedule"].isin(schedules)]
    if len(held_out):
        print("\nprediction of the other schedules (held out):")
        print(error_summary(held_out, "schedule").to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    worse = _print_predictions(predictions(result, measured, setup), schedules, result.base_rows)
    warnings = list(result.warnings)
    if worse:
        # A fit must never make the base profile's answer worse: the rows it was given cannot show
        # it (it is never worse on them), the held-out schedules can.
        warnings.append("on the held-out schedules the fitted profile predicts speedups worse than the base "
                        f"profile ({'; '.join(worse)}): the fitted rows pin what a step costs, not how much of "
                        "an AllReduce a schedule hides; prefer the base profile's speedups, or fit those rows "
                        "too (--with-ladder, --with-upper-bound)")
    if warnings:
        print("fit: warning: " + "; ".join(warnings), file=sys.stderr)
    report = write_report(result.all_rows, args.report, command, fit=(schedules, result.parameters))
    for path in written:
        print(f"profile: {path}", file=sys.stderr)
    print(f"report: {report}", file=sys.stderr)
    return 0
