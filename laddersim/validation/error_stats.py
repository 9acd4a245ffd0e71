"""The error statistics every validation table reports, written once.

A group's relative errors (predicted / measured - 1) become ``<name>_median_abs_err_pct`` and
``<name>_worst_abs_err_pct`` (and, where asked, the signed ``<name>_median_err_pct``: negative is
predicted below measured, and the count ``<name>_n`` of rows that carried the metric); rows without
the metric (NaN) are left out; an empty group gives NaN.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def error_stats(errors: pd.Series, name: str, *, signed: bool = False, count: bool = False,
                scale: float = 100.0, unit: str = "pct") -> dict[str, float]:
    """The statistics of ``errors`` (relative; ``scale`` 100 gives %) in the columns' order
    ``n``, ``median_abs``, ``median`` (signed only), ``worst_abs``."""
    values = pd.to_numeric(errors, errors="coerce").dropna() * scale
    present = len(values) > 0
    out: dict[str, float] = {}
    if count:
        out[f"{name}_n"] = len(values)
    out[f"{name}_median_abs_err_{unit}"] = float(values.abs().median()) if present else np.nan
    if signed:
        out[f"{name}_median_err_{unit}"] = float(values.median()) if present else np.nan
    out[f"{name}_worst_abs_err_{unit}"] = float(values.abs().max()) if present else np.nan
    return out


__all__ = ["error_stats"]
