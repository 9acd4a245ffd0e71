"""The kernels of one compiled decode step, per layer: which kernel paths a real step takes.

laddersim prices a decode step as kernels (floors plus bytes); which kernels a compiled step
launches (is a batch-1 linear a generated reduction? does cuBLAS split K at batch 4 and add a
reduce kernel? does Inductor fuse the residual add into the next RMSNorm, the AllReduce input
copy into its producer? how many kernels is decode attention?) is what no public table has.
This program measures it on the benchmark's own model (``ladder_bench.py``, one rank's shard at
``--tp``, the collectives issued on a one-rank group: the same ops, no peers):

* for each schedule, batch and layer count: build the shard, compile the decode step as the
  benchmark does (``torch.compile(mode="reduce-overhead", fullgraph=True)``; ``--eager`` for
  none), warm up, time ``--steps`` steps, then profile ``--steps`` more;
* the kernels of a step: on GPU every CUDA kernel, copy and memset (CUPTI; kernels replayed from
  a CUDA graph included) with its device time; on CPU, its twin, Inductor's generated C++
  kernels (``cpp.enable_kernel_profile``) and every other top-level op (extern GEMMs, the step's
  bookkeeping) with its CPU time;
* per layer: two layer counts (``--layers 1,2``) differ by whole layers, so their difference
  divided by the layer difference is one layer's kernels, exactly (a count that does not divide
  is reported as irregular).

Writes ``OUT/kernels.csv`` (every kernel signature of every point: calls and us per step),
``OUT/per_layer.csv`` (per point and kernel class: kernels and us per layer, and the step's
measured us per layer), ``OUT/layer_kernels.csv`` (one layer's kernels by signature) and
``OUT/PROVENANCE.md`` (device, driver, torch, date, command). A finished point is kept: an
interrupted run resumes. Last line: ``kernel trace: ...`` with each point's kernels per layer.

    # GPU, Llama-3.1-8B shapes at TP 1, the batches of issue 19 (16 compiles of a 1- or 2-layer
    # model; minutes each with coordinate-descent tuning: a rerun resumes where one stopped):
    python calibration/kernel_trace.py --model llama-3.1-8b --batch 1,4,16,64 --out runs/kernel_trace
    # its CPU twin (Inductor's C++ kernels), the TP 8 shard of the same model:
    python calibration/kernel_trace.py --model llama-3.1-8b --tp 8 --batch 1,4 --steps 3 --out /tmp/kt
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import datetime
import io
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # run as `python calibration/kernel_trace.py` from a checkout
    sys.path.insert(0, _ROOT)

# Kineto (torch's profiler) prints profiler_start/stop lines on stderr at every trace unless its
# log level is above its highest (5); read at the first trace, so setting it here is enough.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from calibration import ladder_bench as lb  # noqa: E402
from calibration import ladder_comm as lcomm  # noqa: E402
from calibration import ladder_model as lmodel  # noqa: E402
from calibration.trace_kernels import (  # noqa: E402
    class_totals, cpu_kernels, gpu_kernels, kernel_class, per_layer, signature,
)
from laddersim.calibrate.fit_context import atomic_write  # noqa: E402
from laddersim.errors import UserInputError  # noqa: E402
from laddersim.io_write import lock_run_dir  # noqa: E402
from laddersim.model_shape import load_model_shape  # noqa: E402

TIMED_WARMUP_STEPS = 3  # reduce-overhead records its CUDA graph over the first calls
FIELDS_KERNELS = ("device", "mode", "sdpa", "tp", "schedule", "batch", "layers", "kernel", "kernel_class",
                  "calls_per_step", "us_per_step")
FIELDS_PER_LAYER = ("device", "mode", "sdpa", "tp", "schedule", "batch", "layers_from", "layers_to", "kernel_class",
                    "kernels_per_layer", "us_per_layer", "regular", "model_kernels_per_layer")
FIELDS_LAYER_KERNELS = ("device", "mode", "sdpa", "tp", "schedule", "batch", "kernel", "kernel_class",
                        "calls_per_layer", "us_per_layer")


def log(msg: str) -> None:
    print(f"[kernel_trace] {msg}", file=sys.stderr, flush=True)


def trace_point(model, comm, schedule: str, batch: int, pos: int, compiled: bool, steps: int,
                device: torch.device, cudagraphs: bool = True) -> tuple[dict[str, tuple[int, float]], float]:
    """{kernel signature: (calls per step, us per step)} of ``steps`` profiled decode steps, and
    the step's wall-clock us (``steps`` timed steps, no profiler)."""
    def decode_one(tok, input_pos):
        return lb.sample(lb.forward(model, tok, input_pos, schedule, comm), 0.8, 200)

    fn = decode_one
    if compiled:
        fn = torch.compile(decode_one, mode="reduce-overhead" if cudagraphs else None, fullgraph=True)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    tok = torch.zeros(batch, 1, dtype=torch.long, device=device)
    new = torch.empty(batch, TIMED_WARMUP_STEPS + 2 * steps, dtype=torch.long, device=device)
    input_pos = torch.tensor([pos], device=device)
    taken = [0, tok]  # steps run so far, the last token

    def run_steps(count: int) -> None:  # decode steps, each at position ``pos`` (the same KV length)
        for _ in range(count):
            taken[1] = lb.step(fn, taken[1], input_pos, new, taken[0])
            taken[0] += 1
            input_pos.fill_(pos)
        sync()

    with torch.no_grad():
        run_steps(TIMED_WARMUP_STEPS)
        start = time.perf_counter()
        run_steps(steps)
        step_us = (time.perf_counter() - start) / steps * 1e6
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            run_steps(steps)
    kernels = gpu_kernels(prof) if cuda else cpu_kernels(prof)
    totals: dict[str, list[float]] = {}
    for name, us in kernels:
        entry = totals.setdefault(signature(name), [0, 0.0])
        entry[0] += 1
        entry[1] += us
    return {k: (round(n / steps), us / steps) for k, (n, us) in totals.items()}, step_us


