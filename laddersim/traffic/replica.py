"""One replica under load: what a simulation of it records, the checks before one, and the
entry point (``simulate_replica``: the direct event loop of ``laddersim.traffic.replica_loop``;
a pipeline's replica is ``laddersim.traffic.pipelined``'s)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from laddersim.errors import UserInputError
from laddersim.support.limits import MAX_ITERATIONS
from laddersim.support.progress import progress_bar as terminal_bar
from laddersim.traffic.arrivals import Requests
from laddersim.traffic.iteration_time import IterationTimer
from laddersim.traffic.options import ServingOptions

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
    prompt = int(requests.prompt_len.max())
    if options.chunked_prefill and not options.split_prompts and prompt > options.max_batched_tokens:
        raise UserInputError(f"max-batched-tokens: {options.max_batched_tokens} is below the longest prompt "
                             f"({prompt} tokens), which this scheduler admits whole; raise it")
    if not options.chunked_prefill and longest > options.max_batched_tokens:
        raise UserInputError(f"max-batched-tokens: {options.max_batched_tokens} is below the longest request "
                             f"({longest} prompt + output tokens); raise it or use --chunked-prefill")


def simulate_replica(timer: IterationTimer, requests: Requests, options: ServingOptions, kv_blocks: int,
                     progress: bool = False, label: str = "serving") -> ServingRun:
    """Serve ``requests`` on one replica: continuous batching (laddersim.traffic.scheduler), each
    iteration lasting ``timer``'s makespan for its shape."""
    from laddersim.traffic.replica_loop import ReplicaLoop

    check_requests_fit(requests, options, kv_blocks)
    bar = progress_bar(len(requests), progress, label)
    loop = ReplicaLoop(timer, requests, options, kv_blocks, bar)
    bound, runs = run_timed([timer], loop.run, bar)
    b = loop.batcher
    return served(requests, loop.done, loop.iterations, kv_blocks, loop.in_system_area, loop.window_end_s, runs,
                  bound, b.first_token_s, b.finish_s, b.preemptions)


def progress_bar(requests: int, progress: bool, label: str):
    """A bar of requests finished on stderr (none for a run that takes well under a second)."""
    return terminal_bar(requests, label, "req", enabled=progress and requests >= PROGRESS_MIN_REQUESTS,
                        dynamic_ncols=True)


def run_timed(timers: list[IterationTimer], simulate: Callable[[], None], bar) -> tuple[float, int]:
    """``simulate()``, then (the largest iteration error bound of this run, the engine runs it
    needed). The timers are shared between runs (their engine runs are reused); each keeps the
    largest bound it has seen, and the bound returned is this run's."""
    earlier = [timer.max_error_bound for timer in timers]
    runs_before = sum(timer.engine_runs for timer in timers)
    for timer in timers:
        timer.max_error_bound = 0.0
    try:
        simulate()
    finally:
        bar.close()
        bound = max(timer.max_error_bound for timer in timers)
        for timer, before in zip(timers, earlier):
            timer.max_error_bound = max(before, timer.max_error_bound)
    return bound, sum(timer.engine_runs for timer in timers) - runs_before


def served(requests: Requests, done: int, iterations: int, kv_blocks: int, in_system_area: float,
           window_end_s: float, engine_runs: int, bound: float, first_token_s, finish_s, preemptions) -> ServingRun:
    """The run's record, once every request is done (the per-request arrays in request order)."""
    n = len(requests)
    if done < n:  # the scheduler stalled with work left: a bug, never bad input
        raise RuntimeError(f"serving: {n - done} requests never finished")
    span = window_end_s - float(requests.arrival_s[0])
    return ServingRun(
        requests=requests,
        first_token_s=np.asarray(first_token_s, dtype=float),
        finish_s=np.asarray(finish_s, dtype=float),
        preemptions=np.asarray(preemptions, dtype=np.int64),
        iterations=iterations,
        kv_blocks=kv_blocks,
        mean_in_system=in_system_area / span if span > 0 else float("nan"),
        engine_runs=engine_runs,
        iteration_error_bound=bound,
    )
