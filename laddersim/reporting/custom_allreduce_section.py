"""Section: Ladder against a custom all-reduce. Ladder's speedup over the standard schedule when the
baseline's AllReduce is NCCL and when it is the serving engine's own (vLLM, TensorRT-LLM, SGLang),
at TP 2/4/8 and batch 1-64, on H100, H200, B200, A100 and a PCIe box."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from laddersim.costs.allreduce import allreduce_label
from laddersim.model.framework import load_framework
from laddersim.reporting.markdown import Section, code, table
from laddersim.reporting.schedule_pair import standard_and_ladder

# (profile, model): the 70B on the 80-192 GB SXM GPUs, the 8B on the 48 GB PCIe L40S.
MACHINES = (("h100-sxm-nvswitch", "llama-3.1-70b"), ("h200-sxm-nvswitch", "llama-3.1-70b"),
            ("b200-sxm-nvswitch", "llama-3.1-70b"), ("a100-sxm-nvswitch", "llama-3.1-70b"),
            ("l40s-pcie", "llama-3.1-8b"))
# (column, framework, forced AllReduce): NCCL under vLLM's kernels, then each engine as it runs.
BASELINES = (("NCCL", "vllm", "nccl"), ("vLLM", "vllm", None), ("TRT-LLM", "trtllm", None), ("SGLang", "sglang", None))
TPS = (2, 4, 8)
BATCHES = (1, 16, 64)
PROMPT_LEN, GEN_LEN = 1024, 128


def _speedup(model: str, hardware: str, tp: int, batch: int, framework: str, forced: str | None):
    """Ladder's tokens/s over standard's, and the decode AllReduce run, or None where it cannot run."""
    pair = standard_and_ladder(model=model, hardware=hardware, tp=tp, batch=batch, prompt_len=PROMPT_LEN,
                               gen_len=GEN_LEN, framework=framework, allreduce=forced)
    if pair is None:
        return None
    standard, ladder, scenario = pair
    message = batch * scenario.model.dim * scenario.workload.dtype_bytes  # one decode AllReduce
    label = allreduce_label(scenario.hardware, tp, message, load_framework(framework),
                            dtype=scenario.workload.dtype, forced=forced)
    return ladder["tokens_per_s"] / standard["tokens_per_s"], label


def custom_allreduce_section(out_dir: Path, figures_dir: Path) -> Section:
    del out_dir, figures_dir  # a table only
    rows = []
    for hardware, model in MACHINES:
        for tp in TPS:
            for batch in BATCHES:
                row = {"hardware": hardware, "model": model.removeprefix("llama-3.1-"), "TP": tp, "batch": batch}
                for column, framework, forced in BASELINES:
                    got = _speedup(model, hardware, tp, batch, framework, forced)
                    row[column] = "-" if got is None else f"{got[0]:.3f}x"
                    if column != "NCCL":
                        row[f"{column} decode AllReduce"] = "-" if got is None else got[1]
                rows.append(row)
    frame = pd.DataFrame(rows)
    body = "\n".join([
        f"Ladder's tokens/s over the standard schedule of the same engine, prompt {PROMPT_LEN}, {GEN_LEN} new "
        "tokens, bf16. `NCCL`: vLLM's kernels with every AllReduce on NCCL (`--framework vllm --allreduce nccl`); "
        "the other columns: each engine as it runs (`--framework vllm|trtllm|sglang`), its AllReduce picked by its "
        "own rule (`laddersim.costs.allreduce_impls`: one-/two-shot custom kernels up to their cut-offs, NCCL above, "
        "NCCL where the machine cannot run them), priced from the profile's measured table of that engine's "
        "all-reduce where it has one. The `decode AllReduce` columns name what a decode step's AllReduce runs. "
        "Under Ladder a custom kernel's CTAs hold their SMs beside the compute it overlaps (priced).",
        "",
        table(frame, {}),
        "",
        "**How to read this.** A custom all-reduce leaves Ladder less to hide than NCCL does (a 16 KiB decode "
        "AllReduce takes 3-5 us instead of 16-19 us on H100), so Ladder's gain over an engine's own baseline is "
        "smaller than over NCCL; on the PCIe box the custom kernels are off above 2 GPUs and NCCL's slow PCIe "
        "AllReduce is what Ladder hides. '-': the setting does not fit the GPU's memory or the group.",
        "",
        "Reproduce one cell:",
        "",
        code([f"laddersim simulate --model llama-3.1-70b --hardware h100-sxm-nvswitch --tp 8 --batch 16 "
              f"--prompt-len {PROMPT_LEN} --gen-len {GEN_LEN} --framework trtllm"]),
    ])
    return Section("8. Ladder against a custom all-reduce", body)
