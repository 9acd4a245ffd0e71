"""Which layers a pipeline stage runs, as data (the costs price a stage's weights and KV cache by
it; ``laddersim.schedules.stages`` splits a model into stages and finds what crosses between them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its index among ``count`` stages and its layers ``[first_layer, end_layer)``."""

    index: int
    count: int
    first_layer: int
    end_layer: int

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.count - 1

    @property
    def n_layers(self) -> int:
        return self.end_layer - self.first_layer


def whole_model(n_layers: int) -> Stage:
    """The one stage of a model run without a pipeline."""
    return Stage(0, 1, 0, n_layers)
