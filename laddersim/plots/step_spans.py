"""The timeline plot's input: simulate a scenario under each schedule and keep one decode step."""

from __future__ import annotations

import pandas as pd

from laddersim.errors import UserInputError
from laddersim.simulation.simulate import SimResult, make_scenario, simulate


def decode_step_spans(model, hardware, tp: int, batch: int, prompt_len: int, gen_len: int,
                      schedules: list[str], step: int, n_ranks: int, dtype: str = "bfloat16",
                      kv_cache: str = "static", *, ep: int = 1,
                      dp_attention: bool = False) -> tuple[pd.DataFrame, dict[str, SimResult]]:
    """Spans (``SimResult.timeline`` rows plus ``schedule``) of decode step ``step`` on ranks
    0..n_ranks-1, and the result of every schedule (for its summary); ``ep`` and ``dp_attention``
    as ``make_scenario``'s."""
    n_steps = gen_len - 1
    if n_steps < 1:
        raise UserInputError(f"gen-len: {gen_len} gives no decode step to draw (the prefill makes the first "
                             f"token); allowed: gen-len >= 2")
    if not 0 <= step < n_steps:
        raise UserInputError(f"step: {step} is not a decode step; allowed: 0..{n_steps - 1} "
                             f"(gen-len {gen_len} gives {n_steps} decode steps)")
    if not 1 <= n_ranks <= tp:
        raise UserInputError(f"ranks: {n_ranks} is more than tp={tp}; allowed: 1..{tp}")
    frames, results = [], {}
    for schedule in schedules:
        scenario = make_scenario(model=model, hardware=hardware, tp=tp, batch=batch, prompt_len=prompt_len,
                                 gen_len=gen_len, schedule=schedule, dtype=dtype, kv_cache=kv_cache, ep=ep,
                                 dp_attention=dp_attention)
        results[schedule] = simulate(scenario)
        frames.append(results[schedule].timeline([step], ranks=list(range(n_ranks))).assign(schedule=schedule))
    return pd.concat(frames, ignore_index=True), results
