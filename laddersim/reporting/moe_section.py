"""Section: what Ladder gives a mixture-of-experts model. Ladder's decode speedup over the standard
schedule for Mixtral-8x22B (the shape the Ladder Residual authors' ``moe_ladder_TP.py`` runs) and
Qwen3-235B-A22B on 8x H100 and 8x H200, every expert split 8 ways (TP 8) against the experts placed
over the 8 GPUs (TP 8 x EP 8: attention TP, the tokens reach every rank, the MoE output AllReduced),
and the experts over the 8 GPUs with data-parallel attention (8 replicas of TP 1, 4 of TP 2: the
tokens dispatched and combined by all-to-alls, ``laddersim.model.dp_attention``), batch 1-64,
vLLM's kernels."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from laddersim.reporting.markdown import Section, code, table
from laddersim.reporting.schedule_pair import standard_and_ladder

MODELS = (("Mixtral-8x22B", "mixtral-8x22b"), ("Qwen3-235B-A22B", "qwen3-235b-a22b"))
MACHINES = ("h100-sxm-nvswitch", "h200-sxm-nvswitch")
SPLITS = ((8, 1, False), (8, 8, False), (1, 8, True), (2, 8, True))  # (TP, EP, data-parallel attention)
BATCHES = (1, 4, 16, 64)
PROMPT_LEN, GEN_LEN = 1024, 128
FRAMEWORK = "vllm"


def _row(model: str, hardware: str, tp: int, ep: int, batch: int, dp_attention: bool = False) -> dict | None:
    """Decode tokens/s of both schedules and the standard run's exposed communication, or None
    where the setting does not fit."""
    pair = standard_and_ladder(model=model, hardware=hardware, tp=tp, batch=batch, prompt_len=PROMPT_LEN,
                               gen_len=GEN_LEN, framework=FRAMEWORK, ep=ep, dp_attention=dp_attention)
    if pair is None:
        return None
    standard, ladder, _ = pair
    return {"standard decode tok/s": f"{batch / standard['tpot_s']:.0f}",
            "ladder decode tok/s": f"{batch / ladder['tpot_s']:.0f}",
            "ladder speedup": f"{standard['tpot_s'] / ladder['tpot_s']:.3f}x",
            "standard exposed comm": f"{standard['exposed_comm_s'] / standard['total_s']:.0%}"}


def moe_section(out_dir: Path, figures_dir: Path) -> Section:
    del out_dir, figures_dir  # a table only
    rows = []
    for name, model in MODELS:
        for hardware in MACHINES:
            for tp, ep, dp_attention in SPLITS:
                for batch in BATCHES:
                    got = _row(model, hardware, tp, ep, batch, dp_attention)
                    split = (f"{ep // tp} x TP {tp} DP attention, EP {ep}" if dp_attention
                             else f"TP {tp}" + (f" x EP {ep}" if ep > 1 else ""))
                    rows.append({"model": name, "hardware": hardware, "split": split, "batch": batch,
                                 **(got or {"standard decode tok/s": "-"})})
    frame = pd.DataFrame(rows).fillna("-")
    body = "\n".join([
        f"Decode tokens/s of the standard and Ladder schedules, prompt {PROMPT_LEN}, {GEN_LEN} new tokens, bf16, "
        f"vLLM's kernels (`--framework {FRAMEWORK}`): the router replicated, the routed experts run as fused-MoE "
        "grouped GEMMs whose cost follows the experts the batch hits (uniform routing: "
        "`laddersim.costs.moe_routing`), two AllReduces a layer as in the dense model. `TP 8`: every expert split "
        "8 ways (the Ladder Residual authors' `moe_TP.py`); `TP 8 x EP 8`: the experts placed over the 8 GPUs, "
        "whole, the attention still TP 8 (vLLM's `--enable-expert-parallel` without data-parallel attention: "
        "every rank sees every token, the MoE output is AllReduced), so the busiest rank's experts set the "
        "step. Ladder overlaps attention(i) with the MoE AllReduce of layer i-1 and the MoE of layer i with "
        "the attention AllReduce (`moe_ladder_TP.py`). `8 x TP 1 DP attention, EP 8` and `4 x TP 2 ...`: "
        "vLLM's `--data-parallel-size 8 (4) --tensor-parallel-size 1 (2) --enable-expert-parallel` (SGLang "
        "`--enable-dp-attention`): the batch spread over attention replicas of TP 1 (2), the experts whole "
        "over the 8 GPUs, each MoE layer's tokens dispatched to their experts and combined back by two "
        "all-to-alls (the profile's nccl-tests all-to-all table) instead of an AllReduce; a replica without "
        "a sequence of its own still runs the step (`ceil(batch / replicas)` each), as vLLM's idle "
        "data-parallel ranks run dummy batches for the expert collectives. Ladder overlaps each combine "
        "with the next layer's attention.",
        "",
        table(frame, {}),
        "",
        "**How to read this.** Ladder hides the AllReduces an MoE layer adds to the step as it does a dense "
        "layer's: 1.06-1.18x here, most at batch 1-4, where the step is shortest and the AllReduces' fixed "
        "latency the largest share of it, and more for Qwen3-235B-A22B (94 layers, 188 AllReduces a step) than "
        "for Mixtral-8x22B (56). Expert parallelism puts whole experts on single GPUs: at batch 1 Mixtral's two "
        "experts are streamed by one or two GPUs instead of an eighth of each by all eight, so TP 8 x EP 8 "
        "decodes at about half TP 8's rate; once a batch hits every expert (batch 64) the two splits converge. "
        "With data-parallel attention Ladder has less to hide: at TP 1 only the combine all-to-all "
        "(1.03-1.06x), at TP 2 the combine and the replica's attention AllReduce (1.05-1.12x). On these 8 GPUs "
        "the layout decodes slower than TP 8 x EP 8 at every batch, most at batch 1-4 (each replica reads its "
        "attention weights whole, and idle replicas still step), and comes within 4-10% of it at batch 64; "
        "what it buys is memory (a replica's KV cache is its own sequences'). "
        "'-': the setting does not fit the GPU's memory.",
        "",
        "Reproduce one cell:",
        "",
        code([f"laddersim simulate --model qwen3-235b-a22b --hardware h200-sxm-nvswitch --tp 8 --ep 8 --batch 16 "
              f"--prompt-len {PROMPT_LEN} --gen-len {GEN_LEN} --framework {FRAMEWORK} --schedule ladder",
              f"laddersim simulate --model qwen3-235b-a22b --hardware h200-sxm-nvswitch --tp 2 --ep 8 --dp-attention "
              f"--batch 16 --prompt-len {PROMPT_LEN} --gen-len {GEN_LEN} --framework {FRAMEWORK} --schedule ladder"]),
    ])
    return Section("9. What Ladder gives an MoE model", body)
