"""``laddersim validate [MEASURED.csv]``: simulate every measured row, print and write a report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from laddersim.cli.args import add_measured_workload_args, invoked_command
from laddersim.errors import DoesNotFitError, UserInputError
from laddersim.io_write import check_output
from laddersim.simulate import make_scenario, simulate
from laddersim.tables import format_table
from laddersim.validation.core import ValidationSetup, error_summary, read_measured_tables, validate
from laddersim.validation.labels import MODEL_P2P, model_label, setting_columns, with_model_p2p
from laddersim.validation.p2p_pairs import SCORED_EXTRA_SHARE, p2p_off_pairs, pair_summary
from laddersim.validation.report import write_report


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare predictions with measured tokens/s (default: the paper's 70B figure)")
    p.add_argument("measured", nargs="*", help="CSVs with model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,"
                   "tokens_per_s (several tables are validated together)")
    p.add_argument("--hardware", default="h100-sxm-nvswitch", help="profile for rows with p2p=on")
    p.add_argument("--models", default=None, metavar="DIR",
                   help="folder of <name>.json model configs the tables' model column names "
                        "(default: models/ beside each table)")
    add_measured_workload_args(p)
    p.add_argument("--report", "--out", dest="out", default="reports/validation",
                   help="report directory (default reports/validation; --out is the older name)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    setup = ValidationSetup(args.hardware, args.hardware_p2p_off, args.dtype, args.kv_cache, args.kv_reads,
                            args.framework)
    if any(not m.strip() for m in args.measured):
        raise UserInputError("measured: '' is not a path; allowed: CSV files, or nothing for the built-in table")
    check_output(args.out, "report", "dir")  # before any simulation, not after it
    if args.models is not None and not Path(args.models).is_dir():
        raise UserInputError(f"models: {args.models} is not a folder; allowed: a folder of <name>.json model configs")
    measured = read_measured_tables(args.measured, args.models)
    frame = validate(measured, setup, on_start=lambda n: print(f"validating {n} rows ...", file=sys.stderr))
    tp1 = _tp1_check(frame, setup)
    command = invoked_command("validate")
    path = write_report(frame, args.out, command, tp1)
    shown = [(c, c, "{}") for c in setting_columns(frame)]
    cols = shown + [("p2p", "p2p", "{}"), ("tp", "tp", "{}"), ("batch", "batch", "{}"), ("schedule", "schedule", "{}"),
            ("tokens_per_s", "measured", "{:.1f}"), ("predicted_tokens_per_s", "predicted", "{:.1f}"),
            ("rel_error", "error", "{:+.1%}"), ("measured_speedup", "meas. speedup", "{:.3f}"),
            ("predicted_speedup", "pred. speedup", "{:.3f}")]
    shown_rows = frame.assign(model=frame["model"].map(model_label)) if "model" in frame else frame
    print(format_table(shown_rows.to_dict("records"), cols))
    print()
    summary = pd.concat([error_summary(frame), error_summary(with_model_p2p(frame), MODEL_P2P)], ignore_index=True)
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    pairs = p2p_off_pairs(frame)
    if len(pairs):
        figures = pair_summary(pairs)
        print(f"\nP2P-off extra decode time, {figures['pairs']} on/off pairs ({figures['scored_pairs']} where it is "
              f">= {SCORED_EXTRA_SHARE:.0%} of the P2P-on decode): median error {figures['extra_decode_median_abs_err_pct']:.1f}%, "
              f"worst {figures['extra_decode_worst_abs_err_pct']:.1f}%")
    print(f"\nreport: {path}", file=sys.stderr)
    return 0


def _tp1_check(frame: pd.DataFrame, setup: ValidationSetup) -> pd.DataFrame | None:
    """Ladder vs standard at TP 1 for each measured (model, batch) that fits on one GPU of the
    p2p=on profile; when none fits (70B needs two H100s), llama-3.1-8b at the same settings."""
    def row(model, batch, prompt, gen):
        out = {s: simulate(make_scenario(model, setup.hardware, 1, int(batch), int(prompt), int(gen), s,
                                         setup.dtype, setup.kv_cache, setup.kv_reads, setup.framework)
                               ).summary()["tokens_per_s"]
               for s in ("standard", "ladder")}
        return {"model": str(model), "batch": batch, "standard_tokens_per_s": out["standard"],
                "ladder_tokens_per_s": out["ladder"], "ladder_speedup": out["ladder"] / out["standard"]}

    settings = list(frame.groupby(["model", "batch", "prompt_len", "gen_len"]).groups)
    rows = []
    for model, batch, prompt, gen in settings:
        try:
            rows.append(row(model, batch, prompt, gen))
        except DoesNotFitError:
            continue
    if not rows:
        for batch, prompt, gen in sorted({setting[1:] for setting in settings}):
            try:
                rows.append(row("llama-3.1-8b", batch, prompt, gen) | {"model": "llama-3.1-8b (stand-in: fits one GPU)"})
            except DoesNotFitError:
                continue
    return pd.DataFrame(rows) if rows else None
