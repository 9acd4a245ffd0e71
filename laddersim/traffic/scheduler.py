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
  With ``split_prompts`` off the prompts admitted are whole (TensorRT-LLM's inflight batching
  without chunked context). With ``mix_decodes`` off an iteration carries prompt chunks only (the
  one being chunked first, then new ones) while there are any, and the running sequences decode in
  the iterations between (SGLang's default; with ``split_prompts`` off too, SGLang with chunked
  prefill off: whole prompts in iterations of their own).
* **Preemption by recompute**: when a running sequence needs a block and none is free, the most
  recently admitted running sequence gives all its blocks back and returns to the head of the
  queue; readmitted, it prefills its prompt and the tokens it had generated, then goes on.
  With ``kv_admission`` ``whole_request`` a sequence is admitted holding the blocks of its prompt
  and whole output, so it never needs another one and nothing is preempted.

State is kept where it is used, so that a million requests cost arrays, not Python objects: the
requests' lengths and outcomes (first token, finish, preemptions, tokens generated) are arrays
indexed by request; the waiting queue is an array of request indices (and a short deque of
preempted ones at its head); the running batch is a few lists of ints, one entry per *slot*
(its position in the batch, in admission order). Iterations name slots. Stretches of iterations
that only decode (``steady_decode``) advance in one step (``laddersim.traffic.decode_run``).
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from laddersim.traffic.decode_run import DecodeRun
from laddersim.traffic.options import ServingOptions


@dataclass
class Iteration:
    """One forward pass: decoding slots (each attending ``kv_lens`` positions, the new one
    included) and prompt chunks ``(slot, cached, tokens)``."""

    decode: list[int] = field(default_factory=list)
    kv_lens: list[int] = field(default_factory=list)
    chunks: list[tuple[int, int, int]] = field(default_factory=list)
    decode_kv: int = 0  # positions the decoding sequences attend over (cached + the new one), summed
    samples: int = 0  # sequences that produce a token

    @property
    def tokens(self) -> int:
        return len(self.decode) + sum(c for _, _, c in self.chunks)


class WaitingQueue:
    """FIFO of request indices: arrivals appended to an int64 array (read from a moving head),
    preempted sequences pushed back in front of them."""

    def __init__(self):
        self._items = array("q")
        self._head = 0
        self._front: deque[int] = deque()

    def __len__(self) -> int:
        return len(self._items) - self._head + len(self._front)

    def append(self, seq: int) -> None:
        self._items.append(seq)

    def extend_range(self, first: int, stop: int) -> None:
        """Append requests ``first`` .. ``stop - 1``, in order."""
        self._items.extend(range(first, stop))

    def appendleft(self, seq: int) -> None:
        self._front.appendleft(seq)

    def head(self) -> int:
        return self._front[0] if self._front else self._items[self._head]

    def popleft(self) -> int:
        if self._front:
            return self._front.popleft()
        self._head += 1
        return self._items[self._head - 1]


