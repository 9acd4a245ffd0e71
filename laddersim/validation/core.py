"""Simulate every row of a measured tokens/s table and compare.

The measured table has the columns of the paper's figure
(``model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s``) and optionally a
``hardware`` column. Without it, rows with ``p2p = on`` use the ``hardware`` profile and rows
with ``p2p = off`` the ``hardware_p2p_off`` profile (NCCL_P2P_DISABLE=1 on the same machine).
An optional ``framework`` column names each row's framework (``laddersim/data/frameworks``; blank:
the setup's). A model that is neither a preset nor a path is looked up as ``<name>.json`` in the
models folder (``--models DIR``; default: ``models/`` beside the table), and optional
``prefill_s`` / ``decode_s`` columns are compared with the predicted phase times. An optional
``pp`` column (default 1) gives each row's pipeline stages, each a TP group of ``tp`` GPUs, an
optional ``ep`` column (default 1) a mixture-of-experts row's expert-parallel degree within the TP
group (``--ep``); an
optional ``allreduce`` column the AllReduce implementation forced over the row's framework rule
(``laddersim.costs.allreduce_impls``; blank: the framework's). Optional ``quant`` and
``kv_cache_dtype`` columns give each row's quantization of the linears and KV cache element type
(laddersim.model.quantization; blank: none and auto). A ``dtype`` of ``fp8`` (published tables
label FP8 serving so, e.g. TensorRT-LLM's performance tables: FP8 weights and an FP8 KV cache) is
read as ``quant`` fp8 and ``kv_cache_dtype`` fp8 over float16 activations.

Every setting a row carries (``hardware``, ``dtype``, ``framework``, ``allreduce``) is read from the
row; a setting given to the setup (a command-line flag) overrides the column in every row, and a
setting neither gives is the paper's benchmark's (``DEFAULTS``; no ``allreduce``: the framework's rule).
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.errors import UserInputError
from laddersim.model.framework import framework_names
from laddersim.support.resources import data_path
from laddersim.support.io_read import read_text
from laddersim.model.workload import DTYPE_BYTES
from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.simulation.simulate import check_memory, make_scenario, scenario_nodes, simulate
from laddersim.validation.error_stats import error_stats

BUILTIN_MEASURED = data_path("validation", "ladder_70b_tp_sweep.csv")
REQUIRED_COLUMNS = ("model", "tp", "nodes", "batch", "prompt_len", "gen_len", "p2p", "schedule", "tokens_per_s")
INTEGER_COLUMNS = ("tp", "nodes", "batch", "prompt_len", "gen_len")
OPTIONAL_INTEGER_COLUMNS = ("pp", "ep")  # pipeline stages, expert-parallel degree; without the column: 1
# A measured setting; ``hardware`` and ``dtype`` count where the table has them (ladder_bench
# writes dtype: a float32 and a bfloat16 run of one setting are two settings).
SETTING = ["model", "hardware", "framework", "allreduce", "tp", "pp", "ep", "nodes", "batch", "prompt_len", "gen_len",
           "dtype", "quant", "kv_cache_dtype"]
# A table's dtype label for FP8 serving: its quantization, KV cache and activations' dtype.
FP8_LABEL = {"quant": "fp8", "kv_cache_dtype": "fp8", "dtype": "float16"}
MODELS_FOLDER = "models"  # beside a measured table: config.json files its model column names


# A setting that neither the setup nor the row gives: the paper's benchmark (gpt-fast, fp16
# weights, on an H100 SXM node; its P2P-off runs with NCCL_P2P_DISABLE=1 on the same machine).
DEFAULTS = {"hardware": "h100-sxm-nvswitch", "hardware_p2p_off": "h100-sxm-p2p-off", "dtype": "float16",
            "framework": "gpt-fast"}


@dataclass(frozen=True)
class ValidationSetup:
    """How measured rows become scenarios: profiles for P2P on/off and the benchmark's workload.
    ``None`` (hardware, hardware_p2p_off, dtype, framework): the row's own column, else ``DEFAULTS``;
    a value given here overrides the column in every row."""

    hardware: str | HardwareProfile | None = None
    hardware_p2p_off: str | HardwareProfile | None = None
    dtype: str | None = None
    kv_cache: str | None = None  # None: the framework's (gpt-fast: preallocated static cache)
    kv_reads: str | None = None  # None: the framework's (gpt-fast: K/V repeated per query head)
    framework: str | None = None
    allreduce: str | None = None  # None: the row's allreduce column, else each framework's rule

    def default(self, name: str):
        """The setup's ``name`` where given, else the benchmark's default (``DEFAULTS``)."""
        value = getattr(self, name)
        return DEFAULTS[name] if value is None else value


def row_setting(row, name: str, setup: ValidationSetup, column: str | None = None):
    """A row's ``name`` setting: the setup's where given (a flag overrides the table), else the
    row's own ``column`` (default: ``name``) where set, else ``DEFAULTS``."""
    given = getattr(setup, name)
    if given is not None:
        return given
    value = getattr(row, column or name, None)
    if isinstance(value, str) and value:
        return value
    return DEFAULTS[name]


