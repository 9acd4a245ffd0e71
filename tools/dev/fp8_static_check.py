"""The FP8 rows of a static-batch table (the external ``static.csv`` layout: model, tp, batch,
prompt_len, gen_len, engine, engine_version, hardware, dtype, tokens_per_s, ttft_s) against the
shipped profiles, no fit: throughput (``tokens_per_s``) and batch-1 time to first token
(``ttft_s``, the prefill of the prompt) per GPU, median absolute errors.

Each row is FP8 serving as the table labels it: FP8 linears (``--quant fp8``) and an FP8 KV cache
over float16 activations. The engine runs on the closest kernels laddersim prices, printed with
the figures: TensorRT-LLM (0.5, 0.6) -> vLLM's kernels (paged cache, fused attention, last-position
logits) with K and V read per query head in decode: those releases' generation attention is the
masked multi-head kernel, one KV read per query head; the grouped-query XQA kernels for Hopper
came with TensorRT-LLM 0.10 (NVIDIA/TensorRT-LLM release notes v0.10.0: "Integrated the new NVIDIA
Hopper XQA kernels for LLaMA 2 70B model"). GPU names -> the shipped profile of that GPU.

Usage: ``PYTHONPATH=$PWD python tools/dev/fp8_static_check.py STATIC_CSV [--models DIR]`` (models:
``<model>.json`` configs, default ``models/`` beside the table).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from laddersim.errors import UserInputError
from laddersim.simulation.simulate import check_memory, make_scenario, simulate

PROFILES = {"H100-SXM5-80GB": "h100-sxm-nvswitch", "H200-SXM-141GB": "h200-sxm-nvswitch",
            "L40S": "l40s-pcie", "B200": "b200-sxm-nvswitch"}
# engine -> (framework, kv_reads) laddersim prices it with (see the module docstring)
ENGINES = {"trtllm": ("vllm", "repeat_interleave"), "vllm": ("vllm", None)}


def check(table: Path, models: Path) -> pd.DataFrame:
    frame = pd.read_csv(table)
    frame = frame[frame["dtype"] == "fp8"]
    rows = []
    for row in frame.itertuples(index=False):
        framework, kv_reads = ENGINES[row.engine]
        out = {"model": row.model, "hardware": row.hardware, "tp": row.tp, "batch": row.batch,
               "prompt_len": row.prompt_len, "gen_len": row.gen_len, "tokens_per_s": row.tokens_per_s,
               "ttft_s": row.ttft_s}
        try:
            scenario = make_scenario(model=str(models / f"{row.model}.json"), hardware=PROFILES[row.hardware],
                                     tp=int(row.tp), batch=int(row.batch), prompt_len=int(row.prompt_len),
                                     gen_len=int(row.gen_len), schedule="standard", dtype="float16",
                                     kv_reads=kv_reads, framework=framework, quant="fp8", kv_cache_dtype="fp8")
            scenario.model.check_tp(int(row.tp))
            check_memory(scenario)
            summary = simulate(scenario).summary()
            out |= {"predicted_tokens_per_s": summary["tokens_per_s"], "predicted_ttft_s": summary["prefill_s"]}
        except UserInputError as exc:  # a row a static batch cannot hold, said in one line
            out["skipped"] = str(exc)
        rows.append(out)
    result = pd.DataFrame(rows)
    for column in ("predicted_tokens_per_s", "predicted_ttft_s"):
        if column not in result:
            result[column] = float("nan")
    result["tokens_per_s_error"] = result["predicted_tokens_per_s"] / result["tokens_per_s"] - 1
    result["ttft_error"] = result["predicted_ttft_s"] / result["ttft_s"] - 1
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", type=Path)
    parser.add_argument("--models", type=Path)
    args = parser.parse_args(argv)
    result = check(args.table, args.models or args.table.parent / "models")
    for engine, (framework, kv_reads) in ENGINES.items():
        print(f"engine {engine} -> {framework} kernels" + (f", K/V read per query head ({kv_reads})" if kv_reads else ""))
    print(", ".join(f"{gpu} -> {name}" for gpu, name in PROFILES.items()))
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(result.round(4).to_string(index=False))
    for gpu, part in result.groupby("hardware", sort=True):
        tps, ttft = part["tokens_per_s_error"].dropna().abs(), part["ttft_error"].dropna().abs()
        print(f"{gpu}: throughput median |error| {tps.median() * 100:.1f}% ({len(tps)} rows), "
              f"TTFT median |error| {ttft.median() * 100:.1f}% ({len(ttft)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
