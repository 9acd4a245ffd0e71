"""Fit ``gpu.kernel_launch_us`` of a profile to its first (bf16) GEMM table, and the GEMM roofline's
efficiencies with that floor held (laddersim.fitting.kernel_floor says how); writes nothing.

    PYTHONPATH=$PWD python tools/fits/fit_kernel_floor.py [--profile P] [--public CSV]

``--public``: also fit the original public table the compact one was resampled from (AIConfigurator
``gemm_perf`` rows as CSV: ``m,n,k,latency`` in ms, duplicates kept), a cross-check.
"""

from __future__ import annotations

import argparse

import pandas as pd

from laddersim.fitting.kernel_floor import (FLOOR_MAX_M, FLOOR_MAX_WEIGHT_BYTES, fit_gemm_at_floor,
                                            fit_kernel_floor)
from laddersim.hardware.profile import load_profile
from laddersim.hardware.table_files import read_gemm_table_csv

PROFILE = "a100-sxm-nvswitch"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=PROFILE, help=f"the profile whose floor is fitted (default {PROFILE})")
    parser.add_argument("--public", default=None, help="the original public GEMM table (CSV with m,n,k,latency ms)")
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    table = profile.gpu.gemm_tables[0]
    frame = read_gemm_table_csv(f"{profile.base_dir}/{table.file}")
    floor = fit_kernel_floor(frame)
    print(f"{table.file}: rows with m <= {FLOOR_MAX_M} and 2nk <= {FLOOR_MAX_WEIGHT_BYTES >> 20} MiB "
          f"({floor['rows']} rows): floor {floor['floor_us']:.2f} us + weights at {floor['bandwidth_gb_per_s']:.0f} GB/s")
    print(f"kernel_launch_us: {floor['floor_us']:.2f}  (stated: {profile.gpu.kernel_launch_us.value})")
    gemm = fit_gemm_at_floor(profile.gpu, frame, floor["floor_us"])
    print(f"roofline at that floor, rows with n, k >= 512 ({gemm['rows']} rows): compute efficiency "
          f"{gemm['gemm_compute_efficiency']}, memory efficiency {gemm['gemm_memory_efficiency']}, blend order "
          f"{gemm['gemm_blend_order']}, rms log error {gemm['rms_log_error']}")
    stated = fit_gemm_at_floor(profile.gpu, frame, profile.gpu.kernel_launch_us.value)
    print(f"  (at the stated floor {profile.gpu.kernel_launch_us.value} us: rms log error {stated['rms_log_error']})")
    if args.public:
        raw = pd.read_csv(args.public)
        raw = raw.assign(time_us=raw["latency"] * 1e3)[["m", "n", "k", "time_us"]]
        public = fit_kernel_floor(raw)
        print(f"{args.public}: ({public['rows']} rows): floor {public['floor_us']:.2f} us + weights at "
              f"{public['bandwidth_gb_per_s']:.0f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
