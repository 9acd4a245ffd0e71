"""``validate``: measured runs beside laddersim's predictions, errors per model x P2P x framework
group, and the report (laddersim.validation)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.api.common import listed, with_choices
# What the command line shows beside the rows: the columns that tell settings apart, a model's
# label, and the share of the decode time above which a P2P-off pair is scored.
from laddersim.validation.development_groups import groups_markdown  # noqa: F401
from laddersim.validation.labels import model_label, setting_columns  # noqa: F401
from laddersim.validation.p2p_pairs import SCORED_EXTRA_SHARE  # noqa: F401

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.validation.core import ValidationSetup

# The flags of the options a measured table is simulated with, as a Reproduce line states them.
SETUP_FLAGS = {"hardware": "--hardware", "hardware_p2p_off": "--hardware-p2p-off", "dtype": "--dtype",
               "framework": "--framework", "kv_cache": "--kv-cache", "kv_reads": "--kv-reads"}


@with_choices
def validate(measured: str | Path | Sequence[str | Path] | pd.DataFrame | None = None,
             hardware: str | Path | HardwareProfile = "h100-sxm-nvswitch",
             hardware_p2p_off: str | Path | HardwareProfile = "h100-sxm-p2p-off", dtype: str = "float16",
             kv_cache: str | None = None, kv_reads: str | None = None, framework: str = "gpt-fast",
             models: str | Path | None = None, *, report: str | Path | None = None,
             progress: bool = False) -> pd.DataFrame:
    """``laddersim validate``: every measured row (default: every development table shipped in
    ``laddersim/data/validation``, the README's accuracy table) with ``hardware``,
    ``predicted_tokens_per_s``, ``rel_error``, ``measured_speedup``, ``predicted_speedup`` and
    ``speedup_error_pp`` (percentage points).

    ``measured``: a CSV path, several (validated together) or a DataFrame, with columns model,
    tp, nodes, batch, prompt_len, gen_len, p2p, schedule, tokens_per_s (optionally hardware,
    framework, pp: pipeline stages of tp GPUs each, default 1, prefill_s, decode_s); ``models``: a folder of <name>.json configs its model column
    names (default: models/ beside each table). ``hardware``: the profile of rows with p2p=on
    (default h100-sxm-nvswitch); ``hardware_p2p_off``: of rows with p2p=off (default
    h100-sxm-p2p-off); ``dtype``: {DTYPES} (default float16: the paper's); ``framework``:
    {FRAMEWORKS} (default gpt-fast) or a framework .yaml, for rows that name none; ``kv_cache``, ``kv_reads``: override the framework's. ``report``: also write the
    report there (a directory: index.md, the figure, validation.csv, and measured.csv with the
    rows as read, which its Reproduce line names); ``progress``: one line on stderr when the
    simulations start (on a terminal also a bar over the rows and a line when the report starts).

    ``frame.attrs``: ``summary`` (errors overall and per model x P2P x framework group),
    ``p2p_pairs`` (for settings measured with P2P on and off, the error of the decode time P2P
    off adds; None without such pairs), ``development_groups`` (with no ``measured``: the errors
    per table x model x P2P x framework group, as the README's table; else None) and ``report``
    (the index.md written, or None)."""
    import pandas as pd
    from tqdm import tqdm

    from laddersim.errors import UserInputError
    from laddersim.support.io_write import check_output
    from laddersim.validation.core import ValidationSetup, error_summary, read_measured_tables, validate as run
    from laddersim.validation.development_groups import development_groups, read_development_tables
    from laddersim.validation.labels import MODEL_P2P, with_model_p2p
    from laddersim.validation.p2p_pairs import p2p_off_pairs, pair_summary
    from laddersim.validation.report import write_measured, write_report

    setup = ValidationSetup(hardware, hardware_p2p_off, dtype, kv_cache, kv_reads, framework)
    paths = None if isinstance(measured, pd.DataFrame) else listed(measured) or []
    if paths and any(not str(m).strip() for m in paths):
        raise UserInputError("measured: '' is not a path; allowed: CSV files, or nothing for the built-in table")
    if report is not None:
        check_output(report, "report", "dir")  # before any simulation, not after it
    if models is not None and not Path(models).is_dir():
        raise UserInputError(f"models: {models} is not a folder; allowed: a folder of <name>.json model configs")
    tables = None  # per row, the development table it came from (no table given)
    if paths is None:
        table = measured
    elif paths:
        table = read_measured_tables(paths, models)
    else:
        table, tables = read_development_tables()
    on_tty = progress and sys.stderr.isatty()  # a bar over the rows, and the report's step, on a terminal only
    with tqdm(total=len(table), desc="validate", unit="row", file=sys.stderr, leave=False, disable=not on_tty,
              delay=1.0) as bar:  # shown after the line saying how many rows
        frame = run(table, setup, on_start=lambda n: print(f"validating {n} rows ...", file=sys.stderr) if progress
                    else None, on_row=lambda done, _: bar.update(done - bar.n))
    pairs = p2p_off_pairs(frame)
    frame.attrs.update(
        summary=pd.concat([error_summary(frame), error_summary(with_model_p2p(frame), MODEL_P2P)], ignore_index=True),
        p2p_pairs=pair_summary(pairs) if len(pairs) else None, report=None,
        development_groups=development_groups(frame, tables, setup.framework) if tables else None)
    if report is not None:
        if on_tty:
            print(f"writing the report to {report} ...", file=sys.stderr)
        written = write_measured(table, report)
        command = reproduce_command("validate", written, validate, setup_options(setup))
        frame.attrs["report"] = str(write_report(frame, report, command, tp1_check(frame, setup)))
    return frame


def setup_options(setup: ValidationSetup) -> dict:
    """A ValidationSetup as the API's keyword arguments (a profile object by its name)."""
    names = {k: getattr(setup, k) for k in SETUP_FLAGS}
    return {k: getattr(v, "name", v) for k, v in names.items()}


def reproduce_command(command: str, measured: Path, function, options: dict, extra: Sequence[str] = ()) -> str:
    """``laddersim COMMAND MEASURED [--flag value ...] [EXTRA...]``: a report's Reproduce line, naming
    the measured rows the report folder holds and every option that differs from ``function``'s
    default (so the line runs with the files a reader of the report has)."""
    import inspect
    import shlex

    parameters = inspect.signature(function).parameters
    words = ["laddersim", command, str(measured)]
    for name, value in options.items():
        if value is not None and value != parameters[name].default:
            words += [SETUP_FLAGS[name], str(value)]
    return shlex.join([*words, *extra])


def tp1_check(frame: pd.DataFrame, setup: ValidationSetup) -> pd.DataFrame | None:
    """Ladder vs standard at TP 1 for each measured (model, batch) that fits on one GPU of the
    p2p=on profile; when none fits (70B needs two H100s), llama-3.1-8b at the same settings."""
    import pandas as pd

    from laddersim.errors import DoesNotFitError
    from laddersim.simulation.simulate import make_scenario, simulate

    def row(model, batch, prompt, gen):
        out = {s: simulate(make_scenario(model=model, hardware=setup.hardware, tp=1, batch=int(batch),
                                         prompt_len=int(prompt), gen_len=int(gen), schedule=s, dtype=setup.dtype,
                                         kv_cache=setup.kv_cache, kv_reads=setup.kv_reads, framework=setup.framework)
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
