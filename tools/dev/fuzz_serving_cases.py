"""The fuzzer's cases of the serving and planning inputs (tools/dev/fuzz_inputs.py): ``serving`` flags
(rates, length specs, SLOs, seeds, arrival shapes, ``--capacity``/``--target-rate`` with a mutated
price file), an arrival trace, a sweep grid's ``serving:`` section and ``plan --rate``; values that
once broke a command (absurd rates and lengths, non-finite numbers) and their neighbours among the
values tried."""

from __future__ import annotations

import random

import yaml

from fuzz_file_cases import GRID, ROOT, Case, _tiny
from fuzz_mutators import BAD_TEXT, dump_yaml, mutate_bytes, mutate_csv, mutate_tree

SERVING_BASE = ["serving", "--model", "tiny.json", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "--requests", "40",
                "--prompt-len", "32", "--gen-len", "uniform:1:16", "--rate", "50", "--ttft-slo-s", "0.002",
                "--no-progress", "--json"]
# Flag -> values worth trying beside BAD_TEXT: extreme, non-finite and malformed values and their neighbours.
SERVING_FLAGS = {
    "--rate": ["4", "1e9", "1e-6", "1e-300", "1e300", "1e15", "2e9"],
    "--requests": ["1", "2", "2147483647", "1000001", "-3", "1e3"],
    "--prompt-len": ["uniform:1:64", "exponential:20", "exponential:inf", "exponential:nan", "exponential:1e30",
                     "uniform:5:1", "uniform:1", "99999999999999999999", "67108864", "\u00b3", "1_0", " 8", "0"],
    "--gen-len": ["1", "uniform:1:64", "exponential:3", "exponential:inf", "100000", "uniform:0:3", "\u00b3"],
    "--gamma-shape": ["0.5", "1e-300", "0.01", "1e300", "100", "0"],
    "--seed": ["-5", "7", "4294967295", "4294967296", "99999999999999999999", "\u00b3"],
    "--ttft-slo-s": ["1e400", "1e-300", "1e6", "10", "0.0001"],
    "--tpot-slo-s": ["1e400", "1e-300", "0.001", "5"],
    "--slo-attainment": ["1", "0.5", "1.5", "1e-300"],
    "--max-running": ["1", "2", "1048577", "2147483647"],
    "--max-batched-tokens": ["16", "1", "67108865", "2147483647"],
    "--block-size": ["1", "65536", "65537", "2147483647"],
    "--target-rate": ["100", "1e15", "1e300", "1e-300"],
    "--schedule": ["ladder", "hybrid:1", "hybrid:99999", "nope"],
    "--trace": ["t.csv", "exists_dir", "/proc/self/status", "/dev/null", "nope.csv"],
}
SERVING_SWITCHES = ["--capacity", "--chunked-prefill"]
TRACE = "arrival_s,prompt_len,output_len\n0.0,30,8\n0.01,12,3\n0.02,50,1\n0.05,8,16\n"
TRACE_VALUES = ["1e400", "inf", "-inf", "nan", "1e9", "1e10", "99999999999999999999", "67108865", "\u00b3", "1_0",
                "0", "-0", "1.5", " 3 "]
SERVING_GRID = {**GRID, "tp": [2], "gen_len": [8], "overrides": {},
                "serving": {"rate": [20, 400], "requests": 30, "ttft_slo_s": 0.002, "max_running": [16],
                            "chunked_prefill": [False, True]}}
SERVING_GRID_VALUES = [["inf"], "inf", "1e400", ["1e400"], 1e400, -5, 2**31, 2**64, ["nan"], 0, [], "x", None, 1e-300,
                       1e300, [1e-7], True, {"a": 1}]
PLAN_RATE = ["plan", "--model", "tiny.json", "--profiles", "h100-sxm-nvswitch", "--tp", "2", "--rate", "50",
             "--ttft-slo-s", "0.002", "--requests", "30", "--prompt-len", "32", "--gen-len", "8", "--no-progress",
             "--json"]
PLAN_RATE_FLAGS = {
    "--rate": SERVING_FLAGS["--rate"], "--requests": SERVING_FLAGS["--requests"],
    "--ttft-slo-s": SERVING_FLAGS["--ttft-slo-s"], "--tpot-slo-s": SERVING_FLAGS["--tpot-slo-s"],
    "--prompt-len": ["1", "4000", "67108864", "67108865", "99999999999999999999"],
    "--gen-len": ["1", "2", "4000", "67108865"], "--tp": ["1", "3", "8", "65537"], "--top": ["1", "0"],
    "--prices": ["prices.yaml", "bomb.yaml"], "--schedule": ["ladder", "hybrid:1", "nope"],
    # the tiny model's request is 32 + 8 = 40 tokens: 39 is below it (refused without chunked prefill)
    "--max-batched-tokens": ["1", "16", "39", "40", "4096", "67108865"],
}
# A "billion laughs" YAML: 9 aliases of 9 aliases ... (~9^9 nodes expanded, 600 bytes of text).
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def _set_flag(rng: random.Random, argv: list[str], flags: dict, value=None) -> None:
    """Give one flag of ``flags`` a bad or boundary value (replacing its value or adding it)."""
    flag = rng.choice(sorted(flags))
    text = value if isinstance(value, str) and "\0" not in value else \
        rng.choice(flags[flag] if rng.random() < 0.6 else BAD_TEXT)
    if flag in argv:
        argv[argv.index(flag) + 1] = text
    else:
        argv += [flag, text]


