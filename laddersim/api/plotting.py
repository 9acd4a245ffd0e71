"""``plot``: a figure (PNG and SVG) from a results table; ``plot_timeline``: one decode step's
timeline, per rank and stream (laddersim.plots)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.api.params import MAX_COUNT, SCENARIO, ScenarioParams, checked, count
from laddersim.support.choices import DEFAULT_SCHEDULES

if TYPE_CHECKING:
    from laddersim.hardware.profile import HardwareProfile
    from laddersim.model.shape import ModelShape

# Which options each results-table kind takes (all of them take a title).
SCHEDULE_KINDS = ("bandwidth", "latency", "heatmap")
X_KINDS = ("bandwidth", "latency")
DEFAULT_RANKS = 2  # timeline lanes drawn without ranks (fewer when TP is smaller)
TIMELINE_DIR = "runs/plots"  # where a timeline goes without out (never the folder's root)


def plot(results: str | Path, kind: str, *, out: str | Path | None = None, title: str | None = None,
         where: Sequence[str] | None = None, x: str | None = None, schedule: str | None = None) -> list[Path]:
    """``laddersim plot RESULTS --kind KIND``: a figure of the results table ``results``
    (``laddersim sweep``'s .parquet or .csv), written as ``out``.png and ``out``.svg (default:
    <RESULTS stem>-<kind> beside RESULTS); returns the two paths.

    ``kind``: bandwidth or latency (speedup over standard vs the interconnect, per model and TP),
    heatmap (speedup across TP x batch), throughput (tokens/s vs TP), breakdown (compute, exposed
    communication, overhead). ``where``: "COL=VAL" filters (one column repeated: any of its
    values; different columns: all must match); ``x``: bandwidth/latency's x column, a numeric
    input (an override column, tp, batch, prompt_len, gen_len); ``schedule``: bandwidth, latency,
    heatmap: the schedule compared with standard (default ladder); ``title``: the figure's."""
    from laddersim.errors import UserInputError
    from laddersim.support.io_write import check_output
    from laddersim.plots import PLOT_KINDS
    from laddersim.plots.frames import parse_where, read_results, select

    if kind not in PLOT_KINDS or PLOT_KINDS[kind].input != "results":
        allowed = [k for k, v in PLOT_KINDS.items() if v.input == "results"]
        raise UserInputError(f"kind: '{kind}' does not plot a results table; allowed: {', '.join(allowed)}")
    options: dict = {"title": title}
    if schedule is not None:
        if kind not in SCHEDULE_KINDS:
            raise UserInputError(f"schedule: not used by --kind {kind}; allowed with: {', '.join(SCHEDULE_KINDS)}")
        options["schedule"] = schedule
    if x:
        if kind not in X_KINDS:
            raise UserInputError(f"x: not used by --kind {kind}; allowed with: {', '.join(X_KINDS)}")
        options["x"] = x
    if out:
        check_output(f"{out}.png", "out", "file")
    frame = select(read_results(results), parse_where(where))
    if frame.empty:
        if not where:
            raise UserInputError(f"results: {results} has no ok rows to plot")
        raise UserInputError(f"where: no rows of {results} match {' '.join(where)}")
    table = Path(results)
    out = out or str(table.with_name(f"{table.stem}-{kind}"))
    check_output(f"{out}.png", "out", "file")
    return PLOT_KINDS[kind].function(frame, out, **options)


def plot_timeline(model: str | Path | ModelShape, hardware: str | Path | HardwareProfile, tp: int, *,
                  batch: int = SCENARIO.batch, prompt_len: int = SCENARIO.prompt_len, gen_len: int = SCENARIO.gen_len,
                  schedules: Sequence[str] = DEFAULT_SCHEDULES, step: int = 0, ranks: int | None = None,
                  zoom_layers: int = 2, dtype: str = SCENARIO.dtype, kv_cache: str = "static",
                  ep: int = SCENARIO.ep, dp_attention: bool = SCENARIO.dp_attention,
                  out: str | Path | None = None, title: str | None = None) -> list[Path]:
    """``laddersim plot --kind timeline``: one decode step's per-rank compute and communication
    lanes for every schedule, written as ``out``.png and ``out``.svg (default
    runs/plots/timeline-<model>-tp<N>); returns the two paths.

    ``model``, ``hardware``, ``tp``, ``batch`` (default 1), ``prompt_len``, ``gen_len`` (default 1024
    and 512), ``dtype`` (default bfloat16), ``kv_cache`` (static, the default, or dynamic): as
    ``simulate``'s; ``schedules``: default standard and ladder; ``step``: the decode step drawn
    (default 0, the first after the prefill); ``ranks``: draw ranks 0..N-1 (default 2, or all of
    them when TP is smaller); ``zoom_layers``: a zoom panel on layers 0..N-1 (0: none; default 2);
    ``ep`` and ``dp_attention``: a mixture-of-experts model's expert placement, as ``simulate``'s;
    ``title``: the figure's (default: the step, model, TP, batch and profile)."""
    from laddersim.costs.collective_labels import collective_args, label
    from laddersim.support.io_write import check_output
    from laddersim.plots import plot_timeline as draw
    from laddersim.plots.step_spans import decode_step_spans

    params = ScenarioParams.pick(locals())
    zoom_layers = checked("zoom_layers", count(0, MAX_COUNT), zoom_layers)
    step = checked("step", count(0, MAX_COUNT), step)
    ranks = checked("ranks", count(1, MAX_COUNT, optional=True), ranks)
    if out:
        check_output(f"{out}.png", "out", "file")
    model, hardware, tp, batch = params.model, params.hardware, params.tp, params.batch
    prompt_len, gen_len, dtype, kv_cache = params.prompt_len, params.gen_len, params.dtype, params.kv_cache
    ranks = ranks if ranks is not None else min(DEFAULT_RANKS, tp)
    spans, results = decode_step_spans(model, hardware, tp, batch, prompt_len, gen_len, list(schedules), step, ranks,
                                       dtype, kv_cache, ep=params.ep, dp_attention=params.dp_attention)
    scenario = next(iter(results.values())).scenario
    title = title or (f"Decode step {step}: {scenario.model.name}, TP {tp}, batch {batch}, {scenario.hardware.name}")
    out = out or f"{TIMELINE_DIR}/timeline-{scenario.model.name}-tp{tp}"
    check_output(f"{out}.png", "out", "file")
    decode = collective_args(scenario.model, scenario.hardware, scenario.workload, scenario.tp)[("decode", "allreduce")]
    return draw(spans, out, zoom_layers=zoom_layers, title=title, comm_label=label(decode))