# ---- the run -------------------------------------------------------------------------------------

def _ints(flag: str, text: str, minimum: int = 1) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserInputError(f"{flag}: comma-separated integers >= {minimum}, got '{text}'") from None
    if not values or min(values) < minimum:
        raise UserInputError(f"{flag}: comma-separated integers >= {minimum}, got '{text}'")
    return list(dict.fromkeys(values))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernel_trace.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-3.1-8b", help="a preset or a Hugging Face config.json")
    p.add_argument("--tp", type=int, default=1, help="the shard of rank 0 of this many (collectives on one rank)")
    p.add_argument("--batch", default="1,4,16,64", help="comma-separated batch sizes")
    p.add_argument("--schedule", default="standard,parallel",
                   help=f"comma-separated schedules; allowed: {', '.join(lb.SCHEDULES)} (at TP 1 ladder and "
                        "upper_bound run standard's kernels)")
    p.add_argument("--layers", default="1,2", help="two layer counts, fewer first (their difference is per layer)")
    p.add_argument("--max-seq", type=int, default=1536, help="static KV cache length (the paper: 1024 + 512)")
    p.add_argument("--pos", type=int, default=1024, help="the decode position traced (< --max-seq)")
    p.add_argument("--steps", type=int, default=20, help="decode steps timed, and as many profiled")
    p.add_argument("--eager", action="store_true", help="no torch.compile (the framework's eager ops)")
    p.add_argument("--no-cudagraphs", action="store_true",
                   help="compile without CUDA graphs (the same generated kernels, each launched by the host)")
    p.add_argument("--sdpa", choices=("default", "math"), default="default",
                   help="decode attention backend: torch's choice (as ladder_bench runs it) or the math "
                        "path only (lowered by Inductor into generated kernels)")
    p.add_argument("--dtype", choices=tuple(lb.DTYPES), default=None, help="default: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--predict", default=None, metavar="HARDWARE",
                   help="also write the kernels laddersim's op program charges a layer (gpt-fast, this "
                        "hardware profile: laddersim.costs.kernel_counts) beside the traced ones")
    p.add_argument("--out", required=True, help="directory for the CSVs and PROVENANCE.md (a rerun resumes)")
    return p


def make_config(args: argparse.Namespace) -> dict:
    """The validated settings (UserInputError naming the flag)."""
    try:
        shape = load_model_shape(args.model)
    except UserInputError as exc:
        raise UserInputError(f"--model: {str(exc).removeprefix('model: ')}") from None
    if args.tp < 1:
        raise UserInputError(f"--tp: must be an integer >= 1, got {args.tp}")
    try:
        shape.check_tp(args.tp)
    except UserInputError as exc:
        raise UserInputError(f"--tp: {str(exc).removeprefix('tp: ')}") from None
    schedules = [s.strip() for s in args.schedule.split(",") if s.strip()]
    unknown = [s for s in schedules if s not in lb.SCHEDULES]
    if not schedules or unknown:
        raise UserInputError(f"--schedule: unknown '{unknown[0] if unknown else args.schedule}'; "
                             f"allowed: {', '.join(lb.SCHEDULES)}")
    layers = _ints("--layers", args.layers)
    if len(layers) != 2 or layers[0] >= layers[1]:
        raise UserInputError(f"--layers: two layer counts, fewer first (e.g. 1,2), got '{args.layers}'")
    if args.steps < 1:
        raise UserInputError(f"--steps: must be an integer >= 1, got {args.steps}")
    if not 0 <= args.pos < args.max_seq:
        raise UserInputError(f"--pos: must be in 0..{args.max_seq - 1} (--max-seq {args.max_seq}), got {args.pos}")
    predict = None
    if args.predict is not None:
        from laddersim.hardware.profile import load_profile
        try:
            predict = load_profile(args.predict)
        except UserInputError as exc:
            raise UserInputError(f"--predict: {str(exc).removeprefix('hardware: ')}") from None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {"predict": predict, "shape": shape, "tp": args.tp, "batches": _ints("--batch", args.batch),
            "schedules": schedules, "layers": layers, "max_seq": args.max_seq, "pos": args.pos, "steps": args.steps,
            "compiled": not args.eager, "cudagraphs": not args.no_cudagraphs, "device": device, "sdpa": args.sdpa,
            "dtype": args.dtype or ("bfloat16" if device == "cuda" else "float32"), "out": Path(args.out)}


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _write(path: Path, fields: Sequence[str], rows: list[dict]) -> None:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(fields))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(path, text.getvalue())  # whole or not at all: an interrupted write leaves the last table


