"""What ``ladder_bench.py`` is asked to measure: its flags, the checked ``BenchConfig``, the
memory pre-check, and the CSV columns that say what a row measured (and so which rows a rerun
already has). Nothing here runs a model.

The default is the paper's benchmark (../shared/docs/ladder-residual.md): fp16 on GPU, the fused
MLP and the math attention of ``ladder_model.PAPER``, and on GPU a compiled decode step (CUDA
graphs) and a compiled static-shape prefill. The ``mode`` column names the configuration:
``compile`` or ``eager``, then what differs from the paper's: ``+eager-prefill``,
``+split-mlp``, ``+default-sdpa``, ``+last-logits`` (e.g.
``compile+eager-prefill+split-mlp+default-sdpa+last-logits`` is how ``--compile`` ran before this
configuration was the paper's).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import torch

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # imported by `python calibration/ladder_bench.py` from a checkout
    sys.path.insert(0, _ROOT)
from calibration.ladder_csv import check_out_csv, read_rows, row_key  # noqa: E402
from calibration.ladder_forward import DTYPES, PREFILL_LOGITS, SCHEDULES, default_dtype  # noqa: E402
from calibration.ladder_memory import (  # noqa: E402
    GIB, available_host_bytes, peak_bytes_per_rank, static_cache_len,
)
from calibration.ladder_model import PAPER, Variant, add_variant_flags  # noqa: E402
from laddersim.errors import UserInputError  # noqa: E402
from laddersim.model.shape import load_model_shape  # noqa: E402


def log(msg: str) -> None:
    print(f"[ladder_bench] {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    model: str
    schedules: tuple[str, ...]
    batch: int
    prompt_len: int
    gen_len: int
    warmup: int
    repeats: int
    backend: str
    device: str  # "cpu" or "cuda"
    dtype: str
    out: str | None
    seed: int
    top_k: int
    temperature: float
    compile: bool  # the decode step compiled (CUDA graphs on GPU)
    nodes: int
    p2p: str
    min_time_s: float = 0.0  # a measurement's least duration (more generations back to back)
    compile_prefill: bool = False  # the prefill compiled too (static shapes); the paper's: with compile
    variant: Variant = PAPER
    prefill_logits: str = "all"  # the LM head over every prompt position (the paper's) or the last one

    @property
    def max_seq(self) -> int:
        return static_cache_len(self.prompt_len, self.gen_len)


def mode_field(cfg: BenchConfig) -> str:
    """The CSV's mode column: ``compile`` / ``eager`` and what differs from the paper's benchmark."""
    suffix = cfg.variant.suffix + ("+last-logits" if cfg.prefill_logits == "last" else "")
    if cfg.compile:
        return "compile" + ("" if cfg.compile_prefill else "+eager-prefill") + suffix
    return "eager" + suffix


def check_memory(cfg: BenchConfig, tp: int, device: torch.device, local_ranks: int) -> None:
    """Raise UserInputError (one line) unless :func:`peak_bytes_per_rank` fits: on CUDA in this
    rank's free GPU memory, on CPU times ``local_ranks`` (the ranks sharing this host) in
    :func:`available_host_bytes`. Nothing is allocated before this check."""
    shape = load_model_shape(cfg.model)
    rank_bytes = peak_bytes_per_rank(shape, tp, cfg.batch, cfg.prompt_len, cfg.gen_len,
                                     DTYPES[cfg.dtype].itemsize, cfg.variant.sdpa == "math",
                                     cfg.prefill_logits == "all")
    need = f"an estimated {rank_bytes / GIB:.1f} GiB per rank (weights, KV cache, margin)"
    if device.type == "cuda":
        need_bytes = rank_bytes
        free_bytes, _ = torch.cuda.mem_get_info(device)
        where = f"GPU {device.index} has {free_bytes / GIB:.1f} GiB free"
        bigger_tp = "a higher TP degree, "
    else:
        need_bytes = rank_bytes * local_ranks
        free_bytes = available_host_bytes()
        if free_bytes is None:
            return
        need += f" x {local_ranks} ranks on this host = {need_bytes / GIB:.1f} GiB"
        where = f"only {free_bytes / GIB:.1f} GiB is available"
        bigger_tp = ""  # the ranks share the host: more of them do not need less in total
    if need_bytes > free_bytes:
        raise UserInputError(
            f"--model: {cfg.model} at tp={tp}, batch={cfg.batch}, prompt_len+gen_len="
            f"{cfg.prompt_len + cfg.gen_len}, {cfg.dtype} needs {need}, but {where}; use a smaller "
            f"model (a smaller preset, or a config.json with fewer layers or a smaller hidden_size), "
            f"{bigger_tp}{'--dtype bfloat16, ' if cfg.dtype == 'float32' else ''}"
            f"or a smaller --batch/--prompt-len/--gen-len")


def setting_fields(cfg: BenchConfig, tp: int) -> dict:
    """The row's columns that say what was measured, but for the schedule (see ``ladder_csv.RESUME_KEY``)."""
    return {
        "model": model_field(cfg.model, cfg.out), "tp": tp, "nodes": cfg.nodes, "batch": cfg.batch,
        "prompt_len": cfg.prompt_len, "gen_len": cfg.gen_len, "p2p": cfg.p2p, "dtype": cfg.dtype,
        "mode": mode_field(cfg),
    }


def model_field(model: str, out: str | None) -> str:
    """The CSV's model column: a preset by name, a config.json by its path relative to the CSV
    (``laddersim validate`` / ``fit`` read it from there, wherever they are run)."""
    if not Path(model).exists():
        return model
    base = Path(out).resolve().parent if out else Path.cwd()
    return os.path.relpath(Path(model).resolve(), base)


