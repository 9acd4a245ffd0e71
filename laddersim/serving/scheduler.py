"""A vLLM-style continuous-batching scheduler: which sequences run in the next iteration.

Pure bookkeeping, no time: ``plan()`` forms an iteration from the waiting queue and the running
batch, ``complete()`` applies its outcome. Sequences are request indices.

* **Admission** is first come, first served, while the running batch is below ``max_running``,
  the iteration's token budget (``max_batched_tokens``) lasts, and free KV-cache blocks hold the
  tokens it will compute.
* **Without chunked prefill** (vLLM V0) waiting prompts are prefilled whole, in an iteration of
  prefills only, ahead of decoding; otherwise every running sequence decodes one token.
* **With chunked prefill** (vLLM V1, Sarathi-Serve) the running sequences come first (one token
  each for decoding ones, a chunk for one still prefilling), then prompt chunks of newly
  admitted sequences fill the rest of the budget.
* **Preemption by recompute**: when a running sequence needs a block and none is free, the most
  recently admitted running sequence gives all its blocks back and returns to the head of the
  queue; readmitted, it prefills its prompt and the tokens it had generated, then goes on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from laddersim.serving.options import ServingOptions


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
