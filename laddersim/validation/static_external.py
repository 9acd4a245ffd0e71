"""Score static-batch tables measured on other engines and GPUs (the columns ``STATIC_COLUMNS``:
``model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,engine,engine_version,hardware,dtype,
tokens_per_s,ttft_s,tpot_s``, empty where not measured).

Each row becomes a scenario of its model, TP, batch, lengths and dtype, on:

* the kernels of the framework laddersim has for its engine at its version (``_framework``):
  TensorRT-LLM before its PyTorch flow (1.0) and LMDeploy's TurboMind 0.1 (from FasterTransformer,
  TensorRT-LLM's predecessor) run ``trtllm-session``: TensorRT-LLM's kernels launched from a C++
  loop without CUDA graphs, NCCL all-reduce; TensorRT-LLM from 1.0 runs ``trtllm``;
* the shipped profile of its GPU (``laddersim.validation.gpu_profiles``, the
  mapping the closed-loop tables use: the 8-GPU node of that GPU).

The mapping used is returned with the scores. Rows laddersim does not price as they ran are
skipped, each with its reason: a dtype neither 16-bit nor quantized serving (``PRICED_DTYPES``,
``QUANTIZED_DTYPES``: a row's ``fp8`` is FP8 weights and KV cache, as TensorRT-LLM's performance
tables label it, priced with ``--quant fp8 --kv-cache-dtype fp8`` over float16), a batch whose KV
cache does not fit the GPU as one static batch (the engines then make part of it wait). Errors are
``predicted / measured - 1`` of ``tokens_per_s``, ``ttft_s`` (the batch's prefill; TurboMind: the
prefill of all but the last prompt token and one decode step, ``first_token_from_decode_step``) and
``tpot_s`` (a decode step), per GPU x engine group. TensorRT-LLM's session benchmark also times its
runtime's host work per call (``SESSION_CALL_S``), added to the TTFT and the run.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.errors import DoesNotFitError, UserInputError
from laddersim.support.io_read import read_text
# One mapping of GPU names to shipped profiles, one model lookup, one list of skipped rows for every external table.
from laddersim.validation.closed_loop import model_source, skipped_reasons
from laddersim.validation.error_stats import error_stats
from laddersim.validation.gpu_profiles import require_profile

STATIC_COLUMNS = ("model", "tp", "nodes", "batch", "prompt_len", "gen_len", "p2p", "schedule", "engine",
                  "engine_version", "hardware", "dtype", "tokens_per_s", "ttft_s", "tpot_s")
# The names tables give TensorRT-LLM.
TRTLLM_ENGINES = ("trtllm", "tensorrt-llm")
# The framework laddersim prices closest to each engine's kernels (before ``_framework``'s
# version rule).
ENGINE_FRAMEWORKS = {"trtllm": "trtllm", "tensorrt-llm": "trtllm", "lmdeploy-turbomind": "trtllm-session",
                     "vllm": "vllm", "sglang": "sglang", "gpt-fast": "gpt-fast"}
# TensorRT-LLM before 1.0 is its TensorRT-engine flow, whose benchmarks ran the C++ session without
# CUDA graphs and its all-reduce on NCCL unless built otherwise (framework trtllm-session); from
# 1.0 the PyTorch flow is the default (NVIDIA/TensorRT-LLM docs/source/release-notes.md 'Release
# 1.0': "the PyTorch-based architecture is now stable and the default experience"), the
# framework trtllm.
TRTLLM_PYTORCH_FLOW_VERSION = (1, 0)
# Engines whose first token comes from a decode step: LMDeploy TurboMind's context pass covers the
# prompt but its last token, which the first decode step then runs ("subtract input/context len
# by 1 to skip last input token (will process with decoder later)": InternLM/lmdeploy @ v0.1.0a1
# 9c46b27ce0358b8bc645633442b7810f715997d7 : src/turbomind/models/llama/LlamaBatch.cc
# ContextDecode); a one-token prompt has no context pass at all.
FIRST_TOKEN_FROM_DECODE_STEP = frozenset({"lmdeploy-turbomind"})
PRICED_DTYPES = {"float16": "float16", "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}
# A dtype label of quantized serving -> (activations' dtype, quantization, KV cache dtype).
QUANTIZED_DTYPES = {"fp8": ("float16", "fp8", "fp8")}
MODELS_FOLDER = "models"
METRICS = ("tokens_per_s", "ttft_s", "tpot_s")


@dataclass(frozen=True)
class StaticScore:
    """Scored rows (the table's columns plus ``framework``, ``profile``, ``allreduce`` and
    ``predicted_*`` / ``*_error`` per metric), skipped rows with ``reason``, the summary per GPU x
    engine, and the mapping lines used."""

    rows: pd.DataFrame
    skipped: pd.DataFrame
    summary: pd.DataFrame
    mappings: list[str]


def is_static_table(path: str | Path) -> bool:
    """Does the CSV at ``path`` have the static-batch external columns (engine, GPU, TTFT/TPOT)?"""
    try:
        header = read_text(path, "measured").lstrip().splitlines()[0]
    except (UserInputError, IndexError):
        return False
    return set(STATIC_COLUMNS) <= {c.strip() for c in header.split(",")}


def read_static(path: str | Path) -> pd.DataFrame:
    frame = pd.read_csv(io.StringIO(read_text(path, "measured")), comment="#")
    missing = [c for c in STATIC_COLUMNS if c not in frame.columns]
    if missing:
        raise UserInputError(f"measured: {path} lacks columns {missing}; required: {', '.join(STATIC_COLUMNS)}")
    for column in METRICS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def score_static(path: str | Path, models_dir: str | Path | None = None,
                 allreduce: str | None = None) -> StaticScore:
    """Score every priced row of the static table at ``path`` (module docstring); ``models_dir``:
    the model configs its ``model`` column names (default ``models/`` beside it); ``allreduce``:
    an AllReduce implementation forced over each framework's rule."""
    from laddersim.costs.collective_labels import allreduce_by_phase
    from laddersim.simulation.simulate import check_memory, make_scenario, simulate

    frame = read_static(path)
    folder = Path(models_dir) if models_dir else Path(path).parent / MODELS_FOLDER
    scored, skipped, used = [], [], {}
    for row in frame.itertuples(index=False):
        engine, dtype = str(row.engine).lower(), str(row.dtype).lower()
        if dtype not in PRICED_DTYPES and dtype not in QUANTIZED_DTYPES:
            skipped.append({**row._asdict(), "reason": f"dtype {row.dtype} not priced"})
            continue
        activations, quant, kv_cache_dtype = QUANTIZED_DTYPES.get(dtype, (PRICED_DTYPES.get(dtype), "none", "auto"))
        if engine not in ENGINE_FRAMEWORKS:
            raise UserInputError(f"measured: engine {row.engine!r} has no framework here; allowed: "
                                 f"{', '.join(ENGINE_FRAMEWORKS)}")
        framework = _framework(engine, str(row.engine_version))
        profile = require_profile(row.hardware, "measured: hardware")

        def scenario_of(prompt_len: int, gen_len: int):
            return make_scenario(model=model_source(str(row.model), folder), hardware=profile, tp=int(row.tp),
                                 batch=int(row.batch), prompt_len=prompt_len, gen_len=gen_len,
                                 schedule=str(row.schedule), dtype=activations, framework=framework,
                                 allreduce=allreduce, quant=quant, kv_cache_dtype=kv_cache_dtype,
                                 kv_reads=_kv_reads(engine, str(row.engine_version), str(row.hardware)))

        scenario = scenario_of(int(row.prompt_len), int(row.gen_len))
        try:
            check_memory(scenario)
        except DoesNotFitError:
            skipped.append({**row._asdict(), "reason": "its KV cache does not fit the GPU as one static batch "
                                                        "(the engine made part of the batch wait)"})
            continue
        used[(row.engine, row.hardware)] = (framework, profile)
        summary = simulate(scenario).summary()
        if engine in FIRST_TOKEN_FROM_DECODE_STEP:
            summary = first_token_from_decode_step(summary, scenario_of, simulate)
        summary = with_call_overhead(summary, harness_call_s(engine, framework))
        used_allreduce = allreduce_by_phase(scenario.model, scenario.hardware, scenario.workload, scenario.tp)
        out = {**row._asdict(), "framework": framework, "profile": profile, "allreduce": used_allreduce["decode"]}
        for metric in METRICS:
            out[f"predicted_{metric}"] = summary[metric]
            measured = getattr(row, metric)
            out[f"{metric}_error"] = summary[metric] / measured - 1.0 if np.isfinite(measured) else np.nan
        scored.append(out)
    rows = pd.DataFrame(scored)
    mappings = [f"engine {e} -> {f} kernels; hardware {h} -> {p}" for (e, h), (f, p) in sorted(used.items())]
    return StaticScore(rows, pd.DataFrame(skipped), static_summary(rows), mappings)


