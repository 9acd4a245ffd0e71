"""The attention intervals of one token count: where an iteration's makespan (without the logits
tail) is interpolated linearly in its per-layer attention seconds.

``IterationTimer.body_seconds`` resolves an interval around each attention value it meets with
engine runs (laddersim.traffic.iteration_time: exact within one event order, else within a
bound); this module keeps them, sorted by their lower end, and interpolates in them, for one
value (``find`` then ``interpolate``) or for many at once (``interpolate_many``, the same
arithmetic on arrays: equal floats).
"""

from __future__ import annotations

import bisect

import numpy as np

# (lo, hi, body at lo, body at hi, error bound) of one interval of attention seconds
Interval = tuple[float, float, float, float, float]


def interpolate(interval: Interval, a_s):
    """The body at attention ``a_s`` (a float or an array) within ``interval``."""
    lo, hi, t_lo, t_hi, _ = interval
    return t_lo + (t_hi - t_lo) * (a_s - lo) / (hi - lo)


class Intervals:
    """Resolved intervals of one token count. Lookups take the interval with the largest lower
    end at or below the value; a value beyond that interval's upper end is not covered."""

    def __init__(self):
        self.starts: list[float] = []
        self.rows: list[Interval] = []
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def find(self, a_s: float) -> Interval | None:
        i = bisect.bisect_right(self.starts, a_s) - 1
        if i >= 0 and a_s <= self.rows[i][1]:
            return self.rows[i]
        return None

    def insert(self, interval: Interval) -> None:
        i = bisect.bisect_right(self.starts, interval[0])
        self.starts.insert(i, interval[0])
        self.rows.insert(i, interval)
        self._arrays = None

    def interpolate_many(self, a_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bodies, error bounds) of the leading values of ``a_s`` that stored intervals cover, as
        ``find`` and ``interpolate`` give them one by one; it stops at the first value not covered."""
        if not self.rows:
            return a_s[:0], a_s[:0]
        if self._arrays is None:
            self._arrays = np.array(self.starts), np.array(self.rows).T.copy()
        starts, (lo, hi, t_lo, t_hi, bound) = self._arrays
        i = np.searchsorted(starts, a_s, side="right") - 1
        j = np.maximum(i, 0)
        covered = (i >= 0) & (a_s <= hi[j])
        m = len(a_s) if covered.all() else int(np.argmin(covered))
        j, a = j[:m], a_s[:m]
        return t_lo[j] + (t_hi[j] - t_lo[j]) * (a - lo[j]) / (hi[j] - lo[j]), bound[j]
