"""Per-request latencies and the run's summary: TTFT/TPOT/E2E percentiles, throughput, goodput.

* TTFT (time to first token) = first token - arrival; E2E = finish - arrival;
* TPOT (time per output token) = (finish - first token) / (output_len - 1), undefined (NaN) for a
  one-token output; a request's TPOT is the mean over its decode tokens;
* throughput = output tokens / (last finish - first arrival);
* SLO attainment = the share of requests meeting both SLOs; goodput = attainment x the offered
  rate (requests per second over the arrival span): the rate of requests served within the SLOs.
  Both are None (null) where the arrival span is zero: one request, or all arriving at once.
"""

from __future__ import annotations

import math

from typing import TYPE_CHECKING

import numpy as np

from laddersim.traffic.options import ServingOptions
from laddersim.traffic.replica import ServingRun

if TYPE_CHECKING:
    import pandas as pd

PERCENTILES = (50, 90, 99)
REQUEST_COLUMNS = ("request", "arrival_s", "prompt_len", "output_len", "first_token_s", "finish_s", "ttft_s",
                   "tpot_s", "e2e_s", "preemptions", "meets_slo")


def latencies(run: ServingRun, options: ServingOptions) -> dict[str, np.ndarray]:
    """Per request (arrays in request order): ttft_s, tpot_s, e2e_s and meets_slo."""
    req = run.requests
    ttft = run.first_token_s - req.arrival_s
    decode_tokens = req.output_len - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(decode_tokens > 0, (run.finish_s - run.first_token_s) / np.maximum(decode_tokens, 1), np.nan)
    meets = np.ones(len(req), dtype=bool)
    if options.ttft_slo_s is not None:
        meets &= ttft <= options.ttft_slo_s
    if options.tpot_slo_s is not None:
        meets &= np.isnan(tpot) | (tpot <= options.tpot_slo_s)
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": run.finish_s - req.arrival_s, "meets_slo": meets}


def request_frame(run: ServingRun, options: ServingOptions) -> pd.DataFrame:
    """One row per request (REQUEST_COLUMNS)."""
    import pandas as pd

    req, late = run.requests, latencies(run, options)
    return pd.DataFrame({
        "request": np.arange(len(req), dtype=np.int64), "arrival_s": req.arrival_s,
        "prompt_len": req.prompt_len, "output_len": req.output_len, "first_token_s": run.first_token_s,
        "finish_s": run.finish_s, "ttft_s": late["ttft_s"], "tpot_s": late["tpot_s"], "e2e_s": late["e2e_s"],
        "preemptions": run.preemptions, "meets_slo": late["meets_slo"],
    }, columns=list(REQUEST_COLUMNS))


def _percentiles(values: np.ndarray, name: str) -> dict[str, float | None]:
    values = values[~np.isnan(values)]
    out = {}
    for p in PERCENTILES:
        out[f"{name}_p{p}_s"] = float(np.percentile(values, p)) if len(values) else None
    out[f"{name}_mean_s"] = float(values.mean()) if len(values) else None
    return out


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def summary(run: ServingRun, options: ServingOptions) -> dict:
    """Latency percentiles, throughput and goodput of a run (keys in a fixed order)."""
    req, late = run.requests, latencies(run, options)
    span_s = float(np.nanmax(run.finish_s) - np.nanmin(req.arrival_s))
    n = len(req)
    good = int(np.count_nonzero(late["meets_slo"]))
    offered = req.offered_rate  # None for one request or all arriving at one instant
    out: dict = {}
    for name in ("ttft", "tpot", "e2e"):
        out.update(_percentiles(late[f"{name}_s"], name))
    out.update({
        "offered_rate": offered,
        "throughput_tokens_per_s": _finite(float(req.output_len.sum()) / span_s) if span_s > 0 else None,
        "throughput_req_per_s": _finite(n / span_s) if span_s > 0 else None,
        "goodput_req_per_s": good / n * offered if offered is not None else None,
        "slo_attainment": good / n,
        "ttft_slo_s": options.ttft_slo_s,
        "tpot_slo_s": options.tpot_slo_s,
        "preemptions": int(run.preemptions.sum()),
        "mean_in_system": None if math.isnan(run.mean_in_system) else run.mean_in_system,
        "iterations": run.iterations,
        "kv_blocks": run.kv_blocks,
        "iteration_error_bound": run.iteration_error_bound,
    })
    return out
