"""Every development group's errors: the table the README and the report quote.

The development tables (the Ladder Residual authors' measured runs, ``DEVELOPMENT_TABLES``) ship in
``laddersim/data/validation/`` with their PROVENANCE.md. ``read_development_tables`` reads them as one
measured table, ``development_groups`` turns their validation (shipped profiles, no fit) into one
row per table x model x P2P x framework group; ``laddersim validate`` with no table prints it.
``tools/dev/fidelity_figures.py --groups`` writes the same rows to
``laddersim/data/validation/development_groups.csv`` (its header names the command) and into the
README between its markers, so the report can quote them without validating 673 rows.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.support.resources import data_path
from laddersim.validation.core import combined_tables, read_measured
from laddersim.validation.labels import model_label

# Every measured table the simulator is developed against, in the order the groups table lists them.
DEVELOPMENT_TABLES = ("ladder_70b_tp_sweep.csv", "ladder_8b_tp_sweep.csv", "ladder_flash_p2p_sweep.csv",
                      "ladder_graph_p2p_sweep.csv", "ladder_405b_2node.csv", "ladder_pp_sweep.csv")
GROUPS_FILE = data_path("validation", "development_groups.csv")
GROUP_COLUMNS = ["table", "model", "p2p", "framework"]
ERROR_COLUMNS = ["rows", "tokens_per_s_median_abs_err_pct", "tokens_per_s_worst_abs_err_pct",
                 "speedup_median_abs_err_pp", "speedup_worst_abs_err_pp", "prefill_rows",
                 "prefill_median_abs_err_pct"]
README_START = "<!-- development-groups: start (tools/dev/fidelity_figures.py --groups writes this table) -->"
README_END = "<!-- development-groups: end -->"


def development_table_paths() -> list[Path]:
    """The shipped development tables, in ``DEVELOPMENT_TABLES`` order."""
    return [data_path("validation", name) for name in DEVELOPMENT_TABLES]


def read_development_tables() -> tuple[pd.DataFrame, list[str]]:
    """The shipped development tables as one measured table (``combined_tables``) and, per row,
    the name of the table it came from."""
    frames = [read_measured(path) for path in development_table_paths()]
    names = [name for name, frame in zip(DEVELOPMENT_TABLES, frames) for _ in range(len(frame))]
    return combined_tables(frames), names


def development_groups(validated: pd.DataFrame, tables: list[str], framework: str) -> pd.DataFrame:
    """``group_errors`` of each table's rows of ``validated`` (``tables``: the table of each row,
    as ``read_development_tables`` gives them), tables in the order they first appear, errors
    rounded to 2 decimals as the committed file holds them."""
    names = pd.Series(tables, index=validated.index)
    parts = [group_errors(validated[names == name], name, framework) for name in dict.fromkeys(tables)]
    return rounded_groups(pd.concat(parts, ignore_index=True))


def rounded_groups(groups: pd.DataFrame) -> pd.DataFrame:
    """``groups`` as written to and read back from the committed file (errors to 2 decimals), so
    a table printed from them is the README's to the last digit."""
    return pd.read_csv(io.StringIO(groups.to_csv(index=False, float_format="%.2f", lineterminator="\n")))


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
              f"# the measured tables {', '.join(tables)} (laddersim/data/validation, see its PROVENANCE.md).",
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
