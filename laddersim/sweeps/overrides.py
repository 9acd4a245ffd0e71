"""Sweep override columns -> the scales ``laddersim.hardware.overrides.with_overrides`` takes.

"Set" columns are converted to scales of the number the cost model really uses for the point's
TP group (``laddersim.costs.scaling.nominal.group_nominal``), so the set value is the one simulated:

* ``intra_bandwidth_gbps``: the large-message bus bandwidth of the group's intra-node AllReduce
  (its measured table, per-GPU-count fit or alpha-beta fallback, whichever the model picks);
* ``intra_latency_us``: that AllReduce's small-message time (its latency floor);
* ``inter_bandwidth_gbps`` / ``inter_latency_us``: the network tier's bus bandwidth, and its
  latency across the group's nodes.

``gpus_per_node`` passes through unchanged; the set columns are converted against the profile with
that node size (the number they replace depends on how the group is laid out across nodes).

A set value that cannot matter for the point (an inter-node one when the group fits one node)
is converted against the profile's own tier number instead; it changes nothing either way. Any
what-if scale already in the profile is taken into account.
"""

from __future__ import annotations

from laddersim.costs.scaling.nominal import NoEffect, group_nominal
from laddersim.errors import UserInputError
from laddersim.hardware.node_size import with_gpus_per_node
from laddersim.hardware.profile import HardwareProfile

# set column -> the scale column it becomes
SET_TO_SCALE = {
    "intra_bandwidth_gbps": "intra_bandwidth_scale",
    "intra_latency_us": "intra_latency_scale",
    "inter_bandwidth_gbps": "inter_bandwidth_scale",
    "inter_latency_us": "inter_latency_scale",
}


def nominal_value(profile: HardwareProfile, set_key: str, tp: int) -> float:
    """The value (GB/s or us) a set column replaces for a TP group of ``tp`` on ``profile``."""
    if set_key.startswith("inter_") and profile.network is None:
        raise UserInputError(f"override: {set_key} needs a profile with a network; {profile.name} has none")
    try:
        return group_nominal(profile, tp, set_key.rsplit("_", 1)[0])[0]
    except NoEffect:  # nothing to set for this group: the tier's own number
        w = profile.what_if
        if set_key.startswith("intra_"):
            tier, bw_scale, lat_scale = profile.collectives.intra_node, w.intra_bandwidth_scale, w.intra_latency_scale
        else:
            tier, bw_scale, lat_scale = profile.network.allreduce, w.inter_bandwidth_scale, w.inter_latency_scale
        if set_key.endswith("_gbps"):
            return tier.bus_bandwidth_gb_per_s.value * bw_scale
        return tier.base_latency_us.value * lat_scale


def override_scales(profile: HardwareProfile, overrides: dict[str, float | None], tp: int) -> dict[str, float]:
    """Keyword arguments for ``with_overrides`` at a TP group of ``tp``: set columns converted,
    unset columns dropped."""
    out: dict[str, float] = {}
    gpus_per_node = overrides.get("gpus_per_node")
    if gpus_per_node is not None and gpus_per_node == gpus_per_node:
        profile = with_gpus_per_node(profile, gpus_per_node)
    for key, value in overrides.items():
        if value is None or value != value:  # None or NaN: not swept
            continue
        if key in SET_TO_SCALE:
            nominal = nominal_value(profile, key, tp)
            if nominal <= 0:
                raise UserInputError(f"override: {key} cannot be set on {profile.name}: its nominal value is 0")
            out[SET_TO_SCALE[key]] = value / nominal
        else:
            out[key] = value
    return out
