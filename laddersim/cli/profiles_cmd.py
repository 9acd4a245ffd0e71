"""``laddersim profiles``: list, show (every parameter with its source), check against the
profile's measured tables, fit parameters to them, and write the collectives report
(``laddersim.api.profiles_task`` does the work)."""

from __future__ import annotations

import argparse
import math
import sys

import yaml

from laddersim.api import check_profile, fit_profile, profiles, profiles_report, show_profile
from laddersim.api.profiles_task import INHERITED
from laddersim.support.text_tables import format_table


def register(sub) -> None:
    p = sub.add_parser("profiles", help="hardware profiles: list, show, check, fit, report")
    verbs = p.add_subparsers(dest="verb", required=True, parser_class=type(p))
    verbs.add_parser("list", help="named profiles").set_defaults(func=run_list)
    show = verbs.add_parser("show", help="every parameter of a profile with its source")
    show.add_argument("name")
    show.set_defaults(func=run_show)
    check = verbs.add_parser("check", help="compare the model with the profile's measured tables")
    check.add_argument("name")
    check.add_argument("--shipped", action="store_true",
                       help="compare with the compact tables shipped with the profiles, even where the "
                            "environment variable LADDERSIM_SHARED names a folder holding the original "
                            "measurement files (reference_data/); without it they are never read")
    check.set_defaults(func=run_check)
    fit = verbs.add_parser("fit", help="fit the profile's parameters to its shipped tables; print YAML")
    fit.add_argument("name")
    fit.set_defaults(func=run_fit)
    report = verbs.add_parser("report", help="write reports/collectives.md and its plots",
                              description="Compare every profile with its measured tables: the original "
                              "measurement files where the environment variable LADDERSIM_SHARED names a folder "
                              "holding them (reference_data/), else the compact tables shipped with the profiles.")
    report.add_argument("--out", default=None,
                        help="report path (default reports/collectives.md under the current folder)")
    report.set_defaults(func=run_report)


def run_list(args: argparse.Namespace) -> int:
    rows = [{**r, "measured": "yes" if r["measured"] else "no (what-if)", "network": "yes" if r["network"] else "-"}
            for r in profiles().to_dict("records")]
    print(format_table(rows, [("name", "name", "{}"), ("measured", "measured", "{}"),
                              ("gpus_per_node", "gpus/node", "{}"), ("fabric", "fabric", "{}"),
                              ("network", "network", "{}"), ("description", "description", "{}")]))
    return 0


def run_show(args: argparse.Namespace) -> int:
    lines = show_profile(args.name)
    width = max(len(p) for p, _, _ in lines)
    for path, value, source in lines:
        print(f"{path.ljust(width)}  {value}" + (f"  [{source}]" if source else ""))
    bases = sorted({source[len(INHERITED) + 1:].split(";")[0] for _, _, source in lines if source.startswith(INHERITED)})
    if bases:  # stdout stays one line per value
        inherited = sum(source.startswith(INHERITED) for _, _, source in lines)
        print(f"{args.name}: {inherited} of {len(lines)} values inherited from {', '.join(bases)} (marked "
              f"[{INHERITED} ...]); the file states the rest (extends: keys it restates replace the base's)",
              file=sys.stderr)
    return 0


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.1f}%"


def run_check(args: argparse.Namespace) -> int:
    check = check_profile(args.name, shipped=args.shipped)
    if check.allreduce.empty:
        print(f"{check.name}: no AllReduce tables")
    else:
        rows = check.allreduce.to_dict("records")
        for r in rows:
            r["group"] = f"{r['gpus']}x{r['nodes']}"
            for key in ("model_median", "model_worst", "table_median", "table_worst", "scatter"):
                r[key] = _pct(r[key])
        print(f"AllReduce, modelled vs measured ({rows[0]['origin']}), 4 KiB-256 MiB; "
              "model = fitted/alpha-beta model, table = interpolated shipped table")
        print(format_table(rows, [
            ("table", "table", "{}"), ("use", "use", "{}"), ("mode", "mode", "{}"), ("group", "gpus x nodes", "{}"),
            ("rows", "rows", "{}"), ("model_median", "model median", "{}"), ("model_worst", "model worst", "{}"),
            ("table_median", "table median", "{}"), ("table_worst", "table worst", "{}"),
            ("scatter", "data scatter", "{}"), ("verdict", "verdict", "{}"), ("reason", "reason", "{}"),
        ]))
    if len(check.gemm):
        rows = [{**r, **{k: _pct(r[k]) for k in ("all_median", "all_p90", "llama_median", "llama_p90")},
                 "verdict": "pass" if r["passes"] else "miss"} for r in check.gemm.to_dict("records")]
        print(f"\nGEMM, modelled vs measured ({check.gemm_origin}); llama = rows with n, k >= 512")
        print(format_table(rows, [
            ("table", "table", "{}"), ("rows", "rows", "{}"), ("all_median", "all median", "{}"),
            ("all_p90", "all p90", "{}"), ("llama_median", "llama median", "{}"), ("llama_p90", "llama p90", "{}"),
            ("verdict", "verdict", "{}"), ("reason", "reason", "{}"),
        ]))
    return 0


def run_fit(args: argparse.Namespace) -> int:
    yaml.safe_dump(fit_profile(args.name), sys.stdout, sort_keys=False, width=200)
    return 0


def run_report(args: argparse.Namespace) -> int:
    print(f"report: {profiles_report(args.out)}", file=sys.stderr)
    return 0
