"""Paired rounds: the schedules of one benchmark timed in turns, and their speedups from the rounds.

On a shared machine a generation's time moves by tens of percent from one second to the next
(other processes, gloo's thread wake-ups on the cores that compute). ``ladder_bench`` therefore
times its schedules in rounds, one measurement of each per round (the order rotated from round to
round, so no schedule always follows the same one), each measurement long enough
(``generations_per_measurement``) that it averages over the fast noise; a schedule's speedup over
``standard`` is then the median over rounds of the ratio within each round
(``paired_speedup``): a slow minute slows both sides of a ratio and cancels, where a ratio of two
separately taken medians keeps it. The spread of the per-round ratios (quartiles) is reported next
to it: the measurement's own noise, to read a prediction error against.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def generations_per_measurement(warm_s: float, min_time_s: float) -> int:
    """Generations one measurement runs back to back: enough that it lasts at least ``min_time_s``
    when one lasts ``warm_s`` (a warm-up generation's time); at least 1."""
    if min_time_s <= 0.0 or not warm_s > 0.0:
        return 1
    return max(1, math.ceil(min_time_s / warm_s))


def round_order(schedules: Sequence[str], round_index: int) -> tuple[str, ...]:
    """The schedules in round ``round_index``'s order: rotated by one each round."""
    k = round_index % max(1, len(schedules))
    return tuple(schedules[k:]) + tuple(schedules[:k])


def paired_speedup(base_s: Sequence[float], other_s: Sequence[float]) -> tuple[float, float, float]:
    """(median, first quartile, third quartile) over rounds of ``base_s[r] / other_s[r]``: the
    speedup of the schedule timed ``other_s`` over the one timed ``base_s``, round by round."""
    if len(base_s) != len(other_s) or not len(base_s):
        raise ValueError(f"paired_speedup needs as many rounds of each (got {len(base_s)} and {len(other_s)})")
    ratios = np.asarray(base_s, dtype=float) / np.asarray(other_s, dtype=float)
    q1, median, q3 = np.percentile(ratios, [25, 50, 75])
    return float(median), float(q1), float(q3)