def _framework(engine: str, version: str) -> str:
    """The framework of ``engine`` at ``version`` (``ENGINE_FRAMEWORKS``; TensorRT-LLM before the
    PyTorch flow: ``trtllm-session``)."""
    if engine in TRTLLM_ENGINES and _version(version) < TRTLLM_PYTORCH_FLOW_VERSION:
        return "trtllm-session"
    return ENGINE_FRAMEWORKS[engine]


def _version(text: str) -> tuple[int, ...]:
    """``major.minor`` of a version string as numbers (``1.0.0rc3`` -> (1, 0); () where none)."""
    found = re.match(r"\s*(\d+)(?:\.(\d+))?", text)
    return () if found is None else tuple(int(p) for p in found.groups() if p is not None)


def first_token_from_decode_step(summary: dict, scenario_of, simulate) -> dict:
    """``summary`` of a batch whose engine makes the first token in a decode step
    (``FIRST_TOKEN_FROM_DECODE_STEP``): the prefill of all but the last prompt token and the decode
    step over that token (``scenario_of(prompt_len - 1, 2)``'s prefill and step; no prefill for a
    one-token prompt) make the TTFT; the run is that plus ``summary``'s decode steps, the next
    ``gen_len - 1`` positions."""
    if summary["decode_step_s"] is None:  # gen_len 1: no decode step simulated; the prefill stands for it
        return summary
    prompt_len = summary["prompt_len"]
    first = simulate(scenario_of(max(prompt_len - 1, 1), 2)).summary()
    prefill_s = first["prefill_s"] if prompt_len > 1 else 0.0
    ttft_s = prefill_s + first["decode_step_s"]
    return {**_with_times(summary, ttft_s, ttft_s + summary["decode_s"]), "prefill_s": prefill_s}


