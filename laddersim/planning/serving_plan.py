"""Capacity planning under load: the cheapest deployments serving a request rate within SLOs.

For each candidate (profile, TP, PP, schedule), one replica's capacity is the highest request rate it
sustains within the SLOs (laddersim.traffic.capacity: continuous batching, every iteration timed
by the step simulator); replicas = the fewest whose capacities reach the target rate; GPUs =
replicas x TP x PP; cost per hour = GPUs x price per GPU-hour. One that sustains the target rate is
always listed (its capacity is at least that rate, ``capacity_at_least`` where no rate tried
failed). Cheapest first (ties: fewer GPUs, then names).

A candidate that cannot serve the workload is skipped with its reason, and the others still
planned: weights leaving no KV cache, a request longer than its KV cache holds, no rate at all
within the SLOs. What no candidate could serve (a request beyond the model's context, or beyond
one iteration's token budget without chunked prefill) is the input's fault:
``check_serving_workload`` refuses it before any candidate is simulated.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from laddersim.errors import UserInputError
from laddersim.hardware.profile import HardwareProfile
from laddersim.model.shape import ModelShape
from laddersim.planning.planner import candidate_splits, fewest_replicas
from laddersim.planning.task_pool import run_tasks
from laddersim.traffic.arrivals import draw_requests
from laddersim.traffic.capacity import Capacity, OfferedLoad, max_sustainable_rate, sustains
from laddersim.traffic.options import ServingOptions
from laddersim.traffic.replica import check_requests_fit
from laddersim.traffic.run import kv_blocks_for, own_timers, serving_scenario
from laddersim.simulation.simulate import scenario_nodes


@dataclass(frozen=True)
class ServingPlanOption:
    hardware: str
    schedule: str
    tp: int
    nodes: int
    capacity_req_per_s: float
    replicas: int
    gpus: int
    ttft_p99_s: float  # of one replica serving its share of the target rate
    tpot_p99_s: float | None
    usd_per_gpu_hour: float
    usd_per_hour: float
    capacity_at_least: bool  # every rate tried passed: the capacity is capacity_req_per_s or more
    prompt_len: int  # the workload and the rule the capacity was judged by
    gen_len: int
    slo_attainment: float  # share of requests within the SLOs for a rate to count as sustained
    requests: int  # requests simulated per rate tried
    pp: int = 1  # pipeline stages of the replica (laddersim.traffic.pipelined)
    capacity_concurrency: int | None = None  # a concurrency plan: requests in flight one replica keeps in SLO


@dataclass(frozen=True)
class SkippedCandidate:
    hardware: str
    schedule: str
    tp: int
    reason: str  # why it cannot serve the workload, one line
    pp: int = 1

    def line(self) -> str:
        split = f"tp {self.tp}" + (f" pp {self.pp}" if self.pp > 1 else "")
        return f"{self.hardware} {split} {self.schedule}: {self.reason}"


@dataclass
class RatePlan:
    options: list[ServingPlanOption]  # cheapest first
    skipped: list[SkippedCandidate] = field(default_factory=list)  # in candidate order


def check_serving_workload(model_shape: ModelShape, options: ServingOptions, load: OfferedLoad,
                           target_rate: float) -> int:
    """The longest request's tokens (prompt + output). Refuses, as one UserInputError line naming a
    ``plan`` flag, a workload no candidate could serve: a request beyond the model's context or
    sliding window, beyond one iteration's token budget without chunked prefill, or needing more
    engine iterations than a run may take. (What depends on the candidate, its KV cache, is left
    to each one.)"""
    requests = draw_requests(load.requests, target_rate, load.prompt, load.output, load.seed, load.gamma_shape)
    i = int((requests.prompt_len + requests.output_len).argmax())
    prompt_len, gen_len = int(requests.prompt_len[i]), int(requests.output_len[i])
    model_shape.check_window(prompt_len, gen_len, where="--prompt-len + --gen-len")
    context = model_shape.max_position_embeddings
    if context and prompt_len + gen_len > context:
        raise UserInputError(f"prompt-len: --prompt-len {prompt_len} + --gen-len {gen_len} = {prompt_len + gen_len} "
                             f"tokens exceed the {context}-token context of {model_shape.name} "
                             f"(max_position_embeddings); allowed: prompt + output <= {context}")
    check_requests_fit(requests, options, kv_blocks=sys.maxsize)  # the KV cache is each candidate's own
    return prompt_len + gen_len


def unservable(scenario, options: ServingOptions, longest: int) -> str | None:
    """Why this candidate cannot hold the longest request in its KV cache, or None."""
    blocks = kv_blocks_for(scenario, options)  # DoesNotFitError: no KV cache at all
    need = -(-longest // options.block_size)
    if need > blocks:
        return (f"a request of {longest} tokens needs {need} KV-cache blocks of {options.block_size} tokens; "
                f"this replica has {blocks}")
    return None


def serving_candidates(model_shape: ModelShape, profiles: dict[str, tuple[str, HardwareProfile]],
                       schedules: list[str], tps: list[int] | None, max_nodes: int | None,
                       pps: list[int] | None = None) -> list[tuple]:
    """(profile name, profile, TP, schedule, PP) to evaluate."""
    return [(name, profile, tp, schedule, pp) for name, (_, profile) in profiles.items()
            for tp, pp in candidate_splits(model_shape, profile, tps, pps, max_nodes) for schedule in schedules]


@dataclass(frozen=True)
class _Split:
    """A task of the plan: the candidates of one (profile, TP, PP), and what each is judged by."""

    model_shape: ModelShape
    candidates: tuple[tuple, ...]
    options: ServingOptions
    load: OfferedLoad
    target_rate: float
    longest: int
    dtype: str


MAX_EXTRA_REPLICAS = 8  # replicas added, one at a time, where a share of the rate misses the attainment


def checked_replicas(scenario, options: ServingOptions, load: OfferedLoad, target_rate: float,
                     capacity: float) -> tuple[int | None, dict]:
    """The fewest replicas whose capacities reach ``target_rate``, each then simulated at its share
    of it: where that run misses the SLO attainment (attainment is not monotone in the rate, so a
    share below the capacity can), one more replica, up to MAX_EXTRA_REPLICAS more. (replicas, the
    metrics of that share's run); replicas None where none of them met it."""
    replicas = fewest_replicas(target_rate, capacity)
    for _ in range(MAX_EXTRA_REPLICAS + 1):
        ok, metrics = sustains(scenario, options, load, target_rate / replicas)
        if ok:
            return replicas, metrics
        replicas += 1
    return None, metrics


def _evaluate(split: _Split) -> list[tuple]:
    """(capacity, why skipped, nodes, replicas, the metrics of one replica's share) of each
    candidate of ``split``, each with iteration timers of its own (its answer is the same in any
    process, after anything)."""
    out = []
    for name, profile, tp, schedule, *stages in split.candidates:  # (..., PP); without it, no pipeline
        pp = stages[0] if stages else 1
        cap, reason, nodes, replicas, share = None, None, None, None, None
        with own_timers():
            try:
                scenario = serving_scenario(split.model_shape, profile, tp, schedule, split.dtype, pp=pp)
                reason = unservable(scenario, split.options, split.longest)
                if reason is None:
                    cap = max_sustainable_rate(scenario, split.options, split.load, start_rate=split.target_rate)
                    reason = None if cap.rate is not None else cap.describe()
                if reason is None:
                    replicas, share = checked_replicas(scenario, split.options, split.load, split.target_rate,
                                                       cap.rate)
                    if replicas is None:
                        reason = (f"no rate found within the SLOs at a share of {split.target_rate:g} req/s "
                                  f"(up to {MAX_EXTRA_REPLICAS} replicas beyond its capacity's count)")
            except UserInputError as exc:  # DoesNotFitError included: this candidate cannot run it
                reason = str(exc)
        out.append((cap, reason, scenario_nodes(scenario) if reason is None else None, replicas, share))
    return out


def _splits(candidates: list[tuple]) -> list[list[tuple]]:
    """The candidates grouped by (profile, TP, PP), in order: one task each (its schedules share
    the costs of their iterations, laddersim.traffic.iteration_shape.shared_op_times_s)."""
    groups: list[list[tuple]] = []
    for candidate in candidates:
        name, _, tp, _, *stages = candidate
        if groups and (groups[-1][0][0], groups[-1][0][2], groups[-1][0][4:]) == (name, tp, tuple(stages)):
            groups[-1].append(candidate)
        else:
            groups.append([candidate])
    return groups


def plan_for_rate(model_shape: ModelShape, candidates: list[tuple], usd_per_gpu_hour: dict[str, float],
                  target_rate: float, options: ServingOptions, load: OfferedLoad, dtype: str = "bfloat16",
                  done: Callable[[], None] = lambda: None, workers: int = 1) -> RatePlan:
    """Every candidate's capacity and cost, on ``workers`` processes (laddersim.planning.task_pool: the
    same answer for any number); the workload is checked first (check_serving_workload), so what
    a candidate raises while it is simulated is about that candidate: it is skipped."""
    longest = check_serving_workload(model_shape, options, load, target_rate)
    groups = _splits(candidates)
    tasks = [_Split(model_shape, tuple(group), options, load, target_rate, longest, dtype) for group in groups]

    def finished(i: int) -> None:
        for _ in groups[i]:
            done()

    outcomes = [o for answer in run_tasks(_evaluate, tasks, workers, finished) for o in answer]
    out, skipped = [], []
    for (name, profile, tp, schedule, *stages), (cap, reason, nodes, replicas, share) in zip(candidates, outcomes):
        pp = stages[0] if stages else 1
        if reason is not None:
            skipped.append(SkippedCandidate(profile.name, schedule, tp, reason, pp))
            continue
        gpus = replicas * tp * pp
        out.append(ServingPlanOption(
            hardware=profile.name, schedule=schedule, tp=tp, nodes=nodes,
            capacity_req_per_s=cap.rate, replicas=replicas, gpus=gpus, ttft_p99_s=share["ttft_p99_s"],
            tpot_p99_s=share["tpot_p99_s"], usd_per_gpu_hour=usd_per_gpu_hour[name],
            usd_per_hour=gpus * usd_per_gpu_hour[name], capacity_at_least=cap.at_least,
            prompt_len=int(load.prompt.a), gen_len=int(load.output.a), slo_attainment=options.slo_attainment,
            requests=load.requests, pp=pp))
    return RatePlan(sorted(out, key=lambda o: (o.usd_per_hour, o.gpus, o.hardware, o.schedule, o.tp, o.pp)), skipped)
