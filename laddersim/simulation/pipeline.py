"""Simulate a TP x PP scenario: every stage's passes, then the steps they compose into.

Each stage is a TP group placed on the profile's nodes (``placement``) running its own program
(``laddersim.schedules.program`` with a ``Stage``: its layers, stage 0 the embedding, the last the
final norm, LM head and sampling). The engine runs a stage's prefill and decode steps as it runs a
whole model's (``laddersim.simulation.passes.simulate_passes``), the stage's receive priced from the link
its pairs cross (``laddersim.costs.point_to_point``): the hidden state (and under Ladder the
pending module outputs) from the stage before, batch x tokens x hidden in the dtype; the sampled
token ids back into stage 0 before each decode step. A stage's pass ends when its last op does,
its pending AllReduces included, which is when the benchmark sends; so one batch's step is the
stages' passes in turn, and micro-batches in flight share the stages as ``timing`` composes them.
Each stage's memory is checked apart: weights and KV cache of its own layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from laddersim.costs.gemm_tables import SOL
from laddersim.costs.memory_fit import MemoryUse, check_fits
from laddersim.costs.point_to_point import send_time_s
from laddersim.simulation import pipeline_timing as timing
from laddersim.hardware.placement import Placement, place
from laddersim.simulation.results import summarize
from laddersim.schedules.plan import parse_schedule
from laddersim.schedules.stages import Stage, boundary_tensors, pipeline_stages
from laddersim.simulation.passes import PassSetup, simulate_passes
from laddersim.simulation.results import SimResult
from laddersim.simulation.scenario import Scenario, SimOptions

if TYPE_CHECKING:
    import pandas as pd

# Bytes of one sampled token id sent back to stage 0: gpt-fast's generate.py samples with
# ``multinomial_sample_one_no_sync`` (``torch.argmax(...).to(dtype=torch.int)``), an int32.
TOKEN_ID_BYTES = 4


def receive_bytes(scenario: Scenario, stage: Stage, tokens: int, samples: int) -> float:
    """Bytes one rank of ``stage`` receives in a pass of ``tokens`` new tokens of which ``samples``
    sequences sampled their last token: the boundary's hidden-state tensors (tokens x hidden each,
    in the dtype), or for stage 0 the sampled token ids (none before a prefill)."""
    model = scenario.model
    if stage.first:
        return float(samples * TOKEN_ID_BYTES)
    return float(boundary_tensors(scenario.schedule, model.n_layers, stage) * tokens * model.dim
                 * scenario.workload.dtype_bytes)


def receive_s(scenario: Scenario, placement: Placement, stage: Stage, tokens: int, samples: int) -> dict[str, float]:
    """{the stage's receive op kind: seconds} for a pass of ``tokens`` new tokens, ``samples``
    sequences sampled (empty where nothing is received)."""
    size = receive_bytes(scenario, stage, tokens, samples)
    if size <= 0:
        return {}
    kind = "recv_tokens" if stage.first else "recv_hidden"
    return {kind: send_time_s(scenario.hardware, placement.hop_into(stage.index), size)[0]}


def stage_setup(scenario: Scenario, placement: Placement, stage: Stage) -> PassSetup:
    """The passes of ``stage``: its nodes, and its receive's seconds in the prefill (the prompt's
    hidden states) and in a decode step (one token's, or the sampled ids)."""
    w = scenario.workload
    costs = (("prefill", receive_s(scenario, placement, stage, w.batch * w.prompt_len, 0)),
             ("decode", receive_s(scenario, placement, stage, w.batch, w.batch)))
    return PassSetup(placement.nodes, placement.stage_nodes(stage.index), stage, costs)


@dataclass
class PipelineResult:
    """A pipeline scenario's stages and the steps they compose into; ``summary`` and ``timeline``
    as a ``SimResult``'s (ranks numbered over the whole pipeline, stage ``s`` holding ``s * tp`` to
    ``s * tp + tp - 1``)."""

    scenario: Scenario
    placement: Placement
    stages: tuple[SimResult, ...]  # each stage's passes at the micro-batch size
    memory: MemoryUse  # the fullest stage's
    prefill_metrics: np.ndarray  # METRICS of the prefill (all micro-batches)
    decode_metrics: np.ndarray  # (steps, METRICS): every micro-batch's token of that step
    decode_half_width_s: np.ndarray | None = None
    # Each stage's receive in a decode step (seconds), the transport its slowest pair crossed and
    # where its time came from (SILICON: the profile's measured send/recv table; SOL: the model).
    receive_s: tuple[float, ...] = ()
    transports: tuple[str, ...] = ()
    receive_labels: tuple[str, ...] = ()

    @property
    def nodes(self) -> int:
        return self.placement.nodes

    @property
    def program(self):
        """The last stage's program (its ops include the LM head and sampling)."""
        return self.stages[-1].program

    @property
    def simulated_steps(self) -> int:
        return max(stage.simulated_steps for stage in self.stages)

    @property
    def engine_events(self) -> int:
        return sum(stage.engine_events for stage in self.stages)

    def receive_sources(self) -> dict[str, str]:
        """{receive op kind: SILICON or SOL} (SOL where any stage's was the model's)."""
        out: dict[str, str] = {}
        for index, label in enumerate(self.receive_labels):
            kind = "recv_tokens" if index == 0 else "recv_hidden"
            out[kind] = label if out.get(kind, label) == label else SOL
        return out

    def stage_decode_s(self) -> np.ndarray:
        """(steps, stages): each stage's pass of each decode step."""
        return np.stack([stage.decode_metrics[:, 0] for stage in self.stages], axis=1)

    def summary(self) -> dict:
        row = summarize(self)
        stage_s = self.stage_decode_s()
        m = self.scenario.microbatches
        busy = m * float(stage_s.sum()) if len(stage_s) else 0.0
        row["pp_microbatches"] = m
        row["pipeline_bubble"] = 1.0 - busy / (len(self.stages) * row["decode_s"]) if len(stage_s) else None
        row["slowest_stage_step_s"] = float(stage_s.mean(axis=0).max()) if len(stage_s) else None
        row["pp_boundary_step_s"] = float(sum(self.receive_s))  # one batch's receives along a step
        row["pp_boundary_transport"] = ",".join(dict.fromkeys(self.transports))
        return row

    def timeline(self, steps: str | list[int] = "all", ranks: list[int] | None = None) -> "pd.DataFrame":
        """Spans of every stage's ranks (columns of ``SimResult.timeline`` and ``microbatch``), each
        pass where the composed schedule puts it (``timing.start_offsets_s``)."""
        import pandas as pd

        tp, m = self.scenario.tp, self.scenario.microbatches
        ranks = list(range(tp * len(self.stages))) if ranks is None else ranks
        by_stage = [[r - s * tp for r in ranks if s * tp <= r < (s + 1) * tp] for s in range(len(self.stages))]
        frames = []

        def place_passes(step: int, offsets: np.ndarray) -> None:
            for j in range(m):
                for s, stage in enumerate(self.stages):
                    if by_stage[s]:
                        frames.append(stage.pass_frame(step, by_stage[s], float(offsets[j, s]), s * tp)
                                      .assign(microbatch=j))

        if steps in ("all", "prefill"):
            prefill_s = np.array([stage.prefill_metrics[0] for stage in self.stages])
            place_passes(-1, timing.start_offsets_s(prefill_s, float(prefill_s.max()), m))
        wanted = range(len(self.decode_metrics)) if steps == "all" else ([] if steps == "prefill" else steps)
        rounds = self.decode_metrics[:, 0]
        base = float(self.prefill_metrics[0]) + np.concatenate([[0.0], np.cumsum(rounds)])
        stage_s = self.stage_decode_s()
        for step in wanted:
            place_passes(step, base[step] + timing.start_offsets_s(stage_s[step], float(rounds[step]) / m, m))
        return pd.concat(frames, ignore_index=True)


def micro_scenario(scenario: Scenario) -> Scenario:
    """``scenario`` with one micro-batch's share of the batch (what each stage runs at once)."""
    batch = scenario.workload.batch // scenario.microbatches
    return Scenario(scenario.model, scenario.hardware, scenario.workload.model_copy(update={"batch": batch}),
                    scenario.tp, scenario.schedule, scenario.pp, scenario.microbatches)


def stage_memories(scenario: Scenario) -> list[MemoryUse]:
    """Every stage's memory per GPU (the KV cache of all micro-batches in flight), checked: one
    line naming the stage that does not fit."""
    micro = micro_scenario(scenario)
    return [check_fits(scenario.model, scenario.hardware, micro.workload, scenario.tp, stage, scenario.microbatches)
            for stage in pipeline_stages(scenario.model.n_layers, scenario.pp)]


def simulate_pipeline(scenario: Scenario, options: SimOptions | None = None, progress=None) -> PipelineResult:
    """Every stage of ``scenario`` (``pp`` stages, ``microbatches`` in flight), composed."""
    model, hw, tp, m = scenario.model, scenario.hardware, scenario.tp, scenario.microbatches
    model.check_tp(tp)
    parse_schedule(scenario.schedule, model.n_layers)
    placement = place(hw, tp, scenario.pp)
    micro = micro_scenario(scenario)
    stages = pipeline_stages(model.n_layers, scenario.pp)
    memories = stage_memories(scenario)  # every stage, before any run
    setups = [stage_setup(micro, placement, stage) for stage in stages]
    results = tuple(simulate_passes(micro, setup, memory, options, progress) for setup, memory in zip(setups, memories))
    receives = tuple(sum(setup.boundary("decode").values()) for setup in setups)
    links = [send_time_s(hw, placement.hop_into(stage.index), 1.0) for stage in stages]
    prefill = np.sum([r.prefill_metrics for r in results], axis=0) * m
    prefill[0] = float(timing.fill_s([r.prefill_metrics[0] for r in results], m))
    decode = np.sum([r.decode_metrics for r in results], axis=0) * m
    stage_s = np.stack([r.decode_metrics[:, 0] for r in results], axis=1)
    decode[:, 0] = timing.round_s(stage_s, m) if len(stage_s) else decode[:, 0]
    widths = [r.decode_half_width_s for r in results if r.decode_half_width_s is not None]
    half_width = None
    if widths:  # the stages sampled apart: independent, scaled to the composed decode time
        scale = decode[:, 0].sum() / max(stage_s.sum(), 1e-300)
        half_width = np.sqrt(np.sum(np.square(widths), axis=0)) * scale
    fullest = max(memories, key=lambda use: use.total_bytes)
    return PipelineResult(scenario, placement, results, fullest, prefill, decode, half_width, receives,
                          tuple(link[1] for link in links), tuple(link[2] for link in links))