def _with_times(summary: dict, ttft_s: float, total_s: float) -> dict:
    """``summary`` with this TTFT and run time, its tokens/s the batch's tokens over the run."""
    return {**summary, "ttft_s": ttft_s, "total_s": total_s,
            "tokens_per_s": summary["batch"] * summary["gen_len"] / total_s}


# gptSessionBenchmark (TensorRT-LLM's static-batch benchmark before its PyTorch flow) times each
# GptSession::generate call with the stream sync after it (NVIDIA/TensorRT-LLM @
# 3c44cb974badec8966108b16054a99c0923e410d : benchmarks/cpp/gptSessionBenchmark.cpp). A call runs host
# work the GPU waits through besides the passes laddersim prices (cpp/tensorrt_llm/runtime/gptSession.cpp,
# generateBatched and executeContextStep): the buffers' init, reshape and reset from the inputs, the KV
# cache's new sequences, the decoder's new batch (sampling setup), the context engine's tensor bindings
# before its enqueue, the decoder's stop check after the first token (shouldStopSync: a host sync
# before the loop can end) and the output copy. The sources give no figure: the value is a fit, the
# median of measured minus predicted first-token latency (without it) over the ten batch-1 first-token
# rows of TensorRT-LLM's performance tables (docs/source/performance.md as of v0.6.1, 'Low Latency':
# A100 fp16, H100 FP8, L40S FP8; 7B and 70B; 128 and 2048 tokens): ``session_call_fit_s``. It is the
# runtime's, not the GPU's: fitted with one GPU's rows held out it is 2.01 / 2.39 / 2.51 ms (A100 / H100 /
# L40S out), and the held-out GPU's median TTFT error 2.7 / 8.5 / 10.8%.
SESSION_CALL_S = 2.1e-3


