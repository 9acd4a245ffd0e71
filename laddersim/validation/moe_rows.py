"""Published mixture-of-experts measurements predicted with the shipped profiles and no fit.

The tables are ``laddersim/data/validation/moe/`` (PROVENANCE.md there). Rows priced here:

* gpt-fast ``mixtral-moe`` on 8x A100-80GB (330 W), batch 1, 5-token prompt, 200 new tokens,
  bf16 (``decode_tokens_per_s``, which includes the prefill): framework ``gpt-fast``, profile
  ``a100-sxm-nvswitch``, AllReduce ``pytorch-intra-node`` (the README's tensor-parallel command sets
  ``ENABLE_INTRA_NODE_COMM=1``: ``GPTFAST_ALLREDUCE``); an ``OOM`` row is checked to be refused by the
  memory check. The int8
  weight-only rows and the superseded first README numbers are left out (laddersim prices 16-bit
  and fp8 weights; the superseded numbers were replaced by their authors).
* vLLM PR 3240 ``benchmark_latency.py`` (A100-80GB TP 2, 1000 in / 50 out, batch 1-64) with the
  tuned fused-MoE config: one static batch, prefill plus 50 decode steps; framework ``vllm-v0``
  (the V0 engine of March 2024).
* vLLM performance CI static-batch latency (batch 8, 32 in / 128 out, TP 2), mean rows; framework ``vllm``.

The online-serving rows (vLLM PR 2979) and the TensorRT-LLM max-load throughputs run through the
serving simulator: ``laddersim.validation.moe_serving``.
"""

from __future__ import annotations

import pandas as pd

from laddersim.errors import UserInputError
from laddersim.support.resources import data_path
from laddersim.validation.gpu_profiles import require_profile

FOLDER = data_path("validation", "moe")
CONFIGS = {"Mixtral-8x7B": "mistralai--Mixtral-8x7B-v0.1.json", "dbrx": "databricks--dbrx-instruct.json"}
# pytorch-labs/gpt-fast mixtral-moe/README.md @ 4f98fe01976600edec013e9ae7e799744f971d9f (and the DBRX
# branch @ 7f9d8c822730a967741391cc9ef3157b162bed42), "Tensor Parallelism": ENABLE_INTRA_NODE_COMM=1 torchrun
# --nproc_per_node=8 generate.py --compile --compile_prefill: PyTorch's intra-node all-reduce (bf16).
GPTFAST_ALLREDUCE = "pytorch-intra-node"
# The engine of each latency table: PR 3240 ran early-2024 vLLM (the V0 engine); the CI pages are current.
LATENCY_FRAMEWORKS = {"vllm_pr3240_mixtral_a100_tp2_latency.csv": "vllm-v0", "vllm_nightly_buildkite_mixtral_tp2.csv": "vllm"}
COLUMNS = ["table", "model", "gpu", "profile", "framework", "tp", "batch", "prompt_len", "gen_len", "metric",
           "measured", "predicted", "error"]


def _config(model: str) -> str:
    return str(FOLDER / "models" / next(f for key, f in CONFIGS.items() if model.startswith(key)))


def _simulate(model: str, profile: str, framework: str, tp: int, batch: int, prompt_len: int, gen_len: int,
              schedule: str = "standard", allreduce: str | None = None) -> dict:
    """``simulate --json``'s row of one scenario."""
    from laddersim.simulation.results import summarize
    from laddersim.simulation.simulate import make_scenario, simulate

    scenario = make_scenario(model=_config(model), hardware=profile, tp=tp, batch=batch, prompt_len=prompt_len,
                             gen_len=gen_len, schedule=schedule, framework=framework,
                             allreduce=allreduce if tp > 1 else None)
    return summarize(simulate(scenario))


def _gptfast_rows() -> list[list]:
    table = pd.read_csv(FOLDER / "gptfast_mixtral_dbrx_a100_tp.csv", dtype=str)
    keep = table["note"].str.startswith("bf16") & ~table["note"].str.contains("SUPERSEDED")
    out = []
    for r in table[keep].itertuples():
        tp, profile = int(r.tp), require_profile("A100", "gpu")
        try:
            row = _simulate(r.model, profile, "gpt-fast", tp, 1, 5, 200, allreduce=GPTFAST_ALLREDUCE)
            predicted = float(row["tokens_per_s"])
        except UserInputError as exc:
            if "memory" not in str(exc):
                raise
            predicted = "OOM"
        measured = r.value if r.value == "OOM" else float(r.value)
        error = (predicted / measured - 1.0) if not isinstance(measured, str) and not isinstance(predicted, str) else None
        out.append(["gptfast_mixtral_dbrx_a100_tp.csv", r.model, r.gpu, profile, "gpt-fast", tp, 1, 5, 200,
                    "decode_tokens_per_s", measured, predicted, error])
    return out


def _latency_rows() -> list[list]:
    out = []
    pr = pd.read_csv(FOLDER / "vllm_pr3240_mixtral_a100_tp2_latency.csv")
    pr = pr[pr["engine"].str.startswith("vLLM PR #3240")]
    ci = pd.read_csv(FOLDER / "vllm_nightly_buildkite_mixtral_tp2.csv")
    ci = ci[ci["metric"] == "batch_e2e_latency_mean"]
    for name, rows, scale in (("vllm_pr3240_mixtral_a100_tp2_latency.csv", pr, 1.0),
                              ("vllm_nightly_buildkite_mixtral_tp2.csv", ci, 1e-3)):
        for r in rows.itertuples():
            batch, prompt_len, gen_len = int(r.batch_or_concurrency), int(r.input_len), int(r.output_len)
            profile = require_profile(r.gpu, "gpu")
            framework = LATENCY_FRAMEWORKS[name]
            row = _simulate(r.model, profile, framework, int(r.tp), batch, prompt_len, gen_len)
            measured = float(r.value) * scale
            predicted = float(row["prefill_s"] + row["decode_s"])
            out.append([name, r.model, r.gpu, profile, framework, int(r.tp), batch, prompt_len, gen_len,
                        "batch_e2e_latency_s", measured, predicted, predicted / measured - 1.0])
    return out


def moe_validation_rows() -> pd.DataFrame:
    """Every priced row of the MoE tables: measured beside predicted, ``error`` = predicted /
    measured - 1 (None where a side is ``OOM``)."""
    return pd.DataFrame(_gptfast_rows() + _latency_rows(), columns=COLUMNS)
