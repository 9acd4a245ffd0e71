"""GPU-hour prices by hardware profile name: the shipped defaults (laddersim/data/prices.yaml) or a
user file in the same format (``--prices FILE``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from laddersim.errors import UserInputError
from laddersim.support.resources import data_path
from laddersim.support.config_files import build, read_yaml_mapping

DEFAULT_PRICES = data_path("prices.yaml")
_FROZEN = ConfigDict(frozen=True, extra="forbid")
MAX_USD_PER_GPU_HOUR = 1e6  # far above any GPU's rent; keeps costs of large fleets finite


class Price(BaseModel):
    model_config = _FROZEN

    # Finite and bounded even when written as a string ("inf" skips the file reader's number check).
    usd_per_gpu_hour: float = Field(gt=0, le=MAX_USD_PER_GPU_HOUR, allow_inf_nan=False)
    source: str = Field(min_length=3)  # where the number came from
    date: str = Field(min_length=4)  # when it was listed, e.g. 2024-07


class PriceFile(BaseModel):
    model_config = _FROZEN

    currency: Literal["USD"] = "USD"
    prices: dict[str, Price]

    def usd_per_gpu_hour(self, profile_name: str) -> float:
        if profile_name not in self.prices:
            raise UserInputError(
                f"prices: no price for profile '{profile_name}'; priced: {', '.join(sorted(self.prices))} "
                "(add it to a --prices file)")
        return self.prices[profile_name].usd_per_gpu_hour


def load_prices(path: str | Path | None = None) -> PriceFile:
    """The price file at ``path``, or the shipped defaults."""
    path = Path(path) if path else DEFAULT_PRICES
    return build(PriceFile, read_yaml_mapping(path, "prices"), f"prices {path.name}")