class ContinuousBatcher:
    def __init__(self, prompt_len: np.ndarray, output_len: np.ndarray, total_blocks: int,
                 options: ServingOptions):
        n = len(prompt_len)
        self.options = options
        self.prompt_len = np.asarray(prompt_len, dtype=np.int64)
        self.output_len = np.asarray(output_len, dtype=np.int64)
        # Per request: outcomes, and the tokens generated (kept while preempted, final when done).
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.generated_by_request = np.zeros(n, dtype=np.int64)
        self.free_blocks = total_blocks
        self.total_blocks = total_blocks
        self.waiting = WaitingQueue()
        # The running batch, one entry per slot (admission order): request, positions cached,
        # positions to have cached before the next sample, tokens generated, output length, blocks.
        self.seq: list[int] = []
        self.cached: list[int] = []
        self.target: list[int] = []
        self.generated: list[int] = []
        self.output: list[int] = []
        self.blocks: list[int] = []
        self.preempted_total = 0

    @property
    def in_system(self) -> int:
        return len(self.waiting) + len(self.seq)

    def add(self, seq: int) -> None:
        self.waiting.append(seq)

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.options.block_size)

    def _grow(self, slot: int, tokens: int) -> bool:
        """Give ``slot`` the blocks to hold ``tokens`` cached positions; False if too few are free."""
        need = self._blocks_for(tokens) - self.blocks[slot]
        if need > self.free_blocks:
            return False
        if need > 0:
            self.free_blocks -= need
            self.blocks[slot] += need
        return True

    def _preempt_last(self) -> None:
        """The most recently admitted sequence gives its blocks back and waits at the queue's head."""
        seq = self.seq.pop()
        self.free_blocks += self.blocks.pop()
        self.generated_by_request[seq] = self.generated.pop()
        for column in (self.cached, self.target, self.output):
            column.pop()
        self.preemptions[seq] += 1
        self.preempted_total += 1
        self.waiting.appendleft(seq)

    def plan(self) -> Iteration | None:
        """The next iteration, or None when nothing can run (nothing waiting or running)."""
        if self.options.chunked_prefill and self.options.mix_decodes:
            it = self._plan_chunked()
        else:
            it = self._plan_prefill_first()
        return it if (it.decode or it.chunks) else None

    def _admission_blocks(self, seq: int, chunk: int) -> int:
        """The blocks ``seq`` takes when admitted computing ``chunk`` tokens: those tokens'
        (``on_demand``), or its prompt's and whole output's (``whole_request``)."""
        if self.options.kv_admission == "whole_request":
            return self._blocks_for(int(self.prompt_len[seq]) + int(self.output_len[seq]))
        return self._blocks_for(chunk)

    def head_admits(self, budget: int, free_blocks: int, whole: bool) -> bool:
        """Would ``_admit`` take the queue's head (the queue not empty, the batch not full)?"""
        seq = self.waiting.head()
        target = int(self.prompt_len[seq]) + int(self.generated_by_request[seq])
        chunk = target if whole and target <= self.options.max_batched_tokens else min(target, budget)
        return chunk <= budget and self._admission_blocks(seq, chunk) <= free_blocks

    def _admit(self, it: Iteration, budget: int, whole: bool) -> int:
        """Admit waiting sequences (FCFS) into ``it``; returns the budget left. A waiting sequence
        holds no blocks and no cached positions (a preempted one gave them back). ``whole``: each
        prompt in one piece, except one longer than the whole token budget (a preempted sequence
        readmitted with the tokens it had generated), which could never be: it is chunked."""
        max_running = self.options.max_running
        while self.waiting and budget > 0 and len(self.seq) < max_running:
            seq = self.waiting.head()
            generated = int(self.generated_by_request[seq])
            target = int(self.prompt_len[seq]) + generated
            chunk = target if whole and target <= self.options.max_batched_tokens else min(target, budget)
            need = self._admission_blocks(seq, chunk)
            if chunk > budget or need > self.free_blocks:
                break
            self.waiting.popleft()
            self.free_blocks -= need
            it.chunks.append((len(self.seq), 0, chunk))
            self.seq.append(seq)
            self.cached.append(0)
            self.target.append(target)
            self.generated.append(generated)
            self.output.append(int(self.output_len[seq]))
            self.blocks.append(need)
            budget -= chunk
        return budget

    def _decode_running(self, it: Iteration, budget: int, chunk_prefills: bool, decodes: bool = True) -> int:
        """Give each running sequence its tokens (preempting from the back when blocks run out):
        a prompt chunk to one still prefilling (if ``chunk_prefills``), one token to a decoding
        one (if ``decodes``)."""
        i = 0
        while i < len(self.seq) and budget > 0:
            cached = self.cached[i]
            prefilling = cached < self.target[i]
            take = min(self.target[i] - cached, budget) if prefilling else 1
            if (prefilling and not chunk_prefills) or (not prefilling and not decodes):
                i += 1
                continue
            granted = self._grow(i, cached + take)
            while not granted:
                last = len(self.seq) - 1
                self._preempt_last()
                if last == i:
                    break  # slot ``i`` was the last one: the loop ends
                granted = self._grow(i, cached + take)
            if not granted:
                continue
            if prefilling:
                it.chunks.append((i, cached, take))
            else:
                it.decode.append(i)
                it.kv_lens.append(cached + 1)
                it.decode_kv += cached + 1
            budget -= take
            i += 1
        return budget

    def _plan_prefill_first(self) -> Iteration:
        it = Iteration()
        if self.options.chunked_prefill:  # prompt chunks alone: the prompt being chunked, then new ones
            budget = self._decode_running(it, self.options.max_batched_tokens, chunk_prefills=True, decodes=False)
            self._admit(it, budget, whole=not self.options.split_prompts)
        else:
            self._admit(it, self.options.max_batched_tokens, whole=True)
        if not it.chunks:
            if not self._decode_all_fast(it):
                self._decode_running(it, len(self.seq), chunk_prefills=False)
        self._count_samples(it)
        return it

    def _decode_all_fast(self, it: Iteration) -> bool:
        """Every running sequence decodes, when the free blocks cover all their needs (the usual
        case; otherwise the general path preempts). False, and nothing changed, if not."""
        bs = self.options.block_size
        cached, blocks = self.cached, self.blocks
        short = [slot for slot in range(len(cached)) if cached[slot] + 1 > blocks[slot] * bs]
        if len(short) > self.free_blocks:
            return False
        for slot in short:
            blocks[slot] += 1
        self.free_blocks -= len(short)
        it.decode = list(range(len(cached)))
        it.kv_lens = [c + 1 for c in cached]
        it.decode_kv = sum(cached) + len(cached)
        return True

    def _plan_chunked(self) -> Iteration:
        it = Iteration()
        budget = self._decode_running(it, self.options.max_batched_tokens, chunk_prefills=True)
        self._admit(it, budget, whole=not self.options.split_prompts)
        self._count_samples(it)
        return it

    def _count_samples(self, it: Iteration) -> None:
        it.samples = len(it.decode) + sum(1 for slot, cached, c in it.chunks if cached + c == self.target[slot])

    def complete(self, it: Iteration, now_s: float) -> int:
        """Apply an iteration that ended at ``now_s``; returns the number of requests finished."""
        finished = []
        cached, generated, output = self.cached, self.generated, self.output
        for slot in it.decode:
            cached[slot] += 1
            generated[slot] += 1
            if generated[slot] >= output[slot]:
                finished.append(slot)
        for slot, before, c in it.chunks:
            cached[slot] = before + c
            if cached[slot] == self.target[slot]:
                generated[slot] += 1
                seq = self.seq[slot]
                if self.first_token_s[seq] != self.first_token_s[seq]:  # NaN: the first token
                    self.first_token_s[seq] = now_s
                if generated[slot] >= output[slot]:
                    finished.append(slot)
        if finished:
            self.finish_slots(sorted(finished), now_s)
        return len(finished)

    def steady_decode(self) -> DecodeRun | None:
        """A decode run from here (laddersim.traffic.decode_run), or None where ``plan`` would not
        form an iteration of every running sequence decoding one token with nothing admitted."""
        batch, opts = len(self.seq), self.options
        if not batch:
            return None
        chunked = opts.chunked_prefill
        mixing = chunked and opts.mix_decodes  # prompt chunks share the decodes' iterations
        budget = opts.max_batched_tokens - batch if mixing else opts.max_batched_tokens  # left to admit
        if budget < 0:
            return None  # not every sequence gets its token
        full = batch >= opts.max_running or budget == 0
        if self.waiting and not full and not mixing and self.head_admits(
                budget, self.free_blocks, whole=not chunked or not opts.split_prompts):
            return None  # prefill first: this iteration admits
        if chunked and any(c < t for c, t in zip(self.cached, self.target)):
            return None  # a prompt is still being prefilled
        run = DecodeRun(self.cached, self.generated, self.output, self.blocks, self.free_blocks, opts.block_size)
        if run.limit == 0:
            return None  # a block short: ``plan`` preempts
        run.blocked = full
        if self.waiting and not full:  # with chunked prefill the queue's head comes after the decodes
            free = self.free_blocks - int(run.cum_needs[0]) if mixing else self.free_blocks
            if self.head_admits(budget, free, whole=not chunked or not opts.split_prompts):
                return None
            run.blocked = True  # the head does not fit, and the free blocks only shrink while the run lasts
        return run

    def advance(self, run: DecodeRun, now_s: float) -> int:
        """Write the iterations ``run`` did into the slots (the last one ending at ``now_s``);
        returns the requests finished (where the run reached its first finish)."""
        steps = run.done
        if steps:
            self.cached[:] = (run.cached + steps).tolist()
            self.generated[:] = [g + steps for g in self.generated]
            self.blocks[:] = (np.array(self.blocks, dtype=np.int64) + run.new_blocks(steps)).tolist()
            self.free_blocks = run.free_blocks()
        if steps < run.until_finish:
            return 0
        finished = [slot for slot, (g, o) in enumerate(zip(self.generated, self.output)) if g >= o]
        self.finish_slots(finished, now_s)
        return len(finished)

    def finish_slots(self, slots: list[int], now_s: float) -> None:
        """The sequences in ``slots`` (ascending) finished at ``now_s``: record them, free their
        blocks and take them out of the batch (the others keep their order)."""
        for slot in slots:
            seq = self.seq[slot]
            self.finish_s[seq] = now_s
            self.generated_by_request[seq] = self.generated[slot]
            self.free_blocks += self.blocks[slot]
        columns = (self.seq, self.cached, self.target, self.generated, self.output, self.blocks)
        if len(slots) == 1:
            for column in columns:
                del column[slots[0]]
            return
        gone = set(slots)
        keep = [slot for slot in range(len(self.seq)) if slot not in gone]
        for column in columns:
            column[:] = [column[slot] for slot in keep]
