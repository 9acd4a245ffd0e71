"""Rank skew: a collective's wait for its slowest rank, grown with the compute since the last one.

Ranks that run the same ops do not finish them together where a rank's speed varies from stretch
to stretch (CPU ranks: the cores also run the collectives' worker threads and every other
process). A collective starts when its last rank arrives, so on average every rank waits the
slowest one's excess over the ranks' mean. ``calibration/skew_bench.py`` measures that wait after
stretches of the model's own modules and ``calibrate fit`` keeps it per second of compute
(``host_overhead.rank_skew_fraction``, measured over ``rank_skew_group`` ranks). A collective op
then costs, besides its table price,

    wait_s = rank_skew_fraction * e(tp) / e(rank_skew_group) * T

where ``T`` is the rank's compute since its previous collective in program order (cyclically: a
pass's first collective follows the previous step's tail, as decode steps run back to back) and
``e(n)`` the expected largest of ``n`` standard normal draws (the wait measured over one group size
carried to another, as for normally spread times). The measured collective tables do not hold this
part: their chains subtract the same modules run alone, which carry the same spread, so what grows
with the stretch cancels (what does not, the wait left by the previous collective's uneven exit, is
in them). A standard step synchronises after every module and pays the wait of short stretches
many times; an upper-bound step pays it once, after the whole step; the sum is about the same, and
the upper bound's share of its shorter step is larger. The wait lengthens the collective: a blocking
call pays it, an overlapped one (the ladder) hides what its overlap covers. The engine's
``--jitter`` is a separate what-if (random per-op noise drawn per rank).
"""

from __future__ import annotations

from functools import lru_cache
from math import erf, sqrt

import numpy as np

from laddersim.hardware.profile import HardwareProfile


@lru_cache(maxsize=64)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normal draws]: 0 for one, 1/sqrt(pi) for two."""
    if n < 2:
        return 0.0
    x = np.linspace(-12.0, 12.0, 48001)
    cdf = 0.5 * (1.0 + np.vectorize(lambda v: erf(v / sqrt(2.0)))(x))
    pdf = np.exp(-0.5 * x * x) / sqrt(2.0 * np.pi)
    integrand = x * n * pdf * cdf ** (n - 1)
    return float(np.sum((integrand[1:] + integrand[:-1]) * 0.5 * np.diff(x)))


def skew_wait_per_compute(hw: HardwareProfile, tp: int) -> float:
    """Seconds a collective of ``tp`` ranks waits per second of compute before it (0 without a
    measured rank skew, or for one rank)."""
    spec = hw.host_overhead
    if spec is None or tp < 2 or spec.rank_skew_fraction.value == 0.0:
        return 0.0
    return spec.rank_skew_fraction.value * expected_max_normal(tp) / expected_max_normal(spec.rank_skew_group)


def compute_before_collectives(streams, kind_of_op: np.ndarray, n_kinds: int) -> np.ndarray:
    """(ops, kinds): for each collective op (an op not on the ``compute`` stream), how many compute
    ops of each kind run between the previous collective and it in program order, cyclically; zero
    rows for the compute ops. ``counts @ seconds_per_kind`` is each collective's ``T``."""
    n = len(streams)
    counts = np.zeros((n, n_kinds))
    collectives = [i for i, stream in enumerate(streams) if stream != "compute"]
    if not collectives:
        return counts
    since = np.zeros(n_kinds)
    for j in range(n):
        i = (collectives[-1] + 1 + j) % n
        if streams[i] == "compute":
            since[kind_of_op[i]] += 1
        else:
            counts[i], since = since, np.zeros(n_kinds)
    return counts
