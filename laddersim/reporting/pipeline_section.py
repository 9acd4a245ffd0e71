"""Section: TP with Ladder, or TP x PP? Llama-3.1-405B on two 8-GPU nodes and 70B on one node
with P2P on and off, each TP-only split against pipelines of TP groups (``laddersim.pipeline``)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from laddersim.reporting.markdown import Section, code, table
from laddersim.simulation.simulate import make_scenario, simulate

# (model, profile, (TP, PP) splits of the same GPUs)
CASES = (
    ("llama-3.1-405b", "h100-sxm-nvswitch", ((16, 1), (8, 2))),
    ("llama-3.1-70b", "h100-sxm-nvswitch", ((8, 1), (4, 2), (2, 4))),
    ("llama-3.1-70b", "h100-sxm-p2p-off", ((8, 1), (4, 2), (2, 4))),
)
BATCHES = (1, 16)
PROMPT_LEN, GEN_LEN = 1024, 128


def _tokens_per_s(model: str, hardware: str, tp: int, pp: int, batch: int, schedule: str, microbatches: int = 1) -> dict:
    return simulate(make_scenario(model=model, hardware=hardware, tp=tp, batch=batch, prompt_len=PROMPT_LEN,
                                  gen_len=GEN_LEN, schedule=schedule, pp=pp, microbatches=microbatches)).summary()


def pipeline_rows() -> pd.DataFrame:
    rows = []
    for model, hardware, splits in CASES:
        for batch in BATCHES:
            for tp, pp in splits:
                standard = _tokens_per_s(model, hardware, tp, pp, batch, "standard")
                ladder = _tokens_per_s(model, hardware, tp, pp, batch, "ladder")
                m = math.gcd(batch, pp)
                flight = _tokens_per_s(model, hardware, tp, pp, batch, "ladder", m) if m > 1 else None
                rows.append({
                    "model": model.removeprefix("llama-3.1-"), "profile": hardware, "batch": batch,
                    "split": f"TP {tp}" if pp == 1 else f"TP {tp} x PP {pp}", "nodes": ladder["nodes"],
                    "standard tok/s": standard["tokens_per_s"], "ladder tok/s": ladder["tokens_per_s"],
                    "ladder ms/token": ladder["tpot_s"] * 1e3,
                    "ladder, a micro-batch per stage": flight["tokens_per_s"] if flight else None,
                    "stage link": ladder.get("pp_boundary_transport") or "-",
                })
    return pd.DataFrame(rows)


def pipeline_section(out_dir: Path, figures_dir: Path) -> Section:
    del out_dir, figures_dir  # a table only
    frame = pipeline_rows()
    body = "\n".join([
        f"Prompt {PROMPT_LEN}, {GEN_LEN} new tokens, bf16. The same GPUs split two ways: one TP group over "
        "all of them (its AllReduces crossing the network or host memory, which Ladder Residual hides "
        "behind the next module), or a pipeline of smaller TP groups, each stage holding a contiguous "
        "share of the layers and sending its hidden state (under ladder, with the two pending module "
        "outputs) to the next over NCCL point-to-point. 'ladder tok/s' runs one batch, the stages in "
        "turn, as the Ladder Residual benchmark does (its `pp` branch, the runs of "
        "`laddersim/data/validation/ladder_pp_sweep.csv`): a stage idles "
        "while the others run. 'a micro-batch per stage' splits the batch into as many micro-batches "
        "as stages, one in flight on each (vLLM's and SGLang's pipeline-parallel decode): the bubbles "
        "fill and throughput tends to the slowest stage. 'stage link' is the transport of the "
        "boundary (`p2p_nvlink`, `shm` with NCCL_P2P_DISABLE, `net` between nodes).",
        "",
        table(frame, {"standard tok/s": "{:.1f}", "ladder tok/s": "{:.1f}", "ladder ms/token": "{:.2f}",
                      "ladder, a micro-batch per stage": "{:.1f}"}),
        "",
        "**How to read this.** At batch 1 a pipeline runs its stages one after the other, so each token "
        "streams all the weights through one stage's TP group at a time: a TP 8 x PP 2 step costs about "
        "what a TP 8 step of the whole model would, while TP 16 streams them through all 16 GPUs at once "
        "and ladder hides most of its AllReduces. Micro-batches in flight keep every stage busy, but each "
        "re-reads its stage's weights, so at decode's memory-bound batch sizes they gain little, and "
        "ms/token is the whole chain of stages. A pipeline's edge is memory (405B does not fit TP 8 "
        "alone) and its smaller TP groups, whose AllReduces cost less where nothing hides them: "
        "standard with P2P off.",
        "",
        "Reproduce a row, or let the planner pick the split for a target:",
        "",
        code([f"laddersim simulate --model llama-3.1-405b --hardware h100-sxm-nvswitch --tp 8 --pp 2 --batch 16 "
              f"--pp-microbatches 2 --prompt-len {PROMPT_LEN} --gen-len {GEN_LEN} --schedule ladder",
              "laddersim plan --model llama-3.1-405b --profiles h100-sxm-nvswitch --tp 8 16 --pp 1 2 --batch 1 16 "
              "--max-nodes 2 --min-user-tokens-per-s 20"]),
    ])
    return Section("7. Pipeline x tensor parallel: TP with Ladder, or TP x PP?", body)
