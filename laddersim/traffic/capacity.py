"""Capacity: the highest request rate one replica sustains within the SLOs, and what a target
rate costs.

A rate is sustained when at least ``slo_attainment`` of the requests meet both SLOs. Past the
replica's capacity the queue grows without bound, so the time to first token does too: a TTFT
SLO is what makes an overloaded rate fail, and the search requires one. Every rate is simulated
with the same seed, so the requests are the same (lengths) and their arrival gaps scale as
1 / rate (common random numbers: the attainment moves with the rate, not with the draw).

The search is bracketed from both sides. Below: the offered ``start_rate`` if it is sustained,
else the first of its halvings that is (down to MIN_RATE). Above: the first doubling that fails,
but never beyond the replica's saturation throughput (the requests / makespan when they all
arrive at once): a long stream offered more than that queues without bound, so no rate above it
is sustained in the long run. The bracket is then bisected geometrically to a relative width of ``rel_tol``.
When every rate tried passes up to the saturation throughput (few requests, loose SLOs), the
answer is that rate with ``at_least`` set: the capacity is at least it, and a longer run bounds
it; it is never "no rate". So a sustained ``start_rate`` always gives a capacity >= it. (The
saturation throughput is measured with the offered requests, so for a handful of them it is
below a long stream's: "at least" is then all this run can tell, and the answer says so.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from laddersim.errors import UserInputError
from laddersim.support.limits import MAX_RATE, MIN_RATE
from laddersim.traffic.arrivals import LengthSpec, burst_of, check_load, draw_requests
from laddersim.traffic.options import ServingOptions
from laddersim.traffic.run import serve
from laddersim.simulation.simulate import Scenario

MAX_HALVINGS = 30


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
    saturation_req_per_s: float | None = None  # requests / makespan with every request arriving at once
    at_least: bool = False  # no failing rate found: the capacity is ``rate`` or more

    def describe(self) -> str:
        """One phrase: 'capacity 4.1 req/s', 'capacity at least 12 req/s (...)' or 'no rate ...'."""
        if self.rate is None:
            low = min(r for r, _ in self.tried) if self.tried else None
            return f"no rate found within the SLOs (down to {low:.3g} req/s)" if low else "no rate found"
        if not self.at_least:
            return f"capacity {self.rate:.3g} req/s within the SLOs"
        sat = self.saturation_req_per_s
        if sat is not None and self.rate > sat * (1 + 1e-9):
            return (f"capacity at least {self.rate:.3g} req/s within the SLOs (every rate tried passed; it is above "
                    f"the saturation throughput {sat:.3g} req/s, so this run is too short to tell: "
                    "raise --requests)")
        return (f"capacity at least {self.rate:.3g} req/s within the SLOs (every rate tried passed, up to the "
                "saturation throughput; a longer run would bound it)")


def sustains(scenario: Scenario, options: ServingOptions, load: OfferedLoad, rate: float) -> tuple[bool, dict]:
    requests = draw_requests(load.requests, rate, load.prompt, load.output, load.seed,
                             load.gamma_shape)
    metrics = serve(scenario, requests, options).metrics
    return metrics["slo_attainment"] >= options.slo_attainment, metrics


def saturation_throughput(scenario: Scenario, options: ServingOptions, load: OfferedLoad) -> float:
    """Requests per second when the offered requests all arrive at once: the most the replica
    completes; a stream offered more grows its queue without bound."""
    requests = draw_requests(load.requests, 1.0, load.prompt, load.output, load.seed, load.gamma_shape)
    metrics = serve(scenario, burst_of(requests), options).metrics
    return metrics["throughput_req_per_s"] or math.inf


def max_sustainable_rate(scenario: Scenario, options: ServingOptions, load: OfferedLoad, start_rate: float = 1.0,
                         rel_tol: float = 0.02) -> Capacity:
    if options.ttft_slo_s is None:
        raise UserInputError("ttft-slo-s: the capacity search needs a time-to-first-token SLO "
                             "(without one an overloaded replica is never detected)")
    check_load(load.requests, start_rate, load.seed, load.gamma_shape)
    result = Capacity(None, None, None)

    def check(rate: float) -> tuple[bool, dict]:
        ok, metrics = sustains(scenario, options, load, rate)
        result.tried.append((rate, metrics))
        return ok, metrics

    ok, metrics = check(start_rate)
    good, bad = ((start_rate, metrics), None) if ok else (None, start_rate)
    if ok:  # upwards: doublings, capped at the saturation throughput
        result.saturation_req_per_s = saturation_throughput(scenario, options, load)
        ceiling = min(result.saturation_req_per_s, start_rate * 2.0 ** MAX_HALVINGS, MAX_RATE)
        rate = start_rate
        while bad is None and rate < ceiling:
            rate = min(rate * 2.0, ceiling)
            ok, metrics = check(rate)
            if ok:
                good = (rate, metrics)
            else:
                bad = rate
        if bad is None:  # nothing failed: the capacity is at least the highest rate tried
            result.rate, result.summary, result.at_least = good[0], good[1], True
            return result
    else:  # downwards: halvings until one is sustained (not below MIN_RATE)
        rate = start_rate
        for _ in range(MAX_HALVINGS):
            if rate <= MIN_RATE:
                break
            rate = max(rate / 2.0, MIN_RATE)
            ok, metrics = check(rate)
            if ok:
                good = (rate, metrics)
                break
            bad = rate
        if good is None:
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
