"""A profile with another number of GPUs per node: what of the base still holds.

A per-GPU-count fit of the intra-node AllReduce (``collectives.intra_node_fits``) was measured on
the base machine's node. A group of ``g`` GPUs inside a smaller node of the same GPU and fabric
runs the same NCCL ring or NVLS kernel over the same links, so the fits for up to the new node
size keep serving it; a fit for more GPUs than the new node holds describes no group inside one
node and is dropped (a larger group now spans nodes: its intra-node part is priced per node).
Both ``extends:`` profiles and the ``gpus_per_node`` sweep override come through here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from laddersim.errors import UserInputError

if TYPE_CHECKING:
    from laddersim.hardware.profile import HardwareProfile


def kept_fit_note(base: str, base_gpus_per_node: int, gpus_per_node: int) -> str:
    """What a kept fit's source says about the node it now serves."""
    return (f"; fitted on the {base_gpus_per_node}-GPU node of {base}, kept for a node of {gpus_per_node} GPUs "
            f"(a group of up to {gpus_per_node} GPUs runs the same kernel over the same links)")


def dropped_fits_note(base: str, dropped: list[int], gpus_per_node: int) -> str:
    counts = ", ".join(str(g) for g in dropped)
    return (f"intra_node_fits for {counts} GPUs of {base} dropped: no group of that size fits inside a "
            f"{gpus_per_node}-GPU node (such a group spans nodes)")


def check_gpus_per_node(value, where: str = "override: gpus_per_node") -> int:
    """``value`` as a GPU count, or one line naming what is allowed."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or not 1 <= value <= 1024:
        raise UserInputError(f"{where} must be a whole number of GPUs in 1..1024, got {value!r}")
    return int(value)


def fits_mapping_for_node(mapping: dict, base: str, base_gpus_per_node, gpus_per_node) -> dict:
    """A profile mapping (``extends:`` merged) whose inherited ``collectives.intra_node_fits`` are
    cut to ``gpus_per_node``, each kept fit's source saying so; unchanged where the counts do not
    make sense (validation reports them)."""
    collectives = mapping.get("collectives")
    if not (isinstance(collectives, dict) and isinstance(collectives.get("intra_node_fits"), list)
            and isinstance(gpus_per_node, int) and isinstance(base_gpus_per_node, int)
            and gpus_per_node != base_gpus_per_node):
        return mapping
    kept, dropped = [], []
    for fit in collectives["intra_node_fits"]:
        if not (isinstance(fit, dict) and isinstance(fit.get("gpus"), int)):
            return mapping
        if fit["gpus"] > gpus_per_node:
            dropped.append(fit["gpus"])
        else:
            kept.append({**fit, "source": str(fit.get("source", "")) + kept_fit_note(base, base_gpus_per_node,
                                                                                      gpus_per_node)})
    out = {**mapping, "collectives": {**collectives, "intra_node_fits": kept}}
    if dropped:
        provenance = dict(out.get("provenance") or {})
        provenance["node"] = dropped_fits_note(base, dropped, gpus_per_node)
        out["provenance"] = provenance
    return out


def with_gpus_per_node(profile: "HardwareProfile", gpus_per_node) -> "HardwareProfile":
    """``profile`` with ``gpus_per_node`` GPUs in each node (the same GPU, fabric and network),
    keeping the intra-node fits that still hold."""
    gpus_per_node = check_gpus_per_node(gpus_per_node)
    base_gpus = profile.node.gpus_per_node
    if gpus_per_node == base_gpus:
        return profile
    mapping = profile.model_dump(mode="json", exclude={"base_dir"})
    mapping["node"]["gpus_per_node"] = gpus_per_node
    mapping = fits_mapping_for_node(mapping, profile.name, base_gpus, gpus_per_node)
    return type(profile).model_validate({**mapping, "base_dir": profile.base_dir})
