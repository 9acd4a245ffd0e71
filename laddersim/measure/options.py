"""The ``calibrate run`` request: flags (shared by the CLI and ``calibration/*.py``) and checks."""

from __future__ import annotations

import argparse
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from laddersim.measure.schema import BENCHMARKS
from laddersim.errors import UserInputError
from laddersim.model.workload import DTYPE_BYTES as WORKLOAD_DTYPE_BYTES

BACKENDS = ("auto", "gloo", "nccl")
DTYPES = ("float16", "bfloat16", "float32")
DTYPE_BYTES = {d: WORKLOAD_DTYPE_BYTES[d] for d in DTYPES}  # element size of each of DTYPES
_UNITS = {"": 1, "B": 1, "K": 1024, "KIB": 1024, "KB": 1000, "M": 1024**2, "MIB": 1024**2,
          "MB": 1000**2, "G": 1024**3, "GIB": 1024**3, "GB": 1000**3}


# Repetitions of a CPU chain point (``RunOptions.chain_repeat_count``). On this project's 2-core
# VM, the README's --quick calibration (5 repetitions) timed a ladder chain of the 4-layer example
# model whose per-module AllReduce cost was 574 us beside 1787 us alone (p10-p90 of the modules'
# slowdown 0.61-1.52), a chain 1.94x faster than the standard one, where the real ladder step was
# 1.28x: the fitted ladder speedup missed by 17 points. The closed loop takes 100
# (calibration/closed_loop.py --comm-repeats); 30 keeps a --quick run under a minute.
CHAIN_REPEATS = 30


