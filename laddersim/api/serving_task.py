"""``serving``: one replica under a stream of requests (continuous batching), per schedule:
TTFT/TPOT/E2E percentiles, throughput, goodput at the SLOs; optionally its capacity (the highest
rate within the SLOs) and the GPUs and cost of a target rate (laddersim.traffic)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.api.common import note_unmeasured
from laddersim.support.choices import DEFAULT_SCHEDULES
from laddersim.support.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN
from laddersim.traffic.options import ServingOptions

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.traffic.run import ServingResult

ENGINE = ServingOptions()  # the engine's and the SLO rule's defaults, stated once in ServingOptions


@dataclass(frozen=True)
class ServingRun:
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


def serving_run(model, hardware, tp: int, *, rate: float | None, schedules: Sequence[str], requests: int,
                prompt_len: int | str, gen_len: int | str, gamma_shape: float, trace: str | Path | None,
                max_running: int, max_batched_tokens: int, chunked_prefill: bool, block_size: int,
                ttft_slo_s: float | None, tpot_slo_s: float | None, slo_attainment: float, capacity: bool,
                target_rate: float | None, prices: str | Path | None, dtype: str, kv_reads: str, framework: str,
                seed: int, out: str | Path | None, progress: bool, pp: int = 1) -> ServingRun:
    """``serving`` (see there for the parameters), every input checked first; ``out``: also write
    every request's row to ``out/requests.parquet`` and ``out/requests.csv``."""
    import pandas as pd

    from laddersim.errors import UserInputError
    from laddersim.planning.planner import fewest_replicas
    from laddersim.planning.prices import load_prices
    from laddersim.traffic.arrivals import check_load
    from laddersim.traffic.capacity import OfferedLoad, max_sustainable_rate
    from laddersim.traffic.options import serving_options
    from laddersim.traffic.run import serve, serving_scenario

    options = serving_options(
        max_running=max_running, max_batched_tokens=max_batched_tokens, chunked_prefill=chunked_prefill,
        block_size=block_size, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, slo_attainment=slo_attainment)
    if target_rate and not capacity:
        raise UserInputError("target-rate: needs --capacity (the cost follows from the replica's capacity)")
    if capacity and trace:
        raise UserInputError("capacity: searches over --rate with drawn requests; not available with --trace")
    if capacity and ttft_slo_s is None:
        raise UserInputError("ttft-slo-s: --capacity needs a time-to-first-token SLO")
    check_load(requests, None, seed, gamma_shape)
    price_file = load_prices(prices) if target_rate else None
    drawn, lengths = _requests(rate, requests, prompt_len, gen_len, gamma_shape, trace, seed)
    scenarios = [serving_scenario(model, hardware, tp, s, dtype, kv_reads, framework, pp=pp)
                 for s in ([schedules] if isinstance(schedules, str) else schedules)]
    for scenario in scenarios:
        scenario.model.check_tp(tp)
    usd_per_gpu_hour = price_file.usd_per_gpu_hour(scenarios[0].hardware.name) if price_file else None
    note_unmeasured(scenarios[0].hardware)
    # The lengths as given (N or a distribution), as the command's flags give them: text.
    workload = {"prompt_len": str(prompt_len), "gen_len": str(gen_len)} if lengths else \
        {"prompt_len": "trace", "gen_len": "trace"}
    rows, results = [], []
    for scenario in scenarios:
        result = serve(scenario, drawn, options, progress=progress)
        row = {**result.summary(rate), **workload, "slo_attainment_required": options.slo_attainment}
        if capacity:
            load = OfferedLoad(requests, *lengths, seed, gamma_shape)
            cap = max_sustainable_rate(scenario, options, load, start_rate=rate)
            row.update(capacity_req_per_s=cap.rate, capacity_at_least=cap.at_least,
                       capacity_bracket_req_per_s=list(cap.bracket) if cap.bracket else None,
                       saturation_req_per_s=cap.saturation_req_per_s, capacity=cap.describe())
            if target_rate:
                replicas = fewest_replicas(target_rate, cap.rate) if cap.rate else None
                row.update(target_rate=target_rate, replicas=replicas, gpus=replicas * tp * pp if replicas else None,
                           usd_per_hour=replicas * tp * pp * usd_per_gpu_hour if replicas else None)
        rows.append(row)
        results.append(result)
    if out is not None:
        _write_requests(results, Path(out))
    s = scenarios[0]
    return ServingRun(rows, results, s.model.name, s.hardware.name, len(drawn), options)


