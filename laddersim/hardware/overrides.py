"""What-if variants of a profile: scale or set interconnect bandwidth and latency, NIC count,
interference, GPUs per node. Returns a new frozen profile; the original is untouched."""

from __future__ import annotations

from laddersim.errors import UserInputError
from laddersim.hardware.node_size import with_gpus_per_node
from laddersim.hardware.profile import HardwareProfile
from laddersim.hardware.sourced import Sourced

OVERRIDE_KEYS = (
    "intra_bandwidth_scale", "intra_latency_scale", "inter_bandwidth_scale", "inter_latency_scale",
    "nics_per_node", "compute_slowdown", "comm_slowdown", "gpus_per_node",
)


def with_overrides(profile: HardwareProfile, **overrides) -> HardwareProfile:
    """A copy of ``profile`` with what-if changes applied (keys: OVERRIDE_KEYS; None = unchanged).

    ``nics_per_node`` sets the NIC count the inter-node AllReduce shares (see
    ``laddersim.costs.collectives``: a NIC per GPU at most; fewer NICs carry the GPUs' shards in
    turn, and a flat ring crosses each node on as many channels as it has NICs). Setting
    ``compute_slowdown`` or ``comm_slowdown`` makes that fraction hold for every message size
    (a measured per-size curve keeps only the other fraction, and a ``compute_slowdown`` drops
    NCCL's channel rule, which would scale it down for small collectives); a ``comm_slowdown``
    stretches the whole collective, whichever part the profile's own fraction stretched.
    ``gpus_per_node`` repacks the same GPUs into nodes of that many (applied first; the intra-node
    fits that still hold are kept, see ``laddersim.hardware.node_size``).
    """
    unknown = set(overrides) - set(OVERRIDE_KEYS)
    if unknown:
        raise UserInputError(f"override: unknown {sorted(unknown)}; allowed: {', '.join(OVERRIDE_KEYS)}")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if "gpus_per_node" in overrides:
        profile = with_gpus_per_node(profile, overrides.pop("gpus_per_node"))
    for key, value in overrides.items():
        if not isinstance(value, (int, float)) or value < 0 or (key.endswith("bandwidth_scale") and value == 0):
            raise UserInputError(f"override: {key} must be a positive number, got {value!r}")
    what_if = profile.what_if.model_dump()
    for key in ("intra_bandwidth_scale", "intra_latency_scale", "inter_bandwidth_scale", "inter_latency_scale"):
        if key in overrides:
            what_if[key] *= float(overrides[key])
    update: dict = {}
    network = profile.network
    if "nics_per_node" in overrides:
        if network is None:
            raise UserInputError(f"override: nics_per_node needs a profile with a network; {profile.name} has none")
        nics = float(overrides["nics_per_node"])
        if nics <= 0:
            raise UserInputError("override: nics_per_node must be positive")
        network = network.model_copy(update={"nics_per_node": Sourced(value=nics, source="what-if override")})
        update["network"] = network
    interference = profile.interference
    for key in ("compute_slowdown", "comm_slowdown"):
        if key in overrides:
            value = float(overrides[key])
            points = [p.model_copy(update={key: value, "source": p.source + "; " + key + " what-if override"})
                      for p in interference.by_size]
            update_spec = {key: Sourced(value=value, source="what-if override"), "by_size": points}
            if key == "comm_slowdown":
                update_spec["comm_slowdown_part"] = "whole"
            else:
                update_spec["collective_channels"] = None
            interference = interference.model_copy(update=update_spec)
    update["interference"] = interference
    update["what_if"] = profile.what_if.model_validate(what_if)
    return profile.model_copy(update=update)
