"""``laddersim validate [MEASURED.csv]``: simulate every measured row, print and write a report
(``laddersim.api.validate`` does the work)."""

from __future__ import annotations

import argparse
import sys

from laddersim.api.closed_loop_validation import (DEFAULT_LIMITS, LIMITS, is_closed_loop_table, skipped_reasons,
                                                   validate_closed_loop, write_scores)
from laddersim.api.static_validation import is_static_table, validate_static
from laddersim.api.validation_task import SCORED_EXTRA_SHARE, groups_markdown, model_label, setting_columns, validate
from laddersim.cli.args import add_measured_workload_args, call_api, default_of
from laddersim.errors import UserInputError
from laddersim.support.choices import VALIDATION_REPORT_DIR
from laddersim.support.io_write import check_output
from laddersim.support.text_tables import format_table


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare predictions with measured tokens/s (default: every shipped "
                       "development table, the README's accuracy table)")
    p.add_argument("measured", nargs="*", help="CSVs with model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,"
                   "tokens_per_s, optionally pp (pipeline stages; several tables are validated together); "
                   "none: the development tables shipped in laddersim/data/validation, errors per group")
    p.add_argument("--hardware", default=default_of(validate, "hardware"),
                   help="profile for rows with p2p=on (default: each row's hardware column, else h100-sxm-nvswitch; "
                        "given, it overrides the column)")
    p.add_argument("--models", default=None, metavar="DIR",
                   help="folder of <name>.json model configs the tables' model column names "
                        "(default: models/ beside each table)")
    add_measured_workload_args(p, validate)
    p.add_argument("--limits", choices=LIMITS, default=None,
                   help="closed-loop tables: the engines' limits, aiconfigurator (default: max batch = the row's "
                        "concurrency, token budget = concurrency + prompt + 1500, as AIConfigurator's generator "
                        "writes them for its benchmark) or engine-defaults (each engine's own); a table's "
                        "max_running / max_batched_tokens columns override either")
    p.add_argument("--report", "--out", dest="report", metavar="OUT", default=VALIDATION_REPORT_DIR,
                   help=f"report directory (default {VALIDATION_REPORT_DIR}, under runs/ so that a run in a checkout "
                        "never replaces the committed reports/; --out is the older name)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.measured and all(is_closed_loop_table(path) for path in args.measured):
        check_output(args.report, "report", "dir")  # before the rows are priced
        return run_closed_loop(args)
    if args.limits is not None:
        raise UserInputError(f"limits: {args.limits!r} sets the engines' limits of closed-loop tables (columns "
                             "concurrency, ttft_ms, tpot_ms); allowed: leave it out for these tables")
    if args.measured and all(is_static_table(path) for path in args.measured):
        check_output(args.report, "report", "dir")
        return run_static(args)
    frame = call_api(validate, args, progress=True)
    if (groups := frame.attrs["development_groups"]) is not None:  # no table given: the README's table
        print(groups_markdown(groups))
        print(f"\nreport: {frame.attrs['report']}", file=sys.stderr)
        return 0
    shown = [(c, c, "{}") for c in setting_columns(frame)]
    cols = shown + [("p2p", "p2p", "{}"), ("tp", "tp", "{}"), ("batch", "batch", "{}"), ("schedule", "schedule", "{}"),
            ("tokens_per_s", "measured", "{:.1f}"), ("predicted_tokens_per_s", "predicted", "{:.1f}"),
            ("rel_error", "error", "{:+.1%}"), ("measured_speedup", "meas. speedup", "{:.3f}"),
            ("predicted_speedup", "pred. speedup", "{:.3f}")]
    shown_rows = frame.assign(model=frame["model"].map(model_label)) if "model" in frame else frame
    print(format_table(shown_rows.to_dict("records"), cols))
    print()
    print(frame.attrs["summary"].to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if (figures := frame.attrs["p2p_pairs"]) is not None:
        print(f"\nP2P-off extra decode time, {figures['pairs']} on/off pairs ({figures['scored_pairs']} where it is "
              f">= {SCORED_EXTRA_SHARE:.0%} of the P2P-on decode): median error {figures['extra_decode_median_abs_err_pct']:.1f}%, "
              f"worst {figures['extra_decode_worst_abs_err_pct']:.1f}%")
    print(f"\nreport: {frame.attrs['report']}", file=sys.stderr)
    return 0


def run_closed_loop(args: argparse.Namespace) -> int:
    """Tables measured at a fixed concurrency: TTFT and TPOT errors per engine x dtype group."""
    scores = validate_closed_loop(args.measured, args.models, progress=True, limits=args.limits or DEFAULT_LIMITS)
    return _print_scores(args.measured, scores, "closed loop at the row's concurrency, its engine's scheduler; "
                         "mean TTFT and TPOT", args.report)


def run_static(args: argparse.Namespace) -> int:
    """Static-batch tables of other engines and GPUs: tokens/s, TTFT and TPOT errors per GPU x engine."""
    scores = validate_static(args.measured, args.models, args.allreduce, progress=True)
    return _print_scores(args.measured, scores, "one static batch per row, standard schedule; TTFT = the batch's "
                         "prefill, TPOT = a decode step", args.report)


def _print_scores(paths, scores, how: str, report: str) -> int:
    """Each table's rows scored and skipped, the mappings it used, and its error summary, printed
    and written under ``report`` (``external_report.write_scores``)."""
    written = write_scores(paths, scores, report)
    for path, score in zip(paths, scores):
        print(f"{path}: {len(score.rows)} rows scored, {len(score.skipped)} skipped ({how})")
        for line in score.mappings:
            print(f"  {line}")
        for line in skipped_reasons(score.skipped):
            print(f"  skipped: {line}")
        if not score.summary.empty:
            print(score.summary.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print(f"\nreport: {written}", file=sys.stderr)
    return 0
