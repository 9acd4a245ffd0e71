"""Serving at a fixed concurrency: C requests in flight, each finished one replaced at once.

This is how serving benchmarks load an engine (aiperf and genai-perf ``--concurrency``, vLLM's
``benchmark_serving --max-concurrency``): the client keeps C requests open, so a request's time to
first token is its wait for a free slot of the engine's running batch (if the batch is full) plus
its prefill, in chunks between the decode steps of the others as the engine's scheduler forms
iterations (``laddersim.traffic.engines``), and its time per output token includes the prompt
chunks of newer requests that share its decode steps.

Start: the C requests land together, as aiperf's ``--concurrency`` without a rate sends them ("burst
mode: as fast as possible within concurrency limits", ai-dynamo/aiperf
docs/benchmark_modes/timing-modes-reference.md @ d509ca920483862dd524ceddd71c29905d2b9af4); with
fixed lengths the engine's token budget then decides how they spread over iterations, and the
spread persists: a budget holding all C prompts keeps them in step (each wave of C prefilled
together), one holding one or two prompts (``engines.benchmark_options`` under
``aiconfigurator``) staggers them over successive iterations.

Warm-up: the benchmarks send ``--warmup-request-count`` requests before the measured ones and
leave them out of every figure (aiperf ``docs/cli_options.md``; genai-perf's option of the same
name). Here the first ``warmup`` requests of the loop (default C, one per slot: the requests that
start together at time 0) are simulated and excluded, so the measured ones find the slots
staggered as in a running benchmark; after the measured ones, C more requests keep the loop full
until the last measured one finishes (a long benchmark's middle, not its drain), and are left out.
aiperf itself runs the warm-up as a phase of its own and starts the measured phase only once every
warm-up request has returned (ai-dynamo/aiperf @ db4f6397d11ee2d4cfbb41f70b2327315163dcf0
aiperf/timing/credit_issuing_strategy.py, ``_execute_phases``): its measured requests start as a
burst of C on an idle engine, which ``warmup=0`` reproduces (``laddersim.validation.closed_loop``
scores its tables so).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from laddersim.errors import UserInputError
from laddersim.support.limits import MAX_BATCH
from laddersim.traffic.arrivals import Requests
from laddersim.traffic.iteration_time import IterationTimer
from laddersim.traffic.options import ServingOptions
from laddersim.traffic.replica import ServingRun, check_requests_fit, progress_bar, run_timed, served

MAX_CONCURRENCY = MAX_BATCH


def check_concurrency(concurrency: int, requests: int, warmup: int | None) -> int:
    """The warm-up requests (default: ``concurrency``); refuses, in one line naming the field, a
    concurrency or warm-up out of range."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, (int, np.integer)) \
            or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise UserInputError(f"concurrency: {concurrency!r}; allowed: an integer from 1 to {MAX_CONCURRENCY}")
    warm = concurrency if warmup is None else warmup
    if isinstance(warm, bool) or not isinstance(warm, (int, np.integer)) or warm < 0:
        raise UserInputError(f"warmup: {warmup!r}; allowed: an integer from 0 (default: the concurrency)")
    if warm + requests > np.iinfo(np.int32).max:
        raise UserInputError(f"warmup: {warm} + {requests} requests; allowed: fewer than 2**31 in all")
    return int(warm)


def simulate_closed_replica(timer: IterationTimer, requests: Requests, options: ServingOptions, kv_blocks: int,
                            concurrency: int, warmup: int, progress: bool = False,
                            label: str = "serving") -> tuple[ServingRun, ServingRun]:
    """Serve ``requests`` (their lengths; their arrival times are ignored: each lands when a slot
    frees) ``concurrency`` at a time on one replica, followed by a tail of ``concurrency`` more
    (the first ones' lengths again, not measured) so that the last measured requests too run
    beside C in flight, as the middle of a long benchmark does. Returns (the whole run, tail
    included; the run of the measured requests: all of ``requests`` but the first ``warmup``),
    the per-request arrays in issue order."""
    from laddersim.traffic.replica_loop import ReplicaLoop

    n = len(requests)
    if warmup >= n:
        raise UserInputError(f"warmup: {warmup} of {n} requests leaves none to measure; allowed: fewer than "
                             "--requests + the warm-up")
    tail = np.arange(concurrency) % n
    requests = Requests(np.zeros(n + concurrency), np.concatenate((requests.prompt_len, requests.prompt_len[tail])),
                        np.concatenate((requests.output_len, requests.output_len[tail])))
    check_requests_fit(requests, options, kv_blocks)
    bar = progress_bar(len(requests), progress, label)
    loop = ReplicaLoop(timer, requests, options, kv_blocks, bar, concurrency=concurrency)
    bound, runs = run_timed([timer], loop.run, bar)
    b = loop.batcher
    issued = Requests(loop.lands_s.copy(), requests.prompt_len, requests.output_len)
    last_s = float(np.nanmax(b.finish_s)) if loop.done else 0.0
    whole = served(issued, loop.done, loop.iterations, kv_blocks, loop.in_system_area, last_s, runs, bound,
                   b.first_token_s, b.finish_s, b.preemptions)
    return whole, measured(whole, warmup, n)


def measured(run: ServingRun, warmup: int, stop: int) -> ServingRun:
    """``run``'s requests ``warmup`` to ``stop`` - 1 (the replica's own figures, iterations and
    KV blocks, unchanged)."""
    keep = slice(warmup, stop)
    req = run.requests
    return replace(run, requests=Requests(req.arrival_s[keep], req.prompt_len[keep], req.output_len[keep]),
                   first_token_s=run.first_token_s[keep], finish_s=run.finish_s[keep],
                   preemptions=run.preemptions[keep])
