"""Break-even fabric: the interconnect bandwidth (or latency) at which schedule A on fabric A
delivers the tokens/s of schedule B on fabric B.

Side A's fabric is scaled by a what-if scale ``s`` (laddersim.hardware.overrides); tokens/s (the
paper's metric: batch * gen_len / (prefill + decode)) is monotone in ``s`` (more bandwidth or less
latency is never slower), so the crossing is found by bisection on log ``s`` inside [lo, hi]. The
result is reported as the scale and as the value it gives the number the cost model really uses
for side A's group (``group_nominal``): for intra-node scales, the large-message bus bandwidth
(GB/s) or the small-message latency (us) of the ``tp / nodes``-GPU AllReduce as modelled (measured
table, per-GPU-count fit, the transport mechanism's path NCCL picks at that size, e.g. NVLS under
NCCL_P2P_DISABLE, or the alpha-beta fallback, whichever laddersim.costs.collectives uses), labelled
with the profile field it is (laddersim.costs.scaling.nominal);
for inter-node scales, the profile's network tier (``network.allreduce``). A scale that cannot
change side A's tokens/s (an inter-node scale on one node, an intra-node one with one GPU per
node) is refused: bisecting it would report a meaningless "no crossing".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from laddersim.costs.scaling.nominal import group_nominal
from laddersim.errors import UserInputError
from laddersim.hardware.profile import load_profile
from laddersim.sweeps.evaluate import simulate_point
from laddersim.sweeps.grid import OVERRIDE_COLUMNS
from laddersim.sweeps.points import Point

# --vary value -> (scale column, set column, unit of the set column)
VARY = {
    "intra_bandwidth": ("intra_bandwidth_scale", "intra_bandwidth_gbps", "GB/s"),
    "intra_latency": ("intra_latency_scale", "intra_latency_us", "us"),
    "inter_bandwidth": ("inter_bandwidth_scale", "inter_bandwidth_gbps", "GB/s"),
    "inter_latency": ("inter_latency_scale", "inter_latency_us", "us"),
}


@dataclass(frozen=True)
class Side:
    schedule: str
    hardware: str

    def __str__(self) -> str:
        return f"{self.schedule}@{self.hardware}"


def parse_side(text: str, flag: str) -> Side:
    schedule, sep, hardware = text.partition("@")
    if not sep or not schedule or not hardware:
        raise UserInputError(f"{flag}: '{text}' is not SCHEDULE@PROFILE, e.g. ladder@h100-sxm-nvswitch")
    return Side(schedule, hardware)


@dataclass(frozen=True)
class SharedRun:
    """What both sides run: model, TP, workload."""

    model: str
    tp: int
    batch: int
    prompt_len: int = 1024
    gen_len: int = 512
    dtype: str = "bfloat16"
    kv_cache: str = "static"

    def tokens_per_s(self, side: Side, scale_key: str | None = None, scale: float | None = None) -> float:
        overrides = tuple((c, scale if c == scale_key else None) for c in OVERRIDE_COLUMNS)
        point = Point(self.model, side.hardware, self.tp, self.batch, self.prompt_len, self.gen_len,
                      side.schedule, self.dtype, self.kv_cache, overrides, self.model, side.hardware)
        try:
            return simulate_point(point)["tokens_per_s"]
        except UserInputError as exc:
            raise UserInputError(f"{side}: {exc}") from None


@dataclass(frozen=True)
class BreakEven:
    vary: str
    a: str
    b: str
    b_tokens_per_s: float
    lo: float  # the scale range searched
    hi: float
    a_tokens_per_s_at_lo: float
    a_tokens_per_s_at_hi: float
    scale: float | None  # None: no crossing in [lo, hi]
    bracket: tuple[float, float] | None  # final bisection interval around ``scale``
    nominal: float  # side A's value (GB/s or us) that the scale multiplies, as the model uses it
    unit: str
    nominal_is: str  # what ``nominal`` is, e.g. "large-message bus bandwidth of the 8-GPU AllReduce (measured table)"

    @property
    def value(self) -> float | None:
        return None if self.scale is None else self.nominal * self.scale


def break_even(scenario: SharedRun, a: Side, b: Side, vary: str, lo: float = 0.01, hi: float = 100.0,
               rel_tol: float = 1e-4) -> BreakEven:
    """Bisect the scale of side A's ``vary`` until tokens/s of A equals that of B (to ``rel_tol``
    in the scale)."""
    if vary not in VARY:
        raise UserInputError(f"vary: unknown '{vary}'; allowed: {', '.join(VARY)}")
    if not 0 < lo < hi:
        raise UserInputError(f"range: need 0 < lo < hi, got lo={lo}, hi={hi}")
    scale_key, _, unit = VARY[vary]
    profile = load_profile(a.hardware)
    target = scenario.tokens_per_s(b)
    try:
        profile.nodes_for(scenario.tp)
    except UserInputError as exc:
        raise UserInputError(f"{a}: {exc}") from None
    nominal, nominal_is = group_nominal(profile, scenario.tp, vary)

    def gap(scale: float) -> float:
        return scenario.tokens_per_s(a, scale_key, scale) - target

    g_lo, g_hi = gap(lo), gap(hi)
    if math.isclose(g_lo, g_hi, rel_tol=1e-12, abs_tol=0.0):
        # Caught structurally above in the usual cases; this covers the rest (e.g. a measured
        # multi-node table, which only the inter-node scales touch).
        raise UserInputError(f"vary: {vary} has no effect on {a} at TP {scenario.tp}: "
                             f"{g_lo + target:.4g} tokens/s at x{lo:g} and at x{hi:g}")
    result = dict(vary=vary, a=str(a), b=str(b), b_tokens_per_s=target, lo=lo, hi=hi,
                  a_tokens_per_s_at_lo=g_lo + target, a_tokens_per_s_at_hi=g_hi + target, nominal=nominal, unit=unit,
                  nominal_is=nominal_is)
    if g_lo == 0.0 or g_hi == 0.0:
        scale = lo if g_lo == 0.0 else hi
        return BreakEven(**result, scale=scale, bracket=(scale, scale))
    if (g_lo > 0) == (g_hi > 0):
        return BreakEven(**result, scale=None, bracket=None)
    left, right = lo, hi
    while right / left > 1.0 + rel_tol:
        mid = math.sqrt(left * right)
        g_mid = gap(mid)
        if g_mid == 0.0:
            left = right = mid
            break
        if (g_mid > 0) == (g_lo > 0):
            left = mid
        else:
            right = mid
    return BreakEven(**result, scale=math.sqrt(left * right), bracket=(left, right))
