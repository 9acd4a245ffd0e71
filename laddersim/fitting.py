"""Fit what microbenchmarks cannot pin down from a user's own end-to-end runs.

"I measured my current model; what will Ladder give me?" Given measured ``standard`` (and
optionally ``upper_bound``) rows, fit per profile:

* ``framework.step_overhead_us``: fixed cost of every forward pass (shared by all profiles of
  the measured machine: P2P on and off are the same GPUs and software). With ``standard`` rows
  of one model at TP > 1 only, every step has the same number of collectives, so a per-step
  cost and a per-collective cost are indistinguishable; the step overhead is then kept from the
  base profile and only fitted when ``upper_bound`` rows, TP 1 rows or several models are given;
* ``framework.collective_sync_us``: the effective extra cost of each collective on the critical
  path (the AllReduce floor a compiled step really pays), one per profile;
* a common scale of ``gpu.gemm_memory_efficiency`` and ``gpu.elementwise_memory_efficiency``
  (how well the framework's kernels stream weights and the KV cache).

Interference is not identifiable from these rows (neither schedule overlaps compute with
communication), so it stays as the base profile has it, and the provenance says so. The fit
minimises log(predicted / measured) tokens/s by bounded least squares.
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
from laddersim.hardware.profile import HardwareProfile, MeasuredTable, Sourced, load_profile
from laddersim.validation.core import ValidationSetup, validate

FIT_SCHEDULES = ("standard", "upper_bound")


@dataclass
class FitResult:
    profiles: dict[str, HardwareProfile]  # p2p setting -> fitted profile
    parameters: dict[str, float]
    fit_rows: pd.DataFrame  # validation frame of the rows fitted
    all_rows: pd.DataFrame  # validation frame of every row with the fitted profiles


def _with(profile: HardwareProfile, step_us: float, sync_us: float, mem_scale: float, source: str) -> HardwareProfile:
    gpu = profile.gpu
    fw = profile.framework
    new_gpu = gpu.model_copy(update={
        "gemm_memory_efficiency": Sourced(value=min(gpu.gemm_memory_efficiency.value * mem_scale, 1.0), source=source),
        "elementwise_memory_efficiency": Sourced(
            value=min(gpu.elementwise_memory_efficiency.value * mem_scale, 1.0), source=source),
    })
    new_fw = fw.model_copy(update={
        "step_overhead_us": Sourced(value=step_us, source=source),
        "collective_sync_us": Sourced(value=sync_us, source=source),
    })
    return profile.model_copy(update={"gpu": new_gpu, "framework": new_fw})


def fit_profiles(measured: pd.DataFrame, base: dict[str, HardwareProfile], setup: ValidationSetup,
                 schedules: tuple[str, ...] = FIT_SCHEDULES, command: str = "laddersim fit",
                 progress=None) -> FitResult:
    """Fit on the rows whose schedule is in ``schedules``; ``base`` maps p2p ('on'/'off') to profiles."""
    rows = measured[measured["schedule"].isin(schedules)]
    if "standard" not in set(rows["schedule"]):
        raise UserInputError(f"fit: the measured table has no 'standard' rows; fitted schedules: {', '.join(schedules)}")
    settings = [p for p in ("on", "off") if p in set(rows["p2p"])]
    missing = [p for p in settings if p not in base]
    if missing:
        raise UserInputError(f"fit: no base profile for p2p={missing[0]} rows")
    n_sync = len(settings)
    evaluations = [0]
    fit_step = bool(("upper_bound" in set(rows["schedule"])) or (rows["tp"] == 1).any()
                    or rows["model"].nunique() > 1)
    base_step_us = base[settings[0]].framework.step_overhead_us.value

    def profiles_for(x: np.ndarray, source: str = "fit in progress") -> dict[str, HardwareProfile]:
        step_us = x[0] if fit_step else base_step_us
        mem_scale = x[1]
        return {p: _with(base[p], step_us, x[2 + i], mem_scale, source) for i, p in enumerate(settings)}

    def frame_for(x: np.ndarray, which: pd.DataFrame) -> pd.DataFrame:
        fitted = profiles_for(x)
        local = ValidationSetup(fitted.get("on", setup.hardware), fitted.get("off", setup.hardware_p2p_off),
                                setup.dtype, setup.kv_cache, setup.kv_reads)
        return validate(which, local)

    def residuals(x: np.ndarray) -> np.ndarray:
        evaluations[0] += 1
        if progress:
            progress(evaluations[0])
        return np.log1p(frame_for(x, rows)["rel_error"].to_numpy())

    x0 = np.array([base_step_us, 1.0]
                  + [base[p].framework.collective_sync_us.value for p in settings])
    lower = np.array([0.0 if fit_step else base_step_us - 1e-9, 0.3] + [0.0] * n_sync)
    upper = np.array([20000.0 if fit_step else base_step_us + 1e-9, 1.0 / max(base[settings[0]].gpu.gemm_memory_efficiency.value,
                                         base[settings[0]].gpu.elementwise_memory_efficiency.value)]
                     + [500.0] * n_sync)
    x0 = np.clip(x0, lower, upper)
    solution = least_squares(residuals, x0, bounds=(lower, upper), x_scale=np.array([50.0, 0.05] + [5.0] * n_sync),
                             diff_step=1e-3, xtol=1e-6, ftol=1e-8, max_nfev=200)
    x = solution.x
    fit_frame = frame_for(x, rows)
    med = float(fit_frame["rel_error"].abs().median() * 100)
    worst = float(fit_frame["rel_error"].abs().max() * 100)
    source = (f"fit: `{command}` on {len(rows)} measured rows (schedules {', '.join(sorted(set(rows['schedule'])))}), "
              f"residual median {med:.2f}% worst {worst:.2f}% ({date.today().isoformat()})")
    fitted = profiles_for(x, source)
    for p in settings:
        fitted[p] = fitted[p].model_copy(update={"provenance": {
            **base[p].provenance,
            "fitted_from": base[p].name,
            "fit_command": command,
            "fit_rows": str(len(rows)),
            "fit_residual_median_pct": f"{med:.3f}",
            "fit_residual_worst_pct": f"{worst:.3f}",
            "fit_interference": "not identifiable from standard/upper_bound rows; kept from the base profile",
            "fit_step_overhead": ("fitted" if fit_step else
                                  "kept from the base profile: with standard rows of one model at TP > 1 it is "
                                  "collinear with the per-collective cost"),
        }})
    all_frame = validate(measured, ValidationSetup(fitted.get("on", setup.hardware), fitted.get("off", setup.hardware_p2p_off),
                                                   setup.dtype, setup.kv_cache, setup.kv_reads))
    params = {"step_overhead_us": float(x[0]) if fit_step else base_step_us, "memory_efficiency_scale": float(x[1])}
    params.update({f"collective_sync_us[p2p={p}]": float(x[2 + i]) for i, p in enumerate(settings)})
    return FitResult(fitted, params, fit_frame, all_frame)


def save_profile(profile: HardwareProfile, path: str | Path, name: str | None = None) -> Path:
    """Write ``profile`` as YAML at ``path`` with its tables copied beside it (self-contained)."""
    path = Path(path)
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

    collectives = profile.collectives.model_copy(update={"tables": [relocate(t) for t in profile.collectives.tables]})
    update = {"collectives": collectives}
    if hasattr(profile.gpu, "gemm_tables"):
        update["gpu"] = profile.gpu.model_copy(update={"gemm_tables": [relocate(t) for t in profile.gpu.gemm_tables]})
    if name:
        update["name"] = name
    data = profile.model_copy(update=update).model_dump(mode="json", exclude={"base_dir"})
    try:
        path.write_text(yaml.safe_dump(data, sort_keys=False, width=120))
    except OSError as exc:
        raise UserInputError(f"out: cannot write {path}: {exc.strerror}") from None
    load_profile(path)  # what we write must load
    return path
