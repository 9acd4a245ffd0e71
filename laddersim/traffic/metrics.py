"""Per-request latencies and the run's summary: TTFT/TPOT/E2E percentiles, throughput, goodput.

* TTFT (time to first token) = first token - arrival; E2E = finish - arrival;
* TPOT (time per output token) = (finish - first token) / (output_len - 1), undefined (NaN) for a
  one-token output; a request's TPOT is the mean over its decode tokens;
* throughput = output tokens / (last finish - first arrival);
* SLO attainment = the share of requests meeting both SLOs; goodput = the rate of requests served
  within the SLOs: attainment x the lower of the request throughput (from the first arrival to the
  last finish) and the offered rate, so never above either, however overloaded the run;
* keeps up: whether the replica served the offered rate. It did not when, by the last arrival, it
  had completed less than KEEP_UP_SHARE of the offered rate and more than BACKLOG_SHARE of the
  requests were still waiting for their first token: the queue grew with the run, so its TTFT
  measures the run's length, not the rate's. None (undefined) without an offered rate (one
  request, all arriving at once, or a closed loop), as is the offered rate.
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
# A stable replica completes the offered rate during the arrivals, less the requests in flight at
# the end; these margins leave room for a short run's tail (a judgement, not a measured figure).
KEEP_UP_SHARE = 0.9
BACKLOG_SHARE = 0.05
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


def summary(run: ServingRun, options: ServingOptions, open_loop: bool = True) -> dict:
    """Latency percentiles, throughput and goodput of a run (keys in a fixed order); a closed
    loop (``open_loop`` False) has no offered rate: its arrivals follow its completions."""
    req, late = run.requests, latencies(run, options)
    span_s = float(np.nanmax(run.finish_s) - np.nanmin(req.arrival_s))
    n = len(req)
    good = int(np.count_nonzero(late["meets_slo"]))
    offered = req.offered_rate if open_loop else None  # None for one request or all arriving at one instant
    out: dict = {}
    for name in ("ttft", "tpot", "e2e"):
        out.update(_percentiles(late[f"{name}_s"], name))
    out.update({
        "offered_rate": offered,
        "throughput_tokens_per_s": _finite(float(req.output_len.sum()) / span_s) if span_s > 0 else None,
        "throughput_req_per_s": _finite(n / span_s) if span_s > 0 else None,
        "goodput_req_per_s": _finite(good / n * min(n / span_s, offered or math.inf)) if span_s > 0 else None,
        "slo_attainment": good / n,
        **keeping_up(run, offered),
        "ttft_slo_s": options.ttft_slo_s,
        "tpot_slo_s": options.tpot_slo_s,
        "preemptions": int(run.preemptions.sum()),
        "mean_in_system": None if math.isnan(run.mean_in_system) else run.mean_in_system,
        "iterations": run.iterations,
        "kv_blocks": run.kv_blocks,
        "iteration_error_bound": run.iteration_error_bound,
    })
    return out


def keeping_up(run: ServingRun, offered: float | None) -> dict:
    """``keeps_up`` (module docstring) and what it is judged by: the requests/s completed by the
    last arrival, and the share of requests not yet started then."""
    req = run.requests
    last_s, first_s = float(req.arrival_s[-1]), float(req.arrival_s[0])
    if offered is None or last_s <= first_s:
        return {"keeps_up": None, "completed_by_last_arrival_req_per_s": None, "backlog_at_last_arrival": None}
    completed = int(np.count_nonzero(run.finish_s <= last_s)) / (last_s - first_s)
    backlog = int(np.count_nonzero(run.first_token_s > last_s)) / len(req)
    keeps_up = not (completed < KEEP_UP_SHARE * offered and backlog > BACKLOG_SHARE)
    return {"keeps_up": keeps_up, "completed_by_last_arrival_req_per_s": completed,
            "backlog_at_last_arrival": backlog}


def overload_line(row: dict) -> str | None:
    """One line for a run that could not keep up with its offered rate (None if it did or the
    question does not arise)."""
    if row.get("keeps_up") is not False:
        return None
    return (f"overloaded ({row['schedule']}): {row['completed_by_last_arrival_req_per_s']:.3g} req/s completed "
            f"of {row['offered_rate']:.3g} req/s offered, {row['backlog_at_last_arrival']:.0%} of the requests "
            "not started by the last arrival; the queue grows with the run, so its TTFT is the run length's, "
            "not the rate's (lower --rate, or --capacity to find the highest rate it serves)")
