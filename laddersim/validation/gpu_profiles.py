"""The shipped profile of the GPU a measured table names, one rule for every external table.

Tables write a GPU as nvidia-smi's product name (``H100-SXM5-80GB``), a short form (``H100``,
``A100-80GB``) or with a note (``A100-SXM-80GB (330W cap)``). The GPU's family is the name's first
known prefix; an A100 whose name says PCIe is the PCIe card (``a100-pcie``), every other A100 the
SXM4 part in its 8-GPU NVSwitch node, as are H100, H200 and B200; L40S is the 8-GPU PCIe box; a
GH200 (``GH200-480GB``) is the Grace Hopper superchip node, one GPU per node (``gh200-480gb``).
"""

from __future__ import annotations

from laddersim.errors import UserInputError

# GPU family (the name's prefix) -> the shipped profile of that GPU's node.
FAMILY_PROFILES = {"GH200": "gh200-480gb", "H200": "h200-sxm-nvswitch", "H100": "h100-sxm-nvswitch", "A100": "a100-sxm-nvswitch",
                   "B200": "b200-sxm-nvswitch", "L40S": "l40s-pcie"}
PCIE_PROFILES = {"A100": "a100-pcie"}


def profile_for_gpu(gpu: str) -> str | None:
    """The shipped profile of ``gpu`` as a table writes it, None where none ships."""
    name = str(gpu).strip().upper()
    family = next((f for f in FAMILY_PROFILES if name.startswith(f)), None)
    if family is None:
        return None
    if "PCIE" in name:
        return PCIE_PROFILES.get(family)
    return FAMILY_PROFILES[family]


def require_profile(gpu: str, field: str = "hardware") -> str:
    """``profile_for_gpu`` or one line naming the field and the GPUs that have a profile."""
    profile = profile_for_gpu(gpu)
    if profile is None:
        raise UserInputError(f"{field} {gpu!r} has no shipped profile; allowed: {', '.join(FAMILY_PROFILES)} "
                             f"(SXM/NVSwitch nodes; L40S PCIe; GH200 one per node), A100 PCIe")
    return profile


__all__ = ["FAMILY_PROFILES", "PCIE_PROFILES", "profile_for_gpu", "require_profile"]
