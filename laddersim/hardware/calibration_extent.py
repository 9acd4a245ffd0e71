"""What a calibrated profile measured, and where a scenario leaves it.

A profile fitted by ``calibrate fit`` holds in its ``provenance`` the shape of the run behind it
(``world_size`` ranks, ``ranks_per_node``, ``nodes``) and the lines of the run's invocations that
measured under load (``load_warnings``, from ``run.json``). A scenario on more GPUs than the run
had, or on more nodes, is priced with AllReduce tables that stop at the run's largest group and,
across nodes, with the base profile's network (copied, not measured): the prediction is an
extrapolation, which ``extent_note`` says in one line. ``load_note`` says, in one line, that the
profile's numbers were measured while other work ran. A profile without calibration provenance
(a shipped one) gets neither line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from laddersim.hardware.profile import HardwareProfile

CALIBRATION_KIND = "calibration fit"  # provenance.kind of a profile ``calibrate fit`` wrote
LOAD_SEPARATOR = " | "  # between the dated lines of provenance.load_warnings


def _whole(value) -> int | None:
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number > 0 else None


def measured_extent(profile: HardwareProfile) -> tuple[int, int] | None:
    """(ranks, nodes) of the calibration run behind ``profile``, or None for a profile that is not
    a calibration fit (or whose provenance does not say)."""
    provenance = profile.provenance or {}
    if provenance.get("kind") != CALIBRATION_KIND:
        return None
    ranks, nodes = _whole(provenance.get("world_size")), _whole(provenance.get("nodes"))
    if ranks is None:
        return None
    return ranks, nodes or 1


def extent_note(profile: HardwareProfile, gpus: int, nodes: int) -> str | None:
    """One line where a scenario on ``gpus`` GPUs over ``nodes`` nodes leaves what ``profile``'s
    calibration measured (more ranks, or more nodes), else None."""
    extent = measured_extent(profile)
    if extent is None:
        return None
    ranks, measured_nodes = extent
    if gpus <= ranks and nodes <= measured_nodes:
        return None
    base = (profile.provenance or {}).get("base_profile", "the base profile")
    beyond = []
    if gpus > ranks:
        beyond.append(f"AllReduce groups above {ranks} ranks extrapolated from the measured ones")
    if nodes > measured_nodes:
        beyond.append(f"the network between nodes copied from {base}, not measured")
    node_word = "node" if measured_nodes == 1 else "nodes"
    return (f"warning: hardware: {profile.name} was calibrated on {ranks} ranks x {measured_nodes} {node_word}; "
            f"this scenario uses {gpus} GPUs on {nodes} node{'s' if nodes != 1 else ''}: "
            f"{' and '.join(beyond)}; calibrate that many ranks for a prediction to trust")


def load_lines(profile: HardwareProfile) -> list[str]:
    """The dated ``measured under load`` lines of the run behind ``profile``: its provenance's, or,
    for a profile whose provenance holds none, its run directory's ``run.json``."""
    provenance = profile.provenance or {}
    if provenance.get("kind") != CALIBRATION_KIND:
        return []
    if "load_warnings" in provenance:
        return [line for line in provenance["load_warnings"].split(LOAD_SEPARATOR) if line]
    manifest = Path(profile.base_dir) / "run.json" if profile.base_dir else None
    try:
        lines = json.loads(manifest.read_text()).get("load_warnings", []) if manifest else []
    except (OSError, ValueError):
        return []
    return [str(line) for line in lines] if isinstance(lines, list) else []


def load_note(profile: HardwareProfile) -> str | None:
    """One line for a profile whose calibration measured under load (the last such invocation's
    figures), else None."""
    lines = load_lines(profile)
    if not lines:
        return None
    more = f" (and {len(lines) - 1} earlier invocation(s))" if len(lines) > 1 else ""
    return (f"warning: hardware: {profile.name} was calibrated under load, {lines[-1]}{more}: its predictions "
            "carry that load; re-measure on an idle machine into a new --out and fit that")
