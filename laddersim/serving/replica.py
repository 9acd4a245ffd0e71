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

    def arrivals():
        for i, at in enumerate(requests.arrival_s.tolist()):
            if at > env.now:
                yield env.timeout(at - env.now)
            account()
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
            finished = batcher.complete(it, env.now)
            counts["iterations"] += 1
            if finished:
                counts["done"] += finished
                bar.update(finished)

    env.process(arrivals())
    env.process(engine())
    # The timer is shared between runs (its engine runs are reused); its error bound is this run's.
    earlier_bound, timer.max_error_bound = timer.max_error_bound, 0.0
    runs_before = timer.engine_runs
    try:
        env.run()
    finally:
        bar.close()
        bound, timer.max_error_bound = timer.max_error_bound, max(earlier_bound, timer.max_error_bound)
    if counts["done"] < n:  # the scheduler stalled with work left: a bug, never bad input
        raise RuntimeError(f"serving: {n - counts['done']} requests never finished")
    span = window_end_s - float(requests.arrival_s[0])
    return ServingRun(
        requests=requests,
        first_token_s=np.array(batcher.first_token_s),
        finish_s=np.array(batcher.finish_s),
        preemptions=np.array(batcher.preemptions, dtype=np.int64),
        iterations=counts["iterations"],
        kv_blocks=kv_blocks,
        mean_in_system=area["sum"] / span if span > 0 else float("nan"),
        engine_runs=timer.engine_runs - runs_before,
        iteration_error_bound=bound,
    )
