"""Argument types and flags shared by several subcommands."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

from laddersim.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN, MAX_BATCH, MAX_TOKENS, MAX_TP


def _number(name: str, cast, kind: str, ok):
    """An argparse type: ``cast(text)``, refused with '<name> must be <kind>' unless ``ok``."""
    def parse(text: str):
        try:
            value = cast(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{name} must be {kind}, got '{text}'") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{name} must be {kind}, got {text}")
        return value
    return parse


def positive_int(name: str, maximum: int = 2**31 - 1):
    return _number(name, int, f"a positive integer up to {maximum}", lambda v: 1 <= v <= maximum)


def positive_float(name: str, maximum: float = 1e15):
    return _number(name, float, f"a finite number > 0 and <= {maximum:g}", lambda v: 0 < v <= maximum)


def non_negative_float(name: str, maximum: float = 1e15):
    return _number(name, float, f"a finite number from 0 to {maximum:g}", lambda v: 0 <= v <= maximum)


def finite_float(name: str):
    return _number(name, float, "a finite number", math.isfinite)


def add_scenario_args(parser: argparse.ArgumentParser, *, tp_required: bool = True) -> None:
    """--model --hardware --tp --batch --prompt-len --gen-len --dtype --framework --kv-cache --kv-reads."""
    parser.add_argument("--model", required=True, help="preset (llama-3.1-8b/70b/405b) or path to a HF config.json")
    parser.add_argument("--hardware", required=True, help="profile name (laddersim profiles list) or path")
    parser.add_argument("--tp", type=positive_int("tp", MAX_TP), required=tp_required, help="tensor-parallel degree")
    parser.add_argument("--batch", type=positive_int("batch", MAX_BATCH), default=1)
    parser.add_argument("--prompt-len", type=positive_int("prompt-len", MAX_TOKENS), default=DEFAULT_PROMPT_LEN)
    parser.add_argument("--gen-len", type=positive_int("gen-len", MAX_TOKENS), default=DEFAULT_GEN_LEN)
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32", "fp8"], default="bfloat16")
    add_framework_args(parser)


FRAMEWORKS = ("gpt-fast", "gpt-fast-flash", "gpt-fast-graph", "vllm")  # laddersim/data/frameworks/*.yaml (checked by a test)


def framework_arg(text: str) -> str:
    """--framework: a shipped framework or a framework .yaml file (laddersim calibrate kernels)."""
    if text in FRAMEWORKS or (text.endswith((".yaml", ".yml")) and Path(text).is_file()):
        return text
    raise argparse.ArgumentTypeError(f"framework must be one of {', '.join(FRAMEWORKS)} or an existing "
                                     f"framework .yaml file, got '{text}'")


def add_framework_args(parser: argparse.ArgumentParser) -> None:
    """--framework and the two KV-cache settings it carries (flags override the framework's)."""
    parser.add_argument("--framework", type=framework_arg, default="gpt-fast",
                        help=f"serving framework ({', '.join(FRAMEWORKS)} or a framework .yaml from laddersim calibrate "
                             "kernels: kernel paths, KV cache, AllReduce kernel; default gpt-fast, the paper's benchmark)")
    parser.add_argument("--kv-cache", choices=["static", "dynamic"], default=None,
                        help="override the framework's: static = preallocated cache read in full each step; dynamic = grows")
    parser.add_argument("--kv-reads", choices=["repeat_interleave", "per_kv_head"], default=None,
                        help="override the framework's: repeat_interleave = K/V copied to every query head; per_kv_head = GQA-aware kernel")


def add_measured_workload_args(parser: argparse.ArgumentParser) -> None:
    """How measured rows become scenarios (validate, fit): profiles for P2P off, the benchmark's
    dtype and attention; defaults are the paper's gpt-fast benchmark."""
    parser.add_argument("--hardware-p2p-off", default="h100-sxm-p2p-off", help="profile for rows with p2p=off")
    parser.add_argument("--dtype", default="float16", choices=["bfloat16", "float16", "float32", "fp8"])
    add_framework_args(parser)


def invoked_command(subcommand: str) -> str:
    """The command line as typed (``laddersim SUB ...``), for reports and provenance; just
    ``laddersim SUB`` when the handler was called from code rather than the console."""
    argv = sys.argv[1:]
    if argv[:1] == [subcommand]:
        return shlex.join(["laddersim", *argv])
    return f"laddersim {subcommand}"


# What a resumable command (sweep, calibrate run) says when interrupted; see laddersim.cli.main.
RESUMABLE_NOTE = "finished work is kept; re-run the same command to resume"
