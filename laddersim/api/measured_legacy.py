"""``validate`` and ``fit`` (being moved)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from laddersim.choices import DEFAULT_SCHEDULES
from laddersim.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN

if TYPE_CHECKING:
    import pandas as pd

    from laddersim.hardware.profile import HardwareProfile
    from laddersim.model_shape import ModelShape


def fit(measured: str | Path | pd.DataFrame, hardware: str | Path | HardwareProfile, *,
        hardware_p2p_off: str | Path | HardwareProfile = "h100-sxm-p2p-off", with_upper_bound: bool = False,
        with_ladder: bool = False, out: str | Path | None = None, dtype: str = "float16",
        kv_cache: str | None = None, kv_reads: str | None = None, framework: str = "gpt-fast") -> pd.DataFrame:
    """``laddersim fit`` without the report: fit framework overhead and the collective floor (with
    ``with_ladder``, the interference fractions too) of ``hardware`` to the measured rows and
    return what the fitted profile predicts, one row per measured setting and schedule:
    ``predicted_tokens_per_s`` with its 95% interval (``tokens_per_s_low/high``),
    ``predicted_speedup`` with its interval, and the ``measured`` values.

    The fitted numbers are in ``frame.attrs["parameters"]``, the fitted profiles (by p2p setting,
    "on"/"off") in ``frame.attrs["profiles"]``, warnings in ``frame.attrs["warnings"]``. ``out``:
    also write the P2P-on profile there (NEW.yaml or a directory; P2P off beside it, -p2p-off)."""
    import pandas as pd

    from laddersim.fit_predictions import predictions
    from laddersim.fitting import fit_profiles, p2p_off_path, save_profile
    from laddersim.hardware.profile import HardwareProfile, load_profile as load
    from laddersim.validation.core import ValidationSetup, check_rows, read_measured

    table = measured if isinstance(measured, pd.DataFrame) else read_measured(measured)
    schedules = ("standard",) + (("upper_bound",) if with_upper_bound else ()) + (("ladder",) if with_ladder else ())
    p2p = set(table["p2p"])
    base = {"on": hardware if isinstance(hardware, HardwareProfile) else load(hardware)}
    if "off" in p2p:
        base["off"] = hardware_p2p_off if isinstance(hardware_p2p_off, HardwareProfile) else load(hardware_p2p_off)
    setup = ValidationSetup(base["on"], base.get("off", hardware_p2p_off), dtype, kv_cache, kv_reads, framework)
    check_rows(table, setup)
    result = fit_profiles(table, {k: v for k, v in base.items() if k in p2p}, setup, schedules, "laddersim.api.fit",
                          None)
    frame = predictions(result, table, setup)
    if out is not None:
        target = Path(out)
        for key, profile in result.profiles.items():
            path = target if key == "on" else p2p_off_path(target)
            save_profile(profile, path)
    frame.attrs.update(parameters=dict(result.parameters), profiles=dict(result.profiles),
                       warnings=list(result.warnings))
    return frame

