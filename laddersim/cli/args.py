"""Argument types and flags shared by several subcommands."""

from __future__ import annotations

import argparse


def positive_int(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got '{text}'") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got {value}")
        return value
    return parse


def non_negative_float(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number >= 0, got '{text}'") from None
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"{name} must be a number >= 0, got {text}")
        return value
    return parse


def add_scenario_args(parser: argparse.ArgumentParser, *, tp_required: bool = True) -> None:
    """--model --hardware --tp --batch --prompt-len --gen-len --dtype --kv-cache."""
    parser.add_argument("--model", required=True, help="preset (llama-3.1-8b/70b/405b) or path to a HF config.json")
    parser.add_argument("--hardware", required=True, help="profile name (laddersim profiles list) or path")
    parser.add_argument("--tp", type=positive_int("tp"), required=tp_required, help="tensor-parallel degree")
    parser.add_argument("--batch", type=positive_int("batch"), default=1)
    parser.add_argument("--prompt-len", type=positive_int("prompt-len"), default=1024)
    parser.add_argument("--gen-len", type=positive_int("gen-len"), default=512)
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32", "fp8"], default="bfloat16")
    parser.add_argument("--kv-cache", choices=["static", "dynamic"], default="static",
                        help="static: gpt-fast preallocated cache read in full each step; dynamic: grows")
    parser.add_argument("--kv-reads", choices=["repeat_interleave", "per_kv_head"], default="repeat_interleave",
                        help="repeat_interleave: gpt-fast copies K/V to every query head before attention; per_kv_head: GQA-aware kernel")
