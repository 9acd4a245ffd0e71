"""``gpu.global_load_latency_us`` fitted to one-GPU decode steps of the memory-efficient attention.

The round trip an fMHA CTA waits on per key block (``laddersim.costs.sdpa_attention``), fitted to
the decode steps of the authors' September CUDA-graph runs
(``laddersim/data/validation/ladder_graph_p2p_sweep.csv``, framework gpt-fast-graph). The fit's
rows are the table's TP 1 rows with P2P on: one GPU, no collective, so a decode step is the sum of
its kernels, and at small batch the memory-efficient attention kernel's grid (heads x batch CTAs of
one query) is smaller than the GPU, its time the CTAs' chains of round trips. For each latency on
``GRID_US`` the rows are validated with the shipped profiles otherwise unchanged; the pick minimises
the RMS of the decode step's relative error over the rows (all three models: two fMHA tiles, MHA
and GQA). The TP 2-8 rows (collectives on both P2P settings) are held out.
``tools/fits/fit_fmha_latency.py`` prints the fit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.hardware.sourced import Sourced
from laddersim.support.resources import data_path
from laddersim.validation.core import ValidationSetup, validate

TABLE = data_path("validation", "ladder_graph_p2p_sweep.csv")
PROFILES = ("h100-sxm-nvswitch", "h100-sxm-p2p-off")  # P2P on, P2P off
GRID_US = np.round(np.arange(0.5, 1.501, 0.05), 2)


def with_latency(name: str, latency_us: float) -> HardwareProfile:
    """Profile ``name`` with ``gpu.global_load_latency_us`` set to ``latency_us``."""
    profile = load_profile(name)
    gpu = profile.gpu.model_copy(update={"global_load_latency_us": Sourced(value=latency_us, source="fit grid")})
    return profile.model_copy(update={"gpu": gpu})


def decode_errors(rows: pd.DataFrame, latency_us: float) -> pd.DataFrame:
    """The rows validated at ``latency_us``: model name and the decode step's relative error."""
    out = validate(rows, ValidationSetup(*(with_latency(name, latency_us) for name in PROFILES)))
    return pd.DataFrame({"model": [Path(str(m)).name.removesuffix(".json") for m in out["model"]],
                         "decode_err": out["predicted_decode_s"] / out["decode_s"] - 1.0})


def fit_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows the latency is fitted to: TP 1, P2P on."""
    return table[(table["tp"] == 1) & (table["p2p"] == "on")]


def latency_grid(rows: pd.DataFrame, grid_us=GRID_US) -> pd.DataFrame:
    """Per latency of ``grid_us``: the decode error's RMS and median absolute value over ``rows``
    (%), and its median per model (signed, %)."""
    out = []
    for latency in grid_us:
        errors = decode_errors(rows, float(latency))
        by_model = errors.groupby("model")["decode_err"].median() * 100
        out.append({"latency_us": float(latency), "rms_pct": float(np.sqrt((errors["decode_err"] ** 2).mean()) * 100),
                    "median_abs_pct": float(errors["decode_err"].abs().median() * 100),
                    **{f"median_pct[{m}]": float(v) for m, v in by_model.items()}})
    return pd.DataFrame(out)


def picked_latency_us(grid: pd.DataFrame) -> float:
    """The grid's latency of least RMS error (the smaller latency on a tie)."""
    return float(min(zip(grid["rms_pct"], grid["latency_us"]))[1])
