"""Snapshot of the command line's behaviour: run a broad set of ``laddersim`` invocations (every
command and subcommand, their --json/--out forms, --help, error cases) and record, per invocation,
the exit code, stdout, stderr and the SHA-256 of every file it wrote; compare two snapshots.

    python tools/dev/cli_snapshot.py record runs/cli_snapshot/after.json
    python tools/dev/cli_snapshot.py record runs/cli_snapshot/base.json --code /tmp/laddersim-base
    python tools/dev/cli_snapshot.py compare runs/cli_snapshot/base.json runs/cli_snapshot/after.json

``--code DIR`` runs the laddersim of another tree (e.g. ``git archive BASE | tar -x -C DIR``) in
place of this checkout's, so a refactoring's snapshot can be compared with its base commit's; either
tree is copied to one fixed folder first, so the paths it records are the same.
Every invocation runs as ``python -m laddersim ...`` in a fresh, fixed working folder (so the
paths it prints are the same in both snapshots), with fixed COLUMNS and MPLBACKEND; the inputs it
reads (small measured tables, grids, logs) are written by this tool. A development tool: the
predicted numbers it records move with the model, so it is not a golden test (the tests compare the
command's output with the API's result instead).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = Path("/tmp/laddersim-cli-snapshot")
INPUTS = WORK / "inputs"
CWD = WORK / "cwd"
TIMEOUT_S = 600

S8 = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "--prompt-len", "128",
      "--gen-len", "8"]
SERVE = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "--rate", "2",
         "--requests", "30", "--prompt-len", "128", "--gen-len", "16", "--no-progress"]
PLAN = ["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "--tp", "1", "2", "--batch", "1",
        "8", "--prompt-len", "128", "--gen-len", "16", "--workers", "1", "--no-progress"]
I = str(INPUTS)

# name -> list of argv (each run in turn in the same fresh working folder; all are recorded).
CASES: dict[str, list[list[str]]] = {
    # top level
    "top-help": [["--help"]],
    "top-version": [["--version"]],
    "top-none": [[]],
    "top-unknown": [["nosuch"]],
    # simulate
    "simulate-help": [["simulate", "--help"]],
    "simulate-table": [["simulate", *S8]],
    "simulate-json": [["simulate", *S8, "--json"]],
    "simulate-out": [["simulate", *S8, "--schedule", "standard", "--schedule", "ladder", "--schedule", "hybrid:4",
                      "--out", "runs/rows.csv"], ["simulate", *S8, "--out", "runs/rows.parquet"],
                     ["simulate", *S8, "--out", "runs/rows.json", "--json"]],
    "simulate-trace": [["simulate", *S8, "--trace", "runs/t.json", "--trace-steps", "2"]],
    "simulate-jitter": [["simulate", *S8, "--jitter", "0.1", "--seed", "3", "--sample-steps", "4"]],
    "simulate-jitter-exact": [["simulate", *S8, "--jitter", "0.05", "--exact-steps", "--json"]],
    "simulate-options": [["simulate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm-p2p-off", "--tp", "8",
                          "--batch", "4", "--prompt-len", "256", "--gen-len", "8", "--framework", "vllm",
                          "--dtype", "fp8", "--schedule", "parallel", "--schedule", "standard"]],
    "simulate-kv": [["simulate", *S8, "--kv-cache", "dynamic", "--kv-reads", "per_kv_head",
                     "--framework", "gpt-fast-flash", "--dtype", "float16"]],
    "simulate-datasheet-profile": [["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-pcie", "--tp", "2",
                                    "--prompt-len", "128", "--gen-len", "8"],
                                   ["simulate", "--model", "llama-3.1-8b", "--hardware", "b200-sxm-nvswitch",
                                    "--tp", "2", "--prompt-len", "128", "--gen-len", "8", "--json"]],
    "simulate-multinode": [["simulate", "--model", "llama-3.1-405b", "--hardware", "h100-sxm-aws-p5-efa", "--tp",
                            "16", "--prompt-len", "128", "--gen-len", "4"]],
    "simulate-config-model": [["simulate", "--model", "examples/small-4l-512/config.json", "--hardware",
                               "h100-sxm-nvswitch", "--tp", "2", "--prompt-len", "64", "--gen-len", "4"]],
    "simulate-err-tp": [["simulate", *S8[:4], "--tp", "3"]],
    "simulate-err-model": [["simulate", "--model", "nosuch", "--hardware", "h100-sxm-nvswitch", "--tp", "2"]],
    "simulate-err-hardware": [["simulate", "--model", "llama-3.1-8b", "--hardware", "nosuch", "--tp", "2"]],
    "simulate-err-out": [["simulate", *S8, "--out", "rows.txt"]],
    "simulate-err-dtype": [["simulate", *S8, "--dtype", "int8"]],
    "simulate-err-schedule": [["simulate", *S8, "--schedule", "nosuch"]],
    "simulate-err-batch": [["simulate", *S8, "--batch", "0"]],
    "simulate-err-jitter": [["simulate", *S8, "--jitter", "3"]],
    "simulate-err-memory": [["simulate", "--model", "llama-3.1-405b", "--hardware", "h100-sxm-nvswitch",
                             "--tp", "1"]],
    "simulate-err-framework": [["simulate", *S8, "--framework", "nosuch"]],
    "simulate-err-trace-steps": [["simulate", *S8, "--trace", "t.json", "--trace-steps", "x"]],
    # kernels
    "kernels-help": [["kernels", "--help"]],
    "kernels-table": [["kernels", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "8",
                       "--batch", "4"]],
    "kernels-json": [["kernels", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
                      "--phase", "prefill", "--json"]],
    "kernels-ladder-vllm": [["kernels", "--model", "llama-3.1-70b", "--hardware", "h100-sxm-nvswitch", "--tp", "8",
                             "--schedule", "ladder", "--framework", "vllm", "--dtype", "float16",
                             "--prompt-len", "256", "--gen-len", "16"]],
    "kernels-datasheet-profile": [["kernels", "--model", "llama-3.1-8b", "--hardware", "h100-pcie", "--tp", "2"]],
    "kernels-err": [["kernels", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "3"]],
    "kernels-err-phase": [["kernels", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
                           "--phase", "x"]],
    # sweep and plot
    "sweep-help": [["sweep", "--help"]],
    "sweep-flags-and-plots": [
        ["sweep", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "4", "--batch", "1",
         "--prompt-len", "64", "--gen-len", "4", "--intra-bandwidth-scale", "0.5", "1", "--out", "runs/sw",
         "--workers", "1", "--no-progress"],
        ["sweep", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "4", "--batch", "1",
         "--prompt-len", "64", "--gen-len", "4", "--intra-bandwidth-scale", "0.5", "1", "--out", "runs/sw",
         "--workers", "1", "--no-progress"],
        ["plot", "runs/sw/results.parquet", "--kind", "bandwidth"],
        ["plot", "runs/sw/results.csv", "--kind", "latency", "--x", "tp", "--out", "runs/lat"],
        ["plot", "runs/sw/results.parquet", "--kind", "throughput", "--where", "tp=2", "--title", "T"],
        ["plot", "runs/sw/results.parquet", "--kind", "breakdown"],
        ["plot", "runs/sw/results.parquet", "--kind", "heatmap", "--schedule", "ladder"],
        ["plot", "runs/sw/results.parquet", "--kind", "heatmap", "--where", "tp=16"],
        ["plot", "runs/sw/results.parquet", "--kind", "breakdown", "--schedule", "ladder"],
        ["plot", "runs/sw/results.parquet", "--kind", "bandwidth", "--model", "x"],
    ],
    "sweep-grid": [["sweep", f"{I}/grid.yaml", "--out", "runs/g", "--workers", "1", "--no-progress"]],
    "sweep-example": [["sweep", "examples/sweep_latency.yaml", "--out", "runs/l", "--workers", "1",
                       "--no-progress", "--tp", "2"]],
    "sweep-err-missing": [["sweep", "--out", "runs/x", "--model", "llama-3.1-8b"]],
    "sweep-err-grid": [["sweep", f"{I}/bad_grid.yaml", "--out", "runs/x"]],
    "sweep-err-nogrid": [["sweep", f"{I}/missing.yaml", "--out", "runs/x"]],
    "plot-help": [["plot", "--help"]],
    "plot-timeline": [["plot", "--kind", "timeline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch",
                       "--tp", "2", "--prompt-len", "64", "--gen-len", "4", "--out", "runs/tl"],
                      ["plot", "--kind", "timeline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch",
                       "--tp", "4", "--prompt-len", "64", "--gen-len", "4", "--schedule", "ladder", "--step", "1",
                       "--ranks", "1", "--zoom-layers", "0"]],
    "plot-err": [["plot", "--kind", "timeline", "--model", "llama-3.1-8b"],
                 ["plot", "--kind", "bandwidth"],
                 ["plot", "--kind", "timeline", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch",
                  "--tp", "2", "--step", "-1"],
                 ["plot", f"{I}/missing.parquet", "--kind", "bandwidth"],
                 ["plot", "x.parquet", "--kind", "nosuch"]],
    # plan
    "plan-help": [["plan", "--help"], ["plan", "break-even", "--help"]],
    "plan-table": [[*PLAN, "--min-user-tokens-per-s", "50"]],
    "plan-json": [[*PLAN, "--min-user-tokens-per-s", "50", "--json", "--top", "3"]],
    "plan-total": [[*PLAN, "--min-total-tokens-per-s", "2000", "--schedule", "ladder", "--max-nodes", "1",
                    "--rank-by", "usd_per_million_tokens"]],
    "plan-none": [[*PLAN, "--min-user-tokens-per-s", "1e6"], [*PLAN, "--min-user-tokens-per-s", "1e6", "--json"]],
    "plan-default-profiles": [["plan", "--model", "llama-3.1-8b", "--tp", "1", "--batch", "1", "--prompt-len", "64",
                               "--gen-len", "4", "--workers", "1", "--no-progress", "--max-token-latency-ms",
                               "100"]],
    "plan-prices": [[*PLAN, "--prices", f"{I}/prices.yaml", "--min-user-tokens-per-s", "50"]],
    "plan-rate": [["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "--tp", "2", "--rate", "1",
                   "--ttft-slo-s", "1", "--requests", "20", "--prompt-len", "128", "--gen-len", "16",
                   "--no-progress"],
                  ["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "--tp", "2", "--rate", "1",
                   "--ttft-slo-s", "1", "--tpot-slo-s", "0.05", "--requests", "20", "--prompt-len", "128",
                   "--gen-len", "16", "--no-progress", "--json", "--chunked-prefill"]],
    "plan-rate-none": [["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "--tp", "2", "--rate",
                        "1", "--ttft-slo-s", "0.00001", "--requests", "20", "--prompt-len", "128", "--gen-len", "16",
                        "--no-progress"]],
    "plan-err": [["plan"], [*PLAN, "--chunked-prefill", "--min-user-tokens-per-s", "5"],
                 [*PLAN, "--gen-len", "1", "--min-user-tokens-per-s", "5"],
                 ["plan", "--model", "llama-3.1-8b", "--rate", "1"],
                 [*PLAN, "--dtype", "fp8", "--profiles", "a100-sxm-nvswitch", "--min-user-tokens-per-s", "5"],
                 [*PLAN, "--profiles", "nosuch", "--min-user-tokens-per-s", "5"],
                 [*PLAN, "--tp", "3", "--min-user-tokens-per-s", "5"],
                 [*PLAN, "--schedule", "nosuch", "--min-user-tokens-per-s", "5"],
                 [*PLAN, "--workers", "0"], [*PLAN, "--rank-by", "nosuch"]],
    "plan-break-even": [["plan", "break-even", "--model", "llama-3.1-8b", "--tp", "2", "--prompt-len", "128",
                         "--gen-len", "8", "--a", "ladder@h100-sxm-p2p-off", "--b", "standard@h100-sxm-nvswitch"],
                        ["plan", "break-even", "--model", "llama-3.1-8b", "--tp", "2", "--prompt-len", "128",
                         "--gen-len", "8", "--a", "ladder@h100-pcie", "--b", "standard@h100-sxm-nvswitch",
                         "--vary", "intra_latency", "--json"],
                        ["plan", "break-even", "--model", "llama-3.1-8b", "--tp", "2", "--prompt-len", "128",
                         "--gen-len", "8", "--a", "standard@h100-sxm-nvswitch", "--b", "ladder@h100-sxm-nvswitch",
                         "--lo", "1", "--hi", "2"]],
    "plan-break-even-err": [["plan", "break-even", "--model", "llama-3.1-8b", "--tp", "2", "--a", "ladder",
                             "--b", "standard@h100-sxm-nvswitch"]],
    # serving
    "serving-help": [["serving", "--help"]],
    "serving-table": [["serving", *SERVE, "--ttft-slo-s", "0.5", "--tpot-slo-s", "0.05"]],
    "serving-json-out": [["serving", *SERVE, "--json", "--out", "runs/req", "--schedule", "ladder"]],
    "serving-capacity": [["serving", *SERVE, "--ttft-slo-s", "0.5", "--capacity", "--target-rate", "10",
                          "--schedule", "standard"],
                         ["serving", *SERVE, "--ttft-slo-s", "0.5", "--capacity", "--json"]],
    "serving-options": [["serving", *SERVE[:6], "--rate", "4", "--requests", "20", "--prompt-len", "uniform:32:256",
                         "--gen-len", "exponential:8", "--gamma-shape", "0.5", "--max-running", "4",
                         "--max-batched-tokens", "512", "--chunked-prefill", "--block-size", "32", "--seed", "7",
                         "--kv-reads", "repeat_interleave", "--framework", "vllm", "--no-progress"]],
    "serving-trace": [["serving", *SERVE[:6], "--trace", f"{I}/trace.csv", "--no-progress"]],
    "serving-datasheet-profile": [["serving", "--model", "llama-3.1-8b", "--hardware", "h100-pcie", "--tp", "2",
                                   "--rate", "2", "--requests", "20", "--prompt-len", "128", "--gen-len", "16",
                                   "--no-progress"]],
    "serving-err": [["serving", *SERVE[:6]], ["serving", *SERVE, "--target-rate", "3"],
                    ["serving", *SERVE, "--capacity"], ["serving", *SERVE, "--trace", f"{I}/trace.csv"],
                    ["serving", *SERVE, "--prompt-len", "uniform:3"], ["serving", *SERVE, "--seed", "-1"]],
    # validate and fit
    "validate-help": [["validate", "--help"]],
    "validate-builtin": [["validate", "--report", "runs/v"]],
    "validate-default-folder": [["validate", f"{I}/measured.csv", "--dtype", "bfloat16"]],
    "validate-table": [["validate", f"{I}/measured.csv", "--dtype", "bfloat16", "--out", "runs/v2",
                        "--framework", "vllm"]],
    "validate-err": [["validate", ""], ["validate", f"{I}/bad.csv"], ["validate", f"{I}/measured.csv",
                                                                        "--models", f"{I}/missing"]],
    "fit-help": [["fit", "--help"]],
    "fit-table": [["fit", f"{I}/measured.csv", "--hardware", "h100-sxm-nvswitch", "--dtype", "bfloat16",
                   "--out", "runs/fitted.yaml", "--report", "runs/fit"]],
    "fit-default-folder": [["fit", f"{I}/measured.csv", "--hardware", "h100-sxm-nvswitch", "--dtype", "bfloat16",
                            "--out", "runs/f.yaml", "--with-ladder"]],
    "fit-err": [["fit", "", "--hardware", "h100-sxm-nvswitch", "--out", "x.yaml"],
                ["fit", f"{I}/measured.csv", "--hardware", "h100-sxm-nvswitch", "--out", "."],
                ["fit", f"{I}/bad.csv", "--hardware", "h100-sxm-nvswitch", "--out", "x.yaml"]],
    # profiles
    "profiles-help": [["profiles", "--help"]],
    "profiles-list": [["profiles", "list"]],
    "profiles-show": [["profiles", "show", "h100-sxm-p2p-off"], ["profiles", "show", "h100-sxm-aws-p5-efa"]],
    "profiles-check": [["profiles", "check", "h100-sxm-nvswitch", "--shipped"], ["profiles", "check", "h100-pcie"]],
    "profiles-fit": [["profiles", "fit", "h100-sxm-nvswitch"], ["profiles", "fit", "b200-sxm-nvswitch"]],
    "profiles-report": [["profiles", "report", "--out", "runs/coll/collectives.md"]],
    "profiles-err": [["profiles", "show", "nosuch"], ["profiles", "report", "--out", "runs"], ["profiles"]],
    # calibrate
    "calibrate-help": [["calibrate", "--help"], ["calibrate", "run", "--help"], ["calibrate", "fit", "--help"],
                       ["calibrate", "import-nccl-tests", "--help"], ["calibrate", "nccl-log", "--help"],
                       ["calibrate", "kernels", "--help"]],
    "calibrate-fit": [["calibrate", "fit", f"{I}/cb_run", "--name", "cb"]],
    "calibrate-import": [["calibrate", "import-nccl-tests", str(ROOT / "tests/data/nccl_tests_logs/"
                                                                "aws_p5_h100_1node_nvswitch.log"),
                          "--out", "runs/imp"], ["profiles", "check", "runs/imp"]],
    "calibrate-nccl-log": [["calibrate", "nccl-log", f"{I}/nccl.log", "--hardware", "h100-sxm-p2p-off",
                            "--max-size", "1048576", "--out", "choices.csv"],
                           ["calibrate", "nccl-log", f"{I}/nccl.log", "--yaml"]],
    "calibrate-kernels": [["calibrate", "kernels", "examples/kernel_trace_h100_8b_tp1", "--hardware",
                           "h100-sxm-nvswitch", "--out", "my-stack.yaml"],
                          ["kernels", "--model", "llama-3.1-8b", "--hardware", "h100-sxm-nvswitch", "--tp", "8",
                           "--batch", "16", "--framework", "my-stack.yaml"]],
    "calibrate-err": [["calibrate", "fit", f"{I}", "--name", "x"], ["calibrate", "nccl-log", f"{I}/missing.log"],
                      ["calibrate", "kernels", "examples/kernel_trace_h100_8b_tp1", "--hardware",
                       "h100-sxm-nvswitch", "--out", "x.txt"],
                      ["calibrate", "run", "--out", "runs/c", "--sizes", "0"],
                      ["calibrate", "run", "--out", "runs/c", "--tp", "2"],
                      ["calibrate", "import-nccl-tests", f"{I}/missing.log", "--out", "runs/i"]],
    "calibrate-run": [["calibrate", "run", "--backend", "gloo", "--world-size", "2", "--out", "runs/cpu", "--quick",
                       "--benchmarks", "allreduce", "--sizes", "1KiB,4KiB", "--dtypes", "float32"]],
    # report, program
    "report-help": [["report", "--help"]],
    "report-quick": [["report", "--quick", "--out", "runs/report", "--no-progress"]],
    "program": [["program", "--list"], ["program", "--path", "ladder_bench"], ["program", "nosuch"],
                ["program"], ["program", "--list", "x"], ["program", "--path", "ladder_bench", "--x"]],
}
# Cases whose outputs are measurements (timings): only the exit code, the files' names and the
# stderr lines that are not measurements are compared.
MEASURED = {"calibrate-run"}
# Not run by default (minutes of CPU): --all adds them.
SLOW = {"report-quick", "profiles-report", "calibrate-run"}

MEASURED_CSV = """model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s
llama-3.1-8b,2,1,1,128,8,on,standard,150
llama-3.1-8b,2,1,1,128,8,on,ladder,180
llama-3.1-8b,2,1,8,128,8,on,standard,900
llama-3.1-8b,2,1,8,128,8,on,ladder,1000
llama-3.1-8b,4,1,1,128,8,on,standard,220
llama-3.1-8b,4,1,1,128,8,on,ladder,260
"""
GRID = """models: [llama-3.1-8b]
hardware: [h100-sxm-nvswitch, h100-pcie]
tp: [2]
prompt_len: [64]
gen_len: [4]
schedules: [standard, ladder]
overrides:
  intra_latency_scale: [1, 2]
