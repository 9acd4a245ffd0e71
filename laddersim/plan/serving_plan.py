"""Capacity planning under load: the cheapest deployments serving a request rate within SLOs.

For each candidate (profile, TP, schedule), one replica's capacity is the highest request rate it
sustains within the SLOs (laddersim.serving.capacity: continuous batching, every iteration timed
by the step simulator); replicas = the fewest whose capacities reach the target rate; GPUs =
replicas x TP; cost per hour = GPUs x price per GPU-hour. Candidates whose weights leave no KV
cache, or that sustain no rate at all, are left out; one that sustains the target rate is always
listed (its capacity is at least that rate, ``capacity_at_least`` where no rate tried failed).
Cheapest first (ties: fewer GPUs, then names).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from laddersim.errors import DoesNotFitError
from laddersim.hardware.profile import HardwareProfile
from laddersim.model_shape import ModelShape
from laddersim.plan.planner import candidate_tps, fewest_replicas
from laddersim.serving.capacity import OfferedLoad, max_sustainable_rate
from laddersim.serving.options import ServingOptions
from laddersim.serving.run import serving_scenario


@dataclass(frozen=True)
class ServingPlanOption:
    hardware: str
    schedule: str
    tp: int
    nodes: int
    capacity_req_per_s: float
    replicas: int
    gpus: int
    ttft_p99_s: float  # at the capacity
    tpot_p99_s: float | None
    usd_per_gpu_hour: float
    usd_per_hour: float
    capacity_at_least: bool  # every rate tried passed: the capacity is capacity_req_per_s or more
    prompt_len: int  # the workload and the rule the capacity was judged by
    gen_len: int
    slo_attainment: float  # share of requests within the SLOs for a rate to count as sustained


def serving_candidates(model_shape: ModelShape, profiles: dict[str, tuple[str, HardwareProfile]],
                       schedules: list[str], tps: list[int] | None, max_nodes: int | None) -> list[tuple]:
    """(profile name, profile, TP, schedule) to evaluate."""
    return [(name, profile, tp, schedule) for name, (_, profile) in profiles.items()
            for tp in candidate_tps(model_shape, profile, tps, max_nodes) for schedule in schedules]


def plan_for_rate(model_shape: ModelShape, candidates: list[tuple], usd_per_gpu_hour: dict[str, float],
                  target_rate: float, options: ServingOptions, load: OfferedLoad, dtype: str = "bfloat16",
                  done: Callable[[], None] = lambda: None) -> list[ServingPlanOption]:
    out = []
    for name, profile, tp, schedule in candidates:
        try:
            scenario = serving_scenario(model_shape, profile, tp, schedule, dtype)
            cap = max_sustainable_rate(scenario, options, load, start_rate=target_rate)
        except DoesNotFitError:
            cap = None
        done()
        if cap is None or cap.rate is None:
            continue
        replicas = fewest_replicas(target_rate, cap.rate)
        gpus = replicas * tp
        out.append(ServingPlanOption(
            hardware=profile.name, schedule=schedule, tp=tp, nodes=profile.nodes_for(tp),
            capacity_req_per_s=cap.rate, replicas=replicas, gpus=gpus, ttft_p99_s=cap.summary["ttft_p99_s"],
            tpot_p99_s=cap.summary["tpot_p99_s"], usd_per_gpu_hour=usd_per_gpu_hour[name],
            usd_per_hour=gpus * usd_per_gpu_hour[name], capacity_at_least=cap.at_least,
            prompt_len=int(load.prompt.a), gen_len=int(load.output.a), slo_attainment=options.slo_attainment))
    return sorted(out, key=lambda o: (o.usd_per_hour, o.gpus, o.hardware, o.schedule, o.tp))
