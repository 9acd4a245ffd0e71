"""Fit ``gpu.global_load_latency_us`` of h100-sxm-nvswitch: the round trip an fMHA CTA waits on per
key block (laddersim.costs.sdpa_attention), to the decode steps of the September CUDA-graph runs.

The fit's rows are ``ladder_graph_p2p_sweep.csv``'s TP 1 rows with P2P on (framework
gpt-fast-graph): one GPU, no collective, so a decode step is the sum of its kernels, and at small
batch the memory-efficient attention kernel's grid (heads x batch CTAs of one query) is smaller than
the GPU, its time the CTAs' chains of round trips. For each latency on the grid the rows are
validated with the shipped profile otherwise unchanged; the pick minimises the RMS of the decode
step's relative error over the rows (all three models: two fMHA tiles, MHA and GQA). The TP 2-8
rows (collectives on both P2P settings) are held out and printed at the pick.

    PYTHONPATH=$PWD python tools/fits/fit_fmha_latency.py [--shared ../shared]

Needs ../shared (the measured table is not shipped); prints, writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.hardware.profile import load_profile
from laddersim.hardware.sourced import Sourced
from laddersim.validation.core import ValidationSetup, read_measured, validate

TABLE = "validation/ladder_graph_p2p_sweep.csv"
PROFILES = ("h100-sxm-nvswitch", "h100-sxm-p2p-off")
GRID_US = np.round(np.arange(0.5, 1.501, 0.05), 2)


def with_latency(name: str, latency_us: float):
    profile = load_profile(name)
    gpu = profile.gpu.model_copy(update={"global_load_latency_us": Sourced(value=latency_us, source="fit grid")})
    return profile.model_copy(update={"gpu": gpu})


def decode_errors(rows: pd.DataFrame, latency_us: float) -> pd.DataFrame:
    """The rows validated at ``latency_us``: model name and the decode step's relative error."""
    out = validate(rows, ValidationSetup(*(with_latency(name, latency_us) for name in PROFILES)))
    return pd.DataFrame({"model": [Path(str(m)).name.removesuffix(".json") for m in out["model"]],
                         "decode_err": out["predicted_decode_s"] / out["decode_s"] - 1.0})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default="../shared")
    args = parser.parse_args(argv)
    path = Path(args.shared) / TABLE
    if not path.exists():
        print(f"no {path}: pass --shared", file=sys.stderr)
        return 2
    table = read_measured(path)
    fit_rows = table[(table["tp"] == 1) & (table["p2p"] == "on")]
    scores = []
    for latency in GRID_US:
        errors = decode_errors(fit_rows, float(latency))
        rms = float(np.sqrt((errors["decode_err"] ** 2).mean()) * 100)
        by_model = errors.groupby("model")["decode_err"].median() * 100
        scores.append((rms, float(latency)))
        print(f"{latency:.2f} us: decode error RMS {rms:.2f}%, median |err| {errors['decode_err'].abs().median() * 100:.2f}%; "
              "median by model " + ", ".join(f"{m} {v:+.2f}%" for m, v in by_model.items()))
    rms, best = min(scores)
    print(f"pick: {best:.2f} us (RMS {rms:.2f}% over {len(fit_rows)} TP 1 P2P-on rows)")
    held = decode_errors(table[table["tp"] > 1], best)
    print(f"held out (TP 2-8, P2P on and off, {len(held)} rows): decode median |err| "
          f"{held['decode_err'].abs().median() * 100:.2f}%, by model " +
          ", ".join(f"{m} {v * 100:.2f}%" for m, v in held.groupby("model")["decode_err"].apply(lambda e: e.abs().median()).items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
