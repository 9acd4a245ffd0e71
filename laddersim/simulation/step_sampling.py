"""Decode time from a random sample of simulated steps, with its 95% confidence interval.

With ``--jitter`` every step of every rank is simulated, which costs a full engine run per step.
A sample does nearly as well: a step's jittered metrics are its jitter-free metrics (cheap: rank
symmetry and step interpolation, see ``laddersim.simulation.passes``) plus a residual that the jitter
draws of that step alone decide, independently from step to step. The decode total is estimated
as the jitter-free total plus the number of steps times the mean residual of a simple random
sample of steps (a difference estimator: the jitter-free run carries the KV-length trend, the
sample only the noise).

The interval is for what simulating every step would give (another independent draw of every
step, as ``--exact-steps`` makes): the estimate's own spread, N^2 s^2 / n, plus that run's,
N s^2, with Student's t at n - 1 degrees of freedom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_SAMPLE = 4
MAX_SAMPLE = 64
SAMPLE_OP_RANKS = 120_000  # sample about this many op x rank simulations (a few seconds)


def sample_size(n_steps: int, n_ranks: int, n_ops: int) -> int:
    """Steps to simulate: about SAMPLE_OP_RANKS op-rank runs, within MIN..MAX_SAMPLE."""
    wanted = math.ceil(SAMPLE_OP_RANKS / max(1, n_ranks * n_ops))
    return min(n_steps, max(MIN_SAMPLE, min(MAX_SAMPLE, wanted)))


def choose_steps(n_steps: int, n: int, seed: int) -> np.ndarray:
    """A simple random sample of ``n`` of ``n_steps`` steps, ascending (its own random stream:
    the jitter draws are not disturbed by the choice)."""
    rng = np.random.default_rng([seed, 18])
    return np.sort(rng.choice(n_steps, size=n, replace=False))


# Student's t 97.5% quantiles for 1..10 degrees of freedom (any statistics table).
_T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t_975(df: int) -> float:
    """Student's t 97.5% quantile: the table to 10 degrees of freedom, then the Cornish-Fisher
    expansion (within 0.05% there)."""
    if df <= len(_T_975):
        return _T_975[df - 1]
    z = 1.959963984540054
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


@dataclass(frozen=True)
class DecodeEstimate:
    metrics: np.ndarray  # (steps, METRICS): simulated where sampled, jitter-free + mean residual elsewhere
    half_width_s: np.ndarray  # (METRICS,) 95% half-width of each metric's decode total
    sampled: np.ndarray  # the simulated steps


def estimate(control: np.ndarray, sampled: np.ndarray, sampled_metrics: np.ndarray) -> DecodeEstimate:
    """``control``: jitter-free metrics per step; ``sampled_metrics``: the simulated ones."""
    n_steps, n = len(control), len(sampled)
    residuals = sampled_metrics - control[sampled]
    mean = residuals.mean(axis=0)
    metrics = control + mean
    metrics[sampled] = sampled_metrics
    if n > 1:
        spread = residuals.std(axis=0, ddof=1)
        half = t_975(n - 1) * spread * n_steps * math.sqrt(1.0 / n + 1.0 / n_steps)
    else:
        half = np.full(control.shape[1], np.inf)
    return DecodeEstimate(metrics, half, sampled)
