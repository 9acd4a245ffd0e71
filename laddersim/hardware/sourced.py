"""The unit every profile number is made of: a value and where it came from (``Sourced``),
bounded variants of it, and the reference to a measured table shipped beside a profile."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

FROZEN_CONFIG = ConfigDict(frozen=True, extra="forbid")


class Sourced(BaseModel):
    """A number and where it came from."""

    model_config = FROZEN_CONFIG

    value: float = Field(allow_inf_nan=False)  # a NaN or infinity would stall the engine's clock
    source: str = Field(min_length=3)


def _bounded(low: float, *, strict: bool):
    """A validator of a ``Sourced`` value: above ``low`` (``strict``) or at least ``low``."""
    def check(number: Sourced) -> Sourced:
        if number.value < low or (strict and number.value == low):
            raise ValueError(f"value must be {'>' if strict else '>='} {low:g}, got {number.value:g}")
        return number
    return AfterValidator(check)


# A rate, capacity, efficiency or count that must be above zero (a zero bandwidth would divide
# by zero, a negative one would make transfers faster), and a time or fraction that may be zero.
Positive = Annotated[Sourced, _bounded(0.0, strict=True)]
NonNegative = Annotated[Sourced, _bounded(0.0, strict=False)]
AtLeastOne = Annotated[Sourced, _bounded(1.0, strict=False)]
# A slowdown fraction that may be a speed-up but never a stop: the work takes (1 + x) times its
# time, x > -1.
AboveMinusOne = Annotated[Sourced, _bounded(-1.0, strict=True)]



class MeasuredTable(BaseModel):
    """A resampled measured table shipped beside the profile (CSV with ``#`` source comments)."""

    model_config = FROZEN_CONFIG

    file: str
    source: str = Field(min_length=3)
    mode: Literal["eager", "graph"] = "eager"  # timed eagerly or captured in a CUDA graph
    library: str = ""  # e.g. "NCCL 2.29.2"
    # model: the simulator may interpolate it; check: only compared with (laddersim profiles check).
    use: Literal["model", "check"] = "model"
    # loop: averaged back-to-back loop (launch hidden); single: one CUDA-event-timed call (launch
    # and skew included); kernel: profiler kernel time.
    timing: Literal["loop", "single", "kernel"] = "loop"
    # Why a check is expected to miss, shown in the report (empty: it should pass).
    expect_miss: str = ""
