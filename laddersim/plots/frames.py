"""Reading a results table for plotting: keep ok rows, check columns, derive the speedup column.

A results table is tidy: one row per (scenario, schedule), input columns (model, hardware, tp,
batch, ..., what-if override columns) and the metric columns of ``SimResult.summary()``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.errors import UserInputError
from laddersim.support.io_read import read_csv

# Columns that are outputs, not inputs: two rows differing only in these are the same scenario.
OUTPUT_COLUMNS = frozenset({
    "schedule", "status", "error", "message", "nodes",
    "prefill_s", "decode_s", "total_s", "tokens_per_s", "ttft_s", "tpot_s", "decode_step_s",
    "compute_s", "overhead_s", "comm_s", "exposed_comm_s", "memory_per_gpu_gib",
    "speedup_vs_standard",
})


def read_results(path: str | Path) -> pd.DataFrame:
    """A results table from ``.parquet`` or ``.csv`` (chosen by extension)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise UserInputError(f"results: '{path}' has extension '{suffix}'; allowed: .parquet, .csv")
    if not path.is_file():
        raise UserInputError(f"results: no such file '{path}'")
    try:
        frame = pd.read_parquet(path) if suffix == ".parquet" else read_csv(path, "results")
    except (OSError, ValueError) as exc:
        raise UserInputError(f"results: cannot read '{path}': {exc}") from None
    return _typed(frame, path)


# Columns that hold numbers wherever they appear (empty cells allowed: a row that did not run).
_NUMERIC = ("tp", "batch", "prompt_len", "gen_len") + tuple(sorted(OUTPUT_COLUMNS - {"schedule", "status", "error",
                                                                                     "message"}))


