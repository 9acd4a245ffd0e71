"""``simulate`` and ``timeline``: one scenario (model, hardware, TP, workload, what-if changes of
the profile) under one or more schedules; ``load_profile``.

``simulate_schedules`` is the task itself (every input checked before the first simulation, the
rows and the simulation results, the optional files), taking the scenario and the run options as
objects (``laddersim.api.params``); ``simulate`` and ``timeline`` build them from their keywords and
return the rows and spans as DataFrames. The defaults are the objects' fields.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from laddersim.api.common import note_calibration, note_unmeasured, profile_of, with_choices
from laddersim.api.params import RUN, SCENARIO, RunOptions, ScenarioParams
from laddersim.support.choices import DEFAULT_SCHEDULES

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.model.shape import ModelShape
    from laddersim.simulation.simulate import Scenario, SimResult

DEFAULT_TRACE_STEPS = 3  # decode steps a trace holds after the prefill


def scenario_profile(params: ScenarioParams) -> HardwareProfile:
    """The scenario's profile with its what-if overrides applied, as a sweep applies a grid's
    (set values converted for the scenario's TP group; ``laddersim.sweeps.overrides``)."""
    profile = profile_of(params.hardware)
    what_if = params.what_if()
    if not what_if:
        return profile
    from laddersim.hardware.overrides import with_overrides
    from laddersim.sweeps.overrides import override_scales

    scales = override_scales(profile, what_if, params.tp)
    return with_overrides(profile, **scales) if scales else profile


def scenarios_of(params: ScenarioParams, schedules: Iterable[str]) -> list[Scenario]:
    """The simulator's scenario of each schedule (each once, in the order given), every input
    checked: each schedule's, then TP, the stages' placement on the profile's nodes and the memory
    (the same for every schedule), before the context warning, so a bad input stays one line."""
    from laddersim.errors import DoesNotFitError
    from laddersim.simulation.simulate import check_memory, make_scenario, scenario_nodes

    profile = scenario_profile(params)
    scenarios = [make_scenario(model=params.model, hardware=profile, tp=params.tp, batch=params.batch,
                               prompt_len=params.prompt_len, gen_len=params.gen_len, schedule=schedule,
                               dtype=params.dtype, kv_cache=params.kv_cache, kv_reads=params.kv_reads,
                               framework=params.framework, pp=params.pp, microbatches=params.pp_microbatches,
                               allreduce=params.allreduce, quant=params.quant, kv_cache_dtype=params.kv_cache_dtype,
                               ep=params.ep, dp_attention=params.dp_attention)
                 for schedule in dict.fromkeys([schedules] if isinstance(schedules, str) else schedules)]
    if not scenarios:
        from laddersim.errors import UserInputError

        raise UserInputError("schedules: give at least one schedule")
    first = scenarios[0]
    first.model.check_tp(params.tp)
    scenario_nodes(first)  # the stages placed on the profile's nodes, or one line
    try:
        check_memory(first)  # every stage's, one line naming the one that does not fit
    except DoesNotFitError as exc:  # an MoE model: name the expert-parallel layout that fits
        from laddersim.planning.ep_layout import with_smallest_ep

        if params.dp_attention:
            raise
        raise with_smallest_ep(exc, first.model, first.hardware, first.workload, params.tp) from None
    first.model.warn_context(params.prompt_len, params.gen_len)
    return scenarios


def simulate_schedules(scenario: ScenarioParams, schedules: Iterable[str], options: RunOptions = RunOptions(), *,
                       out: str | Path | None = None, trace: str | Path | None = None,
                       trace_steps: int | str = DEFAULT_TRACE_STEPS,
                       progress: bool = False) -> tuple[list[dict], list[SimResult]]:
    """(summary rows, SimResults), one per schedule (each once, in the order given); the rows are
    ``simulate --json``'s objects, with ``speedup_vs_standard`` when ``standard`` is among them.
    ``out``, ``trace``, ``trace_steps`` and ``progress`` are ``simulate``'s (see there); ``out``
    and ``trace`` are checked before the first simulation and written after the last, each with
    one line on stderr."""
    from laddersim.support.io_write import check_output, out_format
    from laddersim.support.progress import ProgressBar
    from laddersim.simulation.simulate import scenario_nodes, simulate as run

    if out is not None:
        out_format(out)
        check_output(out, "out")
    if trace is not None:
        check_output(trace, "trace")
    scenarios = scenarios_of(scenario, schedules)
    note_unmeasured(scenarios[0].hardware)
    note_calibration(scenarios[0].hardware, scenario.tp * scenario.pp, scenario_nodes(scenarios[0]))
    sim_options = options.sim_options()
    results = []
    for each in scenarios:
        with (ProgressBar(f"simulate {each.schedule}") if progress else contextlib.nullcontext()) as bar:
            results.append(run(each, sim_options, progress=bar.update if bar else None))
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


@with_choices
def simulate(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int,
             batch: int = SCENARIO.batch, prompt_len: int = SCENARIO.prompt_len, gen_len: int = SCENARIO.gen_len,
             schedules: Iterable[str] = DEFAULT_SCHEDULES, *, dtype: str = SCENARIO.dtype,
             quant: str = SCENARIO.quant, kv_cache_dtype: str = SCENARIO.kv_cache_dtype,
             framework: str = SCENARIO.framework, kv_cache: str | None = SCENARIO.kv_cache,
             kv_reads: str | None = SCENARIO.kv_reads, allreduce: str | None = SCENARIO.allreduce,
             jitter: float = RUN.jitter, seed: int = RUN.seed, exact_steps: bool = RUN.exact_steps, sample_steps: int | None = RUN.sample_steps,
             out: str | Path | None = None, trace: str | Path | None = None,
             trace_steps: int | str = DEFAULT_TRACE_STEPS, progress: bool = False, pp: int = SCENARIO.pp,
             pp_microbatches: int = SCENARIO.pp_microbatches, ep: int = SCENARIO.ep,
             dp_attention: bool = SCENARIO.dp_attention,
             intra_bandwidth_scale: float | None = None, intra_bandwidth_gbps: float | None = None,
             intra_latency_scale: float | None = None, intra_latency_us: float | None = None,
             inter_bandwidth_scale: float | None = None, inter_bandwidth_gbps: float | None = None,
             inter_latency_scale: float | None = None, inter_latency_us: float | None = None,
             nics_per_node: float | None = None, compute_slowdown: float | None = None,
             comm_slowdown: float | None = None, gpus_per_node: float | None = None) -> pd.DataFrame:
    """``laddersim simulate``: one row per schedule with the columns of ``simulate --json`` (times
    in seconds, ``tokens_per_s``, ``speedup_vs_standard``, ``exposed_comm_s``, ...).

    ``model``: a preset name (``llama-3.1-70b``), a Hugging Face config.json path or a ModelShape;
    ``hardware``: a profile name (``laddersim profiles list``), a profile .yaml path, a calibration
    run directory or a HardwareProfile. ``tp``: tensor-parallel ranks (more than a node's GPUs span
    nodes). ``batch``: sequences (default 1); ``prompt_len``, ``gen_len``: prompt and generated
    tokens per sequence (default 1024 and 512). ``schedules``: standard, parallel, ladder,
    upper_bound, desync_half, hybrid:N (default standard and ladder). ``dtype``: {DTYPES}
    (default bfloat16); ``quant``: how the linear layers are quantized, {QUANTS} (default none;
    laddersim.model.quantization: FP8 GEMMs from the profile's FP8 tables, weight-only ones at their
    weights' bytes, the input quantize kernels counted); ``kv_cache_dtype``: {KV_CACHE_DTYPES}
    (default auto: the dtype's; fp8 halves the KV bytes). ``framework``: {FRAMEWORKS} (default gpt-fast) or a framework .yaml
    (kernel paths, KV cache, AllReduce); ``kv_cache`` ({KV_CACHES}) and ``kv_reads``
    ({KV_READS}) override the framework's, ``allreduce`` ({ALLREDUCES}) its AllReduce rule (an
    implementation the machine, group or dtype cannot run is refused in one line). ``jitter``: sigma of per-rank lognormal op-time noise,
    0 to 2 (default 0: none), drawn with ``seed`` (0 to 2**32-1, default 0); with it
    ``exact_steps`` simulates every decode step, else ``sample_steps`` of them (default: about
    120,000 op-rank runs, 4 to 64 steps) with the 95% interval in the ``*_ci95`` columns.
    ``out``: also write the rows to a .csv, .parquet or .json file; ``trace``: a Chrome/Perfetto
    trace (.json) of the prefill and ``trace_steps`` decode steps (a count or "all"; default 3).
    ``progress``: a bar on stderr (a terminal) for a simulation of more than a couple of seconds.
    ``pp``: pipeline stages, each a TP group of ``tp`` GPUs holding a contiguous share of the
    layers (default 1: none; the stages placed on the profile's nodes, each stage's memory
    checked); ``pp_microbatches``: batches of ``batch / pp_microbatches`` in flight through the
    stages, as serving engines run a pipeline (default 1: one batch, the stages in turn, as the
    Ladder Residual benchmark runs it). A pipeline's rows add ``pp_microbatches``,
    ``pipeline_bubble`` (share of the stages' time idle), ``slowest_stage_step_s``,
    ``pp_boundary_step_s`` and ``pp_boundary_transport`` (its stage boundaries' receives per step
    and what they cross). ``ep``: a mixture-of-experts model's experts placed ``ep`` ways over
    each TP group, each expert split ``tp / ep`` ways (default 1: every expert split ``tp`` ways);
    the attention stays TP, the tokens reach every rank, the AllReduce is the TP one.
    ``dp_attention``: instead, data-parallel attention (vLLM ``--data-parallel-size ep/tp
    --tensor-parallel-size tp --enable-expert-parallel``; SGLang ``--tp ep --dp ep/tp
    --enable-dp-attention``): ``ep / tp`` attention replicas of TP ``tp``, the ``batch`` sequences
    spread over them, each GPU holding ``n_experts / ep`` whole experts, each MoE layer's tokens
    dispatched to their experts and combined back by all-to-alls within one node (the combine
    overlapped with the next attention under ladder); rows add ``ep`` and ``attention_replicas``,
    ``tokens_per_s`` is all replicas' (``ep`` GPUs).

    What-if changes of the profile, as a sweep grid's ``overrides`` (the row equals the sweep's
    at the same point): ``intra_bandwidth_scale``, ``intra_latency_scale``,
    ``inter_bandwidth_scale``, ``inter_latency_scale`` (factors), or instead of each scale the value
    it sets for the TP group: ``intra_bandwidth_gbps`` (large-message AllReduce bus bandwidth,
    GB/s), ``intra_latency_us`` (small-message AllReduce time, us), ``inter_bandwidth_gbps``,
    ``inter_latency_us`` (the network tier's); ``nics_per_node``; ``compute_slowdown`` and
    ``comm_slowdown`` (fractions, for every message size); ``gpus_per_node`` (the same GPUs
    repacked into nodes of that many). None (the default) leaves the profile's."""
    import pandas as pd

    rows, _ = simulate_schedules(ScenarioParams.pick(locals()), schedules, RunOptions.pick(locals()), out=out,
                                 trace=trace, trace_steps=trace_steps, progress=progress)
    return pd.DataFrame(rows)


@with_choices
def timeline(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int,
             batch: int = SCENARIO.batch, prompt_len: int = SCENARIO.prompt_len, gen_len: int = SCENARIO.gen_len,
             schedules: Iterable[str] = DEFAULT_SCHEDULES, steps: str | list[int] = "all",
             ranks: list[int] | None = None, *, dtype: str = SCENARIO.dtype, quant: str = SCENARIO.quant,
             kv_cache_dtype: str = SCENARIO.kv_cache_dtype, framework: str = SCENARIO.framework,
             kv_cache: str | None = SCENARIO.kv_cache, kv_reads: str | None = SCENARIO.kv_reads,
             allreduce: str | None = SCENARIO.allreduce, jitter: float = RUN.jitter, seed: int = RUN.seed,
             pp: int = SCENARIO.pp,
             pp_microbatches: int = SCENARIO.pp_microbatches, ep: int = SCENARIO.ep,
             dp_attention: bool = SCENARIO.dp_attention,
             intra_bandwidth_scale: float | None = None, intra_bandwidth_gbps: float | None = None,
             intra_latency_scale: float | None = None, intra_latency_us: float | None = None,
             inter_bandwidth_scale: float | None = None, inter_bandwidth_gbps: float | None = None,
             inter_latency_scale: float | None = None, inter_latency_us: float | None = None,
             nics_per_node: float | None = None, compute_slowdown: float | None = None,
             comm_slowdown: float | None = None, gpus_per_node: float | None = None) -> pd.DataFrame:
    """The spans of every op, rank and step (what ``laddersim plot --kind timeline`` draws), for
    every schedule: columns ``schedule, phase, step, rank, stream, layer, op, kind, start_s, end_s``
    (seconds from the start of the prefill; a pipeline's ranks numbered over its stages, stage s
    holding ranks s*tp to s*tp+tp-1, and a ``microbatch`` column). ``steps``: "all", "prefill", or
    a list of decode step indices; ``ranks``: default all. ``framework``: {FRAMEWORKS} (default
    gpt-fast) or a framework .yaml. The other parameters (the scenario, ``ep`` and
    ``dp_attention`` included, ``jitter``, ``seed`` and the what-if changes of the profile): as
    ``simulate``'s."""
    import pandas as pd

    _, results = simulate_schedules(ScenarioParams.pick(locals()), schedules, RunOptions.pick(locals()))
    frames = [r.timeline(steps, ranks).assign(schedule=r.scenario.schedule) for r in results]
    frame = pd.concat(frames, ignore_index=True)
    return frame[["schedule", *[c for c in frame.columns if c != "schedule"]]]


def time_sources(result: SimResult) -> dict[str, dict[str, str]]:
    """Where each op kind's time came from, per phase (``prefill``, ``decode``), as AIConfigurator
    labels it: SILICON = a measured table, HYBRID = a measured table extended by the roofline,
    SOL = the roofline/bandwidth model; the kinds in the program's order (a pipeline's: its
    stages' in turn, their receives priced from the profile's send/recv table or the transport
    model)."""
    from laddersim.costs.dp_attention_costs import replica_workload
    from laddersim.costs.op_costs import Phase, op_time_sources

    s = result.scenario
    w = s.workload
    stages = getattr(result, "stages", (result,))
    kinds = list(dict.fromkeys(kind for stage in stages for kind in stage.program.kinds))
    receives = result.receive_sources() if hasattr(result, "receive_sources") else {}
    own = replica_workload(s.layout, w)
    out = {}
    for phase in (Phase("prefill", w.batch, w.prompt_len), Phase("decode", w.batch, 1)):
        mine = Phase(phase.name, own.batch, phase.new_tokens_per_seq)
        sources = op_time_sources(s.model, s.hardware, own, s.tp, mine) | receives
        if s.layout is not None:  # data-parallel attention's all-to-alls
            from laddersim.costs.dp_attention_costs import alltoall_source
            from laddersim.model.layer_ops import EP_ALLTOALL_KINDS

            source = alltoall_source(s.model, s.hardware, w, s.layout, phase)
            sources |= {kind: source for kind in EP_ALLTOALL_KINDS}
        out[phase.name] = {k: sources[k] for k in kinds if k in sources}
    return out


def allreduce_used(result: SimResult) -> dict[str, str]:
    """The AllReduce implementation (and kernel) each phase's AllReduce runs, per phase (``prefill``,
    ``decode``): ``nccl``, ``nvls``, ``vllm-custom one-shot``, ... (``laddersim.costs.collective_labels.
    allreduce_by_phase``: the framework's rule, or the scenario's forced ``allreduce``)."""
    from laddersim.costs.collective_labels import allreduce_by_phase
    from laddersim.costs.dp_attention_costs import replica_workload

    s = result.scenario
    return allreduce_by_phase(s.model, s.hardware, replica_workload(s.layout, s.workload), s.tp)  # a replica's


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A hardware profile; ``name_or_path``: a profile name (``laddersim profiles list``), a path to
    a profile .yaml (one with ``extends: NAME`` restates only what differs) or a calibration run
    directory."""
    from laddersim.hardware.profile import load_profile as load

    return load(name_or_path)
