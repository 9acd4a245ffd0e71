"""The AllReduce a step pays, where two benchmarks measure it: one estimate, and the ladder's rates
solved against it.

On CPU ranks whose collectives progress on the compute cores (gloo), calibrate measures the
AllReduce as a standard step pays it twice at the step's own message size: the ``allreduce``
benchmark (its chains of the model's modules, each followed by the AllReduce) and the
``interference`` benchmark (the same chains, interleaved with the ladder chains it times;
``comm_alone_us`` is that AllReduce less its issue). On two shared cores the two means of 30
repetitions each differed by 15-45% from one run to the next for the same quantity, each off the
step's real AllReduce (the benchmark's standard step minus its upper bound) by as much, in either
direction: they are two samples of one thing. ``calibrate fit`` therefore

1. pools them (``pooled_allreduce``): the ``allreduce`` row at the interference row's group, size,
   dtype and mode becomes the repetition-weighted mean of both (the interference row's AllReduce
   with the issue added back: a table row holds the whole call);
2. solves the ladder chain's (compute, comm) slowdowns against the AllReduce the fitted table
   gives at that size (``resolved_rates``), not the interference row's own: the engine simulates
   a ladder step's AllReduces from the table, and rates solved for another AllReduce end the
   simulated chain where the measured one did not end.

Over 11 closed-loop runs' stored calibrations (the same benchmark rows, fitted and validated
again: ``calibration/closed_loop.py`` runs of 2026-11-24), the runs with a speedup median error
<= 5 points went from 7 to 9; the mean error of batch 16's upper bound from +6.7 to +5.4 points,
the ladder's from -5.1 / -5.2 / -3.0 (batch 1 / 4 / 16) to -4.3 / -4.7 / -2.3. What is left of
the ladder's is the chain's own noise: the real ladder step saved 0.32-0.34 of its AllReduces'
time on average at every batch, the chains 0.30-0.34, but one run's chain 0.13-0.55.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from laddersim.fitting.ladder_chain import ladder_rates
from laddersim.costs.collectives import interpolate_table_s

CHAIN_MODULE_LAYERS = 4  # calibration/decode_modules.py MODULE_LAYERS: layers in a ladder chain


def ladder_chain_rows(interference: pd.DataFrame, on_host_cores: bool) -> pd.DataFrame:
    """The interference rows measured as ladder chains of the model's own modules (CPU ranks)."""
    if interference.empty or not on_host_cores or "model" not in interference:
        return interference.iloc[0:0]
    return interference[interference["model"].astype(str) != "-"]


def collective_issue_us(overhead: pd.DataFrame) -> float:
    """One collective's issue as calibrate's ``overhead`` benchmark timed it (0 when not measured):
    what the engine charges a collective launch, and takes off a measured call."""
    rows = overhead[overhead["op_class"] == "collective"] if not overhead.empty else overhead
    return float(rows["time_us"].median()) if not rows.empty else 0.0


def pooled_allreduce(allreduce: pd.DataFrame, chains: pd.DataFrame, issue_us: float) -> pd.DataFrame:
    """``allreduce`` rows with each ladder chain's own AllReduce (``comm_alone_us`` + the issue)
    pooled into the row of the same group, size, dtype and mode, weighted by repetitions."""
    out = allreduce.copy()
    for chain in chains.itertuples(index=False):
        at = ((out["group_size"] == chain.group_size) & (out["size_bytes"] == chain.size_bytes)
              & (out["dtype"] == chain.dtype) & (out["mode"] == chain.mode))
        for index in out.index[at]:
            reps, other = float(out.at[index, "reps"]), float(chain.reps)
            step_us = float(chain.comm_alone_us) + issue_us
            out.at[index, "time_us"] = (reps * float(out.at[index, "time_us"]) + other * step_us) / (reps + other)
            out.at[index, "reps"] = int(reps + other)
    return out


def table_allreduce_us(table: pd.DataFrame, group_size: int, size_bytes: float) -> float | None:
    """The engine's table (``gpus, nodes, size_bytes, time_us``, as ``calibrate fit`` writes it)
    at one message of a one-node group, interpolated; None without such a curve."""
    rows = table[(table["gpus"] == group_size) & (table["nodes"] == 1)].sort_values("size_bytes")
    if rows.empty:
        return None
    sizes, times = rows["size_bytes"].to_numpy(float), rows["time_us"].to_numpy(float)
    if len(sizes) == 1:
        return float(times[0]) if sizes[0] == size_bytes else None
    return float(interpolate_table_s(sizes, times, size_bytes))


def resolved_rates(chain, allreduce_us: float, issue_us: float, n_layers: int) -> tuple[float, float]:
    """(compute, comm) slowdowns with which the engine runs the measured ladder chain (``chain``:
    an interference row) when its AllReduce is ``allreduce_us`` (a whole call, issue included)."""
    n = 2 * min(n_layers, CHAIN_MODULE_LAYERS)
    alone_s = n * float(chain.gemm_alone_us) * 1e-6
    modules_s = n * float(chain.gemm_overlap_us) * 1e-6
    ladder_s = modules_s + n * float(chain.comm_overlap_us) * 1e-6
    comm_s = max(allreduce_us - issue_us, 1.0) * 1e-6
    return ladder_rates(n, alone_s, ladder_s, modules_s, issue_us * 1e-6, comm_s)


def with_resolved_rates(interference: pd.DataFrame, chains: pd.DataFrame, table: pd.DataFrame, mode: str,
                        issue_us: float, layers_of) -> tuple[pd.DataFrame, int]:
    """``interference`` with each ladder chain timed in ``mode`` solved against the engine's
    ``table`` (``table_allreduce_us``; ``layers_of(model)``: the model's layer count, None where
    its config is gone: that row keeps its rates); and how many rows were solved again."""
    out, solved = interference.copy(), 0
    for index, chain in chains.iterrows():
        layers = layers_of(str(chain["model"]))
        table_us = table_allreduce_us(table, int(chain["group_size"]), float(chain["size_bytes"]))
        if layers is None or table_us is None or not np.isfinite(table_us) or chain["mode"] != mode:
            continue
        compute, comm = resolved_rates(chain, table_us, issue_us, layers)
        out.at[index, "compute_slowdown"], out.at[index, "comm_slowdown"] = compute, comm
        solved += 1
    return out, solved
