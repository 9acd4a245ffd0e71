"""Closed loop on one machine: calibrate, run the real TP benchmark, validate the simulator.

1. ``laddersim calibrate run`` (gloo on CPU, or NCCL on GPUs) measures AllReduce, GEMM, memory
   bandwidth and interference, and ``laddersim calibrate fit`` turns that into a profile;
2. ``calibration/ladder_bench.py`` runs a real tensor-parallel generation with every schedule;
3. ``laddersim validate`` simulates the same runs on the calibrated profile and reports how
   close it came (``reports/closed_loop/calibrated/``);
4. ``laddersim fit`` fits the framework costs to the benchmark's ``standard`` rows only and
   predicts the other schedules (``reports/closed_loop/fitted/``): the workflow "I measured my
   current model; what will Ladder give me?".

``reports/closed_loop/index.md`` summarises both.

Every step is a separate command, printed before it runs, so the loop can be re-run by hand;
calibration resumes where it stopped. The model is a small Llama-shaped config written into
the run directory (override with ``--model``).

    python calibration/closed_loop.py [--world-size 2] [--run-dir runs/closed_loop] [--out reports/closed_loop]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd

SMALL_MODEL = {  # 4 layers, width 512: runs in seconds on two CPU ranks
    "_name_or_path": "small-4l-512", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 2, "intermediate_size": 1536, "vocab_size": 32000,
}
SCHEDULES = ("standard", "parallel", "ladder", "upper_bound")


def run(cmd: list[str]) -> None:
    print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl", "auto"])
    parser.add_argument("--model", help="HF config.json (default: a 4-layer, width-512 model)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--gen-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--run-dir", default="runs/closed_loop")
    parser.add_argument("--out", default="reports/closed_loop")
    args = parser.parse_args()

    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    model = Path(args.model) if args.model else run_dir / "model" / "config.json"
    if not args.model:
        model.parent.mkdir(exist_ok=True)
        model.write_text(json.dumps(SMALL_MODEL, indent=1))
    py = sys.executable
    ws = str(args.world_size)
    calib = run_dir / "calibration"
    batches = ",".join(str(b) for b in args.batch)
    run([py, "-m", "laddersim", "calibrate", "run", "--backend", args.backend, "--world-size", ws,
         "--out", str(calib), "--models", str(model), "--tp", ws, "--batch", batches,
         "--prompt-len", str(args.prompt_len), "--sizes", "1KiB,4KiB,16KiB,64KiB,256KiB,1MiB,4MiB",
         "--dtypes", "float32", "--repeats", "10"])
    run([py, "-m", "laddersim", "calibrate", "fit", str(calib), "--name", f"closed-loop-{args.backend}-{ws}"])
    bench_csv = run_dir / "ladder_bench.csv"
    for batch in args.batch:
        key = f"batch {batch}"
        done = pd.read_csv(bench_csv) if bench_csv.exists() else pd.DataFrame(columns=["batch"])
        if (done["batch"] == batch).sum() >= len(SCHEDULES):
            print(f"{key}: already measured in {bench_csv}", file=sys.stderr)
            continue
        cmd = [py, str(Path(__file__).with_name("ladder_bench.py")), "--backend", args.backend,
               "--world-size", ws, "--model", str(model), "--batch", str(batch),
               "--prompt-len", str(args.prompt_len), "--gen-len", str(args.gen_len),
               "--repeats", str(args.repeats), "--out", str(bench_csv)]
        for schedule in SCHEDULES:
            cmd += ["--schedule", schedule]
        run(cmd)
    # The benchmark names the model by its config's _name_or_path; validate needs a loadable path.
    measured = pd.read_csv(bench_csv)
    measured["model"] = str(model)
    measured_path = run_dir / "measured.csv"
    measured.to_csv(measured_path, index=False)
    dtype = str(measured["dtype"].iloc[0])
    out = Path(args.out)
    common = ["--dtype", dtype, "--hardware-p2p-off", str(calib)]
    run([py, "-m", "laddersim", "validate", str(measured_path), "--hardware", str(calib), *common,
         "--out", str(out / "calibrated")])
    run([py, "-m", "laddersim", "fit", str(measured_path), "--hardware", str(calib), *common,
         "--out", str(run_dir / "fitted.yaml"), "--report", str(out / "fitted")])
    write_summary(out, measured_path, [f"python calibration/closed_loop.py {' '.join(sys.argv[1:])}".strip()])
    return 0


def write_summary(out: Path, measured_path: Path, commands: list[str]) -> None:
    """``out/index.md``: measured vs predicted with the calibrated and with the fitted profile."""
    from laddersim.validation.core import error_summary

    calibrated = pd.read_csv(out / "calibrated" / "validation.csv")
    fitted = pd.read_csv(out / "fitted" / "validation.csv")
    table = calibrated[["batch", "schedule", "tokens_per_s"]].copy()
    table["calibrated_prediction"] = calibrated["predicted_tokens_per_s"]
    table["fitted_prediction"] = fitted["predicted_tokens_per_s"]
    table["measured_speedup"] = calibrated["measured_speedup"]
    table["calibrated_speedup"] = calibrated["predicted_speedup"]
    table["fitted_speedup"] = fitted["predicted_speedup"]
    held_out = fitted[fitted["schedule"] != "standard"]

    def md(frame: pd.DataFrame) -> str:
        lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
        for row in frame.itertuples(index=False):
            lines.append("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |")
        return "\n".join(lines)

    text = [
        "# Closed loop on this machine: calibrate, measure, predict",
        "",
        "Real runs of `calibration/ladder_bench.py` (gloo, CPU ranks on 127.0.0.1) against laddersim's",
        "predictions, first from the microbenchmark-calibrated profile alone, then after `laddersim fit` on the",
        "`standard` rows only (the other schedules are predictions).",
        "",
        "Reproduce: " + "; ".join(f"`{c}`" for c in commands),
        "",
        "## Every row (tokens/s)",
        "",
        md(table),
        "",
        "## Errors",
        "",
        "Calibrated profile only:",
        "",
        md(error_summary(calibrated)),
        "",
        "Fitted on standard rows; held-out schedules:",
        "",
        md(error_summary(held_out, "schedule")),
        "",
        "## How to read this",
        "",
        "Microbenchmarks time isolated kernels and collectives. On CPU ranks running eager PyTorch, a real",
        "forward pass also pays Python and dispatcher overhead per op and the two ranks share two cores with",
        "gloo's threads, so the calibrated-only prediction is expected to be optimistic; the fit learns those",
        "framework costs from the standard runs and the remaining error is what the simulator's mechanisms",
        "(overlap, interference, collective costs) get right or wrong. On a shared 2-core machine gloo's",
        "AllReduce times are not even monotone in size (see the run's `tables/allreduce.csv`), so read the",
        "CPU numbers as a check of the pipeline, not of GPU accuracy. Details: `calibrated/index.md`,",
        "`fitted/index.md`; measured rows: `" + str(measured_path) + "`.",
        "",
    ]
    (out / "index.md").write_text("\n".join(text))


if __name__ == "__main__":
    sys.exit(main())
