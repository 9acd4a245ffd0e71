"""Per-layer attention seconds of one continuous-batching iteration on one rank, priced by the
cost model's own functions on the framework's paths: ``laddersim.costs.op_costs.attention_time_s``
for the decoding sequences (a fused FlashAttention-class kernel, or the math path's generated
reductions: ``decode_attention``) and ``prefill_attention_time_s`` for the prompt chunks (fused,
or torch's math SDPA over the attended positions: ``prefill_attention``). Nothing here restates
a formula, so serving follows the cost model as it changes.

The cost model prices a pass of B sequences of one shape. On every path its time is a fixed
part (the kernels' floors) plus work that scales with B (FLOPs, K/V and score bytes are all per
sequence), so ``f(B) = fixed + B * (f(1) - fixed)``, with ``fixed = 2 f(1) - f(2)`` read off the
cost model itself. An iteration's decoding sequences, each at its own KV length, cost the fixed
part once plus each sequence's share ``f(1) - fixed`` at its own length: for B sequences of one
length that is the cost model's ``f(B)`` exactly; for ragged lengths, the sum of the shares (a
kernel charged each row's slower side, compute or memory, where the rows straddle the two; and
each row's own regime of the per-row switches, the looped softmax past 1024 positions and the L2
reuse window). Prompt chunks likewise: the prefill kernels' fixed part once plus each chunk's
share at its (new tokens, cached positions). Decode and prefill are separate kernels, as they are
in the cost model's decode and prefill passes. The framework's host dispatch, where the profile
has one, is folded into the iteration's attention once, as ``op_times_s`` folds it into an op.

Serving runs over a paged (dynamic) KV cache: each sequence attends over its own positions only
(laddersim.traffic.run.serving_scenario says what that means for each framework).
"""

from __future__ import annotations

import numpy as np

from laddersim.costs.host_overhead import with_host_overhead
from laddersim.costs.attention_kernels import SDPA
from laddersim.costs.op_costs import Phase, attention_time_s, prefill_attention_time_s
from laddersim.errors import UserInputError
from laddersim.model.framework import framework_names, load_framework
from laddersim.simulation.simulate import Scenario

TABLE_START = 4096  # decode KV lengths priced up front; the table doubles past them


def check_serving_scenario(scenario: Scenario) -> None:
    """Serving prices a paged cache with the cost model's own kernels: one line otherwise."""
    work = scenario.workload
    if work.kv_cache != "dynamic":
        raise UserInputError("kv-cache: serving runs over a paged cache, each sequence attending its own positions; "
                             f"got '{work.kv_cache}', allowed: dynamic")
    fw = load_framework(work.framework)
    if fw.kernel_calibration is not None:
        raise UserInputError(f"framework: '{work.framework}' is a kernel calibration of one static batch's decode "
                             "steps, which serving's mixed iterations cannot use; allowed: a shipped framework")
    if _grid_priced(fw):
        allowed = [name for name in framework_names() if not _grid_priced(load_framework(name))]
        raise UserInputError(f"framework: '{work.framework}' runs eager SDPA's memory-efficient kernel, priced by its "
                             "grid over one static batch (waves of CTAs, not a per-sequence share), which serving's "
                             f"mixed iterations do not have; allowed: {', '.join(allowed)}")


def _grid_priced(fw) -> bool:
    """Is the framework's attention priced by a kernel grid (laddersim.costs.sdpa_attention)?"""
    return SDPA in (fw.prefill_attention_path, fw.decode_attention_path)


