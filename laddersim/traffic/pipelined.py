"""One replica of a TP x PP pipeline under load: a pipeline-parallel serving engine's batches in flight.

vLLM's pipeline-parallel engine (V0: ``vllm/engine/llm_engine.py``) runs ``pipeline_parallel_size``
virtual engines, each with its own scheduler over an equal share of the KV-cache blocks
(``vllm/core/scheduler.py``: ``num_gpu_blocks //= pipeline_parallel_size``); a new request goes to
the scheduler with the fewest unfinished requests. Each virtual engine's iteration passes the
stages in order and a stage runs one iteration at a time, so up to ``pp`` batches are in flight,
one per stage, as SGLang's pipeline-parallel decode also keeps them. Here each virtual engine is
a ``ContinuousBatcher`` (``laddersim.traffic.scheduler``) and each stage a SimPy resource held
for the stage's time of the iteration (its own ``IterationTimer``: the stage's program, its
layers' attention and its receive, ``laddersim.simulation.pipeline.receive_s``). Bubbles follow: a
stage waits while the iteration it is to run is still on an earlier stage, or while a virtual
engine has nothing to run.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import simpy

from laddersim.hardware.placement import place
from laddersim.simulation.pipeline import receive_s
from laddersim.schedules.stages import pipeline_stages
from laddersim.traffic.arrivals import Requests
from laddersim.traffic.iteration_time import IterationTimer, StageTiming
from laddersim.traffic.kv_blocks import kv_block_count
from laddersim.traffic.options import ServingOptions
from laddersim.traffic.replica import ServingRun, check_requests_fit, progress_bar, run_timed, served
from laddersim.traffic.scheduler import ContinuousBatcher
from laddersim.simulation.simulate import Scenario


def stage_timers(scenario: Scenario, options: ServingOptions) -> list[IterationTimer]:
    """One iteration timer per stage of ``scenario`` (``pp`` stages on the profile's nodes)."""
    placement = place(scenario.hardware, scenario.tp, scenario.pp)
    return [IterationTimer(scenario, options.points_per_octave,
                           StageTiming(stage, placement.stage_nodes(stage.index),
                                       partial(receive_s, scenario, placement, stage)))
            for stage in pipeline_stages(scenario.model.n_layers, scenario.pp)]


def pipeline_kv_blocks(scenario: Scenario, options: ServingOptions) -> int:
    """KV-cache blocks of the pipeline: the fewest any stage's GPUs hold (each its layers' share)."""
    return min(kv_block_count(scenario, options, stage) for stage in pipeline_stages(scenario.model.n_layers, scenario.pp))


def simulate_pipelined_replica(timers: list[IterationTimer], requests: Requests, options: ServingOptions,
                               kv_blocks: int, progress: bool = False, label: str = "serving") -> ServingRun:
    """Serve ``requests`` on the stages of ``timers`` with one virtual engine per stage (module docstring)."""
    engines = len(timers)
    blocks = kv_blocks // engines
    check_requests_fit(requests, options, blocks)
    n = len(requests)
    batchers = [ContinuousBatcher(requests.prompt_len, requests.output_len, blocks, options) for _ in range(engines)]
    owner = np.zeros(n, dtype=int)
    env = simpy.Environment()
    stages = [simpy.Resource(env, capacity=1) for _ in timers]
    idle = [env.event() for _ in range(engines)]
    window_end_s = float(requests.arrival_s[-1])
    area = {"t": 0.0, "sum": 0.0}
    counts = {"done": 0, "iterations": 0}
    bar = progress_bar(n, progress, label)

    def account() -> None:
        t = min(env.now, window_end_s)
        area["sum"] += sum(b.in_system for b in batchers) * (t - area["t"])
        area["t"] = t

    def admit(i: int) -> None:
        v = min(range(engines), key=lambda e: batchers[e].in_system)  # vLLM: fewest unfinished
        owner[i] = v
        batchers[v].add(i)
        if not idle[v].triggered:
            idle[v].succeed()

    def engine(v: int):
        batcher = batchers[v]
        while counts["done"] < n:
            it = batcher.plan()
            if it is None:
                idle[v] = env.event()
                yield idle[v]
                continue
            for stage, timer in zip(stages, timers):
                a_s = timer.attention.seconds(it.kv_lens, it.decode_kv, it.chunks)
                with stage.request() as turn:
                    yield turn
                    yield env.timeout(timer.seconds(it.tokens, it.samples, a_s, prefill=bool(it.chunks)))
            account()
            finished = batcher.complete(it, env.now)
            counts["iterations"] += 1
            if finished:
                counts["done"] += finished
                bar.update(finished)

    env.process(arrive(env, requests, account, admit))
    for v in range(engines):
        env.process(engine(v))
    bound, runs = run_timed(timers, env.run, bar)
    rows = np.arange(n)
    pick = [getattr(batchers[0], name).copy() for name in ("first_token_s", "finish_s", "preemptions")]
    for v in range(1, engines):
        mine = owner == v
        for column, name in zip(pick, ("first_token_s", "finish_s", "preemptions")):
            column[mine] = getattr(batchers[v], name)[rows[mine]]
    return served(requests, counts["done"], counts["iterations"], kv_blocks, area["sum"], window_end_s, runs, bound,
                  *pick)


def arrive(env: simpy.Environment, requests: Requests, account, admit):
    """The arrivals process: each request handed to ``admit`` at its arrival time, the time
    integral of the requests in the system brought up to date first (``account``)."""
    for i, at in enumerate(requests.arrival_s.tolist()):
        if at > env.now:
            yield env.timeout(at - env.now)
        account()
        admit(i)
