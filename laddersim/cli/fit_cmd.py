"""``laddersim fit MEASURED.csv --hardware BASE --out NEW``: fit a profile to your own runs
(``laddersim.api.fit`` does the work)."""

from __future__ import annotations

import argparse
import sys

from laddersim.api import fit
from laddersim.support.choices import FIT_REPORT_DIR
from laddersim.cli.args import add_measured_workload_args, call_api
from laddersim.support.text_tables import format_table


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
    p.add_argument("--report", default=FIT_REPORT_DIR,
                   help=f"report directory (default {FIT_REPORT_DIR}, under runs/ so that a run in a checkout never "
                        "replaces the committed reports/)")
    p.set_defaults(func=run, interrupted_note="nothing written (a fit keeps no partial state); re-run the "
                                               "same command to fit again")


def run(args: argparse.Namespace) -> int:
    frame = call_api(fit, args, progress=True)
    info = frame.attrs
    print("fitted parameters:")
    for key, value in info["parameters"].items():
        print(f"  {key} = {value:.4g}")
    print("\nresiduals on the fitted rows:")
    print(info["fit_summary"].to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if info["held_out_summary"] is not None:
        print("\nprediction of the other schedules (held out):")
        print(info["held_out_summary"].to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    _print_predictions(frame)
    if info["warnings"]:
        print("fit: warning: " + "; ".join(info["warnings"]), file=sys.stderr)
    for path in info["written"]:
        print(f"profile: {path}", file=sys.stderr)
    print(f"report: {info['report']}", file=sys.stderr)
    return 0


def _print_predictions(table) -> None:
    """What will Ladder give me: every schedule at every measured setting, with 95% intervals, and
    the held-out speedup errors beside the base profile's."""
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
    summary = table.attrs["speedup_vs_base"]
    if len(summary):
        print("\nheld-out schedules, speedup over standard vs measured (points), fitted and base profile (no fit):")
        shown = summary.rename(columns={"speedup_median_abs_err_pp": "median_pp", "speedup_worst_abs_err_pp": "worst_pp",
                                        "speedup_median_abs_err_pp_base": "base_median_pp",
                                        "speedup_worst_abs_err_pp_base": "base_worst_pp"})
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
