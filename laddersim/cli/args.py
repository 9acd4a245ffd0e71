"""Argument types and flags shared by several subcommands."""

from __future__ import annotations

import argparse
import inspect
import math
from pathlib import Path

from laddersim.support.choices import DTYPES, FRAMEWORKS, KV_CACHES, KV_READS
from laddersim.support.limits import MAX_BATCH, MAX_TOKENS, MAX_TP


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


def default_of(function, name: str):
    """The default of ``function``'s parameter ``name``: an option's default is its API function's
    (laddersim.api), read here rather than restated."""
    return inspect.signature(function).parameters[name].default


def call_api(function, args: argparse.Namespace, **given):
    """``function(...)`` with every parameter that has a parsed flag of the same name (``--prompt-len``
    is ``prompt_len``) taken from ``args``, and ``given`` for the others (renamed or computed). A
    flag added to the parser and the parameter added to the API function meet here by name: no
    command's handler lists them."""
    parameters = inspect.signature(function).parameters
    taken = {name: getattr(args, name) for name in parameters if name not in given and hasattr(args, name)}
    return function(**taken, **given)


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """--model and --hardware."""
    parser.add_argument("--model", required=True, help="preset (llama-3.1-8b/70b/405b) or path to a HF config.json")
    parser.add_argument("--hardware", required=True, help="profile name (laddersim profiles list) or path")


def add_parallel_args(parser: argparse.ArgumentParser, function=None, *, required: bool = True) -> None:
    """How the model is split over GPUs (--tp, and --pp and --pp-microbatches where ``function``,
    the API function the command calls, takes ``pp`` and ``pp_microbatches``, with its defaults):
    every command that takes one scenario's parallelism adds it here, so a new degree is one flag
    in this function and one parameter of the API functions it reaches (call_api passes it by name)."""
    parser.add_argument("--tp", type=positive_int("tp", MAX_TP), required=required, help="tensor-parallel degree")
    takes = inspect.signature(function).parameters if function is not None else {}
    if "pp" in takes:
        parser.add_argument("--pp", type=positive_int("pp", MAX_TP), default=default_of(function, "pp"),
                            help="pipeline stages, each a TP group of --tp GPUs with a contiguous share of the "
                                 f"layers (default {default_of(function, 'pp')}: none)")
    if "pp_microbatches" in takes:
        parser.add_argument("--pp-microbatches", type=positive_int("pp-microbatches", MAX_BATCH),
                            default=default_of(function, "pp_microbatches"),
                            help="batches of batch/M in flight through the stages, one per stage as serving engines "
                                 f"run a pipeline (default {default_of(function, 'pp_microbatches')}: one batch, the "
                                 "stages in turn, as the Ladder Residual benchmark)")


def add_workload_args(parser: argparse.ArgumentParser, function, *, gen_help: str = "generated tokens per sequence",
                      batch: bool = True) -> None:
    """--batch --prompt-len --gen-len, with ``function``'s defaults (shown in the help)."""
    if batch:
        parser.add_argument("--batch", type=positive_int("batch", MAX_BATCH), default=default_of(function, "batch"),
                            help=f"sequences in the batch (default {default_of(function, 'batch')})")
    parser.add_argument("--prompt-len", type=positive_int("prompt-len", MAX_TOKENS),
                        default=default_of(function, "prompt_len"),
                        help=f"prompt tokens per sequence (default {default_of(function, 'prompt_len')})")
    parser.add_argument("--gen-len", type=positive_int("gen-len", MAX_TOKENS), default=default_of(function, "gen_len"),
                        help=f"{gen_help} (default {default_of(function, 'gen_len')})")


def add_dtype_arg(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--dtype", choices=DTYPES, default=default, help=f"element type (default {default})")


def add_scenario_args(parser: argparse.ArgumentParser, function) -> None:
    """--model --hardware --tp --batch --prompt-len --gen-len --dtype --framework --kv-cache
    --kv-reads, defaults from ``function`` (an API function taking them all)."""
    add_model_args(parser)
    add_parallel_args(parser, function)
    add_workload_args(parser, function)
    add_dtype_arg(parser, default_of(function, "dtype"))
    add_framework_args(parser, function)


def framework_arg(text: str) -> str:
    """--framework: a shipped framework or a framework .yaml file (laddersim calibrate kernels)."""
    if text in FRAMEWORKS or (text.endswith((".yaml", ".yml")) and Path(text).is_file()):
        return text
    raise argparse.ArgumentTypeError(f"framework must be one of {', '.join(FRAMEWORKS)} or an existing "
                                     f"framework .yaml file, got '{text}'")


def add_framework_args(parser: argparse.ArgumentParser, function) -> None:
    """--framework (``function``'s default) and the two KV-cache settings it carries (flags override
    the framework's)."""
    default = default_of(function, "framework")
    parser.add_argument("--framework", type=framework_arg, default=default,
                        help=f"serving framework ({', '.join(FRAMEWORKS)} or a framework .yaml from laddersim calibrate "
                             f"kernels: kernel paths, KV cache, AllReduce kernel; default {default}, the paper's benchmark)")
    parser.add_argument("--kv-cache", choices=KV_CACHES, default=None,
                        help="override the framework's: static = preallocated cache read in full each step; dynamic = grows")
    parser.add_argument("--kv-reads", choices=KV_READS, default=None,
                        help="override the framework's: repeat_interleave = K/V copied to every query head; per_kv_head = GQA-aware kernel")


def add_measured_workload_args(parser: argparse.ArgumentParser, function) -> None:
    """How measured rows become scenarios (validate, fit): profiles for P2P off, the benchmark's
    dtype and attention; defaults are ``function``'s (the paper's gpt-fast benchmark)."""
    parser.add_argument("--hardware-p2p-off", default=default_of(function, "hardware_p2p_off"),
                        help="profile for rows with p2p=off")
    parser.add_argument("--dtype", default=default_of(function, "dtype"), choices=DTYPES)
    add_framework_args(parser, function)


# What a resumable command (sweep, calibrate run) says when interrupted; see laddersim.cli.main.
RESUMABLE_NOTE = "finished work is kept; re-run the same command to resume"
