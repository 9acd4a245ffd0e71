"""The shape of one continuous-batching iteration as the cost model reads it, the grid of token
counts the iteration timer runs the engine at, and the passes' op costs shared between timers
(laddersim.traffic.iteration_time)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from laddersim.costs.op_costs import Phase, op_times_s
from laddersim.simulation.scenario import Scenario

EXACT_TOKENS = 16  # every token count up to this is its own grid point


@dataclass(frozen=True)
class MixedPhase(Phase):
    """A forward pass of ``total_tokens`` new tokens of which ``batch`` sequences sample (a
    continuous-batching iteration); op_costs reads ``tokens`` and ``batch``, and the name: a
    ``prefill`` (the iteration has prompt tokens) runs the LM head on every new token where the
    framework's prefill does (``prefill_logits: all``), a ``decode`` on each sampling sequence."""

    total_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.total_tokens


def phase_of(tokens: int, logits: int, prefill: bool) -> MixedPhase:
    """The pass of an iteration of ``tokens`` new tokens, ``logits`` sampling sequences, with prompt
    tokens or not (``prefill``)."""
    return MixedPhase("prefill" if prefill else "decode", logits, 1, tokens)


def token_bracket(tokens: int, points_per_octave: int) -> tuple[int, int]:
    """The grid points (lo, hi) around ``tokens`` (equal when it is one)."""
    if tokens <= EXACT_TOKENS:
        return tokens, tokens
    octave = 1 << (tokens.bit_length() - 1)
    step = max(1, octave // points_per_octave)
    lo = tokens - tokens % step
    return (lo, lo) if lo == tokens else (lo, lo + step)


_OP_TIMES: OrderedDict[tuple, tuple[Scenario, dict[str, np.ndarray]]] = OrderedDict()
OP_TIMES_KEPT = 4096  # passes' op costs kept (a scenario's iterations need a few hundred)


def shared_op_times_s(scenario: Scenario, tokens: int, logits: int) -> dict[str, np.ndarray]:
    """``op_times_s`` of a pass of ``tokens`` new tokens and ``logits`` sampling sequences on
    ``scenario``'s model, profile, TP and workload, shared by the iteration timers of every
    schedule (and pipeline stage) of them in this process: the costs do not depend on the
    schedule. Keyed by the identity of the model and profile objects (kept alive with the entry)."""
    s = scenario
    key = (id(s.model), id(s.hardware), s.workload, s.tp, tokens, logits)
    if key in _OP_TIMES:
        _OP_TIMES.move_to_end(key)
        return _OP_TIMES[key][1]
    times = op_times_s(s.model, s.hardware, s.workload, s.tp, phase_of(tokens, logits, False), np.ones(1))
    _OP_TIMES[key] = (s, times)
    if len(_OP_TIMES) > OP_TIMES_KEPT:
        _OP_TIMES.popitem(last=False)
    return times


__all__ = ["EXACT_TOKENS", "OP_TIMES_KEPT", "MixedPhase", "phase_of", "shared_op_times_s", "token_bracket"]
