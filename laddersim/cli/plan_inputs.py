"""What both kinds of ``laddersim plan`` check and load first: the model with its schedules and
TPs, the priced candidate profiles, and their prices per GPU-hour."""

from __future__ import annotations

import argparse

from laddersim.errors import UserInputError
from laddersim.hardware.profile import list_profiles, load_profile
from laddersim.model_shape import ModelShape, load_model_shape
from laddersim.schedules.plan import parse_schedule


def checked_shape(args: argparse.Namespace) -> ModelShape:
    """``--model``'s shape, with every ``--schedule`` and ``--tp`` checked against it."""
    shape = load_model_shape(args.model)
    for schedule in args.schedule:
        parse_schedule(schedule, shape.n_layers)
    for tp in args.tp or []:
        shape.check_tp(tp)
    return shape


def candidate_profiles(names: list[str] | None, prices) -> tuple[dict, list[str]]:
    """(name -> (load ref, profile), names skipped); explicit names need a price, defaults without
    one are skipped."""
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
