"""``serving``: one replica under a stream of requests (continuous batching), per schedule:
TTFT/TPOT/E2E percentiles, throughput, goodput at the SLOs; optionally its capacity (the highest
rate within the SLOs) and the GPUs and cost of a target rate (laddersim.traffic)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.api.common import note_unmeasured, with_choices
from laddersim.api.serving_params import SERVING, ServingParams
from laddersim.support.choices import DEFAULT_SCHEDULES
# What the command line names beside the parameters: the default price file, the length forms,
# the SLO rule in words.
from laddersim.planning.prices import DEFAULT_PRICES  # noqa: F401
from laddersim.traffic.arrivals import LENGTH_FORMS  # noqa: F401
from laddersim.traffic.options import prefill_policy, slo_rule  # noqa: F401
from laddersim.traffic.engines import ENGINES  # noqa: F401
from laddersim.traffic.metrics import overload_line  # noqa: F401

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.traffic.options import ServingOptions
    from laddersim.traffic.run import ServingResult


@dataclass(frozen=True)
class ServingAnswer:
    """What ``serving_run`` answers: one row per schedule (``serving --json``'s objects), every
    request's row (``requests``: built when asked for, ``schedule`` first), and what the text
    answer names."""

    rows: list[dict]
    results: list[ServingResult]  # one per schedule, in order
    model: str  # the model's name
    hardware: str  # the profile's name
    request_count: int
    options: ServingOptions

    @cached_property
    def requests(self) -> pd.DataFrame:
        import pandas as pd

        return pd.concat([_schedule_frame(result) for result in self.results], ignore_index=True)


def _schedule_frame(result: ServingResult) -> pd.DataFrame:
    """One schedule's per-request rows, ``schedule`` first."""
    frame = result.frame.assign(schedule=result.scenario.schedule)
    return frame[["schedule"] + [c for c in frame.columns if c != "schedule"]]


def serving_run(params: ServingParams, schedules: Sequence[str] = DEFAULT_SCHEDULES, *,
                out: str | Path | None = None, progress: bool = False) -> ServingAnswer:
    """``serving`` of ``params`` (see there), every input checked first; ``out``: also write
    every request's row to ``out/requests.parquet`` and ``out/requests.csv``."""
    from laddersim.planning.planner import fewest_replicas
    from laddersim.planning.prices import load_prices
    from laddersim.traffic.capacity import OfferedLoad, max_sustainable_rate
    from laddersim.traffic.run import serve, serve_closed_loop, serving_scenario

    p = params
    options = p.engine()
    price_file = load_prices(p.prices) if p.target_rate else None
    drawn, lengths = _requests(p)
    scenarios = [serving_scenario(p.model, p.hardware, p.tp, s, p.dtype, p.kv_reads, p.framework, pp=p.pp,
                                  quant=p.quant, kv_cache_dtype=p.kv_cache_dtype, ep=p.ep)
                 for s in ([schedules] if isinstance(schedules, str) else schedules)]
    for scenario in scenarios:
        scenario.model.check_tp(p.tp)
    usd_per_gpu_hour = price_file.usd_per_gpu_hour(scenarios[0].hardware.name) if price_file else None
    note_unmeasured(scenarios[0].hardware)
    # The lengths as given (N or a distribution), as the command's flags give them: text.
    workload = {"prompt_len": str(p.prompt_len), "gen_len": str(p.gen_len)} if lengths else \
        {"prompt_len": "trace", "gen_len": "trace"}
    rows, results = [], []
    for scenario in scenarios:
        if p.concurrency is not None:
            result = serve_closed_loop(scenario, drawn, options, p.concurrency, p.warmup, progress=progress)
        else:
            result = serve(scenario, drawn, options, progress=progress)
        row = {**result.summary(p.rate), **workload, "slo_attainment_required": options.slo_attainment,
               "scheduler": p.scheduler_name}
        if p.capacity:
            load = OfferedLoad(p.requests, *lengths, p.seed, p.gamma_shape)
            cap = max_sustainable_rate(scenario, options, load, start_rate=p.rate)
            row.update(capacity_req_per_s=cap.rate, capacity_at_least=cap.at_least,
                       capacity_bracket_req_per_s=list(cap.bracket) if cap.bracket else None,
                       saturation_req_per_s=cap.saturation_req_per_s, capacity=cap.describe())
            if p.target_rate:
                replicas = fewest_replicas(p.target_rate, cap.rate) if cap.rate else None
                gpus = replicas * p.tp * p.pp if replicas else None
                row.update(target_rate=p.target_rate, replicas=replicas, gpus=gpus,
                           usd_per_hour=gpus * usd_per_gpu_hour if replicas else None)
        rows.append(row)
        results.append(result)
    if out is not None:
        _write_requests(results, Path(out))
    s = scenarios[0]
    return ServingAnswer(rows, results, s.model.name, s.hardware.name, len(results[0].run.requests), options)


@with_choices
def serving(model: str | Path, hardware: str | Path | HardwareProfile, tp: int, *, rate: float | None = SERVING.rate,
            concurrency: int | None = SERVING.concurrency, warmup: int | None = SERVING.warmup,
            scheduler: str | None = SERVING.scheduler,
            schedules: Sequence[str] = DEFAULT_SCHEDULES, requests: int = SERVING.requests,
            prompt_len: int | str = SERVING.prompt_len, gen_len: int | str = SERVING.gen_len,
            gamma_shape: float = SERVING.gamma_shape, trace: str | Path | None = SERVING.trace,
            max_running: int = SERVING.max_running, max_batched_tokens: int = SERVING.max_batched_tokens,
            chunked_prefill: bool = SERVING.chunked_prefill, block_size: int = SERVING.block_size,
            ttft_slo_s: float | None = SERVING.ttft_slo_s, tpot_slo_s: float | None = SERVING.tpot_slo_s,
            slo_attainment: float = SERVING.slo_attainment, capacity: bool = SERVING.capacity,
            target_rate: float | None = SERVING.target_rate, prices: str | Path | None = SERVING.prices,
            dtype: str = SERVING.dtype, quant: str = SERVING.quant, kv_cache_dtype: str = SERVING.kv_cache_dtype,
            kv_reads: str = SERVING.kv_reads, framework: str = SERVING.framework,
            seed: int = SERVING.seed, per_request: bool = False, out: str | Path | None = None,
            progress: bool = False, pp: int = SERVING.pp, ep: int = SERVING.ep) -> pd.DataFrame:
    """``laddersim serving``: requests arriving at one replica (Poisson at ``rate`` requests/s, gamma
    gaps with ``gamma_shape`` < 1 burstier, or a ``trace`` CSV of arrival_s, prompt_len,
    output_len) served by a vLLM-style continuous-batching scheduler. One row per schedule
    (``serving --json``'s objects: TTFT/TPOT/E2E percentiles in seconds, throughput, the share of
    requests within the SLOs, goodput; with ``capacity``, the highest rate sustained within the
    SLOs, and with ``target_rate`` the replicas, GPUs and cost to serve it).

    ``concurrency``: instead of a rate, a closed loop as serving benchmarks run one (aiperf,
    genai-perf ``--concurrency``, vLLM's ``--max-concurrency``): C requests in flight, each finished
    one replaced at once, ``requests`` measured after ``warmup`` left out (default C); TTFT is the
    wait for a slot plus the chunked prefill. ``scheduler``: whose scheduler forms the iterations,
    one of {SCHEDULERS} (laddersim.traffic.engines: its default token budget, running limit and
    prompt chunking; default vllm for a closed loop, else the limits below as given).

    ``model``, ``hardware``, ``tp``: as ``simulate``'s; ``schedules``: default standard and ladder.
    ``requests``: how many to draw (default 1000); ``prompt_len``/``gen_len``: N tokens (default
    1024 and 512) or "uniform:LO:HI" / "exponential:MEAN"; ``seed``: of the arrivals and lengths
    (0 to 2**32-1, default 0). The engine: ``max_running`` sequences (default 64),
    ``max_batched_tokens`` new tokens per iteration (default 8192), ``chunked_prefill`` (default
    off), ``block_size`` tokens per KV-cache block (default 16). A rate is sustained when
    ``slo_attainment`` (default 0.9) of the requests meet ``ttft_slo_s`` (and ``tpot_slo_s``),
    seconds. ``prices``: a GPU-hour price file (default laddersim/data/prices.yaml); ``dtype``:
    {DTYPES} (default bfloat16); ``quant``: {QUANTS} (default none) and ``kv_cache_dtype``:
    {KV_CACHE_DTYPES} (default auto), as ``simulate``'s; ``kv_reads``: {KV_READS} (default per_kv_head: a GQA-aware paged
    kernel); ``framework``: whose kernels run on the paged cache, one of {FRAMEWORKS} (default
    gpt-fast; gpt-fast-graph is refused: its attention kernel is priced over one static batch).
    ``per_request``: instead, every request's row (``schedule`` first: arrival, first token and
    finish times, TTFT, TPOT, ...); ``out``: also write those rows to out/requests.parquet and
    out/requests.csv; ``progress``: a bar on stderr (a terminal). ``pp``: pipeline stages of
    ``tp`` GPUs each (default 1), served as vLLM's pipeline-parallel engine serves them: one
    scheduler per stage over its share of the KV cache, a batch of each in flight on the stages
    (laddersim.traffic.pipelined); the replica's GPUs are ``tp * pp``. ``ep``: a mixture-of-experts
    model's experts placed ``ep`` ways over each TP group (default 1: every expert split ``tp`` ways)."""
    import pandas as pd

    answer = serving_run(ServingParams.pick(locals()), schedules, out=out, progress=progress)
    return answer.requests if per_request else pd.DataFrame(answer.rows)


def _requests(p: ServingParams):
    """(the requests, (prompt, output) length specs or None for a trace)."""
    from laddersim.traffic.arrivals import draw_requests, parse_length, read_trace

    if p.trace:
        return read_trace(p.trace), None
    prompt, output = parse_length(str(p.prompt_len), "prompt-len"), parse_length(str(p.gen_len), "gen-len")
    if p.concurrency is not None:  # a closed loop: the warm-up and measured requests' lengths (arrivals unused)
        from laddersim.traffic.closed_loop import check_concurrency

        total = p.requests + check_concurrency(p.concurrency, p.requests, p.warmup)
        return draw_requests(total, 1.0, prompt, output, p.seed), (prompt, output)
    return draw_requests(p.requests, p.rate, prompt, output, p.seed, p.gamma_shape), (prompt, output)


def _write_requests(results: list[ServingResult], out_dir: Path) -> None:
    """Every request's row to out_dir/requests.parquet and requests.csv, one schedule at a time
    (only that schedule's rows in memory): the CSV is the rows' in order, the Parquet file one
    row group per schedule."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from laddersim.errors import UserInputError

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"out: cannot create {out_dir}: {exc.strerror}") from None
    parquet, csv = out_dir / "requests.parquet", out_dir / "requests.csv"
    parquet_tmp, csv_tmp = (path.with_name(path.name + ".tmp") for path in (parquet, csv))
    writer = None
    try:
        with open(csv_tmp, "w", newline="") as text:
            for i, result in enumerate(results):
                frame = _schedule_frame(result)
                frame.to_csv(text, index=False, header=i == 0, lineterminator="\n")
                table = pa.Table.from_pandas(frame, preserve_index=False)
                writer = writer or pq.ParquetWriter(parquet_tmp, table.schema)
                writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    parquet_tmp.replace(parquet)
    csv_tmp.replace(csv)
