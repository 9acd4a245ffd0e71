"""Where a batch's tokens go in a mixture-of-experts layer: how many distinct experts a batch of
``tokens`` tokens hits when each picks ``top_k`` of ``n_experts``, and how many (token, expert)
rows each expert receives, under a named routing distribution.

Routing distributions (a small named record each, picked by name):

* ``balanced``: tokens spread evenly, as AIConfigurator's measured MoE tables are taken
  (ai-dynamo/aiconfigurator @ 095f58a5, ``moe_perf`` rows ``distribution == balanced``): the
  ``tokens * top_k`` rows fill ``min(n_experts, tokens * top_k)`` experts round-robin, the busiest
  holding ``ceil(tokens * top_k / n_experts)``.
* ``uniform``: every token picks ``top_k`` distinct experts uniformly at random, independently of
  the other tokens (a router with no preference). An expert misses one token with probability
  ``1 - top_k / n_experts``, so the expected number hit is the closed form
  ``n_experts * (1 - (1 - top_k / n_experts) ** tokens)``; each expert's rows are
  Binomial(tokens, top_k / n_experts), the busiest's expectation approximated by the Gaussian
  extreme ``mean + std * sqrt(2 ln n_experts)``.
* ``power_law``: expert ``e`` (0-based, by popularity) is picked with weight ``(e + 1) ** -alpha``
  (alpha 1.0, the skew of AIConfigurator's ``power_law`` MoE tables), per-token selection
  probability ``q_e = min(1, top_k * w_e / sum(w))``; the expected number hit is
  ``sum_e 1 - (1 - q_e) ** tokens`` and the busiest expert expects ``tokens * q_0`` rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

POWER_LAW_ALPHA = 1.0


@dataclass(frozen=True)
class ExpertLoad:
    """The rows a batch sends the experts: ``hit`` distinct experts receive any (expected value),
    ``rows`` = tokens x top_k in all, the busiest expert ``busiest`` rows, and the expected rows of
    every expert (``per_expert``, most loaded first) for tile padding."""

    hit: float
    rows: int
    busiest: float
    per_expert: tuple[float, ...]


def selection_probabilities(n_experts: int, top_k: int, routing: str) -> np.ndarray:
    """Per-token probability that each expert is among the token's ``top_k`` (sums to ``top_k``)."""
    if routing == "power_law":
        weights = np.arange(1, n_experts + 1, dtype=float) ** -POWER_LAW_ALPHA
        q = top_k * weights / weights.sum()
        # Cap at 1 and hand the excess to the rest, keeping the sum at top_k.
        for _ in range(n_experts):
            over = q > 1.0
            if not over.any():
                break
            excess = float((q[over] - 1.0).sum())
            q[over] = 1.0
            free = ~over & (q < 1.0)
            q[free] += excess * q[free] / q[free].sum()
        return q
    return np.full(n_experts, top_k / n_experts)


def expected_experts_hit(tokens: int, n_experts: int, top_k: int, routing: str = "uniform") -> float:
    """Expected number of distinct experts at least one of ``tokens`` tokens picks."""
    if routing == "balanced":
        return float(min(n_experts, tokens * top_k))
    q = selection_probabilities(n_experts, top_k, routing)
    return float(np.sum(1.0 - (1.0 - q) ** tokens))


def expert_load(tokens: int, n_experts: int, top_k: int, routing: str = "uniform") -> ExpertLoad:
    """The batch's rows per expert under ``routing`` (see the module docstring)."""
    rows = tokens * top_k
    hit = expected_experts_hit(tokens, n_experts, top_k, routing)
    if routing == "balanced":
        full, rest = divmod(rows, n_experts)
        per = tuple(float(full + (1 if e < rest else 0)) for e in range(n_experts))
        return ExpertLoad(hit, rows, per[0], per)
    q = selection_probabilities(n_experts, top_k, routing)
    per = tuple(float(x) for x in sorted(tokens * q, reverse=True))
    if routing == "uniform":
        p = top_k / n_experts
        std = math.sqrt(tokens * p * (1.0 - p))
        busiest = min(float(tokens), tokens * p + std * math.sqrt(2.0 * math.log(n_experts)))
    else:
        busiest = per[0]
    return ExpertLoad(hit, rows, max(busiest, 1.0 if rows else 0.0), per)


