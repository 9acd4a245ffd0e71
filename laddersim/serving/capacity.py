"""Capacity: the highest request rate one replica sustains within the SLOs, and what a target
rate costs.

A rate is sustained when at least ``slo_attainment`` of the requests meet both SLOs. Past the
replica's capacity the queue grows without bound, so the time to first token does too: a TTFT
SLO is what makes an overloaded rate fail, and the search requires one. Every rate is simulated
with the same seed, so the requests are the same (lengths) and their arrival gaps scale as
1 / rate (common random numbers: the attainment moves with the rate, not with the draw). The
search brackets the capacity by doubling or halving from ``start_rate``, then bisects the
bracket geometrically to a relative width of ``rel_tol``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from laddersim.errors import UserInputError
from laddersim.serving.arrivals import LengthSpec, draw_requests
from laddersim.serving.options import ServingOptions
from laddersim.serving.run import serve
from laddersim.simulate import Scenario

MAX_DOUBLINGS = 30


@dataclass(frozen=True)
class OfferedLoad:
    """What the replica is offered at each rate tried."""

    requests: int
    prompt: LengthSpec
    output: LengthSpec
    seed: int = 0
    gamma_shape: float = 1.0


@dataclass
class Capacity:
    rate: float | None  # highest sustained request rate found (req/s); None: not even the lowest
    bracket: tuple[float, float] | None  # (sustained, not sustained) at the end of the search
    summary: dict | None  # metrics at ``rate``
    tried: list[tuple[float, dict]] = field(default_factory=list)  # (rate, metrics) in the order tried


def sustains(scenario: Scenario, options: ServingOptions, load: OfferedLoad, rate: float) -> tuple[bool, dict]:
    requests = draw_requests(load.requests, rate, load.prompt, load.output, load.seed,
                             load.gamma_shape)
    metrics = serve(scenario, requests, options).metrics
    return metrics["slo_attainment"] >= options.slo_attainment, metrics


def max_sustainable_rate(scenario: Scenario, options: ServingOptions, load: OfferedLoad, start_rate: float = 1.0,
                         rel_tol: float = 0.02) -> Capacity:
    if options.ttft_slo_s is None:
        raise UserInputError("ttft-slo-s: the capacity search needs a time-to-first-token SLO "
                             "(without one an overloaded replica is never detected)")
    result = Capacity(None, None, None)

    def check(rate: float) -> tuple[bool, dict]:
        ok, metrics = sustains(scenario, options, load, rate)
        result.tried.append((rate, metrics))
        return ok, metrics

    rate = start_rate
    ok, metrics = check(rate)
    good = (rate, metrics) if ok else None
    bad = None if ok else rate
    for _ in range(MAX_DOUBLINGS):
        if good and bad:
            break
        rate = rate * 2.0 if ok else rate / 2.0
        ok, metrics = check(rate)
        if ok:
            good = (rate, metrics)
        else:
            bad = rate
    if not good or not bad:
        return result
    while bad / good[0] > 1.0 + rel_tol:
        mid = math.sqrt(good[0] * bad)
        ok, metrics = check(mid)
        if ok:
            good = (mid, metrics)
        else:
            bad = mid
    result.rate, result.summary, result.bracket = good[0], good[1], (good[0], bad)
    return result