def pending_schedules(cfg: BenchConfig, tp: int) -> tuple[str, ...]:
    """``cfg.schedules`` but those whose row (same ``ladder_csv.RESUME_KEY``) is already in ``cfg.out``;
    logs one line per skipped schedule. Deleting a row from the CSV measures it again."""
    if not cfg.out:
        return cfg.schedules
    done = {row_key(r) for r in read_rows(cfg.out)[1]}
    setting = setting_fields(cfg, tp)
    pending = []
    for schedule in cfg.schedules:
        if row_key({**setting, "schedule": schedule}) in done:
            log(f"{schedule}: already measured in {cfg.out} (tp={tp}, batch={cfg.batch}, "
                f"prompt_len={cfg.prompt_len}, gen_len={cfg.gen_len}, p2p={cfg.p2p}, {cfg.dtype}, "
                f"{mode_field(cfg)}); "
                "skipped (delete its row to measure it again)")
        else:
            pending.append(schedule)
    return tuple(pending)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ladder_bench.py", description="Real tensor-parallel generation benchmark: standard, "
                "parallel, ladder and upper_bound schedules, as the Ladder Residual paper's benchmark runs them.",
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="llama-3.1-8b",
                   help="preset (llama-3.1-8b/70b/405b) or path to a Hugging Face config.json")
    p.add_argument("--schedule", action="append", choices=SCHEDULES,
                   help="repeatable; default: all four")
    p.add_argument("--world-size", type=int, default=2,
                   help="local ranks to spawn when not under torchrun (= TP degree)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                   help="default: float16 on GPU (the paper's), float32 on CPU (the CPU twin)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=1024)
    p.add_argument("--gen-len", type=int, default=512,
                   help="new tokens per sequence: 1 from the prefill + gen_len-1 decode steps")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3,
                   help="timed rounds (one measurement of each schedule per round); medians are reported")
    p.add_argument("--min-time-s", type=float, default=0.0,
                   help="least duration of a measurement: enough generations back to back (from the "
                        "warm-up's time); 0: one generation")
    p.add_argument("--top-k", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the decode step (mode='reduce-overhead': CUDA graphs) and the prefill "
                        "(dynamic=False), as the paper's benchmark; default: on GPU compiled, on CPU eager "
                        "(Inductor's C++ compile of every shape takes minutes there)")
    p.add_argument("--eager-prefill", action="store_true",
                   help="with --compile: the prefill eager (only the decode step compiled)")
    add_variant_flags(p)
    p.add_argument("--prefill-logits", choices=PREFILL_LOGITS, default="all",
                   help="the prefill's LM head over every prompt position (gpt-fast's Transformer.forward, the "
                        "paper's) or over the last one only")
    p.add_argument("--out", default=None, help="CSV to append rows to (header written once)")
    return p


def _positive(name: str, value: int, minimum: int = 1) -> None:
    if value < minimum:
        raise UserInputError(f"{name}: must be an integer >= {minimum}, got {value}")


# ---- command line --------------------------------------------------------------------------

def _launched() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def make_config(args: argparse.Namespace, world_size: int, check_out: bool) -> BenchConfig:
    """Validate the flags (UserInputError naming the flag) and resolve backend/device/dtype."""
    _positive("--world-size", world_size)
    try:
        shape = load_model_shape(args.model)
    except UserInputError as exc:
        raise UserInputError(f"--model: {str(exc).removeprefix('model: ')}") from None
    try:
        shape.check_tp(world_size)
    except UserInputError as exc:
        raise UserInputError(f"--world-size (the TP degree): {str(exc).removeprefix('tp: ')}") from None
    for name in ("batch", "prompt_len", "gen_len", "repeats", "top_k"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
    _positive("--warmup", args.warmup, 0)
    if args.temperature < 0:
        raise UserInputError(f"--temperature: must be >= 0, got {args.temperature}")
    if not 0.0 <= args.min_time_s <= 3600.0:
        raise UserInputError(f"--min-time-s: must be between 0 and 3600, got {args.min_time_s}")
    cuda = torch.cuda.is_available()
    backend = args.backend if args.backend != "auto" else ("nccl" if cuda else "gloo")
    if backend == "nccl" and not cuda:
        raise UserInputError("--backend: nccl needs CUDA and none is available; allowed here: auto, gloo")
    if backend == "nccl" and not _launched():
        raise UserInputError("--backend: nccl runs under torchrun (one process per GPU); "
                             "without a launcher allowed: gloo, auto")
    device = "cuda" if backend == "nccl" else "cpu"
    dtype = args.dtype or default_dtype(device)
    compiled = device == "cuda" if args.compile is None else args.compile
    if args.eager_prefill and not compiled:
        raise UserInputError("--eager-prefill: only with --compile (without it everything is eager)")
    if check_out and args.out:
        check_out_csv(args.out)
    nodes = int(os.environ.get("GROUP_WORLD_SIZE")
                or world_size // int(os.environ.get("LOCAL_WORLD_SIZE", world_size)) or 1)
    return BenchConfig(
        model=args.model, schedules=tuple(dict.fromkeys(args.schedule or SCHEDULES)),
        batch=args.batch, prompt_len=args.prompt_len, gen_len=args.gen_len, warmup=args.warmup,
        repeats=args.repeats, backend=backend, device=device, dtype=dtype, out=args.out,
        seed=args.seed, top_k=args.top_k, temperature=args.temperature, compile=compiled,
        nodes=nodes, p2p="off" if os.environ.get("NCCL_P2P_DISABLE") == "1" else "on",
        min_time_s=args.min_time_s, compile_prefill=compiled and not args.eager_prefill,
        variant=Variant(mlp=args.mlp, sdpa=args.sdpa), prefill_logits=args.prefill_logits,
    )