def rank_load(tokens: int, n_experts: int, top_k: int, routing: str = "uniform", ep: int = 1) -> ExpertLoad:
    """The rows the busiest of ``ep`` expert-parallel ranks receives, its experts placed in
    contiguous blocks of ``n_experts / ep`` (vLLM's default expert placement: rank r holds experts
    ``r E/ep .. (r+1) E/ep - 1``). Balanced routing spreads the ``tokens x top_k`` rows evenly over
    the ranks (the busiest takes the ceiling); under uniform routing every rank expects the same,
    and the busiest's experts hit and rows are the expected maximum of ``ep`` binomial draws
    (``expected_max_binomial``: experts hit of ``E/ep``, each hit with probability
    ``1 - (1 - k/E)^tokens``; rows of ``tokens x top_k``, each on the rank with probability
    ``1/ep``; the ranks taken as independent); under power-law routing rank 0 holds the most
    popular experts. ``ep`` 1: ``expert_load``."""
    if ep == 1:
        return expert_load(tokens, n_experts, top_k, routing)
    local = n_experts // ep
    if routing == "balanced":
        rows = -(-tokens * top_k // ep)
        full, rest = divmod(rows, local)
        per = tuple(float(full + (1 if e < rest else 0)) for e in range(local))
        return ExpertLoad(float(min(local, rows)), rows, per[0], per)
    q = selection_probabilities(n_experts, top_k, routing)[:local]  # rank 0's block (the busiest under skew)
    per = tuple(float(x) for x in sorted(tokens * q, reverse=True))
    hit_p = 1.0 - (1.0 - q) ** tokens
    hit, rows = float(np.sum(hit_p)), float(sum(per))
    if routing == "uniform":  # every rank alike: the busiest of the ep ranks
        hit = expected_max_binomial(local, float(hit_p[0]), ep)
        rows = expected_max_binomial(tokens * top_k, 1.0 / ep, ep)
        per = tuple(rows / local for _ in range(local))
    return ExpertLoad(hit, max(-(-tokens * top_k // ep), int(round(rows))), per[0], per)


def expected_max_binomial(n: int, p: float, count: int) -> float:
    """Expected maximum of ``count`` independent Binomial(n, p) draws: sum over m >= 1 of
    1 - P(X < m)^count, from the binomial's CDF."""
    if n == 0 or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return float(n)
    from scipy.stats import binom

    cdf = binom.cdf(np.arange(n), n, p)  # P(X <= m - 1) for m = 1..n
    return float(np.sum(1.0 - cdf ** count))


def padded_rows(load: ExpertLoad, block_m: int) -> float:
    """Rows the grouped GEMM computes once each hit expert's segment is padded to a multiple of
    ``block_m`` (vLLM's ``moe_align_block_size``): the expected rows of each expert rounded up,
    over the experts hit, at least the rows themselves."""
    if load.rows == 0:
        return 0.0
    hit = max(1, int(round(load.hit)))
    mean = load.rows / hit
    per = [max(r, 0.0) for r in load.per_expert[:hit]] if load.per_expert else [mean] * hit
    scale = load.rows / sum(per) if sum(per) > 0 else 1.0
    return float(sum(math.ceil(r * scale / block_m - 1e-9) * block_m for r in per))


def monte_carlo_load(tokens: int, n_experts: int, top_k: int, routing: str, draws: int,
                     seed: int = 0) -> tuple[float, float]:
    """(mean experts hit, mean busiest expert's rows) over ``draws`` random batches routed as
    ``routing`` says (``uniform`` or ``power_law``): the check of the closed forms above."""
    rng = np.random.default_rng(seed)
    q = selection_probabilities(n_experts, top_k, routing)
    hits, busiest = [], []
    for _ in range(draws):
        counts = np.zeros(n_experts)
        for _ in range(tokens):
            if routing == "uniform":
                counts[rng.choice(n_experts, size=top_k, replace=False)] += 1
                continue
            # Systematic sampling in a random order: exactly top_k distinct experts, expert e
            # among them with probability q_e (Madow 1949).
            order = rng.permutation(n_experts)
            edges = np.concatenate([[0.0], np.cumsum(q[order])])
            marks = rng.random() + np.arange(top_k)
            counts[order[np.searchsorted(edges, marks, side="right") - 1]] += 1
        hits.append(np.count_nonzero(counts))
        busiest.append(counts.max())
    return float(np.mean(hits)), float(np.mean(busiest))