class RunOptions(BaseModel):
    """What to measure. Empty tuples mean "the default grid for this device" (see ``grid``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["auto", "gloo", "nccl"] = "auto"
    world_size: int = Field(default=2, ge=1)
    out: str
    quick: bool = False
    benchmarks: tuple[str, ...] = BENCHMARKS
    sizes_bytes: tuple[int, ...] = ()
    dtypes: tuple[str, ...] = ()  # AllReduce dtypes; GEMM/memory use the compute dtype
    models: tuple[str, ...] = ()
    tp: tuple[int, ...] = ()
    batch: tuple[int, ...] = ()
    prompt_len: tuple[int, ...] = ()
    warmup: int = Field(default=0, ge=0)  # 0 = default (5, or 2 with --quick)
    repeats: int = Field(default=0, ge=0)  # 0 = default (25, or 5 with --quick)
    graph: bool = True  # on CUDA, also time CUDA-graph captured collectives and GEMMs
    # Locally spawned ranks: a run in which no rank finishes a timed step for this long is hung
    # (a rank stopped, a deadlock, a stalled device) and is stopped with one line. A timed step
    # is one call (or graph replay) of a point; 10 minutes is far above any step of the default
    # grids on a slow machine, while torch's own collective timeout (30 minutes) says nothing.
    rank_timeout_s: float = Field(default=600.0, gt=0)

    @property
    def warmup_count(self) -> int:
        return self.warmup or (2 if self.quick else 5)

    @property
    def repeat_count(self) -> int:
        return self.repeats or (5 if self.quick else 25)

    @property
    def chain_repeat_count(self) -> int:
        """Repetitions of the points that time the model's own modules beside collectives on CPU
        ranks (a step's AllReduce and logits AllGather, the ladder chains, the rank skew): each is
        a mean of differences of timings that gloo's thread wake-ups and the other rank's skew
        scatter, so ``--quick``'s 5 do not pin it (``CHAIN_REPEATS``); ``--repeats`` given wins."""
        return self.repeats or max(CHAIN_REPEATS, self.repeat_count)


def parse_size_bytes(text: str) -> int:
    """'4096', '64KiB', '1MiB', '2G' -> bytes (K/M/G and KiB/MiB/GiB are powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS or int(match.group(1)) == 0:
        raise UserInputError(f"sizes: '{text}' is not a positive size; allowed: e.g. 4096, 64KiB, 1MiB, 2GiB")
    return int(match.group(1)) * _UNITS[unit]


def _csv_list(text: str) -> list[str]:
    return [t for t in re.split(r"[,\s]+", text) if t]


def _ints(name: str, values: list[str] | None) -> tuple[int, ...]:
    out = []
    for text in values or []:
        for item in _csv_list(text):
            if not item.isdigit() or int(item) < 1:
                raise UserInputError(f"{name}: '{item}' is not a positive integer")
            out.append(int(item))
    return tuple(out)


def _choices(name: str, values: list[str] | None, allowed: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for text in values or []:
        for item in _csv_list(text):
            if item not in allowed:
                raise UserInputError(f"{name}: unknown '{item}'; allowed: {', '.join(allowed)}")
            out.append(item)
    return tuple(dict.fromkeys(out))


def add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="auto: nccl when CUDA GPUs are visible, else gloo on CPU")
    p.add_argument("--world-size", type=int, default=2,
                   help="local ranks to spawn when not under torchrun (ignored under torchrun)")
    p.add_argument("--out", required=True, help="run directory (created; re-run to resume)")
    p.add_argument("--quick", action="store_true", help="a small grid with few repeats")
    p.add_argument("--benchmarks", action="append", metavar="LIST",
                   help=f"subset of {','.join(BENCHMARKS)} (default all)")
    p.add_argument("--sizes", action="append", metavar="LIST",
                   help="AllReduce sizes per rank, e.g. 1KiB,64KiB,1MiB (default 1KiB..256MiB, x2)")
    p.add_argument("--dtypes", action="append", metavar="LIST",
                   help=f"AllReduce dtypes from {','.join(DTYPES)} (default all three)")
    p.add_argument("--models", action="append", metavar="LIST",
                   help="models whose GEMM shapes to time (presets or HF config.json paths)")
    p.add_argument("--tp", action="append", metavar="LIST", help="TP degrees for the model GEMM shapes")
    p.add_argument("--batch", action="append", metavar="LIST", help="batch sizes for the model GEMM shapes")
    p.add_argument("--prompt-len", action="append", metavar="LIST",
                   help="also time prefill GEMMs (m = batch * prompt_len)")
    p.add_argument("--warmup", type=int, default=0, help="warm-up iterations per point")
    p.add_argument("--repeats", type=int, default=0, help="timed repetitions per point")
    p.add_argument("--no-graph", dest="graph", action="store_false",
                   help="on CUDA, skip the CUDA-graph captured timings")
    p.add_argument("--rank-timeout-s", type=float, default=RunOptions.model_fields["rank_timeout_s"].default,
                   metavar="S", help="stop a run in which no rank finishes a timed step for S seconds, as hung "
                                     "(locally spawned ranks; default %(default)g)")


def options_from_args(args: argparse.Namespace) -> RunOptions:
    if args.world_size < 1:
        raise UserInputError(f"world-size: must be a positive integer, got {args.world_size}")
    if args.warmup < 0 or args.repeats < 0:
        raise UserInputError("warmup/repeats: must be >= 0 (0 = default)")
    check_rank_timeout(args.rank_timeout_s)
    sizes = tuple(parse_size_bytes(s) for text in args.sizes or [] for s in _csv_list(text))
    opts = RunOptions(
        backend=args.backend, world_size=args.world_size, out=args.out, quick=args.quick,
        benchmarks=_choices("benchmarks", args.benchmarks, BENCHMARKS) or BENCHMARKS,
        sizes_bytes=tuple(sorted(set(sizes))),
        dtypes=_choices("dtypes", args.dtypes, DTYPES),
        models=tuple(m for text in args.models or [] for m in _csv_list(text)),
        tp=_ints("tp", args.tp), batch=_ints("batch", args.batch),
        prompt_len=_ints("prompt-len", args.prompt_len),
        warmup=args.warmup, repeats=args.repeats, graph=args.graph, rank_timeout_s=args.rank_timeout_s,
    )
    check_unused_options(opts)
    return opts


def check_rank_timeout(seconds: float) -> None:
    if not seconds > 0 or seconds == float("inf"):
        raise UserInputError(f"rank-timeout-s: must be a positive number of seconds, got {seconds:g}")


# Options that only refine another one: (fields, what they need). The flag of a field is its
# name with '-' for '_' ('sizes_bytes' is --sizes).
_DEPENDENT_OPTIONS = (
    (("tp", "batch", "prompt_len"), "models"),  # the model GEMM shapes
    (("models",), "gemm"),
    (("sizes_bytes", "dtypes"), "allreduce"),
)


def _flag(field: str) -> str:
    return {"sizes_bytes": "sizes"}.get(field, field).replace("_", "-")


def check_unused_options(opts: RunOptions) -> None:
    """Refuse options that this request would silently ignore: --tp/--batch/--prompt-len without
    --models, --models without the gemm benchmark, --sizes/--dtypes without allreduce."""
    for fields, needs in _DEPENDENT_OPTIONS:
        unused = [_flag(f) for f in fields if getattr(opts, f)]
        if not unused:
            continue
        names, flags = ", ".join(unused), ", ".join(f"--{name}" for name in unused)
        verb, them = ("need", "them") if len(unused) > 1 else ("needs", "it")
        if needs == "models" and not opts.models:
            raise UserInputError(f"{names}: {flags} {verb} --models (used only for the model GEMM "
                                 f"shapes); allowed: with --models MODEL[,MODEL...], or drop {them}")
        if needs == "gemm" and {"ops", "interference", "overhead", "allreduce", "allgather", "skew"} & set(opts.benchmarks):
            continue  # the op trace, the module interference, sampling and the collectives read --models too
        if needs in BENCHMARKS and needs not in opts.benchmarks:
            raise UserInputError(f"{names}: {flags} {verb} the {needs} benchmark, which this run does not "
                                 f"measure (benchmarks: {','.join(opts.benchmarks)}); allowed: with "
                                 f"{needs} in --benchmarks, or drop {them}")