def _key(row: dict) -> tuple:
    return (row["device"], row["mode"], row["sdpa"], str(row["tp"]), row["schedule"], str(row["batch"]),
            str(row["layers"]))


def _provenance(cfg: dict, argv: Sequence[str]) -> str:
    lines = [f"# Kernel trace: {cfg['shape'].name}, TP {cfg['tp']} shard, {cfg['dtype']}",
             "", f"- command: `python calibration/kernel_trace.py {shlex.join(argv)}`",
             f"- date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M')}",
             f"- torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}"]
    if cfg["device"] == "cuda":
        props = torch.cuda.get_device_properties(0)
        lines.append(f"- GPU: {props.name}, {props.multi_processor_count} SMs, CUDA {torch.version.cuda}")
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
            lines.append(f"- driver: {driver[0] if driver else 'not reported'}")
        except (OSError, subprocess.SubprocessError):
            lines.append("- driver: nvidia-smi not available")
    else:
        lines.append(f"- CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
                     "(the CPU twin: Inductor's C++ kernels, CPU time)")
    return "\n".join(lines) + "\n"


def _sdpa_backend(choice: str):
    """The attention backend context: torch's own choice, or the math path only."""
    if choice == "math":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.MATH])
    return contextlib.nullcontext()


def run(cfg: dict, argv: Sequence[str]) -> list[str]:
    """Trace every pending point, then write the per-layer tables; returns the summary parts."""
    lock_run_dir(cfg["out"], "--out")  # one writer per --out
    out = cfg["out"]
    provenance = out / "PROVENANCE.md"
    if provenance.exists():  # a resumed run: the first run's record stays, this one is added
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
        with provenance.open("a") as f:
            f.write(f"- resumed (UTC) {stamp}: `python calibration/kernel_trace.py {shlex.join(argv)}`\n")
    else:
        provenance.write_text(_provenance(cfg, argv))
    device = torch.device(cfg["device"])
    mode = ("compile" if cfg["cudagraphs"] else "compile-no-graphs") if cfg["compiled"] else "eager"
    steps_rows = _read(out / "steps.csv")
    done = {_key(r) for r in steps_rows}
    kernel_rows = [{**r, "kernel_class": kernel_class(r["kernel"])}  # classed by this version's rules
                   for r in _read(out / "kernels.csv") if _key(r) in done]  # a half-written point dropped
    if cfg["compiled"]:
        import torch._inductor.config as inductor_config
        lb.configure_inductor_as_gpt_fast()
        inductor_config.cpp.enable_kernel_profile = True  # CPU: each generated kernel a profiler event
    comm = lcomm.NO_COMM
    if cfg["tp"] > 1 and not dist.is_initialized():
        store = dist.FileStore(str(out / ".store"), 1)
        dist.init_process_group("nccl" if cfg["device"] == "cuda" else "gloo", store=store, rank=0, world_size=1)
    if cfg["tp"] > 1:
        comm = lcomm.FuncolComm() if cfg["compiled"] else lcomm.DistComm()
    points = [(s, b, n) for b in cfg["batches"] for s in cfg["schedules"] for n in cfg["layers"]]
    for i, (schedule, batch, layers) in enumerate(points, 1):
        base = {"device": cfg["device"], "mode": mode, "sdpa": cfg["sdpa"], "tp": cfg["tp"], "schedule": schedule,
                "batch": batch, "layers": layers}
        if _key(base) in done:
            continue
        t0 = time.perf_counter()
        shape = cfg["shape"].model_copy(update={"n_layers": layers})
        model = lmodel.build_model(shape, 0, cfg["tp"], batch, cfg["max_seq"], 0, device, lb.DTYPES[cfg["dtype"]])
        torch._dynamo.reset()
        with _sdpa_backend(cfg["sdpa"]):
            kernels, step_us = trace_point(model, comm, schedule, batch, cfg["pos"], cfg["compiled"], cfg["steps"],
                                           device, cfg["cudagraphs"])
        seen = sum(n for n, _ in kernels.values())
        if cfg["device"] == "cuda" and seen < layers:
            log(f"WARNING {schedule} batch {batch}: {seen} kernels seen for {layers} layer(s): the profiler may "
                "not see this CUDA build's graph replays; rerun with --no-cudagraphs")
        del model
        kernel_rows += [{**base, "kernel": k, "kernel_class": kernel_class(k), "calls_per_step": n,
                         "us_per_step": round(us, 3)} for k, (n, us) in sorted(kernels.items())]
        _write(out / "kernels.csv", FIELDS_KERNELS, kernel_rows)
        steps_rows.append({**base, "step_us": round(step_us, 3)})
        _write(out / "steps.csv", (*base, "step_us"), steps_rows)
        log(f"{i}/{len(points)} {schedule} batch {batch} {layers} layer(s): {seen} kernels, step {step_us:.1f} us "
            f"({time.perf_counter() - t0:.0f} s)")
    return _summarise(out, kernel_rows, steps_rows, cfg, mode)


