"""What both kinds of ``plan`` check and load first: the model with its schedules and TPs, the
candidate profiles and their prices per GPU-hour (from the price file, or the price given for
the profiles it does not price)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
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


@dataclass(frozen=True)
class Candidates:
    """The candidate profiles a plan considers and what a GPU-hour of each costs."""

    profiles: dict  # name -> (load ref, profile)
    usd_per_gpu_hour: dict[str, float]  # name -> USD per GPU-hour
    skipped: list[str]  # default candidates left out: no price
    assumed: list[str]  # priced by price_per_gpu_hour (the price file has none for them)

    def notes(self, price_per_gpu_hour: float | None, *, skipped: bool = True) -> list[str]:
        """What the plan tells on stderr about the candidates it priced (and, with ``skipped``,
        those it left out), one line each."""
        lines = [f"plan: not considered (no price): {', '.join(self.skipped)}"] if skipped and self.skipped else []
        if self.assumed:
            lines.append(f"plan: priced at ${price_per_gpu_hour:g} per GPU-hour (--price-per-gpu-hour): "
                         f"{', '.join(self.assumed)}")
        return lines


def priced_candidates(names: list[str] | None, prices: str | Path | None,
                      price_per_gpu_hour: float | None = None) -> Candidates:
    """The candidate profiles (``names``, default every shipped one) with their prices from the
    price file ``prices`` (default the shipped one); one it does not price costs
    ``price_per_gpu_hour`` when given, else a default candidate is skipped and a named one refused."""
    from laddersim.errors import UserInputError
    from laddersim.hardware.profile import list_profiles, load_profile
    from laddersim.planning.prices import load_prices

    price_file = load_prices(prices)
    priced = price_file.prices
    profiles, usd, skipped, assumed = {}, {}, [], []
    for name in names or list_profiles():
        profile = load_profile(name)
        if profile.name in priced:
            usd[name] = priced[profile.name].usd_per_gpu_hour
        elif price_per_gpu_hour is not None:
            usd[name] = price_per_gpu_hour
            assumed.append(profile.name)
        elif names:
            raise UserInputError(f"prices: no price for profile '{profile.name}'; priced: {', '.join(sorted(priced))}; "
                                 "add it to a --prices file or give --price-per-gpu-hour USD")
        else:
            skipped.append(profile.name)
            continue
        profiles[name] = (name, profile)
    if not profiles:
        raise UserInputError("profiles: none of the candidate profiles has a price; add them to a --prices file "
                             "or give --price-per-gpu-hour USD")
    return Candidates(profiles, usd, skipped, assumed)


def note_unmeasured_candidates(profiles: dict) -> None:
    """The datasheet-only note (stderr) of each candidate profile with no measurement behind it."""
    for _, profile in profiles.values():
        note_unmeasured(profile)
