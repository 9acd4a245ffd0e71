"""The Python API: what the commands do, as functions returning pandas DataFrames.

    import laddersim
    laddersim.simulate(model="llama-3.1-8b", hardware="h100-sxm-nvswitch", tp=2, batch=1,
                       prompt_len=128, gen_len=8, schedules=["standard", "ladder"])

One function per job a user scripts: ``simulate``, ``timeline``, ``sweep``, ``validate``, ``fit``,
``plan``, ``serving``, ``kernels`` (and ``load_profile``), each with the command's parameters and
defaults (``plan`` and ``serving`` run the command's own code, so they answer exactly what it
prints with ``--json``). ``import laddersim`` stays cheap: the package exposes these names lazily
(``laddersim/__init__``) and this module imports the simulator only when a function runs. Bad
input raises ``laddersim.errors.UserInputError`` with the same one-line message the command prints.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from laddersim.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.model_shape import ModelShape

DEFAULT_SCHEDULES = ("standard", "ladder")
# The public functions, in the order the docs list them (laddersim.__all__).
PUBLIC = ("simulate", "timeline", "sweep", "validate", "fit", "plan", "serving", "kernels", "load_profile")


def simulate_schedules(model, hardware, tp: int, batch: int = 1, prompt_len: int = DEFAULT_PROMPT_LEN,
                       gen_len: int = DEFAULT_GEN_LEN, schedules: Iterable[str] = DEFAULT_SCHEDULES, *,
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
        with (progress(f"simulate {schedule}") if progress else contextlib.nullcontext()) as bar:
            results.append(run(scenario, options, progress=bar.update if bar else None))
    rows = [result.summary() for result in results]
    base = next((r["tokens_per_s"] for r in rows if r["schedule"] == "standard"), None)
    for row in rows:
        row["speedup_vs_standard"] = row["tokens_per_s"] / base if base else None
    return rows, results


def simulate(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int, batch: int = 1,
             prompt_len: int = DEFAULT_PROMPT_LEN, gen_len: int = DEFAULT_GEN_LEN,
             schedules: Iterable[str] = DEFAULT_SCHEDULES, *, dtype: str = "bfloat16", framework: str = "gpt-fast",
             kv_cache: str | None = None, kv_reads: str | None = None, jitter: float = 0.0, seed: int = 0,
             exact_steps: bool = False, sample_steps: int | None = None) -> pd.DataFrame:
    """``laddersim simulate``: one row per schedule with the columns of ``simulate --json`` (times
    in seconds, ``tokens_per_s``, ``speedup_vs_standard``, ``exposed_comm_s``, ...).

    ``model``: a preset name (``llama-3.1-70b``), a Hugging Face config.json path or a ModelShape;
    ``hardware``: a profile name (``laddersim profiles list``), a profile .yaml path, a calibration
    run directory or a HardwareProfile. ``schedules``: standard, parallel, ladder, upper_bound,
    desync_half, hybrid:N. ``framework``: gpt-fast or vllm (kernel paths, KV cache, AllReduce);
    ``kv_cache`` (static | dynamic) and ``kv_reads`` (repeat_interleave | per_kv_head) override the
    framework's. ``jitter``: sigma of per-rank lognormal op-time noise (with ``seed``;
    ``exact_steps`` simulates every decode step, ``sample_steps`` a sample of that many)."""
    import pandas as pd

    rows, _ = simulate_schedules(model, hardware, tp, batch, prompt_len, gen_len, schedules, dtype=dtype,
                                 kv_cache=kv_cache, kv_reads=kv_reads, framework=framework, jitter=jitter,
                                 seed=seed, exact_steps=exact_steps, sample_steps=sample_steps)
    return pd.DataFrame(rows)


def timeline(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int, batch: int = 1,
             prompt_len: int = DEFAULT_PROMPT_LEN, gen_len: int = DEFAULT_GEN_LEN,
             schedules: Iterable[str] = DEFAULT_SCHEDULES, steps: str | list[int] = "all",
             ranks: list[int] | None = None, *, dtype: str = "bfloat16", framework: str = "gpt-fast",
             kv_cache: str | None = None, kv_reads: str | None = None, jitter: float = 0.0,
             seed: int = 0) -> pd.DataFrame:
    """The spans ``laddersim plot --kind timeline`` draws, for every schedule: columns ``schedule,
    phase, step, rank, stream, layer, op, kind, start_s, end_s`` (seconds from the start of the
    prefill). ``steps``: "all", "prefill", or a list of decode step indices; ``ranks``: default
    all. The other parameters are ``simulate``'s."""
    import pandas as pd

    _, results = simulate_schedules(model, hardware, tp, batch, prompt_len, gen_len, schedules, dtype=dtype,
                                    kv_cache=kv_cache, kv_reads=kv_reads, framework=framework, jitter=jitter,
                                    seed=seed)
    frames = [r.timeline(steps, ranks).assign(schedule=r.scenario.schedule) for r in results]
    frame = pd.concat(frames, ignore_index=True)
    return frame[["schedule", *[c for c in frame.columns if c != "schedule"]]]


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A hardware profile by name (``laddersim profiles list``), path to a profile .yaml (one with
    ``extends: NAME`` restates only what differs) or calibration run directory."""
    from laddersim.hardware.profile import load_profile as load

    return load(name_or_path)


def sweep(grid: str | Path | dict, out: str | Path, workers: int = 1, scheduler: str | None = None,
          progress: bool = False) -> pd.DataFrame:
    """``laddersim sweep``: ``grid`` is a GRID.yaml path or the same mapping as a dict (keys
    ``models``, ``hardware``, ``tp``, ``batch``, ``prompt_len``, ``gen_len``, ``schedules``,
    ``overrides`` such as ``{"intra_bandwidth_gbps": [100, 400], "gpus_per_node": [4, 8]}``);
    results go to ``out`` (resumable: a re-run reuses stored points) and are returned, one row per
    point. ``scheduler``: a Dask scheduler address instead of ``workers`` local processes."""
    from laddersim.sweep.grid import load_grid, parse_grid
    from laddersim.sweep.sweep_dir import run_sweep

    parsed = parse_grid(grid, where="sweep grid") if isinstance(grid, dict) else load_grid(grid)
    return run_sweep(parsed, out, workers=workers, scheduler=scheduler, progress=progress).frame


def validate(measured: str | Path | pd.DataFrame | None = None, hardware: str | Path | HardwareProfile =
             "h100-sxm-nvswitch", hardware_p2p_off: str | Path | HardwareProfile = "h100-sxm-p2p-off",
             dtype: str = "float16", kv_cache: str | None = None, kv_reads: str | None = None,
             framework: str = "gpt-fast", models: str | Path | None = None) -> pd.DataFrame:
    """``laddersim validate`` without the report: every measured row (default: the built-in copy
    of the paper's 70B figure) with ``predicted_tokens_per_s``, ``rel_error``, ``measured_speedup``,
    ``predicted_speedup`` and ``speedup_error_pp``. ``measured``: a CSV path or a DataFrame with
    columns model, tp, nodes, batch, prompt_len, gen_len, p2p, schedule, tokens_per_s; ``models``:
    a folder of <name>.json configs its model column names (default models/ beside the CSV)."""
    import pandas as pd

    from laddersim.validation.core import ValidationSetup, read_measured, validate as run

    table = measured if isinstance(measured, pd.DataFrame) else read_measured(measured, models)
    return run(table, ValidationSetup(hardware, hardware_p2p_off, dtype, kv_cache, kv_reads, framework))


def fit(measured: str | Path | pd.DataFrame, hardware: str | Path | HardwareProfile, *,
        hardware_p2p_off: str | Path | HardwareProfile = "h100-sxm-p2p-off", with_upper_bound: bool = False,
        with_ladder: bool = False, out: str | Path | None = None, dtype: str = "float16",
        kv_cache: str | None = None, kv_reads: str | None = None, framework: str = "gpt-fast") -> pd.DataFrame:
    """``laddersim fit`` without the report: fit framework overhead and the collective floor (with
    ``with_ladder``, the interference fractions too) of ``hardware`` to the measured rows and
    return what the fitted profile predicts, one row per measured setting and schedule:
    ``predicted_tokens_per_s`` with its 95% interval (``tokens_per_s_low/high``),
    ``predicted_speedup`` with its interval, and the ``measured`` values.

    The fitted numbers are in ``frame.attrs["parameters"]``, the fitted profiles (by p2p setting,
    "on"/"off") in ``frame.attrs["profiles"]``, warnings in ``frame.attrs["warnings"]``. ``out``:
    also write the P2P-on profile there (NEW.yaml or a directory; P2P off beside it, -p2p-off)."""
    import pandas as pd

    from laddersim.fit_predictions import predictions
    from laddersim.fitting import fit_profiles, p2p_off_path, save_profile
    from laddersim.hardware.profile import HardwareProfile, load_profile as load
    from laddersim.validation.core import ValidationSetup, check_rows, read_measured

    table = measured if isinstance(measured, pd.DataFrame) else read_measured(measured)
    schedules = ("standard",) + (("upper_bound",) if with_upper_bound else ()) + (("ladder",) if with_ladder else ())
    p2p = set(table["p2p"])
    base = {"on": hardware if isinstance(hardware, HardwareProfile) else load(hardware)}
    if "off" in p2p:
        base["off"] = hardware_p2p_off if isinstance(hardware_p2p_off, HardwareProfile) else load(hardware_p2p_off)
    setup = ValidationSetup(base["on"], base.get("off", hardware_p2p_off), dtype, kv_cache, kv_reads, framework)
    check_rows(table, setup)
    result = fit_profiles(table, {k: v for k, v in base.items() if k in p2p}, setup, schedules, "laddersim.api.fit",
                          None)
    frame = predictions(result, table, setup)
    if out is not None:
        target = Path(out)
        for key, profile in result.profiles.items():
            path = target if key == "on" else p2p_off_path(target)
            save_profile(profile, path)
    frame.attrs.update(parameters=dict(result.parameters), profiles=dict(result.profiles),
                       warnings=list(result.warnings))
    return frame


def _flags(values: dict) -> list[str]:
    """Command-line words for keyword arguments: None and False are left out, True is a bare flag,
    a list gives its values after one flag."""
    words: list[str] = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            words.append(flag)
        elif isinstance(value, (list, tuple)):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return words


def _command(argv: list[str]):
    """The command's parsed arguments; a usage error raises UserInputError with its one line."""
    from laddersim.cli import build_parser
    from laddersim.errors import UserInputError

    parser = build_parser(argv)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return parser.parse_args(argv)
    except SystemExit:
        message = stderr.getvalue().strip().splitlines()
        raise UserInputError(message[-1].removeprefix("error: ") if message else f"invalid arguments: {argv}") \
            from None


def _command_json(argv: list[str]) -> list:
    """Run a command with ``--json --no-progress``; its JSON answer (a list of objects)."""
    args = _command([*argv, "--json", "--no-progress"])
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        args.func(args)
    return json.loads(stdout.getvalue() or "[]")


def _listed(values):
    """A sequence argument as a list; one name or number given alone is a list of one (a string is
    not split into its characters); None stays None."""
    if values is None:
        return None
    return [values] if isinstance(values, (str, int, float)) else list(values)


def plan(model: str | Path, *, profiles: Sequence[str] | None = None, prices: str | Path | None = None,
         schedules: Sequence[str] = DEFAULT_SCHEDULES, batches: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
         tps: Sequence[int] | None = None, max_nodes: int = 4, prompt_len: int = DEFAULT_PROMPT_LEN,
         gen_len: int = DEFAULT_GEN_LEN, dtype: str = "bfloat16", kv_cache: str = "static",
         min_user_tokens_per_s: float | None = None, min_total_tokens_per_s: float | None = None,
         max_token_latency_ms: float | None = None, rate: float | None = None, ttft_slo_s: float | None = None,
         tpot_slo_s: float | None = None, requests: int = 200, rank_by: str | None = None, top: int = 10,
         workers: int | None = None) -> pd.DataFrame:
    """``laddersim plan``: the cheapest deployments (profile, TP, nodes, replicas, schedule, batch)
    meeting a target, ranked, one row per option (``plan --json``'s objects: ``usd_per_hour``,
    ``usd_per_million_tokens``, ``tpot_s``, ``user_tokens_per_s``, ``total_tokens_per_s``, ...);
    empty when none meets it.

    Decode steady state: the targets are ``min_user_tokens_per_s`` (per user),
    ``min_total_tokens_per_s`` (all replicas) and ``max_token_latency_ms``. With ``rate`` (requests
    per second) and ``ttft_slo_s`` (and optionally ``tpot_slo_s``), deployments are ranked by what
    serving that rate within the SLOs costs instead (a continuous-batching simulation of
    ``requests`` requests per rate tried). ``profiles``: candidate profiles (default every shipped
    one with a price in ``prices``); ``batches``: batch sizes (concurrent users per replica); ``tps``:
    TP degrees (default all valid); ``workers``: processes (default all cores)."""
    import pandas as pd

    argv = ["plan", "--model", str(model)] + _flags({
        "profiles": _listed(profiles), "prices": prices, "schedule": _listed(schedules),
        "batch": _listed(batches), "tp": _listed(tps),
        "max_nodes": max_nodes, "prompt_len": prompt_len, "gen_len": gen_len, "dtype": dtype, "kv_cache": kv_cache,
        "min_user_tokens_per_s": min_user_tokens_per_s, "min_total_tokens_per_s": min_total_tokens_per_s,
        "max_token_latency_ms": max_token_latency_ms, "rate": rate, "ttft_slo_s": ttft_slo_s,
        "tpot_slo_s": tpot_slo_s, "requests": requests, "rank_by": rank_by, "top": top, "workers": workers})
    return pd.DataFrame(_command_json(argv))


def serving(model: str | Path, hardware: str | Path, tp: int, *, rate: float | None = None,
            schedules: Sequence[str] = DEFAULT_SCHEDULES, requests: int = 1000,
            prompt_len: int | str = DEFAULT_PROMPT_LEN, gen_len: int | str = DEFAULT_GEN_LEN,
            gamma_shape: float = 1.0, trace: str | Path | None = None, max_running: int = 64,
            max_batched_tokens: int = 8192, chunked_prefill: bool = False, block_size: int = 16,
            ttft_slo_s: float | None = None, tpot_slo_s: float | None = None, slo_attainment: float = 0.9,
            capacity: bool = False, target_rate: float | None = None, prices: str | Path | None = None,
            dtype: str = "bfloat16", kv_reads: str = "per_kv_head", seed: int = 0,
            per_request: bool = False) -> pd.DataFrame:
    """``laddersim serving``: requests arriving at one replica (Poisson at ``rate`` requests/s, gamma
    gaps with ``gamma_shape`` < 1 burstier, or a ``trace`` CSV of arrival_s, prompt_len,
    output_len) served by a vLLM-style continuous-batching scheduler. One row per schedule
    (``serving --json``'s objects: TTFT/TPOT/E2E percentiles in seconds, throughput, the share of
    requests within the SLOs, goodput; with ``capacity``, the highest rate sustained within the
    SLOs, and with ``target_rate`` the replicas, GPUs and cost to serve it).

    ``prompt_len``/``gen_len``: N tokens or "uniform:LO:HI" / "exponential:MEAN". A rate is
    sustained when ``slo_attainment`` of the requests meet ``ttft_slo_s`` (and ``tpot_slo_s``).
    ``per_request``: instead, every request's row (``schedule`` first: arrival, first token and
    finish times, TTFT, TPOT, ...)."""
    import pandas as pd

    argv = ["serving", "--model", str(model), "--hardware", str(hardware), "--tp", str(tp)] + _flags({
        "rate": rate, "requests": requests, "prompt_len": prompt_len, "gen_len": gen_len,
        "gamma_shape": gamma_shape if gamma_shape != 1.0 else None, "trace": trace, "max_running": max_running,
        "max_batched_tokens": max_batched_tokens, "chunked_prefill": chunked_prefill, "block_size": block_size,
        "ttft_slo_s": ttft_slo_s, "tpot_slo_s": tpot_slo_s, "slo_attainment": slo_attainment,
        "capacity": capacity, "target_rate": target_rate, "prices": prices, "dtype": dtype,
        "kv_reads": kv_reads, "seed": seed})
    for schedule in ([schedules] if isinstance(schedules, str) else schedules):
        argv += ["--schedule", schedule]
    args = _command([*argv, "--no-progress"])
    from laddersim.cli.serving_cmd import serving_rows

    rows, frame, _ = serving_rows(args)
    return frame if per_request else pd.DataFrame(rows)


def kernels(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int, batch: int = 1,
            schedule: str = "standard", framework: str | Path = "gpt-fast", prompt_len: int = DEFAULT_PROMPT_LEN,
            gen_len: int = DEFAULT_GEN_LEN, dtype: str = "bfloat16", phase: str = "decode") -> pd.DataFrame:
    """``laddersim kernels``: what laddersim charges one layer, kernel by kernel, to read beside a
    profiler trace of the same step. One row per kernel of the middle layer of ``schedule``'s
    program on one rank: ``kernel`` (op kind, ``op.part`` within an op), ``class``
    (library_gemm, splitk_reduce, generated, attention, copy, other, collective), ``count`` and
    ``us`` (their device time, microseconds); ``frame.attrs["layer_us"]`` is the layer's
    compute-stream time (collectives excluded).

    ``framework``: a shipped framework (gpt-fast, vllm, ...) or a framework .yaml; ``phase``:
    ``decode`` (the first decode step after a ``prompt_len`` prompt) or ``prefill``."""
    from laddersim.kernel_view import kernel_table

    return kernel_table(model, hardware, tp, batch, schedule=schedule, framework=str(framework),
                        prompt_len=prompt_len, phase=phase, gen_len=gen_len, dtype=dtype)
