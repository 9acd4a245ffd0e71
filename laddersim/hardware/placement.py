"""Where the stages of a TP x PP pipeline run, from the profile's topology.

Each stage is a TP group of ``tp`` GPUs. A group that fits a node stays inside one (as serving
engines and the Ladder Residual benchmark place it: the (pp, tp) device mesh's stage ``s`` is
ranks ``s * tp .. s * tp + tp - 1``): a node holds ``gpus_per_node // tp`` stages side by side
and the next stage goes to the next node once it is full. A group larger than a node spans
``tp / gpus_per_node`` whole nodes (``HardwareProfile.nodes_for``), each stage its own. Rank
``r`` of a stage sends to rank ``r`` of the next (the benchmark's peer ``rank + tp``), so a
boundary is ``tp`` pairs, each over the link its two GPUs share: inside a node (NVLink P2P,
PCIe, or host memory as the profile's transport decides) or the network between two nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from laddersim.errors import UserInputError
from laddersim.hardware.profile import HardwareProfile


@dataclass(frozen=True)
class Hop:
    """A stage boundary: ``tp`` sender/receiver pairs, ``(node, local GPU)`` each."""

    senders: tuple[tuple[int, int], ...]
    receivers: tuple[tuple[int, int], ...]

    @property
    def kind(self) -> Literal["intra_node", "network"]:
        return "intra_node" if all(a[0] == b[0] for a, b in zip(self.senders, self.receivers)) else "network"

    @property
    def pairs(self) -> int:
        return len(self.senders)


@dataclass(frozen=True)
class Placement:
    tp: int
    pp: int
    gpus_per_node: int
    # (node, local GPU) of every rank of every stage: stage_gpus[s][r]
    stage_gpus: tuple[tuple[tuple[int, int], ...], ...]

    @property
    def nodes(self) -> int:
        return 1 + max(node for stage in self.stage_gpus for node, _ in stage)

    def stage_nodes(self, stage: int) -> tuple[int, ...]:
        return tuple(sorted({node for node, _ in self.stage_gpus[stage]}))

    def hop(self, sender: int, receiver: int) -> Hop:
        """The boundary from stage ``sender`` to stage ``receiver`` (rank r to rank r)."""
        return Hop(self.stage_gpus[sender], self.stage_gpus[receiver])

    def hop_into(self, stage: int) -> Hop:
        """What ``stage`` receives from: the stage before it, or (stage 0) the last one's token ids."""
        return self.hop((stage - 1) % self.pp, stage)


def place(profile: HardwareProfile, tp: int, pp: int) -> Placement:
    """The stages of ``tp`` x ``pp`` on ``profile``'s nodes (module docstring); one line naming
    ``pp`` where they need more than one node and the profile has no network."""
    per_node = profile.node.gpus_per_node
    if pp < 1:
        raise UserInputError(f"pp: must be a positive whole number of stages, got {pp}")
    group_nodes = profile.nodes_for(tp)  # a TP group past one node: whole nodes, or one line
    if tp <= per_node:
        side_by_side = per_node // tp
        stages = tuple(tuple((s // side_by_side, (s % side_by_side) * tp + r) for r in range(tp)) for s in range(pp))
    else:
        stages = tuple(tuple((s * group_nodes + r // per_node, r % per_node) for r in range(tp)) for s in range(pp))
    placement = Placement(tp, pp, per_node, stages)
    if placement.nodes > 1 and profile.network is None:
        fit = max(1, per_node // tp)
        raise UserInputError(
            f"pp: {pp} stages of tp={tp} need {placement.nodes} nodes of {per_node} GPUs, and {profile.name} has no "
            f"inter-node network; allowed: pp 1..{fit} at tp={tp} on one node")
    return placement
