"""Measured times that must not fall with size, fitted so (isotonic regression).

More bytes never make a collective (or a memory kernel) faster on the same group, so a measured
curve that falls with size holds noise, not hardware: on a shared 2-core CPU the gloo AllReduce's
latency-bound points (1 KiB..64 KiB, all ~2 ms) scattered by +-20% from one size to the next,
each point a mean of its own repetitions, and a simulation that reads the point at its message
size inherited the whole of that point's noise. The closest non-decreasing curve (least absolute
deviation, weighted by each point's repetitions: pool adjacent violators) pools the points of such
a flat stretch at their weighted median and leaves a curve that already grows untouched.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MONOTONE_NOTE = ", fitted non-decreasing in size: laddersim/fitting/monotone.py"
CURVE = ("group_size", "nodes", "dtype", "mode")  # the columns of measurements/allreduce.csv that make one curve


def nondecreasing_in_size(frame: pd.DataFrame, curve=CURVE) -> pd.DataFrame:
    """``frame`` (AllReduce rows: ``size_bytes``, ``time_us``) with each curve's (rows alike in the
    ``curve`` columns) ``time_us`` fitted non-decreasing in size, weighted by ``reps`` if given."""
    out = frame.copy()
    keys = [c for c in curve if c in out.columns]
    for _, rows in out.groupby(keys, sort=False) if keys else [(None, out)]:
        rows = rows.sort_values("size_bytes")
        weights = rows["reps"].clip(lower=1) if "reps" in rows else None
        out.loc[rows.index, "time_us"] = nondecreasing_fit(rows["time_us"], weights)
    return out


def nondecreasing_fit(values, weights=None) -> np.ndarray:
    """The non-decreasing sequence closest to ``values`` (in the given order) in weighted absolute
    deviation: pool adjacent violators, each pool at the weighted median of its values (robust: one
    outlier among a flat stretch's points moves the pool no more than a median allows).
    ``weights`` default to 1 each."""
    y = np.asarray(values, dtype=float)
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=float)
    if y.shape != w.shape or (w <= 0).any():
        raise ValueError("nondecreasing_fit needs one positive weight per value")
    pools: list[list[int]] = []  # indices of the values pooled, in order
    levels: list[float] = []
    for i in range(len(y)):
        pools.append([i])
        levels.append(float(y[i]))
        while len(pools) > 1 and levels[-2] > levels[-1]:
            last = pools.pop()
            levels.pop()
            pools[-1] += last
            levels[-1] = weighted_median(y[pools[-1]], w[pools[-1]])
    return np.concatenate([np.full(len(pool), level) for pool, level in zip(pools, levels)]) if pools else y


def weighted_median(values, weights) -> float:
    """The lower weighted median, averaged with the next value where the weights split exactly in half."""
    order = np.argsort(values, kind="stable")
    v, w = np.asarray(values, dtype=float)[order], np.asarray(weights, dtype=float)[order]
    cum = np.cumsum(w)
    half = cum[-1] / 2.0
    k = int(np.searchsorted(cum, half))
    if np.isclose(cum[k], half) and k + 1 < len(v):
        return float((v[k] + v[k + 1]) / 2.0)
    return float(v[k])
