"""The Python API: what the commands do, as functions returning pandas DataFrames.

    import laddersim
    laddersim.simulate(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2, batch=1,
                       prompt_len=128, gen_len=8, schedules=["standard", "ladder"])

``import laddersim`` stays cheap: the package exposes these names lazily (``laddersim/__init__``)
and this module imports the simulator only when a function runs. Bad input raises
``laddersim.errors.UserInputError`` with the same one-line message the command prints.
"""

from __future__ import annotations

from pathlib import Path
from contextlib import nullcontext
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_SCHEDULES = ("standard", "ladder")


def simulate_schedules(model, hardware, tp: int, batch: int = 1, prompt_len: int = 1024,
                       gen_len: int = 512, schedules: Iterable[str] = DEFAULT_SCHEDULES, *,
                       dtype: str = "bfloat16", kv_cache: str | None = None,
                       kv_reads: str | None = None, framework: str = "gpt-fast", jitter: float = 0.0,
                       seed: int = 0, exact_steps: bool = False, sample_steps: int | None = None,
                       progress=None) -> tuple[list[dict], list]:
    """(summary rows, SimResults), one per schedule (each once, in the order given); the rows are
    ``simulate --json``'s objects, with ``speedup_vs_standard`` when ``standard`` is among them.
    ``exact_steps``/``sample_steps``: with ``jitter``, every decode step or a sample of them;
    ``progress``: a factory ``progress(label)`` of context managers with ``update(done, total,
    op_ranks)`` (the command's stderr bar), or None."""
    from laddersim.hardware.profile import HardwareProfile, load_profile
    from laddersim.costs.memory_fit import check_fits
    from laddersim.simulate import SimOptions, make_scenario, simulate as run

    if isinstance(schedules, str):
        schedules = [schedules]
    profile = hardware if isinstance(hardware, HardwareProfile) else load_profile(hardware)
    # Every input checked before the first simulation: each schedule's scenario, then the memory
    # (the same for every schedule) before the context warning, so a bad input stays one line.
    scenarios = [make_scenario(model, profile, tp, batch, prompt_len, gen_len, schedule, dtype, kv_cache,
                               kv_reads, framework) for schedule in dict.fromkeys(schedules)]
    first = scenarios[0]
    check_fits(first.model, first.hardware, first.workload, first.tp)
    first.model.warn_context(prompt_len, gen_len)
    results = []
    for scenario in scenarios:
        schedule = scenario.schedule
        options = SimOptions(jitter=jitter, seed=seed, exact_steps=exact_steps, sample_steps=sample_steps)
        with (progress(f"simulate {schedule}") if progress else nullcontext()) as bar:
            results.append(run(scenario, options, progress=bar.update if bar else None))
    rows = [result.summary() for result in results]
    base = next((r["tokens_per_s"] for r in rows if r["schedule"] == "standard"), None)
    for row in rows:
        row["speedup_vs_standard"] = row["tokens_per_s"] / base if base else None
    return rows, results


def simulate(model, hardware, tp: int, batch: int = 1, prompt_len: int = 1024, gen_len: int = 512,
             schedules: Iterable[str] = DEFAULT_SCHEDULES, **workload) -> pd.DataFrame:
    """One row per schedule with the columns of ``laddersim simulate --json`` (times in s).

    ``model``: a preset name, a config.json path or a ModelShape; ``hardware``: a profile name,
    path, calibration run directory or a HardwareProfile. ``workload``: ``dtype``, ``kv_cache``,
    ``kv_reads``, ``jitter``, ``seed`` as the command's flags."""
    import pandas as pd

    rows, _ = simulate_schedules(model, hardware, tp, batch, prompt_len, gen_len, schedules, **workload)
    return pd.DataFrame(rows)


def timeline(model, hardware, tp: int, batch: int = 1, prompt_len: int = 1024, gen_len: int = 512,
             schedules: Iterable[str] = DEFAULT_SCHEDULES, steps: str | list[int] = "all",
             ranks: list[int] | None = None, **workload) -> pd.DataFrame:
    """The spans of every schedule: ``schedule, phase, step, rank, stream, layer, op, kind,
    start_s, end_s`` (absolute seconds from the start of the prefill). ``steps``: "all",
    "prefill", or a list of decode step indices; ``ranks``: default all."""
    import pandas as pd

    _, results = simulate_schedules(model, hardware, tp, batch, prompt_len, gen_len, schedules, **workload)
    frames = [r.timeline(steps, ranks).assign(schedule=r.scenario.schedule) for r in results]
    frame = pd.concat(frames, ignore_index=True)
    return frame[["schedule", *[c for c in frame.columns if c != "schedule"]]]


def load_profile(name_or_path):
    """A hardware profile by name (``laddersim profiles list``), path or calibration run directory."""
    from laddersim.hardware.profile import load_profile as load

    return load(name_or_path)


def sweep(grid, out: str | Path, workers: int = 1, scheduler: str | None = None,
          progress: bool = False) -> pd.DataFrame:
    """``laddersim sweep``: ``grid`` is a GRID.yaml path or the same mapping as a dict (keys
    ``models``, ``hardware``, ``tp``, ...); results go to ``out`` (resumable) and are returned."""
    from laddersim.sweep.grid import load_grid, parse_grid
    from laddersim.sweep.sweep_dir import run_sweep

    parsed = parse_grid(grid, where="sweep grid") if isinstance(grid, dict) else load_grid(grid)
    return run_sweep(parsed, out, workers=workers, scheduler=scheduler, progress=progress).frame


def validate(measured: str | Path | pd.DataFrame | None = None, hardware="h100-sxm-nvswitch",
             hardware_p2p_off="h100-sxm-p2p-off", dtype: str = "float16", kv_cache: str | None = None,
             kv_reads: str | None = None, framework: str = "gpt-fast") -> pd.DataFrame:
    """``laddersim validate`` without the report: every measured row (default: the built-in
    paper table) with ``predicted_tokens_per_s``, ``rel_error`` and the speedups."""
    import pandas as pd

    from laddersim.validation.core import ValidationSetup, read_measured, validate as run

    table = measured if isinstance(measured, pd.DataFrame) else read_measured(measured)
    return run(table, ValidationSetup(hardware, hardware_p2p_off, dtype, kv_cache, kv_reads, framework))
