"""Compact a ``calibration/kernel_trace.py`` output folder into the example the project ships
(``examples/kernel_trace_h100_8b_tp1``): its ``layer_kernels.csv`` summed per batch and kernel class
(what ``laddersim calibrate kernels`` reads: per class, the kernels and device time of one layer),
one row per class instead of one per kernel signature (the kernels shorter than any kernel floor
kept apart: they are their own floors), so the shipped file is a few lines and ``calibrate kernels``
gives the same framework file from it as from the whole trace.

Usage: ``python tools/fits/compact_kernel_trace.py [TRACE_DIR] [OUT_DIR]`` (defaults: the public H100
trace, ``reference_data/kernel_trace_h100/llama-3.1-8b_tp1`` in the folder the environment variable
LADDERSIM_SHARED names, and the shipped example).
Output is deterministic.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from laddersim.fitting.kernel_trace import LAYER_FILE, kernel_class
from laddersim.profiles_check.sources import reference_data_root

REPO = Path(__file__).resolve().parents[2]
TRACE = ("kernel_trace_h100", "llama-3.1-8b_tp1")  # under reference_data/
OUT = REPO / "examples" / "kernel_trace_h100_8b_tp1"
KEYS = ["device", "mode", "sdpa", "tp", "schedule", "batch", "kernel_class"]


# A kernel at least this long a call is above every profile's kernel floor (3.55-3.86 us on Hopper):
# summed with its class, its floors stay one per call. Faster kernels are their own floors
# (laddersim.fitting.kernel_trace.kernel_floor_us), so they, and the negative rows of a layer-count
# difference, keep their own rows.
SUMMED_FROM_US = 5.0


def compact(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per setting, batch and class (nvjet GEMMs counted as library GEMMs), summed over the
    kernels of ``SUMMED_FROM_US`` a call or more; the others kept as they are."""
    frame = frame.assign(kernel_class=[kernel_class(str(n), str(c)) for n, c in zip(frame["kernel"], frame["kernel_class"])])
    keys = [k for k in KEYS if k in frame.columns]
    calls, us = frame["calls_per_layer"], frame["us_per_layer"]
    long = (calls > 0) & (us >= SUMMED_FROM_US * calls)
    summed = frame[long].groupby(keys, sort=True)[["calls_per_layer", "us_per_layer"]].sum().reset_index()
    summed.insert(len(keys) - 1, "kernel", summed["kernel_class"] + " kernels (summed per class)")
    columns = [*keys[:-1], "kernel", "kernel_class", "calls_per_layer", "us_per_layer"]
    out = pd.concat([summed[columns], frame.loc[~long, columns]], ignore_index=True)
    out = out.sort_values([*keys[:-1], "kernel_class", "kernel"], kind="stable").reset_index(drop=True)
    out["calls_per_layer"] = out["calls_per_layer"].round(3)
    out["us_per_layer"] = out["us_per_layer"].round(3)
    return out


def main(argv: list[str]) -> int:
    root = reference_data_root()
    if not argv and root is None:
        print("error: give TRACE_DIR, or set LADDERSIM_SHARED to the folder holding reference_data/", file=sys.stderr)
        return 2
    source = Path(argv[0]) if argv else root.joinpath(*TRACE)
    out = Path(argv[1]) if len(argv) > 1 else OUT
    if not (source / LAYER_FILE).is_file():
        print(f"error: {source / LAYER_FILE} not found (the original trace folder)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    compact(pd.read_csv(source / LAYER_FILE)).to_csv(out / LAYER_FILE, index=False, lineterminator="\n")
    print(f"wrote {out / LAYER_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
