"""Every development group's errors, as a committed compact table the report and the README quote.

The measured development tables (../shared/validation) are not shipped, so the report cannot
validate them itself and stay byte-identical without them. ``tools/dev/fidelity_figures.py --groups``
validates each one where ../shared is present (shipped profiles, no fit) and writes one row per
table x model x P2P x framework group to ``laddersim/data/validation/development_groups.csv``
(its header names the command), and the same table into the README between its markers.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.support.resources import data_path
from laddersim.validation.labels import model_label

GROUPS_FILE = data_path("validation", "development_groups.csv")
GROUP_COLUMNS = ["table", "model", "p2p", "framework"]
ERROR_COLUMNS = ["rows", "tokens_per_s_median_abs_err_pct", "tokens_per_s_worst_abs_err_pct",
                 "speedup_median_abs_err_pp", "speedup_worst_abs_err_pp", "prefill_rows",
                 "prefill_median_abs_err_pct"]
README_START = "<!-- development-groups: start (tools/dev/fidelity_figures.py --groups writes this table) -->"
README_END = "<!-- development-groups: end -->"


def group_errors(frame: pd.DataFrame, table: str, framework: str) -> pd.DataFrame:
    """One row per model x P2P x framework group of a validated table (``validate``'s output):
    tokens/s error median and worst (%), speedup error median and worst (pp, the non-standard
    rows), and the prefill time's median error (%) over the rows that measured one. ``framework``
    names the rows that carry none (the setup's)."""
    frame = frame.copy()
    frame["framework"] = frame["framework"].fillna(framework) if "framework" in frame.columns else framework
    rows = []
    for (model, p2p, fw), part in frame.groupby(["model", "p2p", "framework"], sort=True):
        other = part[part["schedule"] != "standard"]["speedup_error_pp"].abs().dropna()
        prefill = (part["predicted_prefill_s"] / part["prefill_s"] - 1).abs().dropna() * 100 \
            if "prefill_s" in part.columns else pd.Series(dtype=float)
        tokens = part["rel_error"].abs() * 100
        rows.append({"table": table, "model": model_label(model), "p2p": p2p, "framework": fw, "rows": len(part),
                     "tokens_per_s_median_abs_err_pct": tokens.median(), "tokens_per_s_worst_abs_err_pct": tokens.max(),
                     "speedup_median_abs_err_pp": other.median() if len(other) else np.nan,
                     "speedup_worst_abs_err_pp": other.max() if len(other) else np.nan,
                     "prefill_rows": len(prefill), "prefill_median_abs_err_pct": prefill.median() if len(prefill) else np.nan})
    return pd.DataFrame(rows, columns=GROUP_COLUMNS + ERROR_COLUMNS)


def groups_csv(groups: pd.DataFrame, command: str, tables: list[str]) -> str:
    """The committed file's text: a header naming the command and the tables, then the rows."""
    header = ["# Every development group's prediction errors: laddersim's shipped profiles, no fit, against",
              f"# the measured tables {', '.join(tables)} (../shared/validation, not shipped).",
              f"# Written by: {command}",
              "# Errors are absolute: tokens/s and prefill time in %, speedup over standard in percentage points."]
    body = groups.to_csv(index=False, float_format="%.2f", lineterminator="\n")
    return "\n".join(header) + "\n" + body


def read_groups(path: Path = GROUPS_FILE) -> tuple[pd.DataFrame, str]:
    """The committed groups table and the command that wrote it."""
    text = path.read_text()
    command = next(line.split("Written by: ", 1)[1] for line in text.splitlines() if "Written by: " in line)
    return pd.read_csv(io.StringIO(text), comment="#"), command


def groups_markdown(groups: pd.DataFrame) -> str:
    """The groups as a Markdown table (blank where a group has no speedup or prefill rows)."""
    def num(value, fmt: str) -> str:
        return "" if pd.isna(value) else fmt.format(value)
    lines = ["| table | model | P2P | framework | rows | tokens/s median | tokens/s worst | speedup median | "
             "speedup worst | prefill median |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in groups.itertuples(index=False):
        lines.append(f"| {r.table} | {r.model} | {r.p2p} | {r.framework} | {r.rows} | "
                     f"{num(r.tokens_per_s_median_abs_err_pct, '{:.1f}%')} | {num(r.tokens_per_s_worst_abs_err_pct, '{:.1f}%')} | "
                     f"{num(r.speedup_median_abs_err_pp, '{:.1f} pp')} | {num(r.speedup_worst_abs_err_pp, '{:.1f} pp')} | "
                     f"{num(r.prefill_median_abs_err_pct, '{:.1f}%')} |")
    return "\n".join(lines)


def with_readme_table(readme: str, groups: pd.DataFrame) -> str:
    """``readme`` with the table between its markers replaced by ``groups``."""
    start, end = readme.index(README_START) + len(README_START), readme.index(README_END)
    return readme[:start] + "\n" + groups_markdown(groups) + "\n" + readme[end:]
