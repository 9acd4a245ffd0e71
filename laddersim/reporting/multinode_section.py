"""Section: Llama-3.1-405B across 2, 4 and 8 nodes (TP 16, 32, 64) and 70B across 2 nodes (TP 16),
standard vs ladder, with NCCL's multi-node algorithm and protocol for each AllReduce."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from laddersim.costs.collective_labels import collective_args, label
from laddersim.reporting.markdown import Section, code, table
from laddersim.simulation.simulate import make_scenario, simulate

HARDWARE = "h100-sxm-nvswitch"
CASES = (("llama-3.1-405b", 16), ("llama-3.1-405b", 32), ("llama-3.1-405b", 64), ("llama-3.1-70b", 16))
BATCH, PROMPT_LEN, GEN_LEN = 1, 1024, 128


def multinode_section(out_dir: Path, figures_dir: Path) -> Section:
    del out_dir, figures_dir  # a table only
    rows = []
    for model, tp in CASES:
        out = {}
        for schedule in ("standard", "ladder"):
            result = simulate(make_scenario(model=model, hardware=HARDWARE, tp=tp, batch=BATCH, prompt_len=PROMPT_LEN,
                                            gen_len=GEN_LEN, schedule=schedule))
            out[schedule] = result.summary()
        sc = result.scenario
        choices = collective_args(sc.model, sc.hardware, sc.workload, tp)
        rows.append({
            "model": model.removeprefix("llama-3.1-"), "TP": tp, "nodes": out["standard"]["nodes"],
            "decode AllReduce": label(choices[("decode", "allreduce")]),
            "prefill AllReduce": label(choices[("prefill", "allreduce")]),
            "standard tok/s": out["standard"]["tokens_per_s"], "ladder tok/s": out["ladder"]["tokens_per_s"],
            "ladder speedup": out["ladder"]["tokens_per_s"] / out["standard"]["tokens_per_s"],
            "standard exposed comm s": out["standard"]["exposed_comm_s"],
            "ladder exposed comm s": out["ladder"]["exposed_comm_s"],
        })
    frame = pd.DataFrame(rows)
    body = "\n".join([
        f"Batch {BATCH}, prompt {PROMPT_LEN}, {GEN_LEN} new tokens on `{HARDWARE}` (8 GPUs and 8 NDR NICs per "
        "node). Each multi-node AllReduce is timed as NCCL's tuner times its algorithms (ring, double binary "
        "tree, NVLS-tree) and protocols (LL, LL128, Simple) and the fastest is taken "
        "(`laddersim.costs.nccl_algorithms`); the columns name the choice for a decode and a prefill message. "
        "A tree's latency grows with log2 of the node count, so decode AllReduces cost little more on 8 nodes "
        "than on 2, and tokens/s does not fall from TP 16 to TP 64 while each GPU's share of the weights shrinks.",
        "",
        table(frame, {"standard tok/s": "{:.1f}", "ladder tok/s": "{:.1f}", "ladder speedup": "{:.3f}x",
                      "standard exposed comm s": "{:.3f}", "ladder exposed comm s": "{:.3f}"}),
        "",
        "**How to read this.** Each row is one TP group spread over `nodes` nodes; 'exposed comm' is the "
        "communication time the compute lane waits for over the whole run. Standard exposes every "
        "AllReduce; ladder overlaps each with the next module's compute, so only what outlasts that "
        "compute shows. The decode column is what decides tokens/s at batch 1.",
        "",
        "Reproduce one row (and see each collective's algorithm/protocol in the trace's event args):",
        "",
        code([f"laddersim simulate --model llama-3.1-405b --hardware {HARDWARE} --tp 32 --batch {BATCH} "
              f"--prompt-len {PROMPT_LEN} --gen-len {GEN_LEN} --trace trace_405b_tp32.json"]),
    ])
    return Section("5. Multi-node: Llama-3.1-405B on 2, 4 and 8 nodes", body)
