"""Rank skew: how far apart the ranks reach a collective after computing alike (``laddersim calibrate run``).

Ranks that run the same compute do not finish it together: on CPU ranks the cores also run the
collectives' progress threads and every other process, and a rank's time varies from stretch to
stretch. A collective starts when its last rank arrives, so every other rank waits. The waits that
follow a short stretch are in the measured collective tables (their chains run the model's own
modules before each call); what grows with the compute a step runs between two collectives is not:
a standard step synchronises after every module, its upper bound only at the logits gather, after a
whole step. A two-rank probe of ladder_bench's decode steps on this machine's two shared cores
(2026-11-24) found the ranks' arrivals at the gather 0.33 ms apart (mean) in a standard step (~3 ms
of compute since its last AllReduce) and 1.34 ms in an upper-bound step (~9 ms, no AllReduce).

A point: ``modules`` of the model's own decode modules in a row (``decode_modules.
decode_modules``, cycled in a step's order), timed on every rank right after a barrier. Per
repetition, the ranks' times are gathered and the slowest one's excess over their mean taken: what
a rank waits, on average, at a collective that follows the stretch (the spread of their durations,
not of their clock readings: the barrier's own exit spread is a collective's, already in its table;
no assumption on the shape of the spread, which on shared cores has a long tail). The point's
``wait_us`` is the mean over repetitions, ``stretch_us`` the mean time; ``calibrate fit`` fits the
wait per second of compute (``host_overhead.rank_skew_fraction``). Alone, through the launcher:

    python calibration/calibrate_all.py --benchmarks skew --backend gloo --world-size 2 --models CONFIG --out runs/cpu
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

WAIT_FLOOR_US = 1e-3  # a wait of (near) nothing is recorded as this (times are positive)


def measure(ctx, point: dict) -> dict | None:
    group = ctx.group_of(point)
    if group is None:
        return None
    from calibration.decode_modules import decode_modules

    modules = decode_modules(ctx, point["model"], point["group_size"], point["batch"], point["dtype"])
    count = point["modules"]
    stretch = [modules[i % len(modules)] for i in range(count)]
    for _ in range(ctx.opts.warmup_count):
        for module in stretch:
            module()
    rows = []
    for _ in range(ctx.opts.chain_repeat_count):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for module in stretch:
            module()
        own = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        parts = [torch.zeros(1, dtype=torch.float64) for _ in range(point["group_size"])]
        dist.all_gather(parts, own, group=group)
        rows.append(torch.cat(parts).numpy())
    if ctx.rank != 0:
        return None
    samples = np.array(rows)  # (repetitions, ranks) seconds
    wait_s = float(np.mean(samples.max(axis=1) - samples.mean(axis=1)))
    stretch_s = float(samples.mean())
    wait_us = max(wait_s * 1e6, WAIT_FLOOR_US)
    return {"reps": len(rows), "stretch_us": stretch_s * 1e6, "wait_us": wait_us,
            "wait_fraction": wait_us / (stretch_s * 1e6)}


def describe(point: dict) -> str:
    return f"{point['group_size']} ranks, {point['modules']} module(s) of {Path(point['model']).name} at batch {point['batch']}"


def result(values: dict) -> str:
    return (f"wait {values['wait_us']:.1f} us after {values['stretch_us']:.0f} us of compute "
            f"({100 * values['wait_fraction']:.1f}%)")

