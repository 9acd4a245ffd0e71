"""Serving as sweep axes: a grid's ``serving:`` section, and the metrics of one such point.

With a ``serving:`` section every point of the grid is one replica under load instead of one
static batch: requests of the point's ``prompt_len`` and ``gen_len`` tokens arrive at ``rate``
(Poisson, ``seed``), and each listed option is an axis::

    serving:
      rate: [2, 4, 8]
      max_running: [32, 64]
      chunked_prefill: [false, true]
      ttft_slo_s: 0.5
      tpot_slo_s: 0.03

The row holds the serving metrics (laddersim.traffic.metrics) instead of the static ones (empty,
as is ``speedup_vs_standard``: compare schedules by latency percentiles and goodput); the
grid's ``batch`` is not read (the scheduler forms the batches). The KV cache is paged; give
``kv_reads: per_kv_head`` for a GQA-aware attention kernel as vLLM runs.
"""

from __future__ import annotations

import itertools
import math

from pydantic import BaseModel, ConfigDict, Field, field_validator

from laddersim.support.limits import MAX_BATCH, MAX_RATE, MAX_REQUESTS, MAX_SEED, MAX_SLO_S, MAX_TOKENS, MIN_RATE

from laddersim.traffic.arrivals import LengthSpec, draw_requests
from laddersim.traffic.options import serving_options
from laddersim.traffic.run import serve, serving_scenario
from laddersim.simulation.simulate import scenario_nodes

# Axes (lists in the grid) and fixed settings, in row-column order.
SERVING_AXES = ("rate", "max_running", "max_batched_tokens", "chunked_prefill")
SERVING_SETTINGS = ("requests", "ttft_slo_s", "tpot_slo_s", "seed")
SERVING_COLUMNS = SERVING_AXES + SERVING_SETTINGS


class ServingAxes(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: list[float] = Field(min_length=1)  # requests per second
    max_running: list[int] = Field(default=[64], min_length=1)
    max_batched_tokens: list[int] = Field(default=[8192], min_length=1)
    chunked_prefill: list[bool] = Field(default=[False], min_length=1)
    requests: int = Field(default=500, gt=0, le=MAX_REQUESTS)
    ttft_slo_s: float | None = Field(default=None, gt=0, le=MAX_SLO_S, allow_inf_nan=False)
    tpot_slo_s: float | None = Field(default=None, gt=0, le=MAX_SLO_S, allow_inf_nan=False)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)

    @field_validator(*SERVING_AXES, mode="before")
    @classmethod
    def _wrap(cls, value):
        return value if isinstance(value, list) else [value]

    @field_validator("rate", "max_running", "max_batched_tokens")
    @classmethod
    def _in_range(cls, values, info):
        # Checked here, not by the file reader: a number written as a string ("inf") skips its check.
        low, high = {"rate": (MIN_RATE, MAX_RATE), "max_running": (1, MAX_BATCH)}.get(info.field_name, (1, MAX_TOKENS))
        for value in values:
            if not (math.isfinite(value) and low <= value <= high):
                raise ValueError(f"must be finite numbers from {low:g} to {high:g}, got {value}")
        return values

    def settings(self) -> list[tuple[tuple[str, object], ...]]:
        """Every combination of the axes with the fixed settings: (column, value) in SERVING_COLUMNS order."""
        fixed = tuple((c, getattr(self, c)) for c in SERVING_SETTINGS)
        return [tuple(zip(SERVING_AXES, values)) + fixed
                for values in itertools.product(*(getattr(self, c) for c in SERVING_AXES))]


def serving_point_metrics(model, profile, tp: int, schedule: str, dtype: str, kv_reads: str, prompt_len: int,
                          gen_len: int, serving: tuple[tuple[str, object], ...], pp: int = 1) -> dict:
    s = dict(serving)
    options = serving_options(max_running=s["max_running"], max_batched_tokens=s["max_batched_tokens"],
                              chunked_prefill=s["chunked_prefill"], ttft_slo_s=s["ttft_slo_s"],
                              tpot_slo_s=s["tpot_slo_s"])
    requests = draw_requests(s["requests"], s["rate"], LengthSpec("fixed", prompt_len), LengthSpec("fixed", gen_len),
                             s["seed"])
    scenario = serving_scenario(model, profile, tp, schedule, dtype, kv_reads, pp=pp)
    # No static tokens/s (so no speedup column): compare schedules by the serving metrics.
    return {"nodes": scenario_nodes(scenario), "tokens_per_s": None, **serve(scenario, requests, options).metrics}
