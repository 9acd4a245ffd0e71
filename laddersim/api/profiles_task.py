"""The hardware profiles: ``profiles`` (the shipped ones), ``show_profile`` (every parameter with
its source), ``check_profile`` (the model against the profile's measured tables),
``fit_profile`` (its parameters fitted to them) and ``profiles_report`` (laddersim.profiles_check)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from laddersim.api.common import profile_of

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile


def profiles() -> pd.DataFrame:
    """``laddersim profiles list``: one row per shipped profile: ``name``, ``measured`` (False for a
    what-if built from datasheets), ``gpus_per_node``, ``fabric``, ``network`` (True when it has an
    inter-node tier) and ``description``."""
    import pandas as pd

    from laddersim.hardware.profile import list_profiles, load_profile

    rows = []
    for name in list_profiles():
        prof = load_profile(name)
        rows.append({"name": name, "measured": prof.measured, "gpus_per_node": prof.node.gpus_per_node,
                     "fabric": prof.node.fabric, "network": prof.network is not None,
                     "description": prof.description})
    return pd.DataFrame(rows)


def show_profile(hardware: str | Path | HardwareProfile) -> list[tuple[str, str, str]]:
    """``laddersim profiles show``: every parameter of ``hardware`` (a profile name, path or profile) as
    (path, value, source) triples, beginning with what its fabric offers NCCL; a value with no
    source (a name, a count) has source ""."""
    prof = profile_of(hardware)
    lines: list[tuple[str, str, str]] = _offered(prof)
    _flatten(prof.model_dump(mode="json"), "", lines)
    return lines


def _flatten(value, prefix: str, out: list[tuple[str, str, str]]) -> None:
    """(path, value, source) lines: Sourced values keep their source beside the number."""
    if isinstance(value, dict) and set(value) == {"value", "source"}:
        out.append((prefix, f"{value['value']:g}", value["source"]))
    elif isinstance(value, dict) and "terms" in value and "source" in value:
        terms = "; ".join(f"{t['protocol']}: {t['latency_us']:g} us + bytes/{t['bus_bandwidth_gb_per_s']:g} GB/s"
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

    from laddersim.costs import transport

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


@dataclass(frozen=True)
class ProfileCheck:
    """``check_profile``'s answer: the AllReduce tables' summary (one row per table and GPU x node
    group: rows, the model's and the interpolated table's median and worst relative error, the
    data's own scatter, verdict, reason, origin of the rows) and the GEMM tables' (one row per
    table: rows, median and 90th percentile error over all rows and the Llama-sized ones, passes,
    reason); ``gemm_origin`` says which rows the GEMM tables were compared with."""

    name: str
    allreduce: pd.DataFrame
    gemm: pd.DataFrame
    gemm_origin: str | None


def check_profile(hardware: str | Path | HardwareProfile, shipped: bool = False) -> ProfileCheck:
    """``laddersim profiles check``: the model against every measured table ``hardware`` (a profile
    name, path or profile) lists.
    ``shipped``: compare with the compact tables shipped with the profiles even where the original
    measurement files are named (the environment variable LADDERSIM_SHARED: a folder holding
    reference_data/). Errors are fractions (0.05 = 5%)."""
    import pandas as pd

    from laddersim.profiles_check.compare import check_allreduce, check_gemm, summary_frame

    prof = profile_of(hardware)
    summary = summary_frame(check_allreduce(prof, force_shipped=shipped))
    gemm = check_gemm(prof, force_shipped=shipped)
    rows = [{"table": c.table.file, "rows": len(c.rows), "all_median": c.median("all"), "all_p90": c.p90("all"),
             "llama_median": c.median("llama"), "llama_p90": c.p90("llama"), "passes": c.passes,
             "reason": "" if c.passes else c.table.expect_miss} for c in gemm]
    return ProfileCheck(prof.name, summary, pd.DataFrame(rows), gemm[0].origin if gemm else None)


def fit_profile(hardware: str | Path | HardwareProfile) -> dict:
    """``laddersim profiles fit``: the parameters of ``hardware`` (a profile name, path or profile)
    fitted to its shipped tables, as the
    mapping the command prints as YAML (``intra_node_fits``, ``gemm``, ``network``: what it has)."""
    from laddersim.errors import UserInputError
    from laddersim.fitting.public_tables import fit_gemm, fit_intra_node, fit_network

    prof = profile_of(hardware)
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
    return out


def profiles_report(out: str | Path | None = None) -> Path:
    """``laddersim profiles report``: write the collectives report (a Markdown file, its figures
    in a folder beside it named after it) and return its path. ``out``: default
    reports/collectives.md under the current folder; a report compared with the original
    measurement files is never replaced by one compared with the compact tables (then
    runs/collectives/collectives.md, with a line on stderr)."""
    from laddersim.errors import UserInputError
    from laddersim.support.io_write import check_output
    from laddersim.profiles_check.report import write_report
    from laddersim.profiles_check.sources import reference_data_root

    if out:  # a Markdown file path; its figures go in a folder beside it
        target = Path(out)
        if target.is_dir():
            raise UserInputError(f"out: {target} is a directory; allowed: a Markdown file path such as "
                                 f"{target / 'collectives.md'}")
        check_output(target, "out", "file")
        check_output(target.parent / target.stem, "out", "dir")  # its figures' folder
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserInputError(f"out: cannot create {target.parent}: {exc.strerror}") from None
    if reference_data_root() is None:
        print("profiles report: the original measurement files are not on this machine or not named (set "
              "LADDERSIM_SHARED to a folder holding reference_data/ to use them); comparing with the compact "
              "tables shipped with the profiles", file=sys.stderr)
    return write_report(out)