def harness_call_s(engine: str, framework: str) -> float:
    """Seconds the benchmark of ``engine`` times per call beyond the passes (``SESSION_CALL_S`` for
    TensorRT-LLM's session benchmark, else 0)."""
    return SESSION_CALL_S if engine in TRTLLM_ENGINES and framework == "trtllm-session" else 0.0


def with_call_overhead(summary: dict, call_s: float) -> dict:
    """``summary`` with ``call_s`` of host time before the first token: TTFT and the run longer by it."""
    if call_s == 0.0:
        return summary
    return _with_times(summary, summary["ttft_s"] + call_s, summary["total_s"] + call_s)


def session_call_fit_s(rows: pd.DataFrame) -> float:
    """The median of measured minus predicted TTFT, the call overhead taken out of the prediction,
    over scored rows (``score_static(...).rows``) of TensorRT-LLM's session benchmark: the fit behind
    ``SESSION_CALL_S``."""
    timed = rows[(rows["framework"] == "trtllm-session") & rows["engine"].str.lower().isin(TRTLLM_ENGINES)
                 & rows["ttft_s"].notna()]
    return float(np.median(timed["ttft_s"] - (timed["predicted_ttft_s"] - SESSION_CALL_S)))


# TensorRT-LLM before 0.10 ran Hopper's grouped-query generation attention as its masked
# multi-head kernel, K and V read per query head; its Hopper XQA kernels came with 0.10
# (NVIDIA/TensorRT-LLM release notes v0.10.0: "Integrated the new NVIDIA Hopper XQA kernels for
# LLaMA 2 70B model").
TRTLLM_HOPPER_XQA_VERSION = (0, 10)
HOPPER_GPUS = ("H100", "H200")


def _kv_reads(engine: str, version: str, hardware: str) -> str | None:
    """The decode attention's K/V reads of ``engine`` at ``version`` on ``hardware`` where they
    differ from its framework's (None: the framework's)."""
    if engine not in TRTLLM_ENGINES or not hardware.startswith(HOPPER_GPUS):
        return None
    parts = _version(version)
    return "repeat_interleave" if parts and parts < TRTLLM_HOPPER_XQA_VERSION else None


def static_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per GPU x engine: rows, and the median and worst absolute error (%) of each metric where measured."""
    out = []
    if rows.empty:
        return pd.DataFrame(out)
    for (hardware, engine), part in rows.groupby(["hardware", "engine"], sort=True):
        line = {"hardware": hardware, "engine": engine, "rows": len(part)}
        for metric in METRICS:
            line.update(error_stats(part[f"{metric}_error"], metric, count=True))
        out.append(line)
    return pd.DataFrame(out)


__all__ = ["ENGINE_FRAMEWORKS", "SESSION_CALL_S", "STATIC_COLUMNS", "StaticScore",
           "harness_call_s", "is_static_table", "read_static", "score_static", "session_call_fit_s", "skipped_reasons",
           "static_summary", "with_call_overhead"]
