"""``simulate`` and ``timeline``: one scenario (model, hardware, TP, workload) under one or more
schedules; ``load_profile``.

``simulate_schedules`` is the task itself (every input checked before the first simulation, the
rows and the simulation results, the optional files); ``simulate`` and ``timeline`` return its
rows and spans as DataFrames. The defaults live in ``simulate``'s signature.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from laddersim.api.common import note_unmeasured, profile_of
from laddersim.support.choices import DEFAULT_SCHEDULES
from laddersim.support.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.model.shape import ModelShape
    from laddersim.simulation.simulate import SimResult

DEFAULT_TRACE_STEPS = 3  # decode steps a trace holds after the prefill


def simulate_schedules(model, hardware, tp: int, batch: int, prompt_len: int, gen_len: int,
                       schedules: Iterable[str], *, dtype: str, framework: str, kv_cache: str | None,
                       kv_reads: str | None, jitter: float, seed: int, exact_steps: bool, sample_steps: int | None,
                       out: str | Path | None = None, trace: str | Path | None = None,
                       trace_steps: int | str = DEFAULT_TRACE_STEPS,
                       progress: bool = False, pp: int = 1, pp_microbatches: int = 1) -> tuple[list[dict], list[SimResult]]:
    """(summary rows, SimResults), one per schedule (each once, in the order given); the rows are
    ``simulate --json``'s objects, with ``speedup_vs_standard`` when ``standard`` is among them.
    The parameters are ``simulate``'s (see there); ``out`` and ``trace`` are checked before the
    first simulation and written after the last, each with one line on stderr."""
    from laddersim.support.io_write import check_output, out_format
    from laddersim.support.progress import ProgressBar
    from laddersim.simulation.simulate import SimOptions, check_memory, make_scenario, scenario_nodes, simulate as run

    if out is not None:
        out_format(out)
        check_output(out, "out")
    if trace is not None:
        check_output(trace, "trace")
    if isinstance(schedules, str):
        schedules = [schedules]
    profile = profile_of(hardware)
    # Every input checked before the first simulation: each schedule's scenario, then the memory
    # (the same for every schedule) before the context warning, so a bad input stays one line.
    scenarios = [make_scenario(model, profile, tp, batch, prompt_len, gen_len, schedule, dtype, kv_cache,
                               kv_reads, framework, pp=pp, microbatches=pp_microbatches)
                 for schedule in dict.fromkeys(schedules)]
    first = scenarios[0]
    first.model.check_tp(tp)
    scenario_nodes(first)  # the stages placed on the profile's nodes, or one line
    check_memory(first)  # every stage's, one line naming the one that does not fit
    first.model.warn_context(prompt_len, gen_len)
    note_unmeasured(profile)
    results = []
    for scenario in scenarios:
        schedule = scenario.schedule
        options = SimOptions(jitter=jitter, seed=seed, exact_steps=exact_steps, sample_steps=sample_steps)
        with (ProgressBar(f"simulate {schedule}") if progress else contextlib.nullcontext()) as bar:
            results.append(run(scenario, options, progress=bar.update if bar else None))
    rows = [result.summary() for result in results]
    base = next((r["tokens_per_s"] for r in rows if r["schedule"] == "standard"), None)
    for row in rows:
        row["speedup_vs_standard"] = row["tokens_per_s"] / base if base else None
    if trace is not None:
        from laddersim.plots.trace import write_schedules_trace

        write_schedules_trace(results, trace, trace_steps)
    if out is not None:
        from laddersim.support.io_write import write_rows

        write_rows(rows, out)
    return rows, results


def simulate(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int, batch: int = 1,
             prompt_len: int = DEFAULT_PROMPT_LEN, gen_len: int = DEFAULT_GEN_LEN,
             schedules: Iterable[str] = DEFAULT_SCHEDULES, *, dtype: str = "bfloat16", framework: str = "gpt-fast",
             kv_cache: str | None = None, kv_reads: str | None = None, jitter: float = 0.0, seed: int = 0,
             exact_steps: bool = False, sample_steps: int | None = None, out: str | Path | None = None,
             trace: str | Path | None = None, trace_steps: int | str = DEFAULT_TRACE_STEPS,
             progress: bool = False, pp: int = 1, pp_microbatches: int = 1) -> pd.DataFrame:
    """``laddersim simulate``: one row per schedule with the columns of ``simulate --json`` (times
    in seconds, ``tokens_per_s``, ``speedup_vs_standard``, ``exposed_comm_s``, ...).

    ``model``: a preset name (``llama-3.1-70b``), a Hugging Face config.json path or a ModelShape;
    ``hardware``: a profile name (``laddersim profiles list``), a profile .yaml path, a calibration
    run directory or a HardwareProfile. ``tp``: tensor-parallel ranks (more than a node's GPUs span
    nodes). ``batch``: sequences (default 1); ``prompt_len``, ``gen_len``: prompt and generated
    tokens per sequence (default 1024 and 512). ``schedules``: standard, parallel, ladder,
    upper_bound, desync_half, hybrid:N (default standard and ladder). ``dtype``: bfloat16
    (default), float16, float32 or fp8. ``framework``: gpt-fast (default), gpt-fast-flash, vllm or
    a framework .yaml (kernel paths, KV cache, AllReduce); ``kv_cache`` (static | dynamic) and
    ``kv_reads`` (repeat_interleave | per_kv_head) override the framework's. ``jitter``: sigma of
    per-rank lognormal op-time noise, 0 to 2 (default 0: none), drawn with ``seed`` (default 0);
    with it ``exact_steps`` simulates every decode step, else ``sample_steps`` of them (default:
    about 120,000 op-rank runs, 4 to 64 steps) with the 95% interval in the ``*_ci95`` columns.
    ``out``: also write the rows to a .csv, .parquet or .json file; ``trace``: a Chrome/Perfetto
    trace (.json) of the prefill and ``trace_steps`` decode steps (a count or "all"; default 3).
    ``progress``: a bar on stderr for a simulation of more than a couple of seconds. ``pp``:
    pipeline stages, each a TP group of ``tp`` GPUs holding a contiguous share of the layers (default
    1: none; the stages placed on the profile's nodes, each stage's memory checked);
    ``pp_microbatches``: batches of ``batch / pp_microbatches`` in flight through the stages, as
    serving engines run a pipeline (default 1: one batch, the stages in turn, as the Ladder
    Residual benchmark runs it). A pipeline's rows add ``pp_microbatches``, ``pipeline_bubble``
    (share of the stages' time idle), ``slowest_stage_step_s``, ``pp_boundary_step_s`` and
    ``pp_boundary_transport`` (its stage boundaries' receives per step and what they cross)."""
    import pandas as pd

    rows, _ = simulate_schedules(model, hardware, tp, batch, prompt_len, gen_len, schedules, dtype=dtype,
                                 framework=framework, kv_cache=kv_cache, kv_reads=kv_reads, jitter=jitter, seed=seed,
                                 exact_steps=exact_steps, sample_steps=sample_steps, out=out, trace=trace,
                                 trace_steps=trace_steps, progress=progress, pp=pp, pp_microbatches=pp_microbatches)
    return pd.DataFrame(rows)


def timeline(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int, batch: int = 1,
             prompt_len: int = DEFAULT_PROMPT_LEN, gen_len: int = DEFAULT_GEN_LEN,
             schedules: Iterable[str] = DEFAULT_SCHEDULES, steps: str | list[int] = "all",
             ranks: list[int] | None = None, *, dtype: str = "bfloat16", framework: str = "gpt-fast",
             kv_cache: str | None = None, kv_reads: str | None = None, jitter: float = 0.0,
             seed: int = 0, pp: int = 1, pp_microbatches: int = 1) -> pd.DataFrame:
    """The spans of every op, rank and step (what ``laddersim plot --kind timeline`` draws), for
    every schedule: columns ``schedule, phase, step, rank, stream, layer, op, kind, start_s, end_s``
    (seconds from the start of the prefill; a pipeline's ranks numbered over its stages, stage s
    holding ranks s*tp to s*tp+tp-1, and a ``microbatch`` column). ``steps``: "all", "prefill", or
    a list of decode step indices; ``ranks``: default all. ``model``, ``hardware``, ``tp``, ``batch``,
    ``prompt_len``, ``gen_len``, ``schedules``, ``dtype``, ``framework``, ``kv_cache``, ``kv_reads``,
    ``jitter``, ``seed``, ``pp``, ``pp_microbatches``: as ``simulate``'s."""
    import pandas as pd

    _, results = simulate_schedules(model, hardware, tp, batch, prompt_len, gen_len, schedules, dtype=dtype,
                                    framework=framework, kv_cache=kv_cache, kv_reads=kv_reads, jitter=jitter,
                                    seed=seed, exact_steps=False, sample_steps=None, pp=pp,
                                    pp_microbatches=pp_microbatches)
    frames = [r.timeline(steps, ranks).assign(schedule=r.scenario.schedule) for r in results]
    frame = pd.concat(frames, ignore_index=True)
    return frame[["schedule", *[c for c in frame.columns if c != "schedule"]]]


def time_sources(result: SimResult) -> dict[str, dict[str, str]]:
    """Where each op kind's time came from, per phase (``prefill``, ``decode``), as AIConfigurator
    labels it: SILICON = a measured table, HYBRID = a measured table extended by the roofline,
    SOL = the roofline/bandwidth model; the kinds in the program's order (a pipeline's: its
    stages' in turn, their receives priced from the profile's send/recv table or the transport
    model)."""
    from laddersim.costs.op_costs import Phase, op_time_sources

    s = result.scenario
    w = s.workload
    stages = getattr(result, "stages", (result,))
    kinds = list(dict.fromkeys(kind for stage in stages for kind in stage.program.kinds))
    receives = result.receive_sources() if hasattr(result, "receive_sources") else {}
    out = {}
    for phase in (Phase("prefill", w.batch, w.prompt_len), Phase("decode", w.batch, 1)):
        sources = op_time_sources(s.model, s.hardware, w, s.tp, phase) | receives
        out[phase.name] = {k: sources[k] for k in kinds if k in sources}
    return out


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A hardware profile; ``name_or_path``: a profile name (``laddersim profiles list``), a path to
    a profile .yaml (one with ``extends: NAME`` restates only what differs) or a calibration run
    directory."""
    from laddersim.hardware.profile import load_profile as load

    return load(name_or_path)
