"""Fit ``gpu.global_load_latency_us`` of h100-sxm-nvswitch to the September CUDA-graph runs' one-GPU
decode steps (laddersim.fitting.load_latency says how): prints the grid, the pick and the held-out
TP 2-8 rows' errors at the pick; writes nothing.

    PYTHONPATH=$PWD python tools/fits/fit_fmha_latency.py [--table T]
"""

from __future__ import annotations

import argparse

from laddersim.fitting.load_latency import TABLE, decode_errors, fit_rows, latency_grid, picked_latency_us
from laddersim.validation.core import read_measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(TABLE), help="the CUDA-graph runs (default: the shipped "
                        "ladder_graph_p2p_sweep.csv)")
    args = parser.parse_args(argv)
    table = read_measured(args.table)
    rows = fit_rows(table)
    grid = latency_grid(rows)
    for point in grid.to_dict("records"):
        by_model = {k[len("median_pct["):-1]: v for k, v in point.items() if k.startswith("median_pct[")}
        models = ", ".join(f"{m} {v:+.2f}%" for m, v in by_model.items())
        print(f"{point['latency_us']:.2f} us: decode error RMS {point['rms_pct']:.2f}%, median |err| "
              f"{point['median_abs_pct']:.2f}%; median by model {models}")
    best = picked_latency_us(grid)
    rms = float(grid.loc[grid["latency_us"] == best, "rms_pct"].iloc[0])
    print(f"pick: {best:.2f} us (RMS {rms:.2f}% over {len(rows)} TP 1 P2P-on rows)")
    held = decode_errors(table[table["tp"] > 1], best)
    print(f"held out (TP 2-8, P2P on and off, {len(held)} rows): decode median |err| "
          f"{held['decode_err'].abs().median() * 100:.2f}%, by model " +
          ", ".join(f"{m} {v * 100:.2f}%" for m, v in held.groupby("model")["decode_err"].apply(lambda e: e.abs().median()).items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
