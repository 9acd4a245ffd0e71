"""Serve a set of requests on one replica of a scenario: the entry point of laddersim.traffic."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from laddersim.errors import UserInputError
from laddersim.hardware.placement import place
from laddersim.traffic.arrivals import Requests
from laddersim.traffic.iteration_time import IterationTimer
from laddersim.traffic.kv_blocks import kv_block_count
from laddersim.traffic.metrics import request_frame, summary
from laddersim.traffic.options import ServingOptions
from laddersim.traffic.pipelined import pipeline_kv_blocks, simulate_pipelined_replica, stage_timers
from laddersim.traffic.replica import ServingRun, simulate_replica
from laddersim.simulation.simulate import Scenario, make_scenario

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class ServingResult:
    scenario: Scenario
    options: ServingOptions
    run: ServingRun
    metrics: dict  # metrics.summary()

    @cached_property
    def frame(self) -> pd.DataFrame:
        """One row per request (metrics.REQUEST_COLUMNS), built when asked for."""
        return request_frame(self.run, self.options)

    def summary(self, rate: float | None = None) -> dict:
        """The row ``--json`` prints: scenario, options, then the metrics."""
        s, o = self.scenario, self.options
        return {
            "schedule": s.schedule, "model": s.model.name, "hardware": s.hardware.name, "tp": s.tp, "pp": s.pp,
            "framework": s.workload.framework,
            "rate": rate, "requests": len(self.run.requests), "max_running": o.max_running,
            "max_batched_tokens": o.max_batched_tokens, "chunked_prefill": o.chunked_prefill,
            **self.metrics,
        }


def serving_scenario(model, hardware, tp: int, schedule: str, dtype: str = "bfloat16",
                     kv_reads: str = "per_kv_head", framework: str = "gpt-fast", pp: int = 1, quant: str = "none",
                     kv_cache_dtype: str = "auto", ep: int = 1) -> Scenario:
    """A Scenario for serving: a paged (dynamic) KV cache; batch and lengths come per iteration;
    ``pp`` pipeline stages of ``tp`` GPUs (``laddersim.traffic.pipelined``: one batch in flight per stage).

    Serving is a vLLM-style engine: continuous batching over a paged cache, each sequence
    attending its own positions. What the ``framework`` then decides is which kernels run:

    * ``vllm`` is such an engine: FlashAttention over each prompt's own tokens (its prefill
      speedup) and each KV head read once in decode, the LM head on the sampled positions only,
      its custom AllReduce for small messages.
    * ``gpt-fast`` (the default everywhere, the paper's benchmark) has no server: it preallocates
      a static cache of ``max_seq_len`` positions that every step reads whole, a size a stream of
      requests does not fix. Serving under it keeps its kernels -- torch's math SDPA in prefill
      (over the prompt and the positions already cached) and Inductor's generated reductions in
      decode, the LM head over every new token of an iteration with prompt tokens
      (``prefill_logits: all``), its collectives -- on the paged cache, so one request alone is
      ``laddersim simulate --kv-cache dynamic --kv-reads per_kv_head``'s batch 1.
    * ``gpt-fast-flash`` likewise, with its FlashAttention kernels and eager ops.
    * ``gpt-fast-graph`` is refused (one line): its memory-efficient attention kernel is priced
      by its grid over one static batch, which an iteration's mix of sequences does not have.

    ``kv_reads`` overrides the framework's (default per_kv_head: a GQA-aware kernel); ``quant`` and
    ``kv_cache_dtype``: the linears' quantization and the cache's element type (laddersim.model.quantization);
    ``ep``: a mixture-of-experts model's experts placed ``ep`` ways over the TP group. A kernel
    calibration file (``laddersim calibrate kernels``) is refused by the iteration timer: it
    prices one static batch's decode steps only."""
    scenario = make_scenario(model=model, hardware=hardware, tp=tp, batch=1, prompt_len=1, gen_len=1, schedule=schedule,
                             dtype=dtype, kv_cache="dynamic", kv_reads=kv_reads, framework=framework, pp=pp,
                             quant=quant, kv_cache_dtype=kv_cache_dtype, ep=ep)
    if pp > 1:
        place(scenario.hardware, tp, pp)  # the stages fit the profile's nodes, or one line
    return scenario


_TIMERS: dict[tuple, IterationTimer | list[IterationTimer]] = {}


@contextmanager
def own_timers():
    """Within: a cache of iteration timers of its own, dropped after, so that what is simulated
    inside does not depend on what this process simulated before (a timer's resolved intervals
    decide the last bits of later iterations' times). A plan evaluates each candidate so, in
    whichever process it runs."""
    global _TIMERS
    saved, _TIMERS = _TIMERS, {}
    try:
        yield
    finally:
        _TIMERS = saved


def timer_for(scenario: Scenario, options: ServingOptions) -> IterationTimer | list[IterationTimer]:
    """One timer per scenario and process (a pipeline: one per stage), so a rate search or a sweep
    reuses every engine run. Keyed by the identity of the model and profile objects (the timer
    keeps them alive)."""
    w = scenario.workload
    key = (id(scenario.model), id(scenario.hardware), scenario.tp, scenario.pp, scenario.schedule, w.dtype,
           w.kv_cache, w.kv_reads, w.framework, options.points_per_octave, w.quant, w.kv_cache_dtype)
    if key not in _TIMERS:
        if len(_TIMERS) >= 64:
            _TIMERS.pop(next(iter(_TIMERS)))
        _TIMERS[key] = (stage_timers(scenario, options) if scenario.pp > 1
                        else IterationTimer(scenario, options.points_per_octave))
    return _TIMERS[key]


def kv_blocks_for(scenario: Scenario, options: ServingOptions) -> int:
    """KV-cache blocks per GPU of the replica (a pipeline: its fullest stage's)."""
    return pipeline_kv_blocks(scenario, options) if scenario.pp > 1 else kv_block_count(scenario, options)


def serve(scenario: Scenario, requests: Requests, options: ServingOptions, progress: bool = False) -> ServingResult:
    check_context(scenario, requests)
    timer = timer_for(scenario, options)
    replica = simulate_pipelined_replica if scenario.pp > 1 else simulate_replica
    run = replica(timer, requests, options, kv_blocks_for(scenario, options), progress,
                  label=f"serving {scenario.schedule}")
    return ServingResult(scenario, options, run, summary(run, options))


def serve_closed_loop(scenario: Scenario, requests: Requests, options: ServingOptions, concurrency: int,
                      warmup: int | None = None, progress: bool = False) -> ServingResult:
    """``requests`` (their lengths) served ``concurrency`` at a time, each finished one replaced
    at once (laddersim.traffic.closed_loop); the first ``warmup`` (default: ``concurrency``) are
    simulated and left out. The result's run and metrics are the measured requests'."""
    from laddersim.traffic.closed_loop import check_concurrency, simulate_closed_replica

    warm = check_concurrency(concurrency, len(requests), warmup)
    if scenario.pp > 1:
        raise UserInputError("concurrency: a fixed concurrency is simulated on one pipeline stage (--pp 1); "
                             "allowed: --rate with --pp")
    check_context(scenario, requests)
    _, run = simulate_closed_replica(timer_for(scenario, options), requests, options,
                                     kv_blocks_for(scenario, options), concurrency, warm, progress,
                                     label=f"serving {scenario.schedule}")
    metrics = summary(run, options, open_loop=False)
    metrics.update(concurrency=concurrency, warmup_requests=warm)
    return ServingResult(scenario, options, run, metrics)


def check_context(scenario: Scenario, requests: Requests) -> None:
    """The longest request within the model's attention window and context, or one line."""
    if len(requests):  # the longest request within the model's attention window, if it has one
        lengths = requests.prompt_len + requests.output_len
        longest = int(lengths.argmax())
        scenario.model.check_window(int(requests.prompt_len[longest]), int(requests.output_len[longest]),
                                    where="a request's prompt + output length")
        context, tokens = scenario.model.max_position_embeddings, int(lengths[longest])
        if context and tokens > context:  # vLLM refuses a request beyond max_model_len (the model's context)
            raise UserInputError(f"requests: the longest request ({tokens} prompt + output tokens) exceeds the "
                                 f"{context}-token context of {scenario.model.name} (max_position_embeddings); "
                                 f"allowed: prompt + output <= {context}")
