"""``laddersim kernels``: what laddersim charges one decode (or prefill) layer, kernel by kernel."""

from __future__ import annotations

import argparse
import json
import sys

from laddersim.cli.args import framework_arg, positive_int
from laddersim.limits import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN, MAX_BATCH, MAX_TOKENS, MAX_TP
from laddersim.tables import format_table


def register(sub) -> None:
    p = sub.add_parser("kernels", help="one layer's kernels as laddersim prices them: class, count, us (beside a profiler trace)")
    p.add_argument("--model", required=True, help="preset (llama-3.1-8b/70b/405b) or path to a HF config.json")
    p.add_argument("--hardware", required=True, help="profile name (laddersim profiles list) or path")
    p.add_argument("--tp", type=positive_int("tp", MAX_TP), required=True, help="tensor-parallel degree")
    p.add_argument("--batch", type=positive_int("batch", MAX_BATCH), default=1)
    p.add_argument("--schedule", default="standard", help="standard, parallel, ladder, upper_bound, desync_half, hybrid:N")
    p.add_argument("--framework", type=framework_arg, default="gpt-fast",
                   help="gpt-fast, vllm, ... or a framework .yaml (laddersim calibrate kernels)")
    p.add_argument("--prompt-len", type=positive_int("prompt-len", MAX_TOKENS), default=DEFAULT_PROMPT_LEN)
    p.add_argument("--gen-len", type=positive_int("gen-len", MAX_TOKENS), default=DEFAULT_GEN_LEN,
                   help="new tokens (a static cache holds prompt + new tokens)")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32", "fp8"], default="bfloat16")
    p.add_argument("--phase", choices=["decode", "prefill"], default="decode")
    p.add_argument("--json", action="store_true", help="print {layer_us, kernels: [{name, class, count, us}]}")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from laddersim.kernel_view import kernel_table

    frame = kernel_table(args.model, args.hardware, args.tp, args.batch, args.schedule, args.framework,
                         args.prompt_len, args.phase, gen_len=args.gen_len, dtype=args.dtype)
    layer_us = frame.attrs["layer_us"]
    if args.json:
        kernels = [{"name": r["kernel"], "class": r["class"], "count": float(r["count"]), "us": float(r["us"])}
                   for r in frame.to_dict("records")]
        json.dump({"layer_us": layer_us, "kernels": kernels}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    columns = [("kernel", "kernel", "{}"), ("class", "class", "{}"), ("count", "count", "{:g}"), ("us", "us", "{:.2f}")]
    sys.stdout.write(f"{args.model} on {args.hardware}, TP {args.tp}, batch {args.batch}, {args.schedule}, "
                     f"{args.framework}, {args.phase}: one layer on one rank\n")
    sys.stdout.write(format_table(frame.to_dict("records"), columns) + "\n")
    collectives = frame.loc[frame["class"] == "collective", "us"].sum()
    note = f" (+ {collectives:.2f} us of collectives on the communication stream)" if collectives else ""
    sys.stdout.write(f"layer (compute stream): {layer_us:.2f} us{note}\n")
    return 0
