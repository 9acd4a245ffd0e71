"""What will Ladder give me? After ``laddersim fit``: for every measured setting, the predicted
tokens/s and speedup over ``standard`` of every schedule, with an interval from the fit's
uncertainty (the parameters' covariance carried through finite-difference sensitivities of each
prediction: a linearised 95% interval, exp(+-1.96 sigma) on the log scale)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from laddersim.validation.core import SETTING, ValidationSetup, validate

if TYPE_CHECKING:  # laddersim.fitting.rows calls missed_own_rows
    from laddersim.fitting.rows import FitResult

PREDICTED_SCHEDULES = ("standard", "ladder", "parallel", "upper_bound")
Z95 = 1.96


def _predicted(grid: pd.DataFrame, profiles: dict, setup: ValidationSetup) -> np.ndarray:
    """Predicted tokens/s of each grid row with the given (p2p -> profile) profiles."""
    frame = validate(grid.assign(tokens_per_s=1.0), ValidationSetup(
        profiles.get("on", setup.hardware), profiles.get("off", setup.hardware_p2p_off), setup.dtype,
        setup.kv_cache, setup.kv_reads, setup.framework))
    return frame["predicted_tokens_per_s"].to_numpy()


def predictions(result: FitResult, measured: pd.DataFrame, setup: ValidationSetup) -> pd.DataFrame:
    """One row per measured setting and schedule: ``predicted_tokens_per_s`` and its 95% interval
    (``tokens_per_s_low``, ``tokens_per_s_high``), ``predicted_speedup`` over standard and its
    interval, and the measured values where the table has them."""
    keys = [c for c in SETTING + ["p2p"] if c in measured.columns and c != "hardware"]
    schedules = list(dict.fromkeys(PREDICTED_SCHEDULES + tuple(sorted(set(measured["schedule"])))))
    grid = measured.drop_duplicates(keys)[keys].merge(pd.DataFrame({"schedule": schedules}), how="cross")
    grid = grid.merge(measured[keys + ["schedule", "tokens_per_s"]].rename(columns={"tokens_per_s": "measured"}),
                      on=keys + ["schedule"], how="left")
    log_tps = np.log(_predicted(grid.drop(columns="measured"), result.profiles, setup))
    standard = grid.groupby(keys, sort=False).ngroup().to_numpy()
    std_index = {g: i for i, g in enumerate(standard) if grid["schedule"].iloc[i] == "standard"}
    to_std = np.array([std_index[g] for g in standard])
    out = grid.copy()
    out["predicted_tokens_per_s"] = np.exp(log_tps)
    out["predicted_speedup"] = np.exp(log_tps - log_tps[to_std])
    sigma_tps = np.zeros(len(grid))
    sigma_speedup = np.zeros(len(grid))
    if result.covariance is not None and result.steps:
        sens = _sensitivities(grid.drop(columns="measured"), log_tps, result.steps, setup)
        sigma_tps = _log_sigma(sens, result.covariance)
        sigma_speedup = _log_sigma(sens - sens[to_std], result.covariance)
    for name, center, sigma in (("tokens_per_s", out["predicted_tokens_per_s"], sigma_tps),
                                ("speedup", out["predicted_speedup"], sigma_speedup)):
        out[f"{name}_low"] = center * np.exp(-Z95 * sigma)
        out[f"{name}_high"] = center * np.exp(Z95 * sigma)
    measured_std = out["measured"].to_numpy()[to_std]
    out["measured_speedup"] = out["measured"] / measured_std
    out["speedup_error_pp"] = (out["predicted_speedup"] - out["measured_speedup"]) * 100.0
    return out


def _sensitivities(grid: pd.DataFrame, log_tps: np.ndarray, steps, setup: ValidationSetup) -> np.ndarray:
    """d log(tokens/s) / d parameter of each grid row, by finite differences over the fit's steps
    (``FitResult.steps``: the step and the profiles there)."""
    return np.column_stack([(np.log(_predicted(grid, profiles, setup)) - log_tps) / dx for dx, profiles in steps])


def _log_sigma(sens: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    """Per row, the standard deviation of log(prediction) the parameters' covariance gives."""
    return np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", sens, covariance, sens), 0.0))


def missed_own_rows(rows: pd.DataFrame, fitted: pd.DataFrame, steps, covariance: np.ndarray | None,
                    setup: ValidationSetup) -> str | None:
    """One line when the fitted profile misses fitted rows by more than its 95% interval for them
    (what ``predictions`` prints), None when every fitted row lies inside it. ``rows``: the fitted
    measured rows; ``fitted``: their validation frame with the fitted profiles."""
    if covariance is None or not steps or not len(rows):
        return None  # no interval to compare with (the pinning warnings say why)
    log_tps = np.log(fitted["predicted_tokens_per_s"].to_numpy())
    sigma = _log_sigma(_sensitivities(rows, log_tps, steps, setup), covariance)
    log_miss = np.abs(log_tps - np.log(rows["tokens_per_s"].to_numpy(dtype=float)))
    outside = log_miss > Z95 * sigma
    if not outside.any():
        return None
    worst = int(np.argmax(np.where(outside, log_miss - Z95 * sigma, -np.inf)))
    row = rows.iloc[worst]
    centre = float(np.exp(log_tps[worst]))
    return (f"the fitted profile misses {int(outside.sum())} of its {len(rows)} fitted rows by more than its 95% "
            f"interval (worst: {row['model']} tp={row['tp']} batch={row['batch']} p2p={row['p2p']} {row['schedule']}: "
            f"predicted {centre:.1f} [{centre * np.exp(-Z95 * sigma[worst]):.1f}, "
            f"{centre * np.exp(Z95 * sigma[worst]):.1f}] tokens/s, measured {float(row['tokens_per_s']):.1f}): "
            "the model lacks or misprices a cost these rows pay, and the fitted profile's other predictions "
            "inherit it")


def held_out_speedup_summary(table: pd.DataFrame, fitted_schedules: tuple[str, ...]) -> pd.DataFrame:
    """Per model: median and worst |speedup error| (points) of the measured schedules not fitted."""
    other = table[~table["schedule"].isin(fitted_schedules) & table["speedup_error_pp"].notna()]
    rows = [{"model": model, "rows": len(part),
             "speedup_median_abs_err_pp": float(part["speedup_error_pp"].abs().median()),
             "speedup_worst_abs_err_pp": float(part["speedup_error_pp"].abs().max())}
            for model, part in other.groupby("model", sort=True)]
    return pd.DataFrame(rows)