class AttentionCost:
    """Per-layer attention seconds of an iteration (see the module docstring)."""

    def __init__(self, scenario: Scenario):
        check_serving_scenario(scenario)
        self.scenario = scenario
        s = scenario
        self._decode = lambda batch, kv: attention_time_s(s.model, s.hardware, s.workload, s.tp,
                                                          Phase("decode", batch, 1), kv)
        self._prefill = lambda batch, new, cached: prefill_attention_time_s(
            s.model, s.hardware, s.workload, s.tp, Phase("prefill", batch, new), cached)
        one, two = self._decode(1, [1.0])[0], self._decode(2, [1.0])[0]
        self.decode_fixed_s = float(2.0 * one - two)
        self.prefill_fixed_s = float(2.0 * self._prefill(1, 1, 0) - self._prefill(2, 1, 0))
        self._host = scenario.hardware.host_overhead is not None
        self._table = np.zeros(0)  # decode share by KV length (index = positions attended)
        self._affine: tuple[float, float] | None = None  # (share at 0, per position) when the table is a line
        self._chunks: dict[tuple[int, int], float] = {}
        self._grow(TABLE_START)

    def _grow(self, longest: int) -> None:
        size = max(2 * len(self._table), longest + 1)
        lens = np.arange(size, dtype=float)
        self._table = self._decode(1, lens) - self.decode_fixed_s
        slope = self._table[1] - self._table[0]
        line = self._table[0] + slope * lens
        exact = np.abs(self._table - line).max() <= 1e-12 * max(float(np.abs(self._table).max()), 1e-30)
        self._affine = (float(self._table[0]), float(slope)) if exact else None

    def decode_seconds(self, kv_lens, kv_sum: int) -> float:
        """Decode attention of sequences attending ``kv_lens`` positions each (a list or an int
        array; ``kv_sum`` their sum)."""
        if len(kv_lens) == 0:
            return 0.0
        if kv_sum >= len(self._table):  # no length beyond the table when their sum is within it
            longest = int(np.max(kv_lens))
            if longest >= len(self._table):
                self._grow(longest)
        if self._affine is not None:
            share = self._affine[0] * len(kv_lens) + self._affine[1] * kv_sum
        else:
            share = float(self._table[kv_lens].sum())
        return self.decode_fixed_s + share

    def decode_steps(self, cached: np.ndarray, first: int, steps: int) -> np.ndarray:
        """``seconds`` of decode-only iterations ``first`` .. ``first + steps - 1`` of a decode run
        (laddersim.traffic.decode_run) whose sequences had ``cached`` positions at its start
        (iteration i: each attends ``cached + i + 1``), for the leading iterations within the
        priced KV lengths: the next one grows the table (``seconds`` prices it). The same
        arithmetic on arrays: equal floats."""
        batch = len(cached)
        i = np.arange(first, first + steps)
        kv_sum = int(cached.sum()) + batch * (i + 1)
        size = len(self._table)
        grows = (kv_sum >= size) & (int(cached.max()) + i + 1 >= size)
        m = int(np.argmax(grows)) if grows.any() else steps
        i, kv_sum = i[:m], kv_sum[:m]
        if self._affine is not None:
            share = self._affine[0] * batch + self._affine[1] * kv_sum
        else:  # each row summed as the one iteration's gather is
            share = self._table[cached[None, :] + (i[:, None] + 1)].sum(axis=1)
        return self._with_host(self.decode_fixed_s + share)

    def decode_only_seconds(self, kv_lens, kv_sum: int) -> float:
        """``seconds(kv_lens, kv_sum, [])``: an iteration without prompt chunks."""
        return float(self._with_host(self.decode_seconds(kv_lens, kv_sum)))

    def _with_host(self, total):
        """The framework's host dispatch of the attention op (laddersim.costs.host_overhead)."""
        if self._host:
            return with_host_overhead(self.scenario.hardware, {"attention": np.asarray(total)})["attention"]
        return total

    def chunk_share_s(self, new_tokens: int, cached: int) -> float:
        key = (new_tokens, cached)
        if key not in self._chunks:
            self._chunks[key] = self._prefill(1, new_tokens, cached) - self.prefill_fixed_s
        return self._chunks[key]

    def seconds(self, kv_lens: list[int], kv_sum: int, chunks) -> float:
        """Per-layer attention of an iteration: decoding sequences at ``kv_lens`` positions
        (summing to ``kv_sum``) and prompt chunks ``(seq, cached, new tokens)``."""
        total = self.decode_seconds(kv_lens, kv_sum)
        if chunks:
            total += self.prefill_fixed_s + sum(self.chunk_share_s(c, cached) for _, cached, c in chunks)
        return float(self._with_host(total)) if self._host else total
