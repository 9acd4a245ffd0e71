"""The serving scheduler and replicas as they were before issue 40 (SimPy processes, per-request
Python lists in the scheduler): the oracle that tests/test_serving_fast.py holds the direct event
loop (``laddersim.traffic.replica``), the slot-based scheduler and its decode runs to, bit for bit.
Semantics: see laddersim/traffic/scheduler.py and laddersim/traffic/replica.py. Only the progress
bar is left out; a run's error bound and engine runs are counted by replica.run_timed, as there."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import simpy

from laddersim.traffic.arrivals import Requests
from laddersim.traffic.iteration_time import IterationTimer
from laddersim.traffic.options import ServingOptions
from laddersim.traffic.replica import ServingRun, check_requests_fit, progress_bar, run_timed
@dataclass
class Iteration:
    """One forward pass: decoding sequences and prompt chunks ``(seq, cached, tokens)``."""

    decode: list[int] = field(default_factory=list)
    chunks: list[tuple[int, int, int]] = field(default_factory=list)
    decode_kv: int = 0  # positions the decoding sequences attend over (cached + the new one), summed
    samples: int = 0  # sequences that produce a token

    @property
    def tokens(self) -> int:
        return len(self.decode) + sum(c for _, _, c in self.chunks)

    def prefill_shape(self) -> tuple[int, int, float]:
        """(prompt tokens, cached positions before the chunks, causal (query, key) pairs)."""
        tokens = ctx = 0
        pairs = 0.0
        for _, cached, c in self.chunks:
            tokens += c
            ctx += cached
            pairs += c * (cached + c / 2.0)
        return tokens, ctx, pairs


class ContinuousBatcher:
    def __init__(self, prompt_len: np.ndarray, output_len: np.ndarray, total_blocks: int,
                 options: ServingOptions):
        n = len(prompt_len)
        self.options = options
        self.output_len = [int(x) for x in output_len]
        self.prompt_len = [int(x) for x in prompt_len]
        self.target = list(self.prompt_len)  # tokens to have cached before the next sample
        self.cached = [0] * n
        self.generated = [0] * n
        self.blocks = [0] * n
        self.preemptions = [0] * n
        self.first_token_s = [float("nan")] * n
        self.finish_s = [float("nan")] * n
        self.free_blocks = total_blocks
        self.total_blocks = total_blocks
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self.preempted_total = 0

    @property
    def in_system(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, seq: int) -> None:
        self.waiting.append(seq)

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.options.block_size)

    def _grow(self, seq: int, tokens: int) -> bool:
        """Give ``seq`` the blocks to hold ``tokens`` cached positions; False if too few are free."""
        need = self._blocks_for(tokens) - self.blocks[seq]
        if need > self.free_blocks:
            return False
        if need > 0:
            self.free_blocks -= need
            self.blocks[seq] += need
        return True

    def _preempt(self, seq: int) -> None:
        self.running.remove(seq)
        self.free_blocks += self.blocks[seq]
        self.blocks[seq] = 0
        self.cached[seq] = 0
        self.target[seq] = self.prompt_len[seq] + self.generated[seq]
        self.preemptions[seq] += 1
        self.preempted_total += 1
        self.waiting.appendleft(seq)

    def plan(self) -> Iteration | None:
        """The next iteration, or None when nothing can run (nothing waiting or running)."""
        if self.options.chunked_prefill:
            it = self._plan_chunked()
        else:
            it = self._plan_prefill_first()
        return it if (it.decode or it.chunks) else None

    def _admit(self, it: Iteration, budget: int, whole: bool) -> int:
        """Admit waiting sequences (FCFS) into ``it``; returns the budget left."""
        opts = self.options
        while self.waiting and budget > 0 and len(self.running) < opts.max_running:
            seq = self.waiting[0]
            chunk = self.target[seq] if whole else min(self.target[seq], budget)
            if chunk > budget or not self._grow(seq, chunk):
                break
            self.waiting.popleft()
            self.running.append(seq)
            it.chunks.append((seq, 0, chunk))
            budget -= chunk
        return budget

    def _decode_running(self, it: Iteration, budget: int, chunk_prefills: bool) -> int:
        """Give each running sequence its tokens (preempting from the back when blocks run out)."""
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            cached = self.cached[seq]
            prefilling = cached < self.target[seq]
            take = min(self.target[seq] - cached, budget) if prefilling else 1
            if prefilling and not chunk_prefills:
                i += 1
                continue
            granted = self._grow(seq, cached + take)
            while not granted:
                victim = self.running[-1]
                self._preempt(victim)
                if victim == seq:
                    break  # ``seq`` was the last one: the loop ends
                granted = self._grow(seq, cached + take)
            if not granted:
                continue
            if prefilling:
                it.chunks.append((seq, cached, take))
            else:
                it.decode.append(seq)
                it.decode_kv += cached + 1
            budget -= take
            i += 1
        return budget

    def _plan_prefill_first(self) -> Iteration:
        it = Iteration()
        self._admit(it, self.options.max_batched_tokens, whole=True)
        if not it.chunks:
            if not self._decode_all_fast(it):
                self._decode_running(it, len(self.running), chunk_prefills=False)
        self._count_samples(it)
        return it

    def _decode_all_fast(self, it: Iteration) -> bool:
        """Every running sequence decodes, when the free blocks cover all their needs (the usual
        case; otherwise the general path preempts). False, and nothing changed, if not."""
        bs = self.options.block_size
        cached, blocks = self.cached, self.blocks
        short = [seq for seq in self.running if cached[seq] + 1 > blocks[seq] * bs]
        if len(short) > self.free_blocks:
            return False
        for seq in short:
            blocks[seq] += 1
        self.free_blocks -= len(short)
        it.decode = list(self.running)
        it.decode_kv = sum(cached[seq] for seq in self.running) + len(self.running)
        return True

    def _plan_chunked(self) -> Iteration:
        it = Iteration()
        budget = self._decode_running(it, self.options.max_batched_tokens, chunk_prefills=True)
        self._admit(it, budget, whole=False)
        self._count_samples(it)
        return it

    def _count_samples(self, it: Iteration) -> None:
        it.samples = len(it.decode) + sum(1 for seq, cached, c in it.chunks if cached + c == self.target[seq])

    def complete(self, it: Iteration, now_s: float) -> int:
        """Apply an iteration that ended at ``now_s``; returns the number of requests finished."""
        finished = []
        for seq in it.decode:
            self.cached[seq] += 1
            self.generated[seq] += 1
            if self.generated[seq] >= self.output_len[seq]:
                finished.append(seq)
        for seq, cached, c in it.chunks:
            self.cached[seq] = cached + c
            if self.cached[seq] == self.target[seq]:
                self.generated[seq] += 1
                if self.first_token_s[seq] != self.first_token_s[seq]:  # NaN: the first token
                    self.first_token_s[seq] = now_s
                if self.generated[seq] >= self.output_len[seq]:
                    finished.append(seq)
        if finished:
            done = set(finished)
            for seq in finished:
                self.finish_s[seq] = now_s
                self.free_blocks += self.blocks[seq]
                self.blocks[seq] = 0
            self.running = [s for s in self.running if s not in done]
        return len(finished)


def simulate_replica(timer: IterationTimer, requests: Requests, options: ServingOptions, kv_blocks: int,
                     ) -> ServingRun:
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
            complete(batcher, it, env.now, counts)

    env.process(arrive(env, requests, account, admit))
    env.process(engine())
    bound, runs = run_timed([timer], env.run, progress_bar(0, False, ""))
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


def complete(batcher: ContinuousBatcher, it, now_s: float, counts: dict) -> None:
    """Apply an iteration's outcome and count it (and the requests it finished)."""
    finished = batcher.complete(it, now_s)
    counts["iterations"] += 1
    if finished:
        counts["done"] += finished


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


def simulate_pipelined_replica(timers: list[IterationTimer], requests: Requests, options: ServingOptions,
                               kv_blocks: int, ) -> ServingRun:
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
            kv_lens = [batcher.cached[seq] + 1 for seq in it.decode]
            for stage, timer in zip(stages, timers):
                a_s = timer.attention.seconds(kv_lens, it.decode_kv, it.chunks)
                with stage.request() as turn:
                    yield turn
                    yield env.timeout(timer.seconds(it.tokens, it.samples, a_s, prefill=bool(it.chunks)))
            account()
            complete(batcher, it, env.now, counts)

    env.process(arrive(env, requests, account, admit))
    for v in range(engines):
        env.process(engine(v))
    bound, runs = run_timed(timers, env.run, progress_bar(0, False, ""))
    pick = [[getattr(batchers[owner[i]], name)[i] for i in range(n)] for name in ("first_token_s", "finish_s", "preemptions")]
    return served(requests, counts, kv_blocks, area["sum"], window_end_s, runs, bound, *pick)
