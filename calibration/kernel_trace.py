"""The kernels of one compiled decode step, per layer: which kernel paths a real step takes.

laddersim prices a decode step as kernels (floors plus bytes); which kernels a compiled step
launches (is a batch-1 linear a generated reduction? does cuBLAS split K at batch 4 and add a
reduce kernel? does Inductor fuse the residual add into the next RMSNorm, the AllReduce input
copy into its producer? how many kernels is decode attention?) is what no public table has.
This program measures it on the benchmark's own model (``ladder_bench.py``, one rank's shard at
``--tp``, the collectives issued on a one-rank group: the same ops, no peers), by default the
Ladder Residual paper's benchmark exactly (``ladder_model.PAPER``: fp16 on GPU, fused ``wqkv``,
gate and up one GEMM, math SDPA over the whole static cache with K/V repeated to every query
head; ``--mlp split``, ``--sdpa default`` and ``--dtype`` for the variants):

* for each schedule, batch and layer count: build the shard, compile the pass as the benchmark
  does (``--phase decode``: the decode step with ``torch.compile(mode="reduce-overhead",
  fullgraph=True)``, CUDA graphs; ``--phase prefill``: a prefill of ``--prompt-len`` tokens with
  ``torch.compile(dynamic=False, fullgraph=True)``; ``--eager`` for none), warm up, time
  ``--steps`` passes, then profile ``--steps`` more;
* the kernels of a step: on GPU every CUDA kernel, copy and memset (CUPTI; kernels replayed from
  a CUDA graph included) with its device time; on CPU, its twin, Inductor's generated C++
  kernels (``cpp.enable_kernel_profile``) and every other top-level op (extern GEMMs, the step's
  bookkeeping) with its CPU time;
* per layer: two layer counts (``--layers 2,3``) differ by whole layers, so their difference
  divided by the layer difference is one layer's kernels, exactly (a count that does not divide
  is reported as irregular). Not 1 and 2: Inductor names a fused kernel by what it fuses, and
  the first layer's norm fuses with the embedding lookup, so a 1-layer model's kernel names
  differ from a longer one's and per-signature differences go negative (class totals hold).

Writes ``OUT/kernels.csv`` (every kernel signature of every point: calls and us per step),
``OUT/per_layer.csv`` (per point and kernel class: kernels and us per layer, and the step's
measured us per layer), ``OUT/layer_kernels.csv`` (one layer's kernels by signature) and
``OUT/PROVENANCE.md`` (device, driver, torch, date, command). A finished point is kept: an
interrupted run resumes. Last line: ``kernel trace: ...`` with each point's kernels per layer.

    # GPU, the paper's configuration, Llama-3.1-8B at TP 1 and rank 0's shard of TP 8 (16 compiles
    # of a 2- or 3-layer model each; minutes each with coordinate-descent tuning: a rerun resumes):
    python calibration/kernel_trace.py --model llama-3.1-8b --schedule standard --batch 1,4,16,64 --out runs/kt_tp1
    python calibration/kernel_trace.py --model llama-3.1-8b --tp 8 --batch 1,4,16,64 --out runs/kt_tp8
    # its prefill (compiled with static shapes) of the paper's 1024-token prompt:
    python calibration/kernel_trace.py --model llama-3.1-8b --phase prefill --batch 1,4 --out runs/kt_tp1_prefill
    # the variants: torch 2.11's default attention and upstream gpt-fast's two MLP GEMMs
    python calibration/kernel_trace.py --model llama-3.1-8b --sdpa default --mlp split --out runs/kt_tp1_default
    # its CPU twin (Inductor's C++ kernels, float32), the TP 8 shard of the same model:
    python calibration/kernel_trace.py --model llama-3.1-8b --tp 8 --batch 1,4 --steps 3 --out /tmp/kt
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
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

from calibration import ladder_comm as lcomm  # noqa: E402
from calibration import ladder_forward as lf  # noqa: E402
from calibration import ladder_model as lmodel  # noqa: E402
from calibration.kernel_tables import (  # noqa: E402
    FIELDS_KERNELS, OLD_POINT_DEFAULTS, point_base, point_key, read_table, summarise, write_table,
)
from calibration.kernel_tables import provenance as provenance_text  # noqa: E402
from calibration.trace_kernels import cpu_kernels, gpu_kernels, kernel_class, signature  # noqa: E402
from laddersim.errors import UserInputError  # noqa: E402
from laddersim.support.io_write import lock_run_dir  # noqa: E402
from laddersim.model.shape import load_model_shape  # noqa: E402

TIMED_WARMUP_STEPS = 3  # reduce-overhead records its CUDA graph over the first calls


def log(msg: str) -> None:
    print(f"[kernel_trace] {msg}", file=sys.stderr, flush=True)


def trace_point(model, comm, schedule: str, batch: int, pos: int, compiled: bool, steps: int,
                device: torch.device, cudagraphs: bool = True,
                prompt_len: int = 0) -> tuple[dict[str, tuple[int, float]], float]:
    """{kernel signature: (calls per step, us per step)} of ``steps`` profiled passes, and a
    pass's wall-clock us (``steps`` timed passes, no profiler). A pass is a decode step at position
    ``pos``, or with ``prompt_len`` a prefill of that many tokens (positions 0 .. prompt_len - 1)."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if prompt_len:
        def prefill_one(prompt, input_pos):
            return lf.prefill(model, prompt, input_pos, schedule, comm, 0.8, 200)

        fn = lf.compile_prefill(prefill_one) if compiled else prefill_one
        prompt = torch.zeros(batch, prompt_len, dtype=torch.long, device=device)
        prompt_pos = torch.arange(prompt_len, device=device)

        def run_steps(count: int) -> None:  # prefills of the same prompt (the caches rewritten)
            for _ in range(count):
                fn(prompt, prompt_pos)
            sync()
    else:
        def decode_one(tok, input_pos):
            return lf.sample(lf.forward(model, tok, input_pos, schedule, comm), 0.8, 200)

        fn = decode_one
        if compiled:
            fn = lf.compile_decode(decode_one) if cudagraphs else torch.compile(decode_one, fullgraph=True)
        tok = torch.zeros(batch, 1, dtype=torch.long, device=device)
        new = torch.empty(batch, TIMED_WARMUP_STEPS + 2 * steps, dtype=torch.long, device=device)
        input_pos = torch.tensor([pos], device=device)
        taken = [0, tok]  # steps run so far, the last token

        def run_steps(count: int) -> None:  # decode steps, each at position ``pos`` (the same KV length)
            for _ in range(count):
                taken[1] = lf.step(fn, taken[1], input_pos, new, taken[0])
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
                   help=f"comma-separated schedules; allowed: {', '.join(lf.SCHEDULES)} (at TP 1 ladder and "
                        "upper_bound run standard's kernels)")
    p.add_argument("--phase", choices=("decode", "prefill"), default="decode",
                   help="the pass traced: a decode step at --pos, or a prefill of --prompt-len tokens")
    p.add_argument("--layers", default="2,3", help="two layer counts, fewer first (their difference is per layer)")
    p.add_argument("--max-seq", type=int, default=1536, help="static KV cache length (the paper: 1024 + 512)")
    p.add_argument("--pos", type=int, default=1024, help="the decode position traced (< --max-seq)")
    p.add_argument("--prompt-len", type=int, default=1024,
                   help="with --phase prefill: the prompt's tokens (<= --max-seq; the paper: 1024)")
    p.add_argument("--steps", type=int, default=20, help="passes timed, and as many profiled")
    p.add_argument("--eager", action="store_true", help="no torch.compile (the framework's eager ops)")
    p.add_argument("--no-cudagraphs", action="store_true",
                   help="compile without CUDA graphs (the same generated kernels, each launched by the host)")
    lmodel.add_variant_flags(p)
    p.add_argument("--dtype", choices=tuple(lf.DTYPES), default=None,
                   help="default: float16 on GPU (the paper's), float32 on CPU (the CPU twin)")
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
    unknown = [s for s in schedules if s not in lf.SCHEDULES]
    if not schedules or unknown:
        raise UserInputError(f"--schedule: unknown '{unknown[0] if unknown else args.schedule}'; "
                             f"allowed: {', '.join(lf.SCHEDULES)}")
    layers = _ints("--layers", args.layers)
    if len(layers) != 2 or layers[0] >= layers[1]:
        raise UserInputError(f"--layers: two layer counts, fewer first (e.g. 1,2), got '{args.layers}'")
    if args.steps < 1:
        raise UserInputError(f"--steps: must be an integer >= 1, got {args.steps}")
    if args.phase == "decode" and not 0 <= args.pos < args.max_seq:
        raise UserInputError(f"--pos: must be in 0..{args.max_seq - 1} (--max-seq {args.max_seq}), got {args.pos}")
    if args.phase == "prefill" and not 1 <= args.prompt_len <= args.max_seq:
        raise UserInputError(f"--prompt-len: must be in 1..{args.max_seq} (--max-seq {args.max_seq}), "
                             f"got {args.prompt_len}")
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
            "compiled": not args.eager, "cudagraphs": not args.no_cudagraphs, "device": device, "phase": args.phase,
            "prompt_len": args.prompt_len if args.phase == "prefill" else 0,
            "variant": lmodel.Variant(mlp=args.mlp, sdpa=args.sdpa),
            "dtype": args.dtype or lf.default_dtype(device), "out": Path(args.out)}


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
        provenance.write_text(provenance_text(cfg, argv))
    device = torch.device(cfg["device"])
    mode = ("compile" if cfg["cudagraphs"] else "compile-no-graphs") if cfg["compiled"] else "eager"
    steps_rows = [{**OLD_POINT_DEFAULTS, **r} for r in read_table(out / "steps.csv")]
    done = {point_key(r) for r in steps_rows}
    kernel_rows = [{**OLD_POINT_DEFAULTS, **r, "kernel_class": kernel_class(r["kernel"])}  # this version's classes
                   for r in read_table(out / "kernels.csv") if point_key(r) in done]  # a half-written point dropped
    if cfg["compiled"]:
        import torch._inductor.config as inductor_config
        lf.configure_inductor_as_gpt_fast()
        inductor_config.cpp.enable_kernel_profile = True  # CPU: each generated kernel a profiler event
    comm = lcomm.NO_COMM
    if cfg["tp"] > 1 and not dist.is_initialized():
        store = dist.FileStore(str(out / ".store"), 1)
        dist.init_process_group("nccl" if cfg["device"] == "cuda" else "gloo", store=store, rank=0, world_size=1)
    if cfg["tp"] > 1:
        comm = lcomm.FuncolComm() if cfg["compiled"] else lcomm.DistComm()
    points = [(s, b, n) for b in cfg["batches"] for s in cfg["schedules"] for n in cfg["layers"]]
    for i, (schedule, batch, layers) in enumerate(points, 1):
        base = {**point_base(cfg, mode, schedule, batch), "layers": layers}
        if point_key(base) in done:
            continue
        t0 = time.perf_counter()
        shape = cfg["shape"].model_copy(update={"n_layers": layers})
        model = lmodel.build_model(shape, 0, cfg["tp"], batch, cfg["max_seq"], 0, device, lf.DTYPES[cfg["dtype"]],
                                   cfg["variant"])
        torch._dynamo.reset()
        kernels, step_us = trace_point(model, comm, schedule, batch, cfg["pos"], cfg["compiled"], cfg["steps"],
                                       device, cfg["cudagraphs"], cfg["prompt_len"])
        seen = sum(n for n, _ in kernels.values())
        if cfg["device"] == "cuda" and seen < layers:
            log(f"WARNING {schedule} batch {batch}: {seen} kernels seen for {layers} layer(s): the profiler may "
                "not see this CUDA build's graph replays; rerun with --no-cudagraphs")
        del model
        kernel_rows += [{**base, "kernel": k, "kernel_class": kernel_class(k), "calls_per_step": n,
                         "us_per_step": round(us, 3)} for k, (n, us) in sorted(kernels.items())]
        write_table(out / "kernels.csv", FIELDS_KERNELS, kernel_rows)
        steps_rows.append({**base, "step_us": round(step_us, 3)})
        write_table(out / "steps.csv", (*base, "step_us"), steps_rows)
        log(f"{i}/{len(points)} {schedule} batch {batch} {layers} layer(s): {seen} kernels, step {step_us:.1f} us "
            f"({time.perf_counter() - t0:.0f} s)")
    return summarise(out, kernel_rows, steps_rows, cfg, mode)


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
