"""What the benchmarks share: the reference process and the closed-form floor.

* **Reference process**: the symmetric simulation of llama-3.1-405b at TP 16 (2 nodes), batch 16,
  1024 + 512 tokens, one schedule, on the plain engine (no replay): ~0.12 s of CPU on an idle
  machine. Each benchmark times it in the same run as its own figures and prints
  ratios, because the machine it runs on may be shared: the ratios hold where seconds do not.
* **Closed-form floor**: the same schedule evaluated in numpy without the engine: op costs for
  every step (``op_times_s``) and, per forward pass, the larger of the two streams' summed
  durations (a lower bound on its makespan: no interference, no waiting). No simulation of a
  schedule can be cheaper than computing its costs, so its time is the floor to compare with.
"""

from __future__ import annotations

import resource
import time
from functools import lru_cache

import numpy as np

from laddersim.costs.op_costs import Phase, op_times_s
from laddersim.schedules.program import build_program
from laddersim.simulation.simulate import Scenario, SimOptions, make_scenario, simulate

REFERENCE = {"model": "llama-3.1-405b", "hardware": "h100-sxm-nvswitch", "tp": 16, "batch": 16, "prompt_len": 1024,
             "gen_len": 512, "schedule": "standard"}


def reference_s(repeats: int = 3) -> float:
    """Best CPU seconds of the reference process (see the module docstring)."""
    scenario = make_scenario(**REFERENCE, kv_cache="dynamic")
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        simulate(scenario, SimOptions(replay=False, reference=True))
        best = min(best, time.process_time() - t0)
    return best


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (pool workers, subprocesses)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@lru_cache(maxsize=64)
def _streams(schedule: str, n_layers: int, tp: int):
    program = build_program(schedule, n_layers, tp)
    return program.kinds, np.array([op.stream == "comm" for op in program.ops])


def closed_form_floor_s(scenario: Scenario) -> float:
    """Lower bound on prefill + decode seconds of ``scenario`` (see the module docstring)."""
    model, hw, work, tp = scenario.model, scenario.hardware, scenario.workload, scenario.tp
    kinds, comm = _streams(scenario.schedule, model.n_layers, tp)
    total = 0.0
    for phase, kv in ((Phase("prefill", work.batch, work.prompt_len), np.array([work.prompt_len])),
                      (Phase("decode", work.batch, 1),
                       np.array([work.kv_len_at_decode_step(s) for s in range(work.gen_len - 1)]))):
        if not len(kv):
            continue
        costs = op_times_s(model, hw, work, tp, phase, kv)
        names = tuple(dict.fromkeys(kinds))
        per_kind = np.stack([np.broadcast_to(costs[k], kv.shape) for k in names], axis=1)  # (steps, kinds)
        counts = np.array([[sum(1 for k, c in zip(kinds, comm) if k == name and c == side) for name in names]
                           for side in (False, True)], dtype=float)  # (streams, kinds)
        total += float(np.maximum(*(per_kind @ counts.T).T).sum())
    return total