def _serving_files() -> dict[str, bytes]:
    return {"tiny.json": _tiny(), "t.csv": TRACE.encode(), "exists_dir/.keep": b"",
            "prices.yaml": (ROOT / "laddersim" / "data" / "prices.yaml").read_bytes()}


def _serving_case(rng, value=None) -> Case:
    argv, files = list(SERVING_BASE), _serving_files()
    for switch in SERVING_SWITCHES:
        if rng.random() < 0.4:
            argv.append(switch)
    if "--capacity" in argv and rng.random() < 0.6:
        argv += ["--target-rate", rng.choice(["100", "5000"]), "--prices", "prices.yaml"]
        if rng.random() < 0.3:
            prices = yaml.safe_load(files["prices.yaml"])
            files["prices.yaml"] = ALIAS_BOMB.encode() if rng.random() < 0.2 else \
                dump_yaml(rng, mutate_tree(rng, prices))
    for _ in range(rng.choice([1, 1, 2])):
        _set_flag(rng, argv, SERVING_FLAGS, value)
    if "--trace" in argv:  # a trace replaces the drawn requests
        for flag in ("--rate", "--requests", "--prompt-len", "--gen-len"):
            if flag in argv and rng.random() < 0.8:
                i = argv.index(flag)
                del argv[i:i + 2]
    return Case("serving_args", argv, files, "serving")


def _trace_case(rng, value=None) -> Case:
    op = rng.randrange(4)
    if op == 0:  # every arrival at one instant (or one request)
        at = rng.choice(["0", "5", "1e9", "0.0"])
        rows = [f"{at},{rng.randint(1, 60)},{rng.randint(1, 12)}" for _ in range(rng.choice([1, 2, 5, 40]))]
        data = ("arrival_s,prompt_len,output_len\n" + "\n".join(rows) + "\n").encode()
    elif op == 1:
        data = mutate_bytes(rng, TRACE.encode())
    else:
        data = mutate_csv(rng, TRACE, value if value is not None else rng.choice(TRACE_VALUES + BAD_TEXT)).encode()
    argv = SERVING_BASE[:7] + ["--trace", "t.csv", "--ttft-slo-s", "0.002", "--no-progress", "--json"]
    if rng.random() < 0.3:
        argv.append("--chunked-prefill")
    return Case("arrival_trace", argv, {"tiny.json": _tiny(), "t.csv": data}, "serving")


def _serving_grid_case(rng, value=None) -> Case:
    import copy

    grid = copy.deepcopy(SERVING_GRID)
    op = rng.randrange(5)
    if op == 0:
        data = ALIAS_BOMB.encode() if rng.random() < 0.3 else mutate_bytes(rng, yaml.safe_dump(grid).encode())
    elif op == 1:  # a serving field set to a bad value, numbers written as strings included
        key = rng.choice(["rate", "requests", "ttft_slo_s", "tpot_slo_s", "seed", "max_running", "max_batched_tokens",
                          "chunked_prefill", "extra"])
        grid["serving"][key] = value if value is not None else rng.choice(SERVING_GRID_VALUES)
        data = dump_yaml(rng, grid)
    else:
        grid["serving"] = mutate_tree(rng, grid["serving"], value)
        data = dump_yaml(rng, grid)
    return Case("serving_grid", ["sweep", "grid.yaml", "--out", "sw", "--workers", "1", "--no-progress"],
                {"grid.yaml": data, "tiny.json": _tiny()}, "sweep")


def _plan_rate_case(rng, value=None) -> Case:
    argv = list(PLAN_RATE)
    files = {"tiny.json": _tiny(), "bomb.yaml": ALIAS_BOMB.encode(),
             "prices.yaml": (ROOT / "laddersim" / "data" / "prices.yaml").read_bytes()}
    if rng.random() < 0.3:
        argv += ["--prices", "prices.yaml"]
        files["prices.yaml"] = dump_yaml(rng, mutate_tree(rng, yaml.safe_load(files["prices.yaml"]), value))
    else:
        _set_flag(rng, argv, PLAN_RATE_FLAGS, value)
    if rng.random() < 0.3:  # the static planner, same flags
        i = argv.index("--rate")
        del argv[i:i + 4]
        argv += ["--batch", "1", "4", "--workers", "1", "--min-user-tokens-per-s", "1"]
    elif rng.random() < 0.3:
        argv.append("--chunked-prefill")
    return Case("plan_rate", argv, files, "plan")
