"""``laddersim profiles``: list, show (every parameter with its source), check against the
profile's measured tables, fit parameters to them, and write the collectives report."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import yaml

from laddersim.costs import transport
from laddersim.errors import UserInputError
from laddersim.hardware.profile import list_profiles, load_profile
from laddersim.io_write import check_output
from laddersim.tables import format_table


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
                            "original measurement files are on this machine (LADDERSIM_SHARED)")
    check.set_defaults(func=run_check)
    fit = verbs.add_parser("fit", help="fit the profile's parameters to its shipped tables; print YAML")
    fit.add_argument("name")
    fit.set_defaults(func=run_fit)
    report = verbs.add_parser("report", help="write reports/collectives.md and its plots")
    report.add_argument("--out", default=None, help="report path (default reports/collectives.md)")
    report.set_defaults(func=run_report)


def run_list(args: argparse.Namespace) -> int:
    rows = []
    for name in list_profiles():
        prof = load_profile(name)
        rows.append({"name": name, "measured": "yes" if prof.measured else "no (what-if)",
                     "gpus_per_node": prof.node.gpus_per_node, "fabric": prof.node.fabric,
                     "network": "yes" if prof.network else "-", "description": prof.description})
    print(format_table(rows, [("name", "name", "{}"), ("measured", "measured", "{}"),
                              ("gpus_per_node", "gpus/node", "{}"), ("fabric", "fabric", "{}"),
                              ("network", "network", "{}"), ("description", "description", "{}")]))
    return 0


def _flatten(value, prefix: str, out: list[tuple[str, str, str]]) -> None:
    """(path, value, source) lines: Sourced values keep their source beside the number."""
    if isinstance(value, dict) and set(value) == {"value", "source"}:
        out.append((prefix, f"{value['value']:g}", value["source"]))
    elif isinstance(value, dict) and "terms" in value and "source" in value:
        terms = "; ".join(f"{t['protocol']}: {t['latency_us']:g} us + bytes/{t['bus_bandwidth_gbps']:g} GB/s"
                          for t in value["terms"])
        out.append((f"{prefix}[gpus={value['gpus']}]", terms, value["source"]))
    elif isinstance(value, dict) and "file" in value and "source" in value:
        out.append((prefix, value["file"], f"{value['source']} ({value.get('library', '')}; "
                                           f"{value.get('mode')}/{value.get('timing')}; use={value.get('use')})"))
    elif isinstance(value, dict):
        for key, sub in value.items():
            _flatten(sub, f"{prefix}.{key}" if prefix else key, out)
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            _flatten(sub, f"{prefix}[{i}]" if not (isinstance(sub, dict) and "gpus" in sub and "terms" in sub)
                     else prefix, out)
    else:
        out.append((prefix, str(value), ""))


def _offered(prof) -> list[tuple[str, str, str]]:
    """What the fabric offers NCCL: one line for one node, one across nodes (each algorithm with
    its protocols; NVLS, NVLS-tree and CollNet run Simple only)."""
    def listed(names):
        return ", ".join(f"{a} ({'ll, ll128, simple' if a in ('ring', 'tree') else 'simple'})" for a in names)

    algorithms = prof.collectives.algorithms
    spec = prof.collectives.transport
    if spec is None:
        out = [("offers.one_node", listed([a for a in algorithms if a in ("ring", "tree", "nvls")]),
                f"collectives.algorithms on a {prof.node.fabric} node")]
    else:  # the stated topology decides each ring's transport and its protocols (no LL128 off NVLink)
        rings = ", ".join(f"ring over {name} ({', '.join(protos)})" for name, protos in transport.ring_offers(prof).items())
        nvls = ", nvls (simple) above 2 GPUs" if "nvls" in algorithms and spec.nvls else ""
        out = [("offers.one_node", rings + nvls,
                f"collectives.transport (p2p {spec.topology.p2p}) as NCCL decides it, laddersim.costs.transport")]
    if prof.network is not None:
        out.append(("offers.across_nodes", listed([a for a in algorithms if a in ("ring", "tree", "nvls_tree", "collnet")]),
                    "laddersim.costs.nccl_algorithms picks the fastest per message"))
    return out


def run_show(args: argparse.Namespace) -> int:
    prof = load_profile(args.name)
    lines: list[tuple[str, str, str]] = _offered(prof)
    _flatten(prof.model_dump(mode="json"), "", lines)
    width = max(len(p) for p, _, _ in lines)
    for path, value, source in lines:
        print(f"{path.ljust(width)}  {value}" + (f"  [{source}]" if source else ""))
    return 0


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.1f}%"


def run_check(args: argparse.Namespace) -> int:
    from laddersim.profiles_check.compare import (
        check_allreduce,
        check_gemm,
        summary_frame,
    )

    prof = load_profile(args.name)
    summary = summary_frame(check_allreduce(prof, force_shipped=args.shipped))
    if summary.empty:
        print(f"{prof.name}: no AllReduce tables")
    else:
        rows = summary.to_dict("records")
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
    gemm = check_gemm(prof, force_shipped=args.shipped)
    if gemm:
        rows = [{"table": c.table.file, "rows": len(c.rows), "all_median": _pct(c.median("all")),
                 "all_p90": _pct(c.p90("all")), "llama_median": _pct(c.median("llama")),
                 "llama_p90": _pct(c.p90("llama")), "verdict": "pass" if c.passes else "miss",
                 "reason": "" if c.passes else c.table.expect_miss} for c in gemm]
        print(f"\nGEMM, modelled vs measured ({gemm[0].origin}); llama = rows with n, k >= 512")
        print(format_table(rows, [
            ("table", "table", "{}"), ("rows", "rows", "{}"), ("all_median", "all median", "{}"),
            ("all_p90", "all p90", "{}"), ("llama_median", "llama median", "{}"), ("llama_p90", "llama p90", "{}"),
            ("verdict", "verdict", "{}"), ("reason", "reason", "{}"),
        ]))
    return 0


def run_fit(args: argparse.Namespace) -> int:
    from laddersim.profiles_check.fit import fit_gemm, fit_intra_node, fit_network

    prof = load_profile(args.name)
    out: dict = {}
    fits = fit_intra_node(prof)
    if fits:
        out["intra_node_fits"] = [f.model_dump() for f in fits]
    if prof.gpu.gemm_tables:
        out["gemm"] = fit_gemm(prof)
    network = fit_network(prof)
    if network:
        network["groups"] = [f"{g}x{n}" for g, n in network["groups"]]
        out["network"] = network
    if not out:
        raise UserInputError(f"profiles fit: {prof.name} lists no model tables to fit")
    yaml.safe_dump(out, sys.stdout, sort_keys=False, width=200)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from laddersim.profiles_check.report import write_report
    from laddersim.profiles_check.sources import shared_root

    if args.out:  # a Markdown file path; its figures go in a folder beside it
        target = Path(args.out)
        if target.is_dir():
            raise UserInputError(f"out: {target} is a directory; allowed: a Markdown file path such as "
                                 f"{target / 'collectives.md'}")
        check_output(target, "out", "file")
        check_output(target.parent / target.stem, "out", "dir")  # its figures' folder
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserInputError(f"out: cannot create {target.parent}: {exc.strerror}") from None
    if shared_root() is None:
        print("profiles report: the original measurement files are not on this machine (set LADDERSIM_SHARED "
              "to a folder holding reference_data/ to use them); comparing with the compact tables shipped "
              "with the profiles", file=sys.stderr)
    path = write_report(args.out)
    print(f"report: {path}", file=sys.stderr)
    return 0
