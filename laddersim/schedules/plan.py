"""Each schedule as a list of modules: what a module computes, whether its output is AllReduced,
and how late the residual stream takes that output in.

``lag`` is the heart of Ladder Residual. Module i's output is added to the residual stream just
before module ``i + lag`` computes:

* lag 1 (standard): the next module needs this module's AllReduce at once, so it blocks;
* lag 2 (ladder): module i+1 runs on the residual stream without module i's output, so
  AllReduce(y_i) overlaps module i+1's compute and is waited on only before module i+2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from laddersim.errors import UserInputError

ModuleKind = Literal["attn", "mlp", "parallel", "moe", "moe_shared"]
# The MLP module kinds a layer may have: dense, routed experts, routed plus shared experts.
MLP_KINDS = ("mlp", "moe", "moe_shared")

SCHEDULE_NAMES = ("standard", "parallel", "ladder", "upper_bound", "desync_half", "hybrid:N")


@dataclass(frozen=True)
class Module:
    layer: int
    kind: ModuleKind  # attn | mlp | parallel (GPT-J: attention and MLP side by side) | moe | moe_shared
    allreduce: bool  # False where the schedule drops the AllReduce (desync)
    lag: int  # 1 = output used by the next module, 2 = by the one after (ladder)


def parse_schedule(name: str, n_layers: int) -> str:
    """Validate a schedule name; ``hybrid:N`` needs 0 <= N <= n_layers."""
    if name in SCHEDULE_NAMES[:-1]:
        return name
    if name.startswith("hybrid:"):
        count = name.split(":", 1)[1]
        if count.isdigit() and int(count) <= n_layers:
            return name
        raise UserInputError(
            f"schedule: '{name}' needs a layer count 0..{n_layers} after 'hybrid:', e.g. hybrid:{n_layers // 2}"
        )
    raise UserInputError(f"schedule: unknown '{name}'; allowed: {', '.join(SCHEDULE_NAMES)}")


def module_plan(name: str, n_layers: int, mlp_layout: tuple[str, ...] | None = None) -> list[Module]:
    """The modules of one forward pass, bottom layer first. ``mlp_layout``: each layer's MLP module
    kind (``MLP_KINDS``; a mixture-of-experts layer's is ``moe`` or ``moe_shared``); None: all
    ``mlp``. A mixture of experts takes the MLP's place in the schedule, its AllReduce with it:
    under ladder the MoE's AllReduce of layer i overlaps the attention of layer i + 1, as the Ladder
    Residual authors' ``moe_ladder_TP.py`` runs it (mayank31398/ladder-residual-inference, branch
    ``pp``)."""
    name = parse_schedule(name, n_layers)
    if mlp_layout is not None and len(mlp_layout) != n_layers:
        raise ValueError(f"mlp_layout has {len(mlp_layout)} layers, the plan {n_layers}")
    if mlp_layout is not None and name == "parallel" and any(kind != "mlp" for kind in mlp_layout):
        raise UserInputError("schedule: parallel fuses the attention's and the MLP's GEMMs, which a "
                             "mixture-of-experts layer does not have; allowed: " +
                             ", ".join(n for n in SCHEDULE_NAMES if n != "parallel"))
    if name == "parallel":
        return [Module(layer, "parallel", True, 1) for layer in range(n_layers)]
    modules: list[Module] = []
    ladder_from = n_layers  # first layer run as ladder
    if name == "ladder":
        ladder_from = 0
    elif name.startswith("hybrid:"):
        ladder_from = n_layers - int(name.split(":")[1])
    for layer in range(n_layers):
        lag = 2 if layer >= ladder_from else 1
        attn_ar = name not in ("upper_bound", "desync_half")
        mlp_ar = name != "upper_bound"
        modules.append(Module(layer, "attn", attn_ar, lag))
        modules.append(Module(layer, "mlp" if mlp_layout is None else mlp_layout[layer], mlp_ar, lag))
    return modules


def overlaps_communication(name: str, n_layers: int) -> bool:
    """Does any AllReduce of this schedule run beside compute (a module with lag > 1)?"""
    return any(m.allreduce and m.lag > 1 for m in module_plan(name, n_layers))
