"""Score tables of serving at a fixed concurrency (a closed loop, as aiperf measures it): every row
simulated by ``laddersim.traffic.closed_loop`` and its mean TTFT and TPOT compared with the
measured ones.

A table has the columns CLOSED_LOOP_COLUMNS, one row per (model, TP, GPU, engine, dtype, prompt
and output lengths, concurrency), ``ttft_ms`` and ``tpot_ms`` measured (means, as aiperf reports
them). Each row is priced with:

* the engine's scheduler (``laddersim.traffic.engines``: its token budget, running limit and
  prompt chunking) and the kernels of the closest framework laddersim has (ENGINE_FRAMEWORKS);
* the engine's limits as the measured deployment set them: ``limits`` (default ``aiconfigurator``:
  the limits AIConfigurator's generator writes for a benchmark at the row's concurrency and prompt
  length, ``traffic.engines.AICONFIGURATOR_LIMITS``, as the rows this module reproduces were run:
  its measured sample records each row's ``batch_size``, the engine's max batch size, equal to the
  row's concurrency, ai-dynamo/aiconfigurator @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce
  aic-core/src/aiconfigurator_core/systems/silicon_sample.csv; or ``engine-defaults``: each
  engine's own defaults, for a deployment left at them), and a row's own ``max_running`` /
  ``max_batched_tokens`` columns where the table has them (LIMIT_COLUMNS);
* the shipped profile of its GPU (``laddersim.validation.gpu_profiles``);
* its dtype (DTYPES), or for a quantized row its quantization (QUANTIZED_DTYPES);
* a mixture-of-experts row's expert-parallel ranks, where the table has an ``ep`` column (EP_COLUMN);
* the model's config from the table folder's ``models/`` (``org--name.json`` for ``org/name``),
  or a shipped preset of that name.

A row that cannot be priced (a model family or a dtype laddersim does not price) is listed as
skipped with its reason; the others are scored. Errors are (predicted - measured) / measured; the
summary gives the median absolute TTFT and TPOT error per engine x dtype group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from laddersim.errors import UserInputError
from laddersim.support.choices import FRAMEWORKS
from laddersim.support.io_read import read_text
from laddersim.validation.error_stats import error_stats
from laddersim.validation.gpu_profiles import require_profile

CLOSED_LOOP_COLUMNS = ("model", "tp", "hardware", "engine", "engine_version", "dtype", "prompt_len", "gen_len",
                       "concurrency", "ttft_ms", "tpot_ms")
# Kernels: the engine's own framework where laddersim has one (support.choices.FRAMEWORKS), else
# the closest it prices (printed with every score): SGLang's and TensorRT-LLM's serving kernels are
# FlashAttention/FlashInfer-class paged attention over each prompt's own tokens, last-position
# logits and a custom AllReduce, as vLLM's.
CLOSEST_FRAMEWORK = "vllm"
ENGINE_FRAMEWORKS = {engine: engine if engine in FRAMEWORKS else CLOSEST_FRAMEWORK
                     for engine in ("vllm", "sglang", "trtllm")}
DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16"}
# A dtype the tables name for quantized serving -> (the activations' dtype, laddersim's quantization,
# the KV cache's dtype): AIConfigurator's fp8 rows are its ``precision fp8, gemm_quant_mode fp8``
# (FP8 linears, laddersim.model.quantization), and its fp8 precision keeps the KV cache in FP8 too
# (ai-dynamo/aiconfigurator @ 095f58a51c4ca8e61b66ec108d86f223f8d559ce src/aiconfigurator/sdk/
# task_v1_compat.py _PROFILE_TO_QUANT["fp8"]: kvcache_quant_mode fp8; its generator writes it as vLLM's
# ``--kv-cache-dtype fp8_e4m3``, rule_plugin/benchmark/vllm.rule, and TensorRT-LLM reads it from the
# FP8 checkpoint, aic-core/src/aiconfigurator_core/sdk/models/helpers.py: an fp8 checkpoint's KV cache
# is taken as fp8).
# AIConfigurator's fp8_block rows (``gemm_quant_mode fp8_block``: 128 x 128 weight blocks, the DeepSeek /
# Qwen3 FP8 checkpoints) are laddersim's ``fp8-block``, with the same FP8 KV cache. Its nvfp4 precision
# (gemm_quant_mode nvfp4) keeps the KV cache in FP8 too (the same _PROFILE_TO_QUANT["nvfp4"]:
# kvcache_quant_mode fp8).
QUANTIZED_DTYPES = {"fp8": ("bfloat16", "fp8", "fp8"), "fp8_block": ("bfloat16", "fp8-block", "fp8"),
                    "fp8-block": ("bfloat16", "fp8-block", "fp8"), "nvfp4": ("bfloat16", "nvfp4", "fp8"),
                    "fp4": ("bfloat16", "nvfp4", "fp8")}
# Optional: a mixture-of-experts row's expert-parallel ranks in each TP group (laddersim's ``ep``,
# AIConfigurator's moe_ep_size; default 1: every expert split over the TP ranks).
EP_COLUMN = "ep"
LIMIT_COLUMNS = ("max_running", "max_batched_tokens")  # optional: the deployment's own limits, per row
DEFAULT_LIMITS = "aiconfigurator"  # see the module docstring
# The benchmark each row reproduces: AIConfigurator's aiperf run (ai-dynamo/aiconfigurator @
# 095f58a51c4ca8e61b66ec108d86f223f8d559ce src/aiconfigurator/generator/config/backend_templates/benchmark/
# bench_run.sh.j2: ``--num-requests`` C x 20 measured, ``--warmup-request-count`` C x 2). aiperf runs its
# phases one after another, each waiting until its last request has returned before the next starts
# (ai-dynamo/aiperf @ db4f6397d11ee2d4cfbb41f70b2327315163dcf0 aiperf/timing/credit_issuing_strategy.py,
# ``_execute_phases``), so the warm-up leaves the engine idle and the measured phase starts as a burst of C
# (aiperf/timing/request_rate_strategy.py: the concurrency semaphore, no interval between credits):
# every row is simulated as C x AIPERF_ROUNDS requests from that burst, none of them left out (the C
# that ``laddersim.traffic.closed_loop`` runs after them keep the loop full where aiperf lets the last
# ones drain: with the rows' fixed lengths the requests landing together finish together either way).
AIPERF_ROUNDS = 20


def is_closed_loop_table(path: str | Path) -> bool:
    """Does the CSV at ``path`` carry the closed-loop columns (its header read only)?"""
    try:
        header = read_text(Path(path), "measured").splitlines()[0]
    except (UserInputError, IndexError):
        return False
    return set(CLOSED_LOOP_COLUMNS) <= {c.strip() for c in header.split(",")}


@dataclass
class ClosedLoopScore:
    """The rows scored (the table's columns, then predicted_ttft_ms, predicted_tpot_ms,
    ttft_error, tpot_error, framework, profile), the rows skipped (with ``reason``), the error
    summary per engine x dtype, and the mappings used."""

    rows: pd.DataFrame
    skipped: pd.DataFrame
    summary: pd.DataFrame
    mappings: list[str] = field(default_factory=list)


def read_closed_loop(path: str | Path) -> pd.DataFrame:
    import io

    path = Path(path)
    frame = pd.read_csv(io.StringIO(read_text(path, "measured")))
    missing = [c for c in CLOSED_LOOP_COLUMNS if c not in frame.columns]
    if missing:
        raise UserInputError(f"measured: {path} lacks column(s) {', '.join(missing)}; a closed-loop table needs "
                             f"{','.join(CLOSED_LOOP_COLUMNS)}")
    for column in ("tp", "prompt_len", "gen_len", "concurrency"):
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.isna().any() or (values < 1).any() or (values != values.round()).any():
            raise UserInputError(f"measured: {path} column {column}: allowed: positive integers in every row")
        frame[column] = values.astype(int)
    if EP_COLUMN in frame.columns:
        values = pd.to_numeric(frame[EP_COLUMN], errors="coerce").fillna(1)
        if (values < 1).any() or (values != values.round()).any():
            raise UserInputError(f"measured: {path} column {EP_COLUMN}: allowed: positive integers or empty (1)")
        frame[EP_COLUMN] = values.astype(int)
    for column in (c for c in LIMIT_COLUMNS if c in frame.columns):
        values = pd.to_numeric(frame[column], errors="coerce")
        given = values.notna()
        if (values[given] < 1).any() or (values[given] != values[given].round()).any():
            raise UserInputError(f"measured: {path} column {column}: allowed: positive integers or empty")
        frame[column] = values.astype(object).where(given, None)
    for column in ("ttft_ms", "tpot_ms"):
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.isna().any() or (values <= 0).any():
            raise UserInputError(f"measured: {path} column {column}: allowed: positive milliseconds in every row")
        frame[column] = values.astype(float)
    return frame


def model_source(model: str, models_dir: Path) -> str:
    """The config the table folder's models/ holds for ``model`` (org/name as org--name.json, or
    name.json), else ``model`` itself (a shipped preset's name, or refused when loaded)."""
    for candidate in (models_dir / f"{model.replace('/', '--')}.json", models_dir / f"{model}.json"):
        if candidate.is_file():
            return str(candidate)
    return model


def score_closed_loop(path: str | Path, models_dir: str | Path | None = None,
                      progress=lambda: None, limits: str = DEFAULT_LIMITS) -> ClosedLoopScore:
    """Every row of the table at ``path`` simulated and scored (module docstring) under the
    ``limits`` deployment; ``progress`` is called once per row."""
    from laddersim.hardware.profile import load_profile
    from laddersim.model.shape import load_model_shape
    from laddersim.traffic.arrivals import Requests
    from laddersim.traffic.engines import benchmark_options, check_limits
    from laddersim.traffic.options import ServingOptions
    from laddersim.traffic.run import serve_closed_loop, serving_scenario

    check_limits(limits)  # before any row: a bad choice is one line, not a table of skipped rows
    path = Path(path)
    frame = read_closed_loop(path)
    models = Path(models_dir) if models_dir is not None else path.parent / "models"
    shapes, profiles, scored, skipped, used = {}, {}, [], [], set()
    for row in frame.itertuples(index=False):
        record = row._asdict()
        reason, predicted = None, None
        engine, dtype = str(row.engine).lower(), str(row.dtype).lower()
        try:
            if engine not in ENGINE_FRAMEWORKS:
                raise UserInputError(f"engine {row.engine!r} has no scheduler here; allowed: "
                                     f"{', '.join(ENGINE_FRAMEWORKS)}")
            if dtype not in DTYPES and dtype not in QUANTIZED_DTYPES:
                raise UserInputError(f"dtype {row.dtype!r}; allowed: {', '.join([*DTYPES, *QUANTIZED_DTYPES])}")
            activations, quant, kv_cache_dtype = QUANTIZED_DTYPES.get(dtype, (DTYPES.get(dtype), "none", "auto"))
            profile_name = require_profile(row.hardware)
            if row.model not in shapes:
                shapes[row.model] = load_model_shape(model_source(str(row.model), models))
            if row.hardware not in profiles:
                profiles[row.hardware] = load_profile(profile_name)
            framework = ENGINE_FRAMEWORKS[engine]
            scenario = serving_scenario(shapes[row.model], profiles[row.hardware], int(row.tp), "standard",
                                        activations, framework=framework, quant=quant, kv_cache_dtype=kv_cache_dtype,
                                        ep=int(record.get(EP_COLUMN, 1)))
            scenario.model.check_tp(int(row.tp))
            c = int(row.concurrency)
            options = benchmark_options(engine, ServingOptions(), c, int(row.prompt_len), limits)
            given = {k: int(record[k]) for k in LIMIT_COLUMNS if record.get(k) is not None}
            options = options.model_copy(update=given) if given else options
            n = AIPERF_ROUNDS * c
            requests = Requests(np.zeros(n), np.full(n, int(row.prompt_len), dtype=np.int64),
                                np.full(n, int(row.gen_len), dtype=np.int64))
            metrics = serve_closed_loop(scenario, requests, options, c, warmup=0).metrics
            predicted = (metrics["ttft_mean_s"] * 1e3, metrics["tpot_mean_s"] * 1e3)
            used.add((row.engine, framework, row.hardware, profile_name))
        except UserInputError as exc:
            reason = str(exc)
        progress()
        if reason is not None:
            skipped.append({**record, "reason": reason})
            continue
        scored.append({**record, "predicted_ttft_ms": predicted[0], "predicted_tpot_ms": predicted[1],
                       "ttft_error": predicted[0] / row.ttft_ms - 1, "tpot_error": predicted[1] / row.tpot_ms - 1,
                       "framework": ENGINE_FRAMEWORKS[engine], "profile": profile_name})
    rows = pd.DataFrame(scored)
    mappings = [f"engine {e} -> {f} kernels{'' if f == e else ' (the closest priced)'} and the {e} scheduler; "
                f"hardware {h} -> {p}" for e, f, h, p in sorted(used)]
    if used:
        mappings.append(f"engine limits: {limits} " + ("(each engine's own)" if limits == "engine-defaults" else
                                                       "(per row, from its concurrency and prompt length)"))
    return ClosedLoopScore(rows, pd.DataFrame(skipped), error_summary(rows), mappings)


def error_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per engine x dtype: rows, median and worst absolute TTFT and TPOT errors (%), and the
    signed medians (negative: predicted below measured)."""
    columns = ["engine", "dtype", "rows", "ttft_median_abs_err_pct", "ttft_median_err_pct", "ttft_worst_abs_err_pct",
               "tpot_median_abs_err_pct", "tpot_median_err_pct", "tpot_worst_abs_err_pct"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    out = []
    for (engine, dtype), part in rows.groupby(["engine", "dtype"], sort=True):
        out.append({"engine": engine, "dtype": dtype, "rows": len(part),
                    **{k: v for m in ("ttft", "tpot") for k, v in error_stats(part[f"{m}_error"], m, signed=True).items()}})
    return pd.DataFrame(out, columns=columns)


def skipped_reasons(skipped: pd.DataFrame) -> list[str]:
    """One line per distinct (model, dtype, reason) skipped, with its row count."""
    if skipped.empty:
        return []
    counts = skipped.groupby(["model", "engine", "dtype", "reason"], sort=True).size()
    return [f"{n} rows of {model} {engine} {dtype}: {reason}" for (model, engine, dtype, reason), n in counts.items()]
