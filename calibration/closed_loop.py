"""Closed loop on one machine: calibrate, run the real TP benchmark, predict it from the calibration.

1. ``laddersim calibrate run`` (gloo on CPU ranks, or NCCL on GPUs) measures what the run pays:
   the framework's per-op (host dispatch) cost per op class, the framework ops per op kind in a
   profiler trace of one real decode step, GEMM and memory-bound kernels at the model's shapes,
   the AllReduce and the logits AllGather as a standard step pays them, and the interference of the model's own modules with
   async AllReduces of their message as a ladder step runs them (on shared CPU cores). The
   per-batch points (model GEMMs, per-op costs, AllReduce, AllGather, interference) are measured just before
   that batch's benchmark, so calibration and benchmark see the same machine load; every CPU rank
   is pinned to its own cores in both (``laddersim.measure.cores``);
2. ``calibration/ladder_bench.py`` runs a real tensor-parallel generation with every schedule;
3. ``laddersim calibrate fit`` turns all of it into one profile, and ``laddersim validate``
   simulates the benchmark's runs on it, with no fitting to the benchmark rows
   (``reports/closed_loop/calibrated/``; ``reports/closed_loop/index.md`` summarises).

Every step is a separate command, printed before it runs, so the loop can be re-run by hand;
calibration and benchmark resume where they stopped (a new --run-dir measures afresh). The last
line printed is the summary:
``closed loop: tokens/s median |error| X% (worst Y%); speedup median |error| Z pp (worst W pp)``.

    python calibration/closed_loop.py [--world-size 2] [--run-dir runs/closed_loop] [--out reports/closed_loop]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

SMALL_MODEL = {  # 4 layers, width 512: runs in seconds on two CPU ranks
    "_name_or_path": "small-4l-512", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 2, "intermediate_size": 1536, "vocab_size": 32000,
}
SCHEDULES = ("standard", "parallel", "ladder", "upper_bound")
ALLREDUCE_SIZES = "1KiB,2KiB,4KiB,8KiB,16KiB,32KiB,64KiB,256KiB,1MiB,4MiB"
PER_BATCH = ("overhead", "allreduce", "allgather", "interference", "skew")  # re-measured next to each batch's benchmark
COMM = ("allreduce", "allgather", "interference", "skew")  # the noisiest on shared cores: more repetitions


def run(cmd: list[str]) -> None:
    print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    started = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"[closed_loop] {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl", "auto"])
    parser.add_argument("--model", help="HF config.json (default: a 4-layer, width-512 model)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--gen-len", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=12,
                        help="ladder_bench timed rounds (one measurement of each schedule per round)")
    parser.add_argument("--min-time-s", type=float, default=1.0,
                        help="ladder_bench's least duration of a measurement (generations back to back)")
    parser.add_argument("--calibrate-repeats", type=int, default=20)
    parser.add_argument("--comm-repeats", type=int, default=100,
                        help="calibrate repetitions of the AllReduce, AllGather and interference points")
    parser.add_argument("--run-dir", default="runs/closed_loop")
    parser.add_argument("--out", default="reports/closed_loop")
    args = parser.parse_args()

    started, load_start = time.perf_counter(), os.getloadavg()
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    model = Path(args.model) if args.model else run_dir / "model" / "config.json"
    if not args.model:
        model.parent.mkdir(exist_ok=True)
        model.write_text(json.dumps(SMALL_MODEL, indent=1))
    py = sys.executable
    ws = str(args.world_size)
    calibrate = [py, "-m", "laddersim", "calibrate", "run", "--backend", args.backend, "--world-size", ws,
                 "--repeats", str(args.calibrate_repeats), "--warmup", "3", "--models", str(model), "--tp", ws]
    # Measured once: what does not change with the machine's load much or at all (the op trace,
    # memory kernels, the generic GEMM grid).
    common = run_dir / "calibration"
    run([*calibrate, "--out", str(common), "--benchmarks", "ops,memory,gemm", "--batch", str(args.batch[0])])
    bench_csv = run_dir / "ladder_bench.csv"
    profiles, loads = {}, {}
    for batch in args.batch:
        loads[batch] = os.getloadavg()[0]
        # Right before each batch's benchmark, into a copy: what the machine's load changes (per-op
        # costs, the CPU share, AllReduce, interference) and the batch's own GEMMs.
        calib = run_dir / f"calibration_b{batch}"
        if not calib.exists():
            shutil.copytree(common, calib)
            for name in PER_BATCH:
                (calib / "measurements" / f"{name}.csv").unlink(missing_ok=True)
            generic_gemms_only(calib / "measurements" / "gemm.csv")
        at_batch = ["--out", str(calib), "--batch", str(batch), "--prompt-len", str(args.prompt_len)]
        run([*calibrate, *at_batch, "--benchmarks", "overhead,gemm"])
        run([*calibrate[:calibrate.index("--repeats") + 1], str(args.comm_repeats),
             *calibrate[calibrate.index("--repeats") + 2:], *at_batch, "--benchmarks", ",".join(COMM),
             "--sizes", ALLREDUCE_SIZES, "--dtypes", "float32"])
        cmd = [py, str(Path(__file__).with_name("ladder_bench.py")), "--backend", args.backend,
               "--world-size", ws, "--model", str(model), "--batch", str(batch),
               "--prompt-len", str(args.prompt_len), "--gen-len", str(args.gen_len),
               "--repeats", str(args.repeats), "--min-time-s", str(args.min_time_s), "--out", str(bench_csv)]
        run(cmd + [arg for schedule in SCHEDULES for arg in ("--schedule", schedule)])
        run([py, "-m", "laddersim", "calibrate", "fit", str(calib), "--name",
             f"closed-loop-{args.backend}-{ws}-b{batch}"])
        profiles[batch] = str(calib)
    # Each row is predicted from the profile calibrated just before it; no fitting to the rows.
    measured = pd.read_csv(bench_csv)
    measured = measured[measured["batch"].isin(args.batch)].copy()
    measured["hardware"] = measured["batch"].map(profiles)
    measured_path = run_dir / "measured.csv"
    measured.to_csv(measured_path, index=False)
    dtype = str(measured["dtype"].iloc[0])
    out = Path(args.out)
    run([py, "-m", "laddersim", "validate", str(measured_path), "--dtype", dtype, "--out", str(out / "calibrated")])
    command = f"python calibration/closed_loop.py {' '.join(sys.argv[1:])}".strip()
    noise, line = write_summary(out, measured_path, {Path(profiles[b]): loads[b] for b in args.batch}, command,
                                time.perf_counter() - started, load_start)
    if noise:
        print(noise)
    print(line)  # the summary line stays the last
    return 0


def generic_gemms_only(path: Path) -> None:
    """Drop the model GEMMs (another batch's shapes) from a copied ``gemm.csv``: ``calibrate fit``
    fits the GEMM roofline to the model GEMMs of the run, so each batch's profile is fitted to the
    GEMMs its own runs run (measured again at the batch's shapes right after), not to a batch-1
    step's GEMV-like m = 1 calls as well (a CPU BLAS runs m = 1 and m > 1 on different kernels;
    one roofline through both missed the batch-4 LM head by half)."""
    if path.exists():
        frame = pd.read_csv(path)
        frame[frame["origin"].fillna("generic") == "generic"].to_csv(path, index=False)


def run_figures(validation: pd.DataFrame) -> dict:
    """The closed loop's figures: every row's tokens/s error, and the speedup error of the
    schedules other than standard (whose speedup is 1 by definition), median and worst."""
    tokens = validation["rel_error"].abs() * 100
    speedup = validation.loc[validation["schedule"] != "standard", "speedup_error_pp"].abs()
    return {"tokens_median_pct": float(tokens.median()), "tokens_worst_pct": float(tokens.max()),
            "speedup_median_pp": float(speedup.median()), "speedup_worst_pp": float(speedup.max())}


def summary_line(validation: pd.DataFrame) -> str:
    f = run_figures(validation)
    return (f"closed loop: tokens/s median |error| {f['tokens_median_pct']:.1f}% (worst {f['tokens_worst_pct']:.1f}%); "
            f"speedup median |error| {f['speedup_median_pp']:.1f} pp (worst {f['speedup_worst_pp']:.1f} pp)")


def noise_line(validation: pd.DataFrame) -> str:
    """The measured speedups' own noise, to read their errors against: the width of the per-round
    ratios' interquartile range (ladder_bench's ``speedup_q1``..``speedup_q3``), in points, median
    and widest over the schedules other than standard ("" where the rows carry none)."""
    if not {"speedup_q1", "speedup_q3"} <= set(validation.columns):
        return ""
    other = validation[validation["schedule"] != "standard"]
    width = ((other["speedup_q3"] - other["speedup_q1"]) * 100).dropna()
    if width.empty:
        return ""
    return (f"measured speedups: per-round interquartile range {width.median():.1f} pp wide (median; "
            f"widest {width.max():.1f} pp at batch {int(other.loc[width.idxmax(), 'batch'])} "
            f"{other.loc[width.idxmax(), 'schedule']})")


def write_summary(out: Path, measured_path: Path, calibs: dict[Path, float], command: str, wall_s: float,
                  load_start: tuple[float, ...] = ()) -> tuple[str, str]:
    """``out/index.md``: measured against predicted from the calibrated profile (``calibs``: each
    calibration directory and the 1-minute load average when it started; ``load_start``: the load
    averages when the loop started); returns the noise line ("" without quartiles) and the summary line."""
    from laddersim.hardware.profile import load_profile
    from laddersim.validation.core import error_summary
    from laddersim.validation.report import markdown_table

    calibrated = pd.read_csv(out / "calibrated" / "validation.csv")
    line = summary_line(calibrated)
    noise = noise_line(calibrated)
    spread = [c for c in ("speedup_q1", "speedup_q3") if c in calibrated.columns]
    table = calibrated[["batch", "schedule", "tokens_per_s", "predicted_tokens_per_s", "rel_error",
                        "measured_speedup", *spread, "predicted_speedup", "speedup_error_pp"]]
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    before = " ".join(f"{v:.2f}" for v in load_start)
    loads = f"load average (1, 5, 15 min) at the start {before}, at the end {load}" if before else \
        f"load average at the end {load}"

    mechanisms = []
    for calib, load_1min in calibs.items():
        profile = load_profile(calib)
        host, inter = profile.host_overhead, profile.interference
        curve = ", ".join(f"{p.size_bytes} B: +{p.compute_slowdown:.2f}, +{p.comm_slowdown:.2f}" for p in inter.by_size)
        mechanisms.append(f"- `{calib}` (load average {load_1min:.2f}): interference (compute, comm slowdown): "
                          f"{curve or f'+{inter.compute_slowdown.value:.2f}, +{inter.comm_slowdown.value:.2f}'}")
        if host is not None:
            sampling = f"{host.sampling_us.value:.0f} us" if host.sampling_us is not None else "not measured"
            mechanisms[-1] += (f"; host overhead ({host.mode}, {host.timing}) {host.compute_op_us.value:.2f} us per "
                               f"compute op, {host.view_op_us.value:.2f} us per view, {host.collective_op_us.value:.1f} us "
                               f"per collective issue; sampling {sampling}; GEMM floor "
                               f"{profile.gpu.kernel_launch_us.value:.1f} us, weight streaming "
                               f"{profile.gpu.memory_bandwidth_gb_per_s.value * profile.gpu.gemm_memory_efficiency.value:.1f}"
                               f" GB/s; collectives progress on {host.collective_progress}; a collective waits "
                               f"{100 * host.rank_skew_fraction.value:.1f}% of the compute since the previous one "
                               f"for the slowest rank")
    text = [
        "# Closed loop on this machine: calibrate, measure, predict",
        "",
        "Real runs of `calibration/ladder_bench.py` against laddersim's predictions from the",
        "microbenchmark-calibrated profiles alone (no fitting to the benchmark rows): each batch's rows",
        "from the profile calibrated just before them.",
        "",
        f"Reproduce: `{command}` ({wall_s / 60:.1f} min here; {loads}; this loop's own two ranks",
        "add about 2).",
        "",
        "    " + line,
        *(["    " + noise] if noise else []),
        "",
        "## Every row",
        "",
        markdown_table(table, ".3f"),
        "",
        "## Errors",
        "",
        markdown_table(error_summary(calibrated), ".3f"),
        "",
        markdown_table(error_summary(calibrated, "schedule"), ".3f"),
        "",
        "## What the calibration measured",
        "",
        *mechanisms,
        "",
        "## How to read this",
        "",
        "Two CPU ranks on a shared machine, each pinned to a core of its own (calibrate and benchmark",
        "alike, `laddersim/measure/cores.py`). Calibration measures in the state a decode step runs in,",
        "on every rank at once: a step reads each weight once, after the rest of the rank's weights went",
        "through the caches, so the GEMMs at the model's shapes rotate over weight copies as large as the",
        "step's weights (cold, sharing the memory bandwidth as the ranks do), the per-op framework cost",
        "is timed after that working set streamed and then solved so that the op program prices the model's own modules",
        "as they measured (`laddersim/fitting/modules.py`: chains of tiny ops under-price real modules' ops), the top-k sampling over the vocabulary is timed as one",
        "call, and an AllReduce is what a standard step pays for it (the model's own modules in a row,",
        "each followed by the AllReduce, minus the modules alone, over their number; a mean: the wait",
        "for the slower rank and gloo's thread wake-ups, a long tail, included; its issue on the calling",
        "thread is charged once, by the step's collective launch), and the logits AllGather likewise (each",
        "rank's lm_head slice, then the gather: `calibration/allgather_bench.py`); the overlap of the ladder is measured",
        "as the ladder runs it (the model's modules in ladder order, each AllReduce async; the engine's rates",
        "solved from the mean timings against the table's AllReduce at that size, into which the ladder",
        "chains' own AllReduce is pooled: `laddersim/fitting/step_allreduce.py`), and the ranks' skew as a step meets it",
        "(the slowest rank's excess after stretches of the model's modules: a collective waits for it in proportion to the",
        "compute since the previous one, `calibration/skew_bench.py`, `laddersim/costs/rank_skew.py`). Other processes on the machine change every timing from minute to minute, so the",
        "load-dependent points are measured next to each batch's benchmark, the AllReduce table is fitted",
        "non-decreasing in size (its latency-bound points pooled at their median, `laddersim/fitting/monotone.py`),",
        "and the benchmark times its schedules in paired rounds: a measured speedup is the median over rounds of",
        "each round's ratio, shown with its quartiles (`calibration/paired_rounds.py`). Read the CPU numbers as a check of the",
        f"pipeline and of these mechanisms, not of GPU accuracy. Measured rows: `{measured_path}`; details:",
        "`calibrated/index.md`.",
        "",
    ]
    (out / "index.md").write_text("\n".join(text))
    return noise, line


if __name__ == "__main__":
    sys.exit(main())
