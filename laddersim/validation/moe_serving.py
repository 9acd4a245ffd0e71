"""Published mixture-of-experts serving measurements predicted by the serving simulator
(``laddersim.traffic``) with the shipped profiles and no fit.

* TensorRT-LLM v0.17 ``trtllm-bench`` throughput (``trtllm_perf_overview_v0.17.csv``): every request
  of the document's dataset (``DATASET_REQUESTS``: its count for the row's ISL/OSL, every prompt and
  output exactly ISL and OSL tokens) arriving at once, served under TensorRT-LLM's scheduler
  (``laddersim.traffic.engines``: in-flight batching, its token budget and batch limit) with
  chunked context, trtllm-bench's default (``TRTLLM_BENCH_CHUNKED``), on the ``trtllm`` framework's kernels; predicted = output tokens / (last finish). FP8
  rows run FP8 experts and linears and an FP8 KV cache (the document's engines are built with
  ``--quantization FP8``, which in v0.17 quantizes the KV cache too), FP16 rows 16-bit ones. The
  GH200 rows run on ``gh200-480gb`` (datasheet HBM, H100's fits; measured: false). On a PCIe node (the L40S rows) NCCL runs with
  ``NCCL_P2P_LEVEL=SYS`` (``TRTLLM_NCCL_P2P_LEVEL``, ``trtllm_node``): P2P between every pair of
  the node's GPUs, so a 4- or 8-GPU ring runs P2P over PCIe where NCCL's default level (P2P only
  behind one PCIe switch) would stage it through host memory (SHM).
* vLLM PR 2979 online serving (``vllm_pr2979_pr2913_mixtral_h100_tp2_itl.csv``, its tuned fused-MoE
  rows, H100 TP 2, 1000 in / 50 out): Poisson arrivals at the row's rate, ``ITL_REQUESTS`` requests
  (benchmark_serving.py's default ``--num-prompts``), under vLLM V0's scheduler of early 2024 (whole
  prompts in iterations of their own ahead of the decodes, ``V0_MAX_RUNNING`` sequences,
  ``max(context, 2048)`` tokens per iteration); the PR's "ITL" is the benchmark's average latency
  per output token, mean over requests of end-to-end latency / output tokens (PR 2913 prints
  "16.9 ms ITL (0.85s end-to-end completion time per request)" for 50 tokens). The untuned and
  TensorRT-LLM-kernel rows and the superseded PR 2913 rows time other kernel configurations and are
  left out, as the latency tables' untuned rows are.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from laddersim.errors import UserInputError
from laddersim.support.resources import data_path
from laddersim.validation.gpu_profiles import require_profile

FOLDER = data_path("validation", "moe")
TRTLLM_TABLE = "trtllm_perf_overview_v0.17.csv"
ITL_TABLE = "vllm_pr2979_pr2913_mixtral_h100_tp2_itl.csv"
ITL_FRAMEWORK = "vllm-v0"  # February 2024: vLLM's V0 engine (laddersim/data/frameworks/vllm-v0.yaml)
CONFIGS = {"Mixtral-8x7B": "mistralai--Mixtral-8x7B-v0.1.json", "Mixtral-8x22B": "mistralai--Mixtral-8x22B-v0.1.json"}
# precision label -> (activations' dtype, quantization, KV cache dtype)
PRECISIONS = {"FP8": ("float16", "fp8", "fp8"), "FP16": ("float16", "none", "auto"),
              "BF16": ("bfloat16", "none", "auto")}
# (ISL, OSL) -> $num_requests: NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md
# @ 258c7540c03517def55d9a5aadfa9288af474e1b, "Preparing a Dataset" table.
DATASET_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (2048, 128): 3000, (2048, 2048): 1500,
                    (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000}
# NVIDIA/TensorRT-LLM tensorrt_llm/bench/benchmark/throughput.py: ``--enable_chunked_context/
# --disable_chunked_context`` defaults to enabled: a context is prefilled in chunks beside the generation requests.
TRTLLM_BENCH_CHUNKED = True
# NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md @ 258c7540c03517def55d9a5aadfa9288af474e1b,
# "Known AllReduce performance issue on AMD-based CPU platforms": "export NCCL_P2P_LEVEL=SYS" for the
# document's multi-GPU runs (NCCL 2.23.4). Under it NCCL allows P2P across host bridges and sockets
# (NVIDIA/nccl src/graph/paths.cc ncclTopoCheckP2p: the path type must not exceed the P2P level).
# The document's own rows agree: its L40S TP 1 rows (Llama 3.1 8B, dense, no collective) price 8-17%
# slow on the shipped profile, its TP 4 and 8 Mixtral-8x7B rows 16-27% slow with SHM rings (median 22%)
# and median 8.0% with P2P ones (tools/dev/moe_ladder_table.py --serving L40S; the 20000/2000 rows
# are 45-71% slow either way, as on every GPU).
TRTLLM_NCCL_P2P_LEVEL = "SYS"
# vllm-project/vllm benchmarks/benchmark_serving.py (v0.3.x, Feb 2024): --num-prompts default 1000.
ITL_REQUESTS = 1000
# vLLM V0 (v0.3.x) SchedulerConfig: max_num_seqs 256 (EngineArgs default); max_num_batched_tokens
# max(max_model_len, 2048) (vllm/config.py SchedulerConfig.__init__); no chunked prefill.
V0_MAX_RUNNING = 256
V0_MIN_BATCHED_TOKENS = 2048
COLUMNS = ["table", "model", "gpu", "profile", "framework", "tp", "precision", "load", "input_len", "output_len",
           "requests", "metric", "measured", "predicted", "error"]


def _config(model: str) -> str:
    return str(FOLDER / "models" / next(f for key, f in CONFIGS.items() if model.startswith(key)))


def trtllm_node(profile):
    """``profile`` as the TensorRT-LLM document's runs saw its node: on a PCIe node whose profile
    states NCCL's transports, P2P allowed between every pair of GPUs (``TRTLLM_NCCL_P2P_LEVEL``:
    as if every GPU sat behind one PCIe switch, so laddersim.costs.transport runs a ring of any
    size over P2P); any other profile unchanged."""
    from laddersim.hardware.sourced import Sourced

    spec = profile.collectives.transport
    if spec is None or spec.topology.gpu_links != "pcie" or spec.topology.p2p != "enabled":
        return profile
    gpus = Sourced(value=profile.node.gpus_per_node, source=f"NCCL_P2P_LEVEL={TRTLLM_NCCL_P2P_LEVEL}: P2P between "
                   "every pair of the node's GPUs (laddersim.validation.moe_serving.TRTLLM_NCCL_P2P_LEVEL)")
    topology = spec.topology.model_copy(update={"gpus_per_pcie_switch": gpus})
    transport = spec.model_copy(update={"topology": topology})
    return profile.model_copy(update={"collectives": profile.collectives.model_copy(update={"transport": transport})})


def _scenario(cache: dict, model: str, gpu: str, tp: int, framework: str, precision: str):
    """A serving scenario, its model and profile loaded once per table (so the rows share the
    iteration timers: laddersim.traffic.run.timer_for); under ``trtllm`` the profile's node as
    the TensorRT-LLM document ran it (``trtllm_node``)."""
    from laddersim.hardware.profile import load_profile
    from laddersim.model.shape import load_model_shape
    from laddersim.traffic.run import serving_scenario

    key = (model, gpu, framework)
    if key not in cache:
        profile = load_profile(require_profile(gpu, "gpu"))
        cache[key] = (load_model_shape(_config(model)), trtllm_node(profile) if framework == "trtllm" else profile)
    shape, profile = cache[key]
    dtype, quant, kv = PRECISIONS[precision]
    scenario = serving_scenario(shape, profile, tp, "standard", dtype, framework=framework, quant=quant,
                                kv_cache_dtype=kv)
    scenario.model.check_tp(tp)
    return scenario


def trtllm_rows(gpus: tuple[str, ...] | None = None,
                lengths: tuple[tuple[int, int], ...] | None = None) -> tuple[list[list], list[dict]]:
    """(scored rows, skipped rows with ``reason``) of the TensorRT-LLM throughput table, optionally
    only the rows of ``gpus`` and of the (ISL, OSL) pairs ``lengths``."""
    from laddersim.traffic.arrivals import Requests
    from laddersim.traffic.engines import engine_options
    from laddersim.traffic.options import ServingOptions
    from laddersim.traffic.run import serve

    table = pd.read_csv(FOLDER / TRTLLM_TABLE)
    table["precision"] = table["note"].str.extract(r"precision=(\w+)", expand=False)
    if gpus is not None:
        table = table[table["gpu"].isin(gpus)]
    if lengths is not None:
        table = table[[(int(i), int(o)) in lengths for i, o in zip(table["input_len"], table["output_len"])]]
    cache, out, skipped = {}, [], []
    options = engine_options("trtllm", ServingOptions()).model_copy(update={"split_prompts": TRTLLM_BENCH_CHUNKED})
    for r in table.itertuples():
        isl, osl, tp = int(r.input_len), int(r.output_len), int(r.tp)
        n = DATASET_REQUESTS[(isl, osl)]
        try:
            scenario = _scenario(cache, r.model, r.gpu, tp, "trtllm", r.precision)
            requests = Requests(np.zeros(n), np.full(n, isl, dtype=np.int64), np.full(n, osl, dtype=np.int64))
            predicted = float(serve(scenario, requests, options).metrics["throughput_tokens_per_s"])
        except UserInputError as exc:
            skipped.append({"table": TRTLLM_TABLE, "model": r.model, "gpu": r.gpu, "tp": tp, "input_len": isl,
                            "output_len": osl, "reason": str(exc)})
            continue
        measured = float(r.value)
        out.append([TRTLLM_TABLE, r.model, r.gpu, require_profile(r.gpu, "gpu"), "trtllm", tp, r.precision, "max-load", isl, osl,
                    n, "total_output_throughput", measured, predicted, predicted / measured - 1.0])
    return out, skipped


def v0_scheduler(context: int):
    """vLLM V0's default scheduler (``V0_MAX_RUNNING``, ``V0_MIN_BATCHED_TOKENS``) for a model of
    ``context`` positions: whole prompts, in iterations of their own."""
    from laddersim.traffic.options import ServingOptions

    return ServingOptions(max_running=V0_MAX_RUNNING, max_batched_tokens=max(context, V0_MIN_BATCHED_TOKENS),
                          chunked_prefill=False)


def itl_rows() -> list[list]:
    """The PR 2979 tuned rows: predicted = mean over requests of E2E / output tokens, in ms."""
    from laddersim.traffic.arrivals import draw_requests, parse_length
    from laddersim.traffic.metrics import latencies
    from laddersim.traffic.run import serve

    table = pd.read_csv(FOLDER / ITL_TABLE)
    table = table[table["engine"].str.startswith("vLLM PR #2979") & (table["metric"] == "mean_inter_token_latency")]
    cache, out = {}, []
    for r in table.itertuples():
        rate = float(str(r.batch_or_concurrency).removeprefix("qps="))
        isl, osl = int(str(r.input_len).split()[0]), int(str(r.output_len).split()[0])
        scenario = _scenario(cache, r.model, r.gpu, int(r.tp), ITL_FRAMEWORK, "BF16")
        options = v0_scheduler(scenario.model.max_position_embeddings or 0)
        requests = draw_requests(ITL_REQUESTS, rate, parse_length(str(isl), "prompt-len"),
                                 parse_length(str(osl), "gen-len"))
        run = serve(scenario, requests, options).run
        predicted = float(np.mean(latencies(run, options)["e2e_s"] / requests.output_len)) * 1e3
        measured = float(r.value)
        out.append([ITL_TABLE, r.model, r.gpu, require_profile(r.gpu, "gpu"), ITL_FRAMEWORK, int(r.tp), "BF16", f"{rate:g} req/s", isl,
                    osl, ITL_REQUESTS, "mean_latency_per_output_token_ms", measured, predicted,
                    predicted / measured - 1.0])
    return out


def moe_serving_rows(gpus: tuple[str, ...] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(priced rows, skipped rows): the TensorRT-LLM throughput rows (of ``gpus``, default all)
    and the vLLM PR 2979 latency-per-output-token rows; ``error`` = predicted / measured - 1."""
    trt, skipped = trtllm_rows(gpus)
    return pd.DataFrame(trt + itl_rows(), columns=COLUMNS), pd.DataFrame(skipped)