def predicted_per_layer(cfg: dict, schedule: str, batch: int) -> dict[str, float]:
    """The kernels laddersim's op program charges one layer (gpt-fast; {} without --predict)."""
    if cfg.get("predict") is None:
        return {}
    from laddersim.costs.kernel_counts import kernels_per_layer
    from laddersim.costs.op_costs import Phase
    from laddersim.workload import Workload

    work = Workload(batch=batch, prompt_len=max(cfg["pos"], 1), gen_len=1, framework="gpt-fast")
    return kernels_per_layer(cfg["shape"], cfg["predict"], work, cfg["tp"], Phase("decode", batch, 1), schedule)


def _summarise(out: Path, kernel_rows: list[dict], steps_rows: list[dict], cfg: dict, mode: str) -> list[str]:
    lo, hi = cfg["layers"]
    by_point: dict[tuple, dict[str, tuple[int, float]]] = collections.defaultdict(dict)
    for r in kernel_rows:
        by_point[_key(r)][r["kernel"]] = (int(r["calls_per_step"]), float(r["us_per_step"]))
    step_of = {_key(r): float(r["step_us"]) for r in steps_rows}
    layer_rows, class_rows, summary = [], [], []
    for schedule in cfg["schedules"]:
        for batch in cfg["batches"]:
            base = {"device": cfg["device"], "mode": mode, "sdpa": cfg["sdpa"], "tp": cfg["tp"], "schedule": schedule,
                    "batch": batch}
            keys = [_key({**base, "layers": n}) for n in (lo, hi)]
            if not all(k in step_of for k in keys):
                continue
            one, regular = per_layer(by_point[keys[0]], by_point[keys[1]], hi - lo)
            layer_rows += [{**base, "kernel": k, "kernel_class": kernel_class(k), "calls_per_layer": round(c, 3),
                            "us_per_layer": round(u, 3)} for k, (c, u) in one.items()]
            totals = class_totals(one)
            model = predicted_per_layer(cfg, schedule, batch)
            for cls, (calls, us) in totals.items():
                class_rows.append({**base, "layers_from": lo, "layers_to": hi, "kernel_class": cls,
                                   "kernels_per_layer": round(calls, 3), "us_per_layer": round(us, 3),
                                   "regular": regular, "model_kernels_per_layer": model.get(cls, "")})
            step_us = (step_of[keys[1]] - step_of[keys[0]]) / (hi - lo)
            class_rows.append({**base, "layers_from": lo, "layers_to": hi, "kernel_class": "step (wall clock)",
                               "kernels_per_layer": "", "us_per_layer": round(step_us, 3), "regular": regular})
            count = sum(c for c, _ in totals.values())
            parts = ", ".join(f"{c:g} {cls}" for cls, (c, _) in totals.items() if c)
            said = (f"; laddersim {sum(model.values()):g} ("
                    + ", ".join(f"{c:g} {cls}" for cls, c in model.items() if c) + ")") if model else ""
            summary.append(f"{schedule} b{batch}: {count:g} kernels/layer ({parts}){'' if regular else ' IRREGULAR'}, "
                           f"{step_us:.1f} us/layer{said}")
    _write(out / "per_layer.csv", FIELDS_PER_LAYER, class_rows)
    _write(out / "layer_kernels.csv", FIELDS_LAYER_KERNELS, layer_rows)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = make_config(build_parser().parse_args(argv))
        summary = run(cfg, argv)
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        log("interrupted: finished points are kept in --out; rerun the same command to resume")
        return 130
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    print("kernel trace: " + ("; ".join(summary) if summary else "no point finished"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
