"""The engine's rate law, written once: how fast each running activity progresses, and when one
counts as done.

An activity has a standalone amount of work (seconds) and progresses at a rate set by what else
runs:

* a compute op at 1/(1 + s) while collectives of its rank run (s: the most disturbing one's
  ``compute_slowdown``, 0 if none disturbs), at 1 otherwise;
* a collective at 1/(1 + its ``comm_slowdown``) while any of its ranks computes, divided by the
  largest number of running collectives on any of its links.

Every strategy calls these functions: the SimPy engine's fluid (``fluid``), the direct loop's
(``lazy_fluid``), the replays (``order_tree`` through ``running_rates``) and the batch replay over
many runs (``tree_batch``), where a slowdown is an array with one entry per run. Over arrays each
function does the same IEEE float64 operations elementwise (numpy's ``+ - /`` and ``maximum`` on
float64 are Python's ``+ - /`` and ``max`` on floats without NaN), so every run's rates are bit for
bit those of its own one-run replay.
"""

from __future__ import annotations

import math
from functools import reduce

import numpy as np

EPS_S = 1e-13  # work left below this (seconds) counts as done: float round-off only


def done_tolerance_s(now_s: float) -> float:
    """Work left that counts as done at time ``now_s``: round-off, and below the clock's own
    resolution there (far along a long run a tiny remainder would otherwise schedule a timeout
    that cannot advance time)."""
    return EPS_S + 8.0 * math.ulp(now_s)  # numpy's spacing, for the clock's non-negative readings


def done_tolerances_s(now_s: np.ndarray) -> np.ndarray:
    """``done_tolerance_s`` of each of many clock readings (non-negative: there ``np.spacing`` is
    ``math.ulp``)."""
    return EPS_S + 8.0 * np.spacing(now_s)


def comm_rate(comm_slowdown, any_rank_computes: bool, link_loads: list[int]):
    """A collective's rate. ``link_loads``: running collectives on each of its links (empty: it
    uses none). ``comm_slowdown`` a float, or an array (one per run): the rate is then an array."""
    rate = 1.0 / (1.0 + comm_slowdown) if any_rank_computes else 1.0
    if link_loads:
        rate /= max(link_loads)
    return rate


def compute_rate(slowdowns: list):
    """A compute op's rate. ``slowdowns``: the compute slowdowns of the collectives running on
    the op's rank, floats, or arrays (one entry per run: the rate is then an array)."""
    if not slowdowns:
        return 1.0
    if isinstance(slowdowns[0], np.ndarray):  # max(0.0, *slowdowns), elementwise and in that order
        return 1.0 / (1.0 + reduce(np.maximum, slowdowns, 0.0))
    return 1.0 / (1.0 + max(0.0, *slowdowns))


def one_rank_rates(acts: list[tuple]) -> list:
    """Rates of the running activities of a single rank (one group, one set of links: each link
    carries every running collective), in order. ``acts``: (is_comm, compute_slowdown,
    comm_slowdown, n_links) each; slowdowns floats or arrays (one entry per run)."""
    disturbing = [compute for is_comm, compute, _, _ in acts if is_comm]
    computes = len(disturbing) < len(acts)
    rate_of_compute = None
    rates = []
    for is_comm, _, comm, n_links in acts:
        if is_comm:
            rates.append(comm_rate(comm, computes, [len(disturbing)] * n_links))
        else:
            if rate_of_compute is None:
                rate_of_compute = compute_rate(disturbing)
            rates.append(rate_of_compute)
    return rates


def running_rates(acts: list[tuple]) -> list[float]:
    """Rates of any running set, from scratch, in order. ``acts``: (is_comm, ranks, links,
    compute_slowdown, comm_slowdown) each (a compute op: its one rank)."""
    computing = {ranks[0] for is_comm, ranks, _, _, _ in acts if not is_comm}
    on_rank: dict[int, list[float]] = {}
    link_load: dict[str, int] = {}
    for is_comm, ranks, links, compute, _ in acts:
        if is_comm:
            for rank in ranks:
                on_rank.setdefault(rank, []).append(compute)
            for link in links:
                link_load[link] = link_load.get(link, 0) + 1
    rates = []
    for is_comm, ranks, links, _, comm in acts:
        if is_comm:
            rates.append(comm_rate(comm, any(r in computing for r in ranks), [link_load[link] for link in links]))
        else:
            rates.append(compute_rate(on_rank.get(ranks[0], [])))
    return rates
