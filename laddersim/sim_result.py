"""What a simulation takes and gives: the scenario (``Scenario``), how to simulate it
(``SimOptions``) and its result (``SimResult``: per-step metrics, the simulated passes, the
summary row and the timeline). ``laddersim.simulate`` fills them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from laddersim.costs.memory_fit import MemoryUse
from laddersim.engine.work import EngineResult
from laddersim.hardware.profile import HardwareProfile
from laddersim.model_shape import ModelShape
from laddersim.results import timeline_frame
from laddersim.schedules.program import Program
from laddersim.workload import Workload

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Scenario:
    model: ModelShape
    hardware: HardwareProfile
    workload: Workload
    tp: int
    schedule: str


@dataclass(frozen=True)
class SimOptions:
    jitter: float = 0.0  # sigma of a per-rank, per-op lognormal duration multiplier
    seed: int = 0
    all_ranks: bool = False  # simulate every rank even when they are symmetric
    exact_steps: bool = False  # simulate every decode step (no interpolation; with jitter: no sample)
    sample_steps: int | None = None  # with jitter: decode steps to simulate (None: step_sampling's rule)
    replay: bool = True  # replay a recorded event order where it holds (bit for bit the engine's)
    # Every run on the SimPy engine itself (no replay, no direct event loop): the reference the
    # fast paths are checked against (laddersim.engine.direct, laddersim.engine.tree_batch).
    reference: bool = False


@dataclass
class SimResult:
    scenario: Scenario
    nodes: int
    program: Program
    memory: MemoryUse
    sim_ranks: int  # ranks simulated (1 under symmetry)
    prefill: EngineResult
    prefill_metrics: np.ndarray  # METRICS of the prefill
    decode_metrics: np.ndarray  # (steps, METRICS)
    # Per decode step: anchor steps (simulated) and the interpolation weight between them.
    step_lo: np.ndarray
    step_hi: np.ndarray
    step_frac: np.ndarray
    anchors: dict[int, EngineResult] = field(default_factory=dict)
    # With jitter and a sample of decode steps (laddersim.step_sampling): 95% half-width of each
    # METRICS' decode total; None where every step was simulated.
    decode_half_width_s: np.ndarray | None = None

    @property
    def simulated_steps(self) -> int:
        return len(self.anchors) + 1

    @property
    def engine_events(self) -> int:
        """Starts and ends of ops the engine ordered: two per op and rank of each simulated pass
        (a jittered run records no order of its own: nothing reads it)."""
        return 2 * self.sim_ranks * len(self.program) * (len(self.anchors) + 1)

    def decode_spans(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi, frac = int(self.step_lo[step]), int(self.step_hi[step]), float(self.step_frac[step])
        a, b = self.anchors[lo], self.anchors[hi]
        if lo == hi or frac == 0.0:
            return a.start_s, a.end_s
        return a.start_s + (b.start_s - a.start_s) * frac, a.end_s + (b.end_s - a.end_s) * frac

    def summary(self) -> dict:
        s = self.scenario
        w = s.workload
        prefill_s = float(self.prefill_metrics[0])
        decode_s = float(self.decode_metrics[:, 0].sum())
        total_s = prefill_s + decode_s
        both = self.prefill_metrics + self.decode_metrics.sum(axis=0)
        n_decode = len(self.decode_metrics)
        summary = {
            "schedule": s.schedule,
            "model": s.model.name,
            "hardware": s.hardware.name,
            "tp": s.tp,
            "nodes": self.nodes,
            "batch": w.batch,
            "prompt_len": w.prompt_len,
            "gen_len": w.gen_len,
            "dtype": w.dtype,
            "kv_cache": w.kv_cache,
            "kv_reads": w.kv_reads,
            "framework": w.framework,
            "prefill_s": prefill_s,
            "decode_s": decode_s,
            "total_s": total_s,
            # The paper's metric: batch * generated tokens / (prefill + decode).
            "tokens_per_s": w.batch * w.gen_len / total_s,
            "ttft_s": prefill_s,
            # None with gen_len 1: the prefill made the only token, there is no decode step.
            "tpot_s": decode_s / n_decode if n_decode else None,
            "decode_step_s": decode_s / n_decode if n_decode else None,
            "compute_s": float(both[1]),
            "overhead_s": float(both[2]),
            "comm_s": float(both[3]),
            "exposed_comm_s": float(both[4]),
            "memory_per_gpu_gib": self.memory.total_bytes / 2**30,
        }
        if self.decode_half_width_s is not None:
            summary.update(self._intervals(summary))
        return summary

    def _intervals(self, summary: dict) -> dict:
        """95% intervals of the sampled estimates (what simulating every step would give)."""
        half = float(self.decode_half_width_s[0])
        tokens = self.scenario.workload.batch * self.scenario.workload.gen_len
        n_decode = len(self.decode_metrics)
        decode = (summary["decode_s"] - half, summary["decode_s"] + half)
        total = (summary["prefill_s"] + decode[0], summary["prefill_s"] + decode[1])
        return {
            "sampled_steps": self.simulated_steps - 1,
            "decode_s_ci95": list(decode),
            "total_s_ci95": list(total),
            "tokens_per_s_ci95": [tokens / total[1], tokens / max(total[0], 1e-300)],
            "tpot_s_ci95": [decode[0] / n_decode, decode[1] / n_decode],
        }

    def timeline(self, steps: str | list[int] = "all", ranks: list[int] | None = None) -> "pd.DataFrame":
        """Spans as rows: phase, step, rank, stream, layer, op, kind, start_s, end_s (absolute).

        ``steps``: "all", "prefill" (prefill only), or a list of decode step indices. Under rank
        symmetry every requested rank gets the simulated rank's spans.
        """
        tp = self.scenario.tp
        ranks = list(range(tp)) if ranks is None else ranks
        def rows(arr: np.ndarray) -> np.ndarray:
            return arr[[r if self.sim_ranks > 1 else 0 for r in ranks]]
        frames = []
        if steps in ("all", "prefill"):
            frames.append(timeline_frame(self.program, rows(self.prefill.start_s), rows(self.prefill.end_s),
                                         ranks, -1, "prefill", 0.0))
        wanted = range(len(self.decode_metrics)) if steps == "all" else ([] if steps == "prefill" else steps)
        offsets = float(self.prefill_metrics[0]) + np.concatenate([[0.0], np.cumsum(self.decode_metrics[:, 0])])
        for step in wanted:
            start, end = self.decode_spans(step)
            frames.append(timeline_frame(self.program, rows(start), rows(end), ranks, step, "decode",
                                         float(offsets[step])))
        import pandas as pd

        return pd.concat(frames, ignore_index=True)
