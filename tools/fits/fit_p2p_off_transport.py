"""Fit the constants of h100-sxm-p2p-off's intra-node tier that no public table pins on an H100
host to the authors' paired P2P on/off runs (laddersim.fitting.p2p_off_transport says how); prints,
writes nothing.

By default the SHM grid (``shm.ll_bus_bandwidth_gb_per_s`` x NCCL's link estimate and channels) against
the decode time P2P off adds; ``--lines`` the SHM Simple bandwidth (2 GPUs) and the NVLS lines
(4, 8 GPUs) read from the pairs, beside how far the profile's stated lines miss those points;
``--by-size`` fits nothing: per TP and AllReduce size, the time P2P off adds to each AllReduce of the
standard schedule, measured and predicted (the 70B figure and the flash table).

    PYTHONPATH=$PWD python tools/fits/fit_p2p_off_transport.py [--table T] [--by-size | --lines]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from laddersim.costs.allreduce import allreduce_time_s
from laddersim.fitting.p2p_off_transport import (
    BY_SIZE_TABLES, PAIRED_TABLE, extra_per_allreduce, fit_lines, fit_shm_grid, paired_allreduce_points,
    stated_nvls_misses,
)
from laddersim.hardware.profile import load_profile
from laddersim.support.resources import data_path
from laddersim.validation.core import ValidationSetup, read_measured, validate


def by_size() -> None:
    frames = []
    for name, framework in BY_SIZE_TABLES.items():
        measured = read_measured(data_path("validation", name))
        measured = measured[(measured["schedule"] == "standard") & (measured["tp"] > 1)].reset_index(drop=True)
        frames.append(extra_per_allreduce(validate(measured, ValidationSetup(framework=framework))))
    print(pd.concat(frames, ignore_index=True).sort_values(["tp", "message_kib"]).to_string(
        index=False, float_format=lambda v: f"{v:.1f}"))


def print_lines(measured: pd.DataFrame) -> None:
    on, off = load_profile("h100-sxm-nvswitch"), load_profile("h100-sxm-p2p-off")
    fitted = fit_lines(paired_allreduce_points(measured, on), on, off)
    points = fitted["points"]
    points["stated_us"] = [float(allreduce_time_s(off, int(tp), np.array([size]))[0]) * 1e6
                           for tp, size in zip(points["tp"], points["size_bytes"])]
    print(points.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print(f"shm.simple_bus_bandwidth_gb_per_s (2 GPUs, NCCL's Simple latency): {fitted['simple_bus_bandwidth_gb_per_s']:.2f}")
    misses = stated_nvls_misses(points, off)
    for gpus, lines in fitted["nvls"].items():
        print(f"nvls {gpus} GPUs: fitted {[(round(a, 2), round(b, 2)) for a, b in lines]}; "
              f"the profile's stated lines miss these points by up to {misses[gpus]:.0f}%")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(PAIRED_TABLE),
                        help="the paired P2P on/off runs (default: the shipped ladder_flash_p2p_sweep.csv)")
    parser.add_argument("--by-size", action="store_true",
                        help="print the extra per AllReduce by TP and size; fit nothing")
    parser.add_argument("--lines", action="store_true",
                        help="fit the SHM Simple bandwidth (2 GPUs) and the NVLS lines (4, 8 GPUs) to the pairs")
    args = parser.parse_args(argv)
    if args.by_size:
        by_size()
        return 0
    measured = read_measured(args.table)
    if args.lines:
        print_lines(measured)
        return 0
    grid = fit_shm_grid(measured)
    print(grid.to_string(index=False))
    print("best:", grid.iloc[0].to_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
