"""One replica under load, as a SimPy discrete-event simulation.

Two processes: ``arrivals`` hands each request to the scheduler at its arrival time (waking an
idle engine); ``engine`` loops over iterations, each lasting the iteration-time model's makespan
for its shape. Records go into the scheduler's plain lists and become arrays afterwards.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import simpy
from tqdm import tqdm

from laddersim.errors import UserInputError
from laddersim.limits import MAX_ITERATIONS
from laddersim.serving.arrivals import Requests
from laddersim.serving.iteration_time import IterationTimer
from laddersim.serving.options import ServingOptions
from laddersim.serving.scheduler import ContinuousBatcher

PROGRESS_MIN_REQUESTS = 2000  # smaller runs take well under a second: no bar


@dataclass(frozen=True)
class ServingRun:
    """What happened to every request (arrays in request order) and to the replica."""

    requests: Requests
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    iterations: int
    kv_blocks: int
    # Time-average of the requests in the system (waiting or running) from the first to the last
    # arrival, counted by the simulation as it runs (for Little's law).
    mean_in_system: float
    engine_runs: int  # new engine runs this simulation needed (the rest were cached)
    iteration_error_bound: float  # largest bound on an iteration time's relative error, this run


def check_requests_fit(requests: Requests, options: ServingOptions, kv_blocks: int) -> None:
    """Every request must be able to run alone: its KV cache in the blocks, and (without chunked
    prefill) its prompt plus output in one iteration's budget (vLLM's model-length rule). And the
    run must end: the iterations it needs at the least (a request's output tokens one per
    iteration; all output tokens max_running, all prompt tokens max_batched_tokens at a time) stay
    within MAX_ITERATIONS."""
    least = max(int(requests.output_len.max()),
                -(-int(requests.output_len.sum()) // options.max_running),
                -(-int(requests.prompt_len.sum()) // options.max_batched_tokens))
    if least > MAX_ITERATIONS:
        raise UserInputError(f"requests: {len(requests)} requests of these lengths need at least {least} engine "
                             f"iterations; allowed: at most {MAX_ITERATIONS} (fewer --requests or shorter lengths)")
    longest = int((requests.prompt_len + requests.output_len).max())
    if -(-longest // options.block_size) > kv_blocks:
        raise UserInputError(f"requests: the longest request ({longest} tokens) needs more than the "
                             f"{kv_blocks} KV-cache blocks of {options.block_size} tokens; shorten it or raise tp")
    if not options.chunked_prefill and longest > options.max_batched_tokens:
        raise UserInputError(f"max-batched-tokens: {options.max_batched_tokens} is below the longest request "
                             f"({longest} prompt + output tokens); raise it or use --chunked-prefill")


def simulate_replica(timer: IterationTimer, requests: Requests, options: ServingOptions, kv_blocks: int,
                     progress: bool = False, label: str = "serving") -> ServingRun:
    check_requests_fit(requests, options, kv_blocks)
    n = len(requests)
    batcher = ContinuousBatcher(requests.prompt_len, requests.output_len, kv_blocks, options)
    attention = timer.attention
    cached = batcher.cached  # updated in place by the batcher
    env = simpy.Environment()
    idle = {"event": env.event()}
    window_end_s = float(requests.arrival_s[-1])
    area = {"t": 0.0, "sum": 0.0}

    def account() -> None:
        # The integral of requests in the system, up to the last arrival.
        t = min(env.now, window_end_s)
        area["sum"] += batcher.in_system * (t - area["t"])
        area["t"] = t

    def admit(i: int) -> None:
        batcher.add(i)
        if not idle["event"].triggered:
            idle["event"].succeed()

    bar = tqdm(total=n, desc=label, unit="req", file=sys.stderr, dynamic_ncols=True,
               disable=not progress or n < PROGRESS_MIN_REQUESTS)
    counts = {"done": 0, "iterations": 0}

    def engine():
        while counts["done"] < n:
            it = batcher.plan()
            if it is None:
                idle["event"] = env.event()
                yield idle["event"]
                continue
            kv_lens = [cached[seq] + 1 for seq in it.decode]  # each decoding sequence's positions attended
            a_s = attention.seconds(kv_lens, it.decode_kv, it.chunks)
            yield env.timeout(timer.seconds(it.tokens, it.samples, a_s, prefill=bool(it.chunks)))
            account()
            complete(batcher, it, env.now, counts, bar)

    env.process(arrive(env, requests, account, admit))
    env.process(engine())
    bound, runs = run_timed(env, [timer], bar)
    return served(requests, counts, kv_blocks, area["sum"], window_end_s, runs, bound,
                  batcher.first_token_s, batcher.finish_s, batcher.preemptions)


def arrive(env: simpy.Environment, requests: Requests, account, admit):
    """The arrivals process: each request handed to ``admit`` at its arrival time, the time
    integral of the requests in the system brought up to date first (``account``)."""
    for i, at in enumerate(requests.arrival_s.tolist()):
        if at > env.now:
            yield env.timeout(at - env.now)
        account()
        admit(i)


def complete(batcher: ContinuousBatcher, it, now_s: float, counts: dict, bar) -> None:
    """Apply an iteration's outcome and count it (and the requests it finished)."""
    finished = batcher.complete(it, now_s)
    counts["iterations"] += 1
    if finished:
        counts["done"] += finished
        bar.update(finished)


def run_timed(env: simpy.Environment, timers: list[IterationTimer], bar) -> tuple[float, int]:
    """``env.run()``, then (the largest iteration error bound of this run, the engine runs it
    needed). The timers are shared between runs (their engine runs are reused); each keeps the
    largest bound it has seen, and the bound returned is this run's."""
    earlier = [timer.max_error_bound for timer in timers]
    runs_before = sum(timer.engine_runs for timer in timers)
    for timer in timers:
        timer.max_error_bound = 0.0
    try:
        env.run()
    finally:
        bar.close()
        bound = max(timer.max_error_bound for timer in timers)
        for timer, before in zip(timers, earlier):
            timer.max_error_bound = max(before, timer.max_error_bound)
    return bound, sum(timer.engine_runs for timer in timers) - runs_before


def served(requests: Requests, counts: dict, kv_blocks: int, in_system_area: float, window_end_s: float,
           engine_runs: int, bound: float, first_token_s, finish_s, preemptions) -> ServingRun:
    """The run's record, once every request is done (the per-request lists in request order)."""
    n = len(requests)
    if counts["done"] < n:  # the scheduler stalled with work left: a bug, never bad input
        raise RuntimeError(f"serving: {n - counts['done']} requests never finished")
    span = window_end_s - float(requests.arrival_s[0])
    return ServingRun(
        requests=requests,
        first_token_s=np.array(first_token_s),
        finish_s=np.array(finish_s),
        preemptions=np.array(preemptions, dtype=np.int64),
        iterations=counts["iterations"],
        kv_blocks=kv_blocks,
        mean_in_system=in_system_area / span if span > 0 else float("nan"),
        engine_runs=engine_runs,
        iteration_error_bound=bound,
    )
