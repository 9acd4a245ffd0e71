"""Sweep override columns -> the scales ``laddersim.hardware.overrides.with_overrides`` takes.

"Set" columns are converted to scales of the profile's nominal alpha-beta numbers:

* ``intra_bandwidth_gbps``: scale = value / ``collectives.intra_node.bus_bandwidth_gbps``;
* ``inter_bandwidth_gbps``: scale = value / ``network.allreduce.bus_bandwidth_gbps``;
* ``intra_latency_us`` / ``inter_latency_us``: scale = value / the tier's ``base_latency_us``; the
  per-step latency scales by the same factor, so the value is the new base latency and the
  latency structure (steps per algorithm) is kept.

Where the profile ships a measured AllReduce table the scale applies to the table (its bandwidth-
bound part, or its latency floor; see laddersim.costs.collectives), so a set value there means
"the table, scaled as the nominal bandwidth (latency) would be to reach this value". Any what-if
scale already in the profile is taken into account, so the set value is the one simulated.
"""

from __future__ import annotations

from laddersim.errors import UserInputError
from laddersim.hardware.profile import HardwareProfile

# set column -> the scale column it becomes
SET_TO_SCALE = {
    "intra_bandwidth_gbps": "intra_bandwidth_scale",
    "intra_latency_us": "intra_latency_scale",
    "inter_bandwidth_gbps": "inter_bandwidth_scale",
    "inter_latency_us": "inter_latency_scale",
}


def nominal_value(profile: HardwareProfile, set_key: str) -> float:
    """The profile's current value of a set column (GB/s or us), what-if scales included."""
    w = profile.what_if
    if set_key.startswith("intra_"):
        tier, bw_scale, lat_scale = profile.collectives.intra_node, w.intra_bandwidth_scale, w.intra_latency_scale
    else:
        if profile.network is None:
            raise UserInputError(f"override: {set_key} needs a profile with a network; {profile.name} has none")
        tier, bw_scale = profile.network.allreduce, w.inter_bandwidth_scale
        lat_scale = w.inter_latency_scale
    if set_key.endswith("_gbps"):
        return tier.bus_bandwidth_gbps.value * bw_scale
    return tier.base_latency_us.value * lat_scale


def override_scales(profile: HardwareProfile, overrides: dict[str, float | None]) -> dict[str, float]:
    """Keyword arguments for ``with_overrides``: set columns converted, unset columns dropped."""
    out: dict[str, float] = {}
    for key, value in overrides.items():
        if value is None or value != value:  # None or NaN: not swept
            continue
        if key in SET_TO_SCALE:
            nominal = nominal_value(profile, key)
            if nominal <= 0:
                raise UserInputError(f"override: {key} cannot be set on {profile.name}: its nominal value is 0")
            out[SET_TO_SCALE[key]] = value / nominal
        else:
            out[key] = value
    return out
