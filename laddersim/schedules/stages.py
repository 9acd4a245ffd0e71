"""Pipeline stages as pure data: which layers each stage runs, and what crosses a stage boundary.

A pipeline of ``pp`` stages cuts the model's layers into contiguous runs. The split is vLLM's
(``vllm/distributed/utils.py`` ``get_pp_indices``): ``n_layers // pp`` layers each, the remainder
given one by one to the stages before the last (the last also holds the final norm, the LM head
and the sampling); a 2-stage pipeline of an even model is the two halves, as the Ladder Residual
benchmark cuts it (mayank31398/ladder-residual-inference, its ``pp`` branch, whose runs are
laddersim/data/validation/ladder_pp_sweep.csv). Stage 0 holds the embedding.

What crosses a boundary is the state between two layers. Under a schedule whose modules all have
lag 1 (standard, parallel, upper_bound, desync_half) that is the residual stream alone: every
module's output was added inside its layer. Under Ladder (lag 2) the last two modules' outputs
are still pending at the cut (their AllReduces overlap the next modules): the benchmark's stage
waits for those AllReduces and sends the residual stream and both outputs, three tensors, and
the next stage adds them where its ladder takes them in. ``crossing_modules`` finds them from the
module plan, so a hybrid schedule crosses with as many tensors as its plan has pending there.
"""

from __future__ import annotations

from laddersim.errors import UserInputError
from laddersim.model.stage import Stage, whole_model
from laddersim.schedules.plan import Module, module_plan

__all__ = ["Stage", "boundary_tensors", "crossing_modules", "pipeline_stages", "split_layers", "stage_modules",
           "whole_model"]


def split_layers(n_layers: int, pp: int) -> list[int]:
    """Layers per stage (vLLM's ``get_pp_indices``: the remainder to the stages before the last)."""
    if not 1 <= pp <= n_layers:
        raise UserInputError(f"pp: {pp} stages for {n_layers} layers; allowed: 1..{n_layers}")
    counts = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        counts[-i] += 1
    return counts


def pipeline_stages(n_layers: int, pp: int) -> tuple[Stage, ...]:
    """The ``pp`` stages of a model of ``n_layers`` layers, in order."""
    stages, first = [], 0
    for index, count in enumerate(split_layers(n_layers, pp)):
        stages.append(Stage(index, pp, first, first + count))
        first += count
    return tuple(stages)


def stage_modules(modules: list[Module], stage: Stage) -> tuple[int, int]:
    """(first, end) module indices of ``stage`` in the plan ``modules``."""
    inside = [i for i, m in enumerate(modules) if stage.first_layer <= m.layer < stage.end_layer]
    return inside[0], inside[-1] + 1


def crossing_modules(modules: list[Module], cut: int) -> list[int]:
    """Indices of the modules before module ``cut`` whose output the residual stream takes in at or
    after it, other than a lag-1 output taken in right at the cut (added inside its own layer):
    the pending outputs a stage boundary at ``cut`` sends beside the residual stream."""
    return [i for i, m in enumerate(modules[:cut]) if i + m.lag >= cut and not (m.lag == 1 and i + 1 == cut)]


def boundary_tensors(schedule: str, n_layers: int, stage: Stage) -> int:
    """Hidden-state tensors ``stage`` receives from the stage before it: the residual stream and
    the pending module outputs (0 for the first stage, which receives token ids)."""
    if stage.first:
        return 0
    modules = module_plan(schedule, n_layers)
    return 1 + len(crossing_modules(modules, stage_modules(modules, stage)[0]))