def serving(model: str | Path, hardware: str | Path | HardwareProfile, tp: int, *, rate: float | None = None,
            schedules: Sequence[str] = DEFAULT_SCHEDULES, requests: int = 1000,
            prompt_len: int | str = DEFAULT_PROMPT_LEN, gen_len: int | str = DEFAULT_GEN_LEN,
            gamma_shape: float = 1.0, trace: str | Path | None = None, max_running: int = ENGINE.max_running,
            max_batched_tokens: int = ENGINE.max_batched_tokens, chunked_prefill: bool = ENGINE.chunked_prefill,
            block_size: int = ENGINE.block_size, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None,
            slo_attainment: float = ENGINE.slo_attainment, capacity: bool = False,
            target_rate: float | None = None, prices: str | Path | None = None, dtype: str = "bfloat16",
            kv_reads: str = "per_kv_head", framework: str = "gpt-fast", seed: int = 0, per_request: bool = False,
            out: str | Path | None = None, progress: bool = False, pp: int = 1) -> pd.DataFrame:
    """``laddersim serving``: requests arriving at one replica (Poisson at ``rate`` requests/s, gamma
    gaps with ``gamma_shape`` < 1 burstier, or a ``trace`` CSV of arrival_s, prompt_len,
    output_len) served by a vLLM-style continuous-batching scheduler. One row per schedule
    (``serving --json``'s objects: TTFT/TPOT/E2E percentiles in seconds, throughput, the share of
    requests within the SLOs, goodput; with ``capacity``, the highest rate sustained within the
    SLOs, and with ``target_rate`` the replicas, GPUs and cost to serve it).

    ``model``, ``hardware``, ``tp``: as ``simulate``'s; ``schedules``: default standard and ladder.
    ``requests``: how many to draw (default 1000); ``prompt_len``/``gen_len``: N tokens (default
    1024 and 512) or "uniform:LO:HI" / "exponential:MEAN"; ``seed``: of the arrivals and lengths
    (default 0). The engine: ``max_running`` sequences (default 64), ``max_batched_tokens`` new
    tokens per iteration (default 8192), ``chunked_prefill`` (default off), ``block_size`` tokens per
    KV-cache block (default 16). A rate is sustained when ``slo_attainment`` (default 0.9) of the
    requests meet ``ttft_slo_s`` (and ``tpot_slo_s``), seconds. ``prices``: a GPU-hour price file
    (default laddersim/data/prices.yaml); ``dtype``: bfloat16 (default), float16, float32, fp8;
    ``kv_reads``: per_kv_head (default: a GQA-aware paged kernel) or repeat_interleave;
    ``framework``: whose kernels run on the paged cache (gpt-fast, the default; vllm;
    gpt-fast-flash). ``per_request``: instead, every request's row (``schedule`` first: arrival,
    first token and finish times, TTFT, TPOT, ...); ``out``: also write those rows to
    out/requests.parquet and out/requests.csv; ``progress``: a bar on stderr. ``pp``: pipeline
    stages of ``tp`` GPUs each (default 1), served as vLLM's pipeline-parallel engine serves them:
    one scheduler per stage over its share of the KV cache, a batch of each in flight on the stages
    (laddersim.traffic.pipelined); the replica's GPUs are ``tp * pp``."""
    import pandas as pd

    run = serving_run(model, hardware, tp, rate=rate, schedules=schedules, requests=requests, prompt_len=prompt_len,
                      gen_len=gen_len, gamma_shape=gamma_shape, trace=trace, max_running=max_running,
                      max_batched_tokens=max_batched_tokens, chunked_prefill=chunked_prefill, block_size=block_size,
                      ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, slo_attainment=slo_attainment, capacity=capacity,
                      target_rate=target_rate, prices=prices, dtype=dtype, kv_reads=kv_reads, framework=framework,
                      seed=seed, out=out, progress=progress, pp=pp)
    return run.requests if per_request else pd.DataFrame(run.rows)


def _requests(rate, requests: int, prompt_len, gen_len, gamma_shape: float, trace, seed: int):
    """(the requests, (prompt, output) length specs or None for a trace)."""
    from laddersim.errors import UserInputError
    from laddersim.traffic.arrivals import draw_requests, parse_length, read_trace

    if trace:
        given = [f for f, v in (("--rate", rate), ("--gamma-shape", gamma_shape != 1.0)) if v]
        if given:
            raise UserInputError(f"trace: give --trace or {', '.join(given)}, not both")
        return read_trace(trace), None
    if rate is None:
        raise UserInputError("rate: give --rate REQ_PER_S or --trace FILE")
    prompt, output = parse_length(str(prompt_len), "prompt-len"), parse_length(str(gen_len), "gen-len")
    return draw_requests(requests, rate, prompt, output, seed, gamma_shape), (prompt, output)


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
