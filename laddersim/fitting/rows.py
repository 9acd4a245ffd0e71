"""Fit what microbenchmarks cannot pin down from a user's own end-to-end runs.

"I measured my current model; what will Ladder give me?" From measured ``standard`` (and
optionally ``upper_bound`` and ``ladder``) rows the fit sets the numbers
``laddersim.fitting.row_parameters`` names by bounded robust least squares on log(predicted / measured)
tokens/s, each held near the base profile's value by a prior.

Kept from the base profile, and said so in the provenance: the per-collective constant
``framework.collective_sync_us`` and input copies (with standard rows a per-collective
constant is indistinguishable from the per-step one; microbenchmarks and the framework's code
fix them) and, without overlapping rows, the interference fractions (``standard`` and
``upper_bound`` never overlap compute with communication, so they carry no information about
them).

A fit that cannot explain its own rows says so: a fitted row whose measurement lies outside the
fitted profile's 95% interval for it (the parameters' uncertainty carried to the prediction,
``laddersim.fitting.row_predictions``) is a cost the model lacks or moves wrongly, and every other
prediction of the fitted profile inherits it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

from laddersim.errors import UserInputError
from laddersim.fitting.row_parameters import PRIOR_SIGMA, WEAK_PRIOR_SIGMA, Param, apply, parameters
from laddersim.fitting.row_predictions import missed_own_rows
from laddersim.hardware.profile import HardwareProfile, load_profile
from laddersim.hardware.sourced import MeasuredTable
from laddersim.model.shape import load_model_shape
from laddersim.support.provenance import laddersim_version, profile_sha256
from laddersim.schedules.plan import overlaps_communication
from laddersim.validation.core import ValidationSetup, validate

FIT_SCHEDULES = ("standard", "upper_bound")
LOSS_SCALE = 0.03  # a row off by ~3% is where the robust loss turns from quadratic to linear
FAR_FROM_PRIOR_SIGMAS = 2.0  # a fitted value this many prior sigmas from its base is reported


@dataclass
class FitResult:
    profiles: dict[str, HardwareProfile]  # p2p setting -> fitted profile
    parameters: dict[str, float]
    fit_rows: pd.DataFrame  # validation frame of the rows fitted
    all_rows: pd.DataFrame  # validation frame of every row with the fitted profiles
    warnings: list[str]  # rows that cannot pin the parameters, parameters at a bound, a fit kept out
    # Linearised uncertainty: the fitted vector, its covariance, and the profiles at x + dx (one per
    # parameter, for finite-difference sensitivities of predictions).
    covariance: np.ndarray | None = None
    steps: list[tuple[float, dict[str, HardwareProfile]]] | None = None
    base_rows: pd.DataFrame | None = None  # validation frame of every row with the base profiles (no fit)


def _soft_l1(z: np.ndarray) -> np.ndarray:
    """Robust loss rho(z) = 2(sqrt(1 + z) - 1) with its first two derivatives (scipy's layout).

    Rows the model cannot explain (a measurement anomaly, an effect it lacks) pull on the fit
    linearly instead of quadratically, so they do not drag the parameters of every other row.
    """
    t = 1.0 + z
    return np.vstack([2.0 * (np.sqrt(t) - 1.0), 1.0 / np.sqrt(t), -0.5 * t ** -1.5])


def _one_machine(measured: pd.DataFrame, base: dict[str, HardwareProfile]) -> pd.DataFrame:
    """The rows without their ``hardware`` column, once every row is checked to name the base
    profile of its P2P setting: a fit fits one machine, and a row naming its own profile would be
    simulated on that profile, untouched by the fit."""
    if "hardware" not in measured.columns:
        return measured
    names: dict[str, str] = {}
    for i, (hardware, p2p) in enumerate(zip(measured["hardware"], measured["p2p"])):
        if not isinstance(hardware, str) or not hardware or p2p not in base:
            continue
        if hardware not in names:
            names[hardware] = hardware if hardware in {b.name for b in base.values()} else load_profile(hardware).name
        if names[hardware] != base[p2p].name:
            raise UserInputError(f"fit: row {i + 1} names hardware {hardware}, but the fit starts from "
                                 f"{base[p2p].name} for p2p={p2p} rows; fit one machine at a time (keep its "
                                 "rows, or drop the hardware column)")
    return measured.drop(columns="hardware")


def fit_profiles(measured: pd.DataFrame, base: dict[str, HardwareProfile], setup: ValidationSetup,
                 schedules: tuple[str, ...] = FIT_SCHEDULES, command: str = "laddersim fit",
                 progress=None, *, loss: str = "soft_l1", priors: bool = True) -> FitResult:
    """Fit on the rows whose schedule is in ``schedules``; ``base`` maps p2p ('on'/'off') to profiles.
    ``priors=False`` drops the priors (plain least squares on the rows)."""
    measured = _one_machine(measured, base)
    rows = measured[measured["schedule"].isin(schedules)]
    if "standard" not in set(rows["schedule"]):
        raise UserInputError(f"fit: the measured table has no 'standard' rows; fitted schedules: {', '.join(schedules)}")
    settings = [p for p in ("on", "off") if p in set(rows["p2p"])]
    missing = [p for p in settings if p not in base]
    if missing:
        raise UserInputError(f"fit: no base profile for p2p={missing[0]} rows")
    group_sizes = {p: set(rows.loc[rows["p2p"] == p, "tp"].astype(int)) for p in settings}
    overlapped = any(overlaps_communication(s, load_model_shape(m).n_layers)
                     for s, m in set(zip(rows["schedule"], rows["model"])))
    # Rows without communication (upper_bound) or overlapping it (ladder) beside standard ones see
    # the AllReduce's own time; standard rows alone do not.
    collectives_seen = bool(set(rows["schedule"]) - {"standard"})
    params = parameters(base, settings, set(rows["batch"].astype(int)), group_sizes, overlapped, collectives_seen)
    evaluations = [0]

    def profiles_for(x: np.ndarray, source: str = "fit in progress") -> dict[str, HardwareProfile]:
        out = {}
        for p in settings:
            values = {q.name: v for q, v in zip(params, x) if q.p2p in (None, p)}
            out[p] = apply(base[p], values, source)
        return out

    def frame_for(x: np.ndarray, which: pd.DataFrame) -> pd.DataFrame:
        fitted = profiles_for(x)
        return validate(which, ValidationSetup(fitted.get("on", setup.hardware), fitted.get("off", setup.hardware_p2p_off),
                                               setup.dtype, setup.kv_cache, setup.kv_reads, setup.framework))

    def residuals(x: np.ndarray) -> np.ndarray:
        evaluations[0] += 1
        if progress:
            progress(evaluations[0])
        rows_r = np.log1p(frame_for(x, rows)["rel_error"].to_numpy())
        held = [LOSS_SCALE * np.log(v / q.start) / q.prior_sigma for q, v in zip(params, x) if priors and q.prior_sigma]
        return np.concatenate([rows_r, held])

    lower = np.array([q.lower for q in params])
    upper = np.array([q.upper for q in params])
    x0 = np.clip([q.start for q in params], lower, upper)
    solution = least_squares(residuals, x0, bounds=(lower, upper), loss=_soft_l1 if loss == "soft_l1" else loss,
                             f_scale=LOSS_SCALE, x_scale=np.array([q.scale for q in params]),
                             diff_step=1e-3, xtol=1e-5, ftol=1e-6, max_nfev=200)
    x = solution.x
    warnings = pinning_warnings(params, x, len(rows))
    all_frame = frame_for(x, measured)  # every row, fitted and held out, simulated once
    fit_frame = all_frame.loc[rows.index]
    # Every row with the base profiles too: the fitted rows for the check below, the held-out ones
    # for the caller's comparison (``FitResult.base_rows``).
    base_rows = validate(measured, ValidationSetup(base.get("on", setup.hardware),
                                                   base.get("off", setup.hardware_p2p_off), setup.dtype,
                                                   setup.kv_cache, setup.kv_reads, setup.framework))
    base_median = float(base_rows.loc[rows.index, "rel_error"].abs().median())
    if float(fit_frame["rel_error"].abs().median()) > base_median:
        # A fit must never make the shipped profile's answer worse on the rows it was given.
        warnings.append(f"kept the base profile's values: the fit's median error on the fitted rows "
                        f"({fit_frame['rel_error'].abs().median():.2%}) was above the base's ({base_median:.2%})")
        x = x0
        all_frame = frame_for(x, measured)
        fit_frame = all_frame.loc[rows.index]
    covariance = _covariance(solution.jac, np.log1p(fit_frame["rel_error"].to_numpy()), len(params))
    steps = []
    for i, q in enumerate(params):
        bumped = x.copy()
        bumped[i] = min(x[i] + 0.1 * q.scale, upper[i]) if x[i] + 0.1 * q.scale <= upper[i] else x[i] - 0.1 * q.scale
        steps.append((bumped[i] - x[i], profiles_for(bumped)))
    missed = missed_own_rows(rows, fit_frame, steps, covariance, setup)
    if missed:
        warnings.insert(0, missed)
    med = float(fit_frame["rel_error"].abs().median() * 100)
    worst = float(fit_frame["rel_error"].abs().max() * 100)
    source = (f"fit: `{command}` on {len(rows)} measured rows (schedules {', '.join(sorted(set(rows['schedule'])))}), "
              f"residual median {med:.2f}% worst {worst:.2f}% ({date.today().isoformat()})")
    fitted = profiles_for(x, source)
    for p in settings:
        fitted[p] = fitted[p].model_copy(update={"provenance": {
            **base[p].provenance,
            "fitted_from": base[p].name,
            "fitted_from_sha256": profile_sha256(base[p]),
            "laddersim_version": laddersim_version(),
            "fit_command": command,
            "fit_rows": str(len(rows)),
            "fit_residual_median_pct": f"{med:.3f}",
            "fit_residual_worst_pct": f"{worst:.3f}",
            "fit_kept": "collective_sync_us and collective_input_copies (per-collective constants, "
                        "indistinguishable from the per-step constant in these rows)"
                        + ("" if collectives_seen else " and the AllReduce's own floor and bandwidth (standard "
                                                       "rows alone cannot tell it from the compute, nor what a "
                                                       "schedule hides of it: it moves with the machine's common "
                                                       "speed only)")
                        + ("" if overlapped else " and interference (no fitted row overlaps compute with "
                                                 "communication)") + ": from the base profile",
            "fit_priors": (f"log-scale sigma {PRIOR_SIGMA} on microbenchmarked scales, {WEAK_PRIOR_SIGMA} on a "
                           "collective model without a measured table" if priors else "none"),
        }})
    values = {q.label: float(v) for q, v in zip(params, x)}
    return FitResult(fitted, values, fit_frame, all_frame, warnings, covariance, steps, base_rows)


def pinning_warnings(params: list[Param], x: np.ndarray, rows: int) -> list[str]:
    """What says the rows could not pin the parameters: fewer rows than parameters, a parameter
    that ended at one of its bounds, a microbenchmarked value pulled far from where it was."""
    out = []
    if rows < len(params):
        out.append(f"{rows} fitted rows for {len(params)} parameters: the rows cannot pin them "
                   "(priors hold the rest near the base profile)")
    at_bound = [q.label for q, v in zip(params, x)
                if np.isclose(v, q.lower, rtol=1e-6, atol=1e-12) or np.isclose(v, q.upper, rtol=1e-6, atol=1e-12)]
    if at_bound:
        out.append(f"at a bound: {', '.join(at_bound)} (the rows push it past what the model allows: "
                   "a missing mechanism, not a result)")
    far = [f"{q.label} {v:.4g} (base {q.start:.4g})" for q, v in zip(params, x)
           if q.prior_sigma and q.start > 0 and abs(np.log(v / q.start)) > FAR_FROM_PRIOR_SIGMAS * q.prior_sigma]
    if far:
        out.append(f"far from its microbenchmark value (over {FAR_FROM_PRIOR_SIGMAS:g} sigma of its prior): "
                   f"{', '.join(far)}: the rows' machine differs there from the profile's microbenchmarks or pays "
                   "for a cost the model lacks, so read the other schedules' predictions with care")
    return out


def _covariance(jac: np.ndarray, row_residuals: np.ndarray, n_params: int) -> np.ndarray | None:
    """Covariance of the fitted parameters, s^2 (J^T J)^-1 with s^2 the rows' residual variance
    (at least the loss scale's, LOSS_SCALE^2); None when J^T J is singular. The variance is the
    robust one the loss fits with (1.4826 x the median absolute residual, squared, per degree of
    freedom): a few rows the model cannot explain do not widen every prediction's interval until
    their own misses fit inside theirs."""
    n = len(row_residuals)
    dof = max(n - n_params, 1)
    robust = 1.4826 * float(np.median(np.abs(row_residuals))) if n else 0.0
    s2 = max(robust ** 2 * n / dof, LOSS_SCALE ** 2)
    try:
        return s2 * np.linalg.inv(jac.T @ jac)
    except np.linalg.LinAlgError:
        return None


def p2p_off_path(out: Path) -> Path:
    """Where a fit writes its P2P-off profile beside ``out``: NEW-p2p-off.yaml for NEW.yaml,
    else the name with -p2p-off added (a directory, or a file of another suffix)."""
    if out.suffix in (".yaml", ".yml"):
        return out.with_name(out.stem + "-p2p-off" + out.suffix)
    return out.with_name(out.name + "-p2p-off")


def save_profile(profile: HardwareProfile, path: str | Path, name: str | None = None) -> Path:
    """Write ``profile`` as YAML at ``path`` with its tables copied beside it (self-contained),
    named ``name``, by default after ``path`` (its stem, or a folder's name)."""
    path = Path(path)
    name = name or (path.stem if path.suffix else path.name)
    if path.suffix not in (".yaml", ".yml"):
        path = path / "profile.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    base_dir = Path(profile.base_dir) if profile.base_dir else Path(".")

    def relocate(table: MeasuredTable) -> MeasuredTable:
        src = base_dir / table.file
        dest = Path("tables") / Path(table.file).name
        (path.parent / "tables").mkdir(exist_ok=True)
        if src.resolve() != (path.parent / dest).resolve():
            shutil.copyfile(src, path.parent / dest)
        return table.model_copy(update={"file": str(dest)})

    update = {
        "collectives": profile.collectives.model_copy(update={
            key: [relocate(t) for t in getattr(profile.collectives, key)]
            for key in ("tables", "allgather_tables", "sendrecv_tables")}),
        "gpu": profile.gpu.model_copy(update={
            key: [relocate(t) for t in getattr(profile.gpu, key)] for key in ("gemm_tables", "quantized_gemm_tables")}),
    }
    if name:
        update["name"] = name
    data = profile.model_copy(update=update).model_dump(mode="json", exclude={"base_dir"})
    try:
        path.write_text(yaml.safe_dump(data, sort_keys=False, width=120))
    except OSError as exc:
        raise UserInputError(f"out: cannot write {path}: {exc.strerror}") from None
    load_profile(path)  # what we write must load
    return path
