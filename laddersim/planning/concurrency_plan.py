"""Capacity planning at a fixed concurrency: the cheapest deployments keeping C requests in flight
within the SLOs, as a serving benchmark loads them (laddersim.traffic.closed_loop).

For each candidate (profile, TP, schedule), one replica's capacity is the most requests it keeps in
flight with at least ``slo_attainment`` of them meeting both SLOs (a closed loop under the
engine's scheduler; doublings from 1, then bisection); replicas = the fewest whose capacities
reach C, each then simulated at its share (C / replicas, rounded up), one more replica where that
share misses the attainment; GPUs = replicas x TP; cost per hour = GPUs x price per GPU-hour.
Cheapest first (ties: fewer GPUs, then names). A candidate that cannot hold the longest request,
or meets the SLOs at no concurrency, is skipped with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from laddersim.errors import UserInputError
from laddersim.model.shape import ModelShape
from laddersim.planning.serving_plan import RatePlan, ServingPlanOption, SkippedCandidate, unservable
from laddersim.planning.task_pool import run_tasks
from laddersim.traffic.arrivals import Requests
from laddersim.traffic.options import ServingOptions
from laddersim.traffic.run import own_timers, serve_closed_loop, serving_scenario
from laddersim.simulation.simulate import scenario_nodes

MAX_EXTRA_REPLICAS = 8  # replicas added, one at a time, where a share of C misses the attainment


@dataclass(frozen=True)
class ConcurrencyLoad:
    """What each closed loop is run with: fixed lengths, ``requests`` measured after C warm-up."""

    prompt_len: int
    gen_len: int
    requests: int


def closed_loop_metrics(scenario, options: ServingOptions, load: ConcurrencyLoad, concurrency: int) -> dict:
    n = load.requests + concurrency
    requests = Requests(np.zeros(n), np.full(n, load.prompt_len, dtype=np.int64),
                        np.full(n, load.gen_len, dtype=np.int64))
    return serve_closed_loop(scenario, requests, options, concurrency).metrics


def max_concurrency(scenario, options: ServingOptions, load: ConcurrencyLoad,
                    target: int) -> tuple[int | None, dict | None]:
    """The most requests in flight (up to ``target``) one replica keeps within the SLOs at the
    attainment, and that loop's metrics; (None, None) where not even one is."""
    def meets(c: int) -> tuple[bool, dict]:
        metrics = closed_loop_metrics(scenario, options, load, c)
        return metrics["slo_attainment"] >= options.slo_attainment, metrics

    ok, metrics = meets(1)
    if not ok:
        return None, None
    good, bad = (1, metrics), None
    c = 1
    while bad is None and c < target:
        c = min(2 * c, target)
        ok, metrics = meets(c)
        if ok:
            good = (c, metrics)
        else:
            bad = c
    while bad is not None and bad - good[0] > 1:
        mid = (good[0] + bad) // 2
        ok, metrics = meets(mid)
        if ok:
            good = (mid, metrics)
        else:
            bad = mid
    return good


@dataclass(frozen=True)
class _Candidate:
    model_shape: ModelShape
    candidate: tuple
    options: ServingOptions
    load: ConcurrencyLoad
    target: int
    dtype: str


def _evaluate(task: _Candidate) -> tuple:
    """(capacity, its metrics, replicas, the share's metrics, nodes, why skipped) of one candidate,
    with iteration timers of its own."""
    name, profile, tp, schedule = task.candidate[:4]
    with own_timers():
        try:
            scenario = serving_scenario(task.model_shape, profile, tp, schedule, task.dtype)
            reason = unservable(scenario, task.options, task.load.prompt_len + task.load.gen_len)
            if reason is not None:
                return None, None, None, None, None, reason
            capacity, metrics = max_concurrency(scenario, task.options, task.load, task.target)
            if capacity is None:
                return None, None, None, None, None, "no concurrency within the SLOs (not even 1 request)"
            replicas = math.ceil(task.target / capacity)
            for _ in range(MAX_EXTRA_REPLICAS + 1):
                share = closed_loop_metrics(scenario, task.options, task.load, math.ceil(task.target / replicas))
                if share["slo_attainment"] >= task.options.slo_attainment:
                    return capacity, metrics, replicas, share, scenario_nodes(scenario), None
                replicas += 1
            return None, None, None, None, None, (f"no share of {task.target} in flight within the SLOs (up to "
                                                  f"{MAX_EXTRA_REPLICAS} replicas beyond its capacity's count)")
        except UserInputError as exc:  # DoesNotFitError included: this candidate cannot run it
            return None, None, None, None, None, str(exc)


def plan_for_concurrency(model_shape: ModelShape, candidates: list[tuple], usd_per_gpu_hour: dict[str, float],
                         target: int, options: ServingOptions, load: ConcurrencyLoad, dtype: str = "bfloat16",
                         done: Callable[[], None] = lambda: None, workers: int = 1) -> RatePlan:
    """Every candidate's capacity in requests in flight and the cost of ``target`` of them, on
    ``workers`` processes (the same answer for any number). Candidates are (profile name,
    profile, TP, schedule, PP); a pipeline (PP > 1) is skipped: a closed loop is simulated on one
    stage."""
    model_shape.check_window(load.prompt_len, load.gen_len, where="--prompt-len + --gen-len")
    tasks, skipped = [], []
    for candidate in candidates:
        if len(candidate) > 4 and candidate[4] > 1:
            skipped.append(SkippedCandidate(candidate[1].name, candidate[3], candidate[2],
                                            "a fixed concurrency is simulated on one pipeline stage", candidate[4]))
        else:
            tasks.append(_Candidate(model_shape, candidate, options, load, target, dtype))
    answers = run_tasks(_evaluate, tasks, workers, lambda i: done())
    out = []
    for task, (capacity, metrics, replicas, share, nodes, reason) in zip(tasks, answers):
        name, profile, tp, schedule = task.candidate[:4]
        if reason is not None:
            skipped.append(SkippedCandidate(profile.name, schedule, tp, reason))
            continue
        gpus = replicas * tp
        out.append(ServingPlanOption(
            hardware=profile.name, schedule=schedule, tp=tp, nodes=nodes,
            capacity_req_per_s=metrics["throughput_req_per_s"], replicas=replicas, gpus=gpus,
            ttft_p99_s=share["ttft_p99_s"], tpot_p99_s=share["tpot_p99_s"], usd_per_gpu_hour=usd_per_gpu_hour[name],
            usd_per_hour=gpus * usd_per_gpu_hour[name], capacity_at_least=capacity >= target,
            prompt_len=load.prompt_len, gen_len=load.gen_len, slo_attainment=options.slo_attainment,
            requests=load.requests, capacity_concurrency=capacity))
    return RatePlan(sorted(out, key=lambda o: (o.usd_per_hour, o.gpus, o.hardware, o.schedule, o.tp, o.pp)), skipped)