"""


def write_inputs() -> None:
    """The files the cases read, written fresh each time (same bytes in every snapshot)."""
    if INPUTS.exists():
        shutil.rmtree(INPUTS)
    INPUTS.mkdir(parents=True)
    (INPUTS / "measured.csv").write_text(MEASURED_CSV)
    (INPUTS / "bad.csv").write_text("model,tp\nllama-3.1-8b,2\n")
    (INPUTS / "grid.yaml").write_text(GRID)
    (INPUTS / "bad_grid.yaml").write_text("models: [llama-3.1-8b]\nhardware: [h100-sxm-nvswitch]\ntp: [2]\nbogus: 1\n")
    (INPUTS / "trace.csv").write_text("arrival_s,prompt_len,output_len\n0.5,100,8\n0.0,300,4\n0.2,50,1\n")
    shutil.copytree(ROOT / "tests/data/calibration_compute_bound_gemms", INPUTS / "cb_run")  # fit writes into it
    (INPUTS / "prices.yaml").write_text((ROOT / "laddersim/data/prices.yaml").read_text())
    sys.path.insert(0, str(ROOT / "tests"))
    from test_nccl_log import p2p_off_log  # a synthetic NCCL_DEBUG=INFO log, as the tests build it

    (INPUTS / "nccl.log").write_text(p2p_off_log())


def _files(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out


def run_case(argvs: list[list[str]], code: Path) -> list[dict]:
    if CWD.exists():
        shutil.rmtree(CWD)
    CWD.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LADDERSIM_SHARED")}
    env.update(PYTHONPATH=str(code), COLUMNS="100", LINES="40", MPLBACKEND="Agg", PYTHONHASHSEED="0",
               TQDM_DISABLE="1")
    steps = []
    for argv in argvs:
        before = _files(CWD)
        proc = subprocess.run([sys.executable, "-m", "laddersim", *argv], cwd=CWD, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
        after = _files(CWD)
        written = {k: v for k, v in after.items() if before.get(k) != v}
        steps.append({"argv": argv, "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                      "files": written})
    return steps


CODE_FOLDERS = ("laddersim", "hardware_profiles", "calibration", "examples")


def stage_code(tree: Path) -> Path:
    """A copy of ``tree``'s package and data folders at one fixed place: files that record where
    the code ran from (a framework file names its trace's path) are then the same for any tree."""
    code = WORK / "code"
    if code.exists():
        shutil.rmtree(code)
    code.mkdir(parents=True)
    for folder in CODE_FOLDERS:
        shutil.copytree(tree / folder, code / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(tree / "pyproject.toml", code / "pyproject.toml")
    return code


def record(out: Path, tree: Path, names: list[str]) -> None:
    write_inputs()
    code = stage_code(tree)
    snapshot = {"code": str(tree), "cases": {}}
    for name in names:
        start = time.time()
        snapshot["cases"][name] = run_case(CASES[name], code)
        print(f"{name}: {time.time() - start:.1f} s", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")


def _measured_view(step: dict) -> dict:
    return {"argv": step["argv"], "rc": step["rc"], "files": sorted(f for f in step["files"] if "rendezvous" not in f)}


# Parts of an answer that vary from run to run: elapsed times, and the lock files' contents (a
# process id; their names are compared).
_ELAPSED = re.compile(r"(done|figure files) in [0-9.]+ s")


def _stable(step: dict) -> dict:
    return {**step, "stdout": _ELAPSED.sub(r"\1 in T s", step["stdout"]),
            "stderr": _ELAPSED.sub(r"\1 in T s", step["stderr"]),
            "files": {k: ("lock" if k.endswith(".laddersim.lock") else v) for k, v in step["files"].items()}}


def compare(a: Path, b: Path) -> int:
    """Print every case whose steps differ (exit code, stdout, stderr, files written); 0 when none."""
    import difflib

    left, right = json.loads(a.read_text())["cases"], json.loads(b.read_text())["cases"]
    differ = 0
    for name in sorted(set(left) | set(right)):
        if name not in left or name not in right:
            print(f"{name}: only in {'the first' if name in left else 'the second'} snapshot")
            differ += 1
            continue
        for i, (x, y) in enumerate(zip(left[name], right[name])):
            x, y = _stable(x), _stable(y)
            if name in MEASURED:
                x, y = _measured_view(x), _measured_view(y)
            for key in ("argv", "rc", "stdout", "stderr", "files"):
                if x.get(key) != y.get(key):
                    differ += 1
                    print(f"--- {name} step {i} ({' '.join(x['argv'])[:90]}): {key} differs")
                    if key in ("stdout", "stderr"):
                        diff = difflib.unified_diff(x[key].splitlines(), y[key].splitlines(), lineterm="", n=0)
                        print("\n".join(list(diff)[2:40]))
                    else:
                        print(f"    {x.get(key)}\n    {y.get(key)}")
    total = sum(len(v) for v in left.values())
    print(f"{len(left)} cases, {total} invocations; {differ} differences")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--code", type=Path, default=ROOT, help="the tree whose laddersim runs (default this one)")
    rec.add_argument("--case", action="append", help="only these cases (repeatable)")
    rec.add_argument("--all", action="store_true", help="also the slow cases: " + ", ".join(sorted(SLOW)))
    cmp = sub.add_parser("compare")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.action == "compare":
        return compare(args.a, args.b)
    names = args.case or [n for n in CASES if args.all or n not in SLOW]
    record(args.out, args.code.resolve(), names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
