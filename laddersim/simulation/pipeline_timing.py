"""A pipeline's step from its stages' times: stages in turn for one batch, or several
micro-batches in flight.

``stage_s[..., s]`` is stage ``s``'s pass for one batch (or micro-batch), its receive of the
previous stage's output included (``laddersim.schedules.program``: the transfer is the receiving
stage's op). Each stage is one server that runs one pass at a time; a batch's step goes through
every stage in order, and its next step starts where the first stage receives its sampled token.

* **One batch** (the Ladder Residual benchmark): the stages never overlap, the step is their sum,
  ``C = sum_s t_s``, and each stage idles ``C - t_s`` of it.
* **M micro-batches in flight** (vLLM's and SGLang's pipeline-parallel decode: a batch per stage):
  the steady state of this cyclic system is a max-plus recurrence whose cycle time is the largest
  cycle mean (Baccelli et al., *Synchronization and Linearity*, 1992, ch. 3): the circuit of one
  micro-batch through all stages (``C``, holding M micro-batches) and each stage serving one after
  the other (``t_s``, one at a time), so every micro-batch gets a token every
  ``T = max(C, M * max_s t_s)``. Throughput tends to ``1 / max_s t_s`` micro-batches per second as M
  grows, and a token's latency ``T`` is never below the one-batch step ``C``. A valid schedule
  reaching it starts micro-batch ``j`` on stage ``s`` at ``j * T / M + sum_{s' < s} t_s'``.
* **Filling** the pipeline (the prefills of M micro-batches): ``C + (M - 1) * max_s t_s``, micro-batch
  ``j`` entering each stage ``max_s t_s`` after the one before it.
"""

from __future__ import annotations

import numpy as np


def round_s(stage_s: np.ndarray, microbatches: int = 1) -> np.ndarray:
    """Seconds in which each of ``microbatches`` micro-batches passes every stage once."""
    stage_s = np.asarray(stage_s, dtype=float)
    return np.maximum(stage_s.sum(axis=-1), microbatches * stage_s.max(axis=-1))


def fill_s(stage_s: np.ndarray, microbatches: int = 1) -> np.ndarray:
    """Seconds until the last of ``microbatches`` micro-batches has passed every stage, from an empty pipeline."""
    stage_s = np.asarray(stage_s, dtype=float)
    return stage_s.sum(axis=-1) + (microbatches - 1) * stage_s.max(axis=-1)


def start_offsets_s(stage_s: np.ndarray, spacing_s: float, microbatches: int = 1) -> np.ndarray:
    """(microbatches x stages) start of micro-batch ``j`` on stage ``s`` of one round (``stage_s``: one
    pass per stage): ``j * spacing + sum_{s' < s} t_s'`` (``spacing`` = ``T / M`` in a decode round,
    ``max_s t_s`` while filling)."""
    stage_s = np.asarray(stage_s, dtype=float)
    before = np.concatenate([[0.0], np.cumsum(stage_s)[:-1]])
    return before[None, :] + spacing_s * np.arange(microbatches)[:, None]