def _typed(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Numeric columns as finite numbers, text columns as text: a stray cell is one error line."""
    frame = frame.copy()
    for column in frame.columns:
        numeric = column in _NUMERIC or column.endswith(("_scale", "_gbps", "_us", "_slowdown")) \
            or column == "nics_per_node"
        if not numeric:
            continue
        if not pd.api.types.is_numeric_dtype(frame[column]):  # a blank cell ('' or spaces, as parquet keeps it) is empty
            frame[column] = frame[column].map(lambda v: np.nan if isinstance(v, str) and not v.strip() else v)
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = (values.isna() & frame[column].notna()) | values.isin([np.inf, -np.inf])
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise UserInputError(f"results: {path}: row {row + 1}: {column} = {frame[column].iloc[row]!r}; "
                                 "allowed: a finite number or empty")
        frame[column] = values
    for column in ("model", "hardware", "schedule", "status", "dtype", "kv_cache", "kv_reads"):
        if column in frame.columns:
            frame[column] = frame[column].astype("string")
    return frame


def parse_where(clauses: list[str] | None) -> dict[str, list[str]]:
    """``["tp=8", "tp=4", "model=llama-3.1-70b"]`` -> {"tp": ["8", "4"], "model": [...]}.

    Repeating a column means "any of these values" (tp in {8, 4}); different columns must all match.
    """
    where: dict[str, list[str]] = {}
    for clause in clauses or []:
        column, sep, value = clause.partition("=")
        if not sep or not column.strip():
            raise UserInputError(f"where: '{clause}' is not COLUMN=VALUE")
        values = where.setdefault(column.strip(), [])
        if value.strip() not in values:
            values.append(value.strip())
    return where


def select(frame: pd.DataFrame, where: dict[str, str | list[str]]) -> pd.DataFrame:
    """Rows whose ``column`` equals one of its values (a single value or a list: any of them), for
    every column given. Compared as text, so 8 matches 8 and 8.0 matches 8.0."""
    for column, values in where.items():
        if column not in frame.columns:
            raise UserInputError(f"where: no column '{column}'; allowed: {', '.join(map(str, frame.columns))}")
        if isinstance(values, str):
            values = [values]
        as_text = frame[column].astype(str)
        keep = pd.Series(False, index=frame.index)
        for value in values:
            matches = as_text == value
            if not matches.any():
                # 1 should select 1.0 in a float column: compare numerically when both sides are numbers.
                try:
                    matches = pd.to_numeric(frame[column], errors="coerce") == float(value)
                except ValueError:
                    pass
            keep |= matches
        frame = frame[keep]
    return frame


def ok_rows(frame: pd.DataFrame, kind: str, needed: list[str]) -> pd.DataFrame:
    """Rows with status ok (all rows if there is no status column); errors name the missing columns."""
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise UserInputError(f"results: the {kind} plot needs column(s) {', '.join(missing)}; "
                             f"the table has: {', '.join(map(str, frame.columns))}")
    if "status" in frame.columns:
        frame = frame[frame["status"] == "ok"]
    frame = frame.dropna(subset=needed)
    if frame.empty:
        raise UserInputError(f"results: no rows with status ok and values for {', '.join(needed)} to plot")
    return frame


def not_run_rows(frame: pd.DataFrame, needed: list[str]) -> pd.DataFrame:
    """Rows the table marks as not run (status infeasible or error) that have the ``needed``
    inputs: a plot marks their place instead of leaving it silently empty."""
    if "status" not in frame.columns or any(c not in frame.columns for c in needed):
        return frame.iloc[:0]
    return frame[(frame["status"] != "ok") & frame[needed].notna().all(axis=1)]


def not_run_reason(error) -> str:
    """What a not-run row's place reads: "out of memory" for a configuration that does not fit
    (the memory check's message starts ``memory:``), else "not run"."""
    return "out of memory" if isinstance(error, str) and error.startswith("memory:") else "not run"


def matching(frame: pd.DataFrame, selector: dict) -> pd.DataFrame:
    """Rows of ``frame`` equal to ``selector`` on its columns (compared as text)."""
    for column, value in selector.items():
        if column in frame.columns:
            frame = frame[frame[column].astype(str) == str(value)]
    return frame


def input_columns(frame: pd.DataFrame) -> list[str]:
    """Columns that identify a scenario (everything but the schedule and the outputs)."""
    return [c for c in frame.columns if c not in OUTPUT_COLUMNS]


def with_speedup(frame: pd.DataFrame) -> pd.DataFrame:
    """``speedup_vs_standard`` = tokens/s over the standard schedule's on the same inputs.

    Kept as is when the table already has it; otherwise derived (NaN where there is no standard row).
    """
    if "speedup_vs_standard" in frame.columns and frame["speedup_vs_standard"].notna().any():
        return frame
    if "schedule" not in frame.columns or "tokens_per_s" not in frame.columns:
        raise UserInputError("results: speedup needs columns schedule and tokens_per_s")
    keys = input_columns(frame)
    standard = {}
    for key, schedule, tokens in zip(_row_keys(frame, keys), frame["schedule"], frame["tokens_per_s"]):
        if schedule == "standard":
            standard.setdefault(key, tokens)
    out = frame.copy()
    out["speedup_vs_standard"] = [tokens / standard[key] if key in standard else float("nan")
                                  for key, tokens in zip(_row_keys(frame, keys), frame["tokens_per_s"])]
    return out


def _row_keys(frame: pd.DataFrame, keys: list[str]) -> list[tuple]:
    """Each row's values of ``keys``; NaN (an unset override) becomes None so that it matches itself."""
    return [tuple(None if pd.isna(v) else v for v in row) for row in frame[keys].itertuples(index=False, name=None)]


def varying(frame: pd.DataFrame, columns: list[str]) -> list[str]:
    """The columns among ``columns`` (present in the frame) that take more than one value."""
    return [c for c in columns if c in frame.columns and frame[c].nunique(dropna=False) > 1]


def label(values: dict) -> str:
    """'llama-3.1-70b, TP 8, batch 16' from a dict of column values."""
    return ", ".join(column_words(column, value) for column, value in values.items())


# Characters of a panel title (axes.titlesize 10 pt, DejaVu Sans) that fit in one inch of panel.
TITLE_CHARS_PER_IN = 11


def panel_title(values: dict, panel_w_in: float) -> str:
    """``label(values)`` wrapped between its parts so each line fits a panel ``panel_w_in`` wide:
    long what-if override names would otherwise run into the neighbouring panel's title."""
    width = max(12, int(panel_w_in * TITLE_CHARS_PER_IN))
    lines: list[str] = []
    for column, value in values.items():
        part = column_words(column, value)
        if lines and len(lines[-1]) + 2 + len(part) <= width:
            lines[-1] += ", " + part
        elif len(part) > width and column not in _BARE and column in COLUMN_WORDS:
            # Too long for one line: its name above its value ("intra-node bandwidth" / "100 GB/s").
            name = COLUMN_WORDS[column][0]
            lines += [name, part[len(name) + 1:]]
        else:
            lines.append(part)
    return "\n".join(lines)


# How an input column reads in a title or a legend: its name in words and its value's format.
COLUMN_WORDS = {
    "tp": ("TP", "{}"), "batch": ("batch", "{}"), "nodes": ("nodes", "{}"), "prompt_len": ("prompt", "{}"),
    "gen_len": ("gen", "{}"),
    "intra_bandwidth_scale": ("intra-node bandwidth", "{}x"),
    "intra_bandwidth_gbps": ("intra-node bandwidth", "{} GB/s"),
    "intra_latency_scale": ("intra-node latency", "{}x"),
    "intra_latency_us": ("intra-node latency", "{} us"),
    "inter_bandwidth_scale": ("inter-node bandwidth", "{}x"),
    "inter_bandwidth_gbps": ("inter-node bandwidth", "{} GB/s"),
    "inter_latency_scale": ("inter-node latency", "{}x"),
    "inter_latency_us": ("inter-node latency", "{} us"),
    "nics_per_node": ("NICs per node", "{}"),
    "gpus_per_node": ("GPUs per node", "{}"),
    "compute_slowdown": ("compute slowdown", "{}"),
    "comm_slowdown": ("communication slowdown", "{}"),
}
# Columns whose value alone says what it is (a name, a schedule, a dtype).
_BARE = ("model", "hardware", "schedule", "dtype", "kv_cache", "kv_reads", "framework")


def column_words(column: str, value) -> str:
    """One input value in words: ``intra-node bandwidth 50 GB/s``, ``TP 8``; an override the row
    leaves unset (NaN) reads "as profiled"."""
    if column in _BARE:
        return str(value)
    name, unit = COLUMN_WORDS.get(column, (column.replace("_", " "), "{}"))
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return f"{name} as profiled"
    return f"{name} {unit.format(number_text(value))}"


def number_text(value) -> str:
    """A number as a reader writes it: 50, not 50.0; 0.125; 1e+06 for very large ones."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def groups(frame: pd.DataFrame, keys: list[str]) -> list[tuple[dict, pd.DataFrame]]:
    """(values of ``keys``, rows) per distinct combination, sorted; NaN is a value of its own
    (an override a sweep left unset), not a reason to drop rows."""
    if not keys:
        return [({}, frame)]
    return [(dict(zip(keys, value if isinstance(value, tuple) else (value,))), rows)
            for value, rows in frame.groupby(keys, sort=True, dropna=False)]


def titled(title: str, rows: pd.DataFrame, shown: list[str]) -> str:
    """``title`` plus the inputs that are constant over ``rows`` and not shown elsewhere."""
    keep = [c for c in ("model", "hardware", "tp", "batch", "prompt_len", "gen_len")
            if c in rows.columns and c not in shown and rows[c].nunique() == 1]
    fixed = label({c: rows[c].iloc[0] for c in keep})
    return f"{title}\n{fixed}" if fixed else title