def read_measured(path: str | Path | None = None, models_dir: str | Path | None = None) -> pd.DataFrame:
    """The measured table (the built-in copy of the paper's 70B figure when ``path`` is None);
    model names not a preset are looked up in ``models_dir`` (default: ``models/`` beside it)."""
    path = Path(path) if path else BUILTIN_MEASURED
    try:
        with warnings.catch_warnings():
            # index_col=False would drop the extra fields of a long row with only a warning.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(io.StringIO(read_text(path, "measured")), comment="#", index_col=False)
    except pd.errors.ParserWarning:
        raise UserInputError(f"measured: a row of {path} has more fields than its header") from None
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserInputError(f"measured: cannot read {path}: {str(exc).strip().splitlines()[0]}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise UserInputError(f"measured: {path} lacks columns {missing}; required: {', '.join(REQUIRED_COLUMNS)}")
    if frame.empty:
        raise UserInputError(f"measured: {path} has no rows")
    for column in INTEGER_COLUMNS + tuple(c for c in OPTIONAL_INTEGER_COLUMNS if c in frame.columns):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = frame.loc[values.isna() | ~np.isfinite(values) | (values != values.round()) | (values < 1), column]
        if len(bad):
            raise UserInputError(f"measured: {column} must be a positive whole number in every row of {path}; "
                                 f"row {bad.index[0] + 1} has {str(frame[column].iloc[bad.index[0]])}")
        frame[column] = values.astype(int)
    bad_p2p = sorted(set(frame["p2p"].astype(str)) - {"on", "off"})
    if bad_p2p:
        raise UserInputError(f"measured: p2p values {bad_p2p} in {path}; allowed: on, off")
    tokens = pd.to_numeric(frame["tokens_per_s"], errors="coerce")
    if tokens.isna().any() or (tokens <= 0).any() or not np.isfinite(tokens).all():
        raise UserInputError(f"measured: {path}: tokens_per_s must be positive numbers (finite, > 0)")
    for column in ("model", "schedule", "hardware", "framework", "allreduce"):  # text, even where a cell looks like a number
        if column in frame.columns:
            frame[column] = [value if isinstance(value, str) or pd.isna(value) else str(value)
                             for value in frame[column]]
    for column in ("model", "schedule"):
        if frame[column].isna().any():
            row = int(np.flatnonzero(frame[column].isna().to_numpy())[0]) + 1
            raise UserInputError(f"measured: {column} in row {row} of {path} is blank; allowed: a {column} name")
    frame["tokens_per_s"] = tokens.astype(float)
    if "dtype" in frame.columns:
        _check_dtypes(frame, path)
    _check_quantization(frame, path)
    if "mode" in frame.columns and frame["mode"].nunique(dropna=False) > 1:
        modes = ", ".join(sorted(frame["mode"].astype(str).unique()))
        raise UserInputError(f"measured: {path} mixes mode values ({modes}); validate one mode at a time "
                             "(a profile is simulated in its own timing regime, collectives.mode)")
    if "framework" in frame.columns:
        _check_frameworks(frame, path)
    for column in ("prefill_s", "decode_s"):
        if column in frame.columns:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    folder = Path(models_dir) if models_dir else path.parent / MODELS_FOLDER
    frame["model"] = [_resolve_model(str(m), path, folder) for m in frame["model"]]
    keys = [c for c in SETTING + ["p2p", "schedule"] if c in frame.columns]
    later = frame.index[frame.duplicated(keys)]
    if len(later):
        second = int(later[0])
        same = (frame[keys] == frame.loc[second, keys]).all(axis=1)
        first, second = int(frame.index[same][0]) + 1, second + 1
        raise UserInputError(f"measured: rows {first} and {second} of {path} measure the same setting and schedule; "
                             "keep one row per setting (e.g. the mean of repeated runs)")
    return frame.reset_index(drop=True)


def read_measured_tables(paths: list[str | Path] | None, models_dir: str | Path | None = None) -> pd.DataFrame:
    """Several measured tables as one (the built-in paper figure when none is given); columns one
    table lacks (``hardware``, ``dtype``) are blank in its rows. A setting measured in two tables is
    refused like a repeated row of one table."""
    if not paths:
        return read_measured()
    return combined_tables([read_measured(path, models_dir) for path in paths])


def combined_tables(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Measured tables (``read_measured``'s) as one, rows in the order given; columns one table
    lacks are blank in its rows (``pp``: 1). A setting measured in two tables is refused."""
    if len(frames) == 1:
        return frames[0]
    frame = pd.concat(frames, ignore_index=True)
    for column in OPTIONAL_INTEGER_COLUMNS:  # a table without the column ran no pipeline / no EP
        if column in frame.columns:
            frame[column] = frame[column].fillna(1).astype(int)
    keys = [c for c in SETTING + ["p2p", "schedule"] if c in frame.columns]
    repeated = frame[frame.duplicated(keys, keep=False)]
    if len(repeated):
        row = repeated.iloc[0]
        raise UserInputError(f"measured: the tables measure {row['model']} tp={row['tp']} batch={row['batch']} "
                             f"p2p={row['p2p']} {row['schedule']} twice; keep one row per setting")
    return frame


def _check_frameworks(frame: pd.DataFrame, path: Path) -> None:
    """A ``framework`` column names a shipped framework in every row, or is blank (the setup's)."""
    allowed = framework_names()
    text = frame["framework"].astype("string").str.strip()
    bad = text.notna() & (text != "") & ~text.isin(allowed)
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise UserInputError(f"measured: framework in row {row + 1} of {path} is {str(text.iloc[row])!r}; "
                             f"allowed: {', '.join(allowed)}, or blank for --framework")
    frame["framework"] = [None if pd.isna(v) or not v else str(v) for v in text]


def _check_dtypes(frame: pd.DataFrame, path: Path) -> None:
    """A ``dtype`` column names one of the simulator's dtypes in every row: a blank one (a row cut
    short mid-write, or a mix of tables) would be keyed apart from the setting it really is."""
    text = frame["dtype"].astype("string").str.strip()
    bad = text.isna() | ~text.isin([*DTYPE_BYTES, "fp8"])
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        value = "blank" if pd.isna(text.iloc[row]) or not text.iloc[row] else repr(str(text.iloc[row]))
        raise UserInputError(f"measured: dtype in row {row + 1} of {path} is {value}; allowed: "
                             f"{', '.join(DTYPE_BYTES)}, fp8 in every row (a row cut short mid-write lacks it: "
                             "delete that row), or no dtype column")
    frame["dtype"] = text.astype(str)


def _check_quantization(frame: pd.DataFrame, path: Path) -> None:
    """Optional ``quant`` and ``kv_cache_dtype`` columns name allowed values (blank: none, auto)."""
    from laddersim.support.choices import KV_CACHE_DTYPES, QUANTS

    for column, allowed in (("quant", QUANTS), ("kv_cache_dtype", KV_CACHE_DTYPES)):
        if column not in frame.columns:
            continue
        text = frame[column].astype("string").str.strip().fillna("")
        bad = (text != "") & ~text.isin(allowed)
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise UserInputError(f"measured: {column} in row {row + 1} of {path} is {str(text.iloc[row])!r}; "
                                 f"allowed: {', '.join(allowed)}, or blank")
        frame[column] = text.astype(str)


def row_quantization(row, dtype: str) -> tuple[str, str, str]:
    """(dtype, quant, kv_cache_dtype) of a measured row: its columns where set, a ``dtype`` of fp8
    read as ``FP8_LABEL``."""
    quant = getattr(row, "quant", "") or ""
    kv = getattr(row, "kv_cache_dtype", "") or ""
    if dtype == "fp8":
        return FP8_LABEL["dtype"], quant or FP8_LABEL["quant"], kv or FP8_LABEL["kv_cache_dtype"]
    return dtype, quant or "none", kv or "auto"


def _resolve_model(model: str, table: Path, models_dir: Path) -> str:
    """A model that names a config.json relative to the measured table (as ``ladder_bench.py``
    writes it) is read from there; a bare name that is no preset, from ``models_dir/<name>.json``
    (or ``models_dir/<name>/config.json``); presets and other paths are left as they are."""
    from laddersim.model.shape import PRESETS

    if model in PRESETS or Path(model).is_absolute() or Path(model).exists():
        return model
    beside = table.parent / model
    if beside.exists():
        return str(beside)
    for named in (models_dir / f"{model}.json", models_dir / model / "config.json"):
        if named.is_file():
            return str(named)
    return model


def _profile_for(row, setup: ValidationSetup, cache: dict) -> HardwareProfile:
    key = row_setting(row, "hardware" if row.p2p == "on" else "hardware_p2p_off", setup, "hardware")
    if isinstance(key, HardwareProfile):
        return key
    if key not in cache:
        cache[key] = load_profile(key)
    return cache[key]


def row_framework(row, setup: ValidationSetup) -> str:
    """The row's framework: the setup's where given, else the row's ``framework`` column, else gpt-fast."""
    return row_setting(row, "framework", setup)


def check_rows(frame: pd.DataFrame, setup: ValidationSetup) -> list:
    """The scenario of every row of ``frame``, each checked (model, schedule, TP, memory, node
    count): the first bad row is one UserInputError, before anything is simulated."""
    cache: dict = {}
    scenarios = []
    for row in frame.itertuples(index=False):
        profile = _profile_for(row, setup, cache)
        dtype = row_setting(row, "dtype", setup)  # ladder_bench writes the dtype it ran
        framework = row_framework(row, setup)
        allreduce = setup.allreduce  # given: it overrides the row's allreduce column
        if allreduce is None and isinstance(getattr(row, "allreduce", None), str) and row.allreduce:
            allreduce = row.allreduce  # blank or absent: the framework's rule
        dtype, quant, kv_cache_dtype = row_quantization(row, dtype)
        scenario = make_scenario(model=row.model, hardware=profile, tp=int(row.tp), batch=int(row.batch),
                                 prompt_len=int(row.prompt_len), gen_len=int(row.gen_len), schedule=row.schedule,
                                 dtype=dtype, kv_cache=setup.kv_cache, kv_reads=setup.kv_reads, framework=framework,
                                 pp=int(getattr(row, "pp", 1)), ep=int(getattr(row, "ep", 1)), allreduce=allreduce,
                                 quant=quant, kv_cache_dtype=kv_cache_dtype)
        scenario.model.check_tp(scenario.tp)
        check_memory(scenario)
        if scenario_nodes(scenario) != int(row.nodes):
            where = f"tp={row.tp}" + (f" pp={scenario.pp}" if scenario.pp > 1 else "")
            raise UserInputError(f"measured: row {where} says nodes={row.nodes} but {profile.name} "
                                 f"packs it on {scenario_nodes(scenario)}")
        scenarios.append(scenario)
    return scenarios


def validate(measured: pd.DataFrame | None = None, setup: ValidationSetup | None = None,
             on_start: Callable[[int], None] | None = None,
             on_row: Callable[[int, int], None] | None = None,
             on_checked: Callable[[list], None] | None = None) -> pd.DataFrame:
    """The measured rows plus ``hardware``, ``predicted_tokens_per_s``, ``rel_error``,
    ``measured_speedup``, ``predicted_speedup`` (over ``standard`` at the same setting and p2p)
    and ``speedup_error_pp`` (percentage points). A measured ``speedup`` column (``ladder_bench``'s
    median of per-round ratios, calibration/paired_rounds.py) is the measured speedup where set.

    Every row is checked (model, schedule, TP, memory, node count) before any is simulated; then
    ``on_checked(scenarios)`` (every row's) and ``on_start(rows)`` are called, so a bad row is one
    error and nothing else; ``on_row(done, rows)`` after each row is simulated."""
    setup = setup or ValidationSetup()
    frame = (read_measured() if measured is None else measured).copy()
    scenarios = check_rows(frame, setup)
    if on_checked:
        on_checked(scenarios)
    if on_start:
        on_start(len(scenarios))
    frame["hardware"] = [s.hardware.name for s in scenarios]
    frame["framework"] = [s.workload.framework for s in scenarios]
    if "dtype" in frame.columns:  # as simulated: a --dtype given overrides the table's
        frame["dtype"] = [s.workload.dtype for s in scenarios]
    summaries = []
    for scenario in scenarios:
        summaries.append(simulate(scenario).summary())
        if on_row:
            on_row(len(summaries), len(scenarios))
    frame["predicted_tokens_per_s"] = [s["tokens_per_s"] for s in summaries]
    frame["predicted_prefill_s"] = [s["prefill_s"] for s in summaries]
    frame["predicted_decode_s"] = [s["decode_s"] for s in summaries]
    frame["rel_error"] = frame["predicted_tokens_per_s"] / frame["tokens_per_s"] - 1.0
    keys = [c for c in SETTING + ["p2p"] if c in frame.columns]
    base = frame[frame["schedule"] == "standard"].set_index(keys)
    measured_base, predicted_base = [], []
    for row in frame.itertuples(index=False):
        key = tuple(getattr(row, k) for k in keys)
        if key in base.index:
            measured_base.append(float(base.loc[key, "tokens_per_s"]))
            predicted_base.append(float(base.loc[key, "predicted_tokens_per_s"]))
        else:
            measured_base.append(np.nan)
            predicted_base.append(np.nan)
    frame["measured_speedup"] = frame["tokens_per_s"] / np.array(measured_base)
    if "speedup" in frame.columns:  # measured paired with standard round by round (ladder_bench): preferred
        paired = pd.to_numeric(frame["speedup"], errors="coerce")
        frame["measured_speedup"] = paired.where(paired > 0, frame["measured_speedup"])
    frame["predicted_speedup"] = frame["predicted_tokens_per_s"] / np.array(predicted_base)
    frame["speedup_error_pp"] = (frame["predicted_speedup"] - frame["measured_speedup"]) * 100.0
    return frame


def error_summary(frame: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Median and worst absolute tokens/s error (%) and speedup error (points), overall or by a column."""
    def summarize(part: pd.DataFrame) -> dict:
        other = part[part["schedule"] != "standard"].dropna(subset=["speedup_error_pp"])
        return {"rows": len(part), **error_stats(part["rel_error"], "tokens_per_s"),
                **error_stats(other["speedup_error_pp"], "speedup", scale=1.0, unit="pp")}
    if by is None:
        return pd.DataFrame([{"group": "all", **summarize(frame)}])
    rows = [{"group": f"{by}={value}", **summarize(part)} for value, part in frame.groupby(by, sort=True)]
    return pd.DataFrame(rows)
