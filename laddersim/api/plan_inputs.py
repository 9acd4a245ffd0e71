"""What both kinds of ``plan`` check and load first: the model with its schedules and TPs, the
priced candidate profiles, and their prices per GPU-hour."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from laddersim.api.common import note_unmeasured

if TYPE_CHECKING:
    from laddersim.model.shape import ModelShape


def checked_shape(model, schedules: Sequence[str], tps: Sequence[int] | None) -> ModelShape:
    """``model``'s shape, with every schedule and TP checked against it."""
    from laddersim.model.shape import load_model_shape
    from laddersim.schedules.plan import parse_schedule

    shape = load_model_shape(model)
    for schedule in schedules:
        parse_schedule(schedule, shape.n_layers)
    for tp in tps or []:
        shape.check_tp(tp)
    return shape


def candidate_profiles(names: list[str] | None, prices) -> tuple[dict, list[str]]:
    """(name -> (load ref, profile), names skipped); explicit names need a price, defaults without
    one are skipped."""
    from laddersim.errors import UserInputError
    from laddersim.hardware.profile import list_profiles, load_profile

    out, skipped = {}, []
    for name in names or list_profiles():
        profile = load_profile(name)
        if profile.name not in prices.prices:
            if names:
                prices.usd_per_gpu_hour(profile.name)  # raises, naming the priced profiles
            skipped.append(profile.name)
            continue
        out[name] = (name, profile)
    if not out:
        raise UserInputError("profiles: none of the candidate profiles has a price; add them to a --prices file")
    return out, skipped


def gpu_hour_prices(prices, profiles: dict) -> dict[str, float]:
    """USD per GPU-hour of each candidate profile (name -> price)."""
    return {name: prices.usd_per_gpu_hour(profile.name) for name, (_, profile) in profiles.items()}


def note_unmeasured_candidates(profiles: dict) -> None:
    """The datasheet-only note (stderr) of each candidate profile with no measurement behind it."""
    for _, profile in profiles.values():
        note_unmeasured(profile)
