"""Seeded fuzzer of every input laddersim reads: mutate a valid seed input, run the command that
reads it in this process (``laddersim.cli.main``), and classify what happened.

    python tools/fuzz_inputs.py --cases 1200 --seed 1          # counts per kind and outcome
    python tools/fuzz_inputs.py --kinds nccl_log --cases 50 --show

Kinds: profile (hardware YAML), hf_config (config.json), measured_csv (validate), nccl_log
(calibrate import-nccl-tests), sweep_grid, prices (plan --prices), run_dir (calibrate fit of a
calibration run), points_jsonl (a sweep store resumed), results_csv (plot), cli_args; and the
serving and planning inputs: serving_args (``serving`` flags: rates, length specs, SLOs, seeds,
arrival shapes, ``--capacity``/``--target-rate`` with a mutated price file), arrival_trace
(``serving --trace``), serving_grid (a sweep grid's ``serving:`` section) and plan_rate
(``plan --rate``).

Outcomes: ``error`` (exit 2, one stderr line ``error: ...``, no traceback) and ``ok`` (exit 0
with finite, positive results) are good; ``traceback`` (an exception escaped), ``multiline``
(exit 2 with more or fewer than one stderr line), ``nonsense`` (exit 0 with non-finite, non-positive
or absurd results, self-contradicting ones such as a capacity below an offered rate that met the
SLOs, or another exit code) and ``hang`` (over the time limit) are failures. ``plan`` exiting 1
with no option ("no configuration meets ...") is an answer, judged ``ok``.
tests/test_fuzz.py draws cases from the same mutators with hypothesis and replays the corpus of
past failures in tests/data/fuzz_corpus/.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
import signal
import sys
import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from laddersim.cli import main  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "fuzz_corpus"
SEED_RUN = CORPUS / "seed_run"
NCCL_LOG = ROOT / "tests" / "data" / "nccl_tests_logs" / "aws_p5_h100_1node_nvswitch.log"
TINY_MODEL = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 4,
              "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 4096}
MEASURED = ("model,tp,nodes,batch,prompt_len,gen_len,p2p,schedule,tokens_per_s\n"
            "tiny.json,2,1,1,32,4,on,standard,1000\n"
            "tiny.json,2,1,1,32,4,on,ladder,1100\n")
GRID = {"models": ["tiny.json"], "hardware": ["h100-sxm-nvswitch"], "tp": [1, 2], "batch": [1],
        "prompt_len": [32], "gen_len": [4], "schedules": ["standard", "ladder"],
        "overrides": {"intra_bandwidth_scale": [0.5, 1.0]}}
TIME_LIMIT_S = 60

# Values that broke readers before, or might: wrong types, out of range, non-finite, huge.
BAD_VALUES = [
    -1, 0, 1, 2**64, 2**200, -2**63, 1e400, -1e400, float("nan"), 1e30, 1e-30, -0.0,
    "nope", "", " ", "0x10", "1e400", "nan", "inf", "-1", "2**64", "\u00e9\u00e8", "../../etc/passwd",
    "/proc/self/status", None, True, False, [], {}, [1, 2], {"a": 1}, "a\nb", "1" * 500,
]
BAD_TEXT = ["-1", "0", "1e400", "nan", "inf", "-inf", "18446744073709551616", "nope", "", "0x10",
            "1e30", "1e-30", "\u00e9", "-0", "3.5", "true", "{}", "[]", "/proc/x", "/sys/x", "a\tb"]
YAML_SNIPPETS = ["!!float 'nope'", "!!int 'x'", "!!timestamp 'x'", "!!binary '*'", "!!python/object:os.system x",
                 ".nan", ".inf", "-.inf", "0x10", "1e400", "~", "[[[[[[[[", "{a: [}", "&a [*a]", "!!set {a}",
                 "2001-12-14", "0o777", "'\\x00'", "1_000"]


@dataclass
class Case:
    kind: str
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> content (written in the work dir)
    check: str = ""  # what exit 0 must produce: "json", "sweep", "profile", "validation", "text"
    note: str = ""

    def to_json(self) -> dict:
        return {"kind": self.kind, "argv": self.argv, "note": self.note, "check": self.check,
                "files": {k: v.decode("latin-1") for k, v in self.files.items()}}

    @staticmethod
    def from_json(data: dict) -> "Case":
        return Case(data["kind"], data["argv"], {k: v.encode("latin-1") for k, v in data["files"].items()},
                    data.get("check", ""), data.get("note", ""))


# ---- mutators ------------------------------------------------------------------------------

def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    op = rng.randrange(7)
    if op == 0 and data:  # flip bytes
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif op == 1:  # non-UTF-8 sequence
        pos = rng.randrange(len(data) + 1)
        data[pos:pos] = rng.choice([b"\xff\xfe", b"\xc3", b"\x80\x81", b"\xed\xa0\x80"])
    elif op == 2:  # a NUL byte
        pos = rng.randrange(len(data) + 1)
        data[pos:pos] = b"\0"
    elif op == 3:  # truncate
        del data[rng.randrange(len(data) + 1):]
    elif op == 4 and data:  # duplicate a slice
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randint(1, 200))
        data[b:b] = data[a:b]
    elif op == 5:  # binary garbage
        data = bytearray(rng.randbytes(rng.randint(1, 512)))
    else:  # delete a slice
        if data:
            a = rng.randrange(len(data))
            del data[a:a + rng.randint(1, 50)]
    return bytes(data)


def _paths(tree, prefix=()):
    yield prefix
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _paths(v, prefix + (i,))


def mutate_tree(rng: random.Random, tree, value=None):
    """Replace, delete or add one node of a YAML/JSON tree."""
    import copy

    tree = copy.deepcopy(tree)
    paths = [p for p in _paths(tree) if p]
    if not paths:
        return rng.choice(BAD_VALUES) if value is None else value
    path = rng.choice(paths)
    parent = tree
    for part in path[:-1]:
        parent = parent[part]
    new = rng.choice(BAD_VALUES) if value is None else value
    op = rng.randrange(5)
    if op == 0:
        del parent[path[-1]]
    elif op == 1 and isinstance(parent, dict):
        parent[rng.choice(["extra", "typo_field", path[-1] + "x" if isinstance(path[-1], str) else "k"])] = new
    elif op == 2 and isinstance(parent[path[-1]], (int, float)) and not isinstance(parent[path[-1]], bool):
        parent[path[-1]] = parent[path[-1]] * rng.choice([-1, 0, 1e30, 1e-30, 2**64, 1.5])
    else:
        parent[path[-1]] = new
    return tree


def dump_yaml(rng: random.Random, tree) -> bytes:
    text = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True)
    if rng.random() < 0.3:  # splice a raw YAML snippet in place of some value
        lines = text.splitlines()
        candidates = [i for i, line in enumerate(lines) if ": " in line]
        if candidates:
            i = rng.choice(candidates)
            key = lines[i].split(": ", 1)[0]
            lines[i] = f"{key}: {rng.choice(YAML_SNIPPETS)}"
            text = "\n".join(lines) + "\n"
    return text.encode()


def dump_json(tree) -> bytes:
    return json.dumps(tree, allow_nan=True, default=str).encode()


def mutate_csv(rng: random.Random, text: str, value=None) -> str:
    lines = text.splitlines()
    data_lines = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
    op = rng.randrange(5)
    i = rng.choice(data_lines)
    cells = lines[i].split(",")
    if op <= 2:
        j = rng.randrange(len(cells))
        cells[j] = str(value) if value is not None else rng.choice(BAD_TEXT)
        lines[i] = ",".join(cells)
    elif op == 3:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice([",,,", "a,b", lines[i] + ",extra", lines[i]]))
    else:
        del lines[i]
    return "\n".join(lines) + ("\n" if rng.random() < 0.9 else "")


def mutate_log(rng: random.Random, text: str, value=None) -> str:
    lines = text.splitlines()
    data = [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]
    op = rng.randrange(4)
    if op <= 1 and data:  # a numeric token of a data line
        i = rng.choice(data)
        tokens = lines[i].split()
        j = rng.randrange(len(tokens))
        tokens[j] = str(value) if value is not None else rng.choice(BAD_TEXT + ["1e30", "0", "-5", "N/A"])
        lines[i] = "  ".join(tokens)
    elif op == 2 and data:  # all times absurd
        for i in data:
            tokens = lines[i].split()
            if len(tokens) > 9:
                tokens[5] = tokens[9] = rng.choice(["1e30", "0", "-1", "nan", "1e6"])
            lines[i] = "  ".join(tokens)
    else:
        i = rng.randrange(len(lines))
        if rng.random() < 0.5:
            del lines[i]
        else:
            lines.insert(i, rng.choice(["#  Rank  9 Group  0 Pid 1 on x device 0 [0x1] H100", "# nccl-library=x",
                                        "garbage", "1 2 3", "#  Rank -1"]))
    return "\n".join(lines) + "\n"


# ---- seed inputs and their commands --------------------------------------------------------

def _tiny() -> bytes:
    return json.dumps(TINY_MODEL).encode()


def _profile_case(rng, value=None) -> Case:
    name = rng.choice(["h100-sxm-nvswitch", "h100-pcie", "l40s-pcie", "h100-sxm-p2p-off"])
    text = (ROOT / "hardware_profiles" / f"{name}.yaml").read_bytes()
    data = mutate_bytes(rng, text) if rng.random() < 0.3 else dump_yaml(rng, mutate_tree(rng, yaml.safe_load(text), value))
    return Case("profile", ["simulate", "--model", "tiny.json", "--hardware", "hw/p.yaml", "--tp", "2",
                            "--prompt-len", "32", "--gen-len", "4", "--json"],
                {"hw/p.yaml": data, "tiny.json": _tiny()}, "json")


def _hf_case(rng, value=None) -> Case:
    if rng.random() < 0.3:
        data = mutate_bytes(rng, _tiny())
    else:
        data = dump_json(mutate_tree(rng, TINY_MODEL, value))
    return Case("hf_config", ["simulate", "--model", "m/config.json", "--hardware", "h100-sxm-nvswitch", "--tp", "2",
                              "--prompt-len", "32", "--gen-len", "4", "--json"], {"m/config.json": data}, "json")


def _measured_case(rng, value=None) -> Case:
    data = mutate_bytes(rng, MEASURED.encode()) if rng.random() < 0.2 else mutate_csv(rng, MEASURED, value).encode()
    return Case("measured_csv", ["validate", "measured.csv", "--report", "rep"],
                {"measured.csv": data, "tiny.json": _tiny()}, "validation")


def _nccl_case(rng, value=None) -> Case:
    text = NCCL_LOG.read_text()
    data = mutate_bytes(rng, text.encode()) if rng.random() < 0.2 else mutate_log(rng, text, value).encode()
    return Case("nccl_log", ["calibrate", "import-nccl-tests", "a.log", "--out", "imp"], {"a.log": data}, "profile")


def _grid_case(rng, value=None) -> Case:
    data = mutate_bytes(rng, yaml.safe_dump(GRID).encode()) if rng.random() < 0.2 else \
        dump_yaml(rng, mutate_tree(rng, GRID, value))
    return Case("sweep_grid", ["sweep", "grid.yaml", "--out", "sw", "--workers", "1", "--no-progress"],
                {"grid.yaml": data, "tiny.json": _tiny()}, "sweep")


def _prices_case(rng, value=None) -> Case:
    text = (ROOT / "laddersim" / "data" / "prices.yaml").read_bytes()
    data = mutate_bytes(rng, text) if rng.random() < 0.3 else dump_yaml(rng, mutate_tree(rng, yaml.safe_load(text), value))
    return Case("prices", ["plan", "--model", "tiny.json", "--profiles", "h100-sxm-nvswitch", "--prices", "prices.yaml",
                           "--batch", "1", "--tp", "1", "2", "--max-nodes", "1", "--workers", "1", "--no-progress",
                           "--prompt-len", "32", "--gen-len", "4", "--min-user-tokens-per-s", "1", "--json"],
                {"prices.yaml": data, "tiny.json": _tiny()}, "text")


def _run_dir_files() -> dict[str, bytes]:
    return {f"run/{p.relative_to(SEED_RUN)}": p.read_bytes() for p in sorted(SEED_RUN.rglob("*")) if p.is_file()}


def _run_dir_case(rng, value=None) -> Case:
    files = _run_dir_files()
    target = rng.choice(sorted(files))
    if target.endswith(".json") and rng.random() < 0.7:
        files[target] = dump_json(mutate_tree(rng, json.loads(files[target]), value))
    elif rng.random() < 0.8:
        files[target] = mutate_csv(rng, files[target].decode(), value).encode()
    else:
        files[target] = mutate_bytes(rng, files[target])
    return Case("run_dir", ["calibrate", "fit", "run", "--name", "fuzzed"], files, "profile", note=target)


def _points_case(rng, value=None) -> Case:
    """A finished sweep's store with one line changed, resumed (the grid is rewritten each time)."""
    line = {"key": "0" * 20, "model": "tiny.json", "status": "ok", "tokens_per_s": 1.0}
    bad = rng.choice(["{}", "[]", "null", "1", '"x"', json.dumps({**line, "key": value}),
                      json.dumps({**line, "tokens_per_s": "nan"}), "{\"key\": []}", "\xff\xfe", "{" * 5000])
    grid = yaml.safe_dump({**GRID, "tp": [2], "overrides": {}})
    return Case("points_jsonl", ["sweep", "grid.yaml", "--out", "sw", "--workers", "1", "--no-progress"],
                {"grid.yaml": grid.encode(), "tiny.json": _tiny(), "sw/points.jsonl": (bad + "\n").encode("utf-8", "surrogateescape")
                 if isinstance(bad, str) else bad}, "sweep")


RESULTS = ("model,hardware,tp,batch,prompt_len,gen_len,schedule,dtype,kv_cache,kv_reads,intra_bandwidth_scale,status,"
           "error,tokens_per_s,speedup_vs_standard\n"
           "tiny,h100,2,1,32,4,standard,bfloat16,static,repeat_interleave,1.0,ok,,1000,1.0\n"
           "tiny,h100,2,1,32,4,ladder,bfloat16,static,repeat_interleave,1.0,ok,,1100,1.1\n")


def _results_case(rng, value=None) -> Case:
    data = mutate_bytes(rng, RESULTS.encode()) if rng.random() < 0.2 else mutate_csv(rng, RESULTS, value).encode()
    return Case("results_csv", ["plot", "results.csv", "--kind", "throughput", "--out", "fig/x"],
                {"results.csv": data}, "text")


# ---- serving and planning under load -------------------------------------------------------

SERVING_BASE = ["serving", "--model", "tiny.json", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "--requests", "40",
                "--prompt-len", "32", "--gen-len", "uniform:1:16", "--rate", "50", "--ttft-slo-s", "0.002",
                "--no-progress", "--json"]
# Flag -> values worth trying beside BAD_TEXT: the cases of issue #31 and their neighbours.
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
    return Case("plan_rate", argv, files, "plan")


# A valid command line per command; cli_args replaces or adds one argument.
BASE_ARGV = [
    ["simulate", "--model", "tiny.json", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "--prompt-len", "32",
     "--gen-len", "4", "--json"],
    ["sweep", "--model", "tiny.json", "--hardware", "h100-sxm-nvswitch", "--tp", "2", "--prompt-len", "32",
     "--gen-len", "4", "--out", "sw", "--workers", "1", "--no-progress", "--intra-latency-us", "5"],
    ["validate", "measured.csv", "--report", "rep"],
    ["fit", "measured.csv", "--hardware", "h100-sxm-nvswitch", "--out", "fit.yaml", "--report", "fitrep"],
    ["plan", "break-even", "--model", "tiny.json", "--tp", "2", "--prompt-len", "32", "--gen-len", "4",
     "--a", "ladder@h100-sxm-p2p-off", "--b", "standard@h100-sxm-nvswitch", "--json"],
    ["profiles", "show", "h100-sxm-nvswitch"],
    ["calibrate", "import-nccl-tests", "a.log", "--out", "imp"],
]
ARG_VALUES = BAD_TEXT + ["2", "1024", "tiny.json", "h100-sxm-nvswitch", "measured.csv", "a.log", "exists_file",
                         "exists_dir", "/proc/self/x", "/sys/kernel/x", "/dev/null", "--json", "-x",
                         "ladder@nope", "standard", "hybrid:99999", "hybrid:-1", "99999999999999999999"]


def _cli_case(rng, value=None) -> Case:
    argv = list(rng.choice(BASE_ARGV))
    text = value if isinstance(value, str) and "\0" not in value else rng.choice(ARG_VALUES)
    positions = [i for i in range(1, len(argv)) if not argv[i].startswith("--")]
    if rng.random() < 0.8 and positions:
        argv[rng.choice(positions)] = text
    else:
        argv.insert(rng.randrange(1, len(argv) + 1), text)
    files = {"tiny.json": _tiny(), "measured.csv": MEASURED.encode(), "a.log": NCCL_LOG.read_bytes(),
             "exists_file": b"x", "exists_dir/.keep": b""}
    return Case("cli_args", argv, files, "json" if argv[0] == "simulate" else "text")


KINDS = {
    "profile": _profile_case, "hf_config": _hf_case, "measured_csv": _measured_case, "nccl_log": _nccl_case,
    "sweep_grid": _grid_case, "prices": _prices_case, "run_dir": _run_dir_case, "points_jsonl": _points_case,
    "results_csv": _results_case, "cli_args": _cli_case,
    "serving_args": _serving_case, "arrival_trace": _trace_case, "serving_grid": _serving_grid_case,
    "plan_rate": _plan_rate_case,
}


def make_case(kind: str, seed: int, value=None) -> Case:
    return KINDS[kind](random.Random(f"{kind}:{seed}"), value)


# ---- running and judging -------------------------------------------------------------------

class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _finite_positive(values) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values)


def _sourced_numbers(tree):
    if isinstance(tree, dict):
        if set(tree) >= {"value", "source"} and isinstance(tree["value"], (int, float)):
            yield tree["value"]
        for v in tree.values():
            yield from _sourced_numbers(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _sourced_numbers(v)


def _no_constant(name: str):
    raise ValueError(f"non-finite number {name} in JSON output")


def _all_numbers(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _all_numbers(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _all_numbers(v)
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        yield tree


def _serving_row_nonsense(row: dict) -> str | None:
    """A serving row's figures contradicting themselves (or being non-finite/negative), or None."""
    for v in _all_numbers(row):
        if not math.isfinite(v) or v < 0:
            return f"serving: figure {v} in {row.get('schedule')}"
    for name in ("ttft", "tpot", "e2e"):
        ps = [row.get(f"{name}_p{p}_s") for p in (50, 90, 99)]
        if None not in ps and not ps[0] <= ps[1] + 1e-12 <= ps[2] + 2e-12:
            return f"serving: {name} percentiles out of order {ps}"
    if row.get("offered_rate") is not None and row.get("goodput_req_per_s") is not None \
            and row["goodput_req_per_s"] > row["offered_rate"] * (1 + 1e-9):
        return "serving: goodput above the offered rate"
    if not 0 <= row.get("slo_attainment", 0) <= 1:
        return "serving: attainment outside [0, 1]"
    if "capacity_req_per_s" in row and row.get("rate"):
        cap, passed = row["capacity_req_per_s"], row["slo_attainment"] >= row["slo_attainment_required"]
        if passed and (cap is None or cap < row["rate"] * (1 - 1e-9)):
            return f"serving: the offered {row['rate']} req/s met the SLOs but the capacity is {cap}"
        if not passed and cap is not None and cap >= row["rate"] * (1 + 1e-9) and not row.get("capacity_at_least"):
            return f"serving: the offered {row['rate']} req/s missed the SLOs but the capacity is {cap}"
        if row.get("replicas") is not None and cap and row["replicas"] * cap < row["target_rate"] * (1 - 1e-9):
            return "serving: replicas x capacity below the target rate"
    return None


def _serving_nonsense(case: Case, work: Path, stdout: str) -> str | None:
    if case.argv[0] == "serving" and "--json" in case.argv:
        for row in json.loads(stdout, parse_constant=_no_constant):
            why = _serving_row_nonsense(row)
            if why:
                return why
    if case.argv[0] == "plan" and "--json" in case.argv:
        rate = float(case.argv[case.argv.index("--rate") + 1]) if "--rate" in case.argv else None
        for row in json.loads(stdout, parse_constant=_no_constant):
            if not all(math.isfinite(v) and v >= 0 for v in _all_numbers(row)):
                return f"plan: non-finite or negative figure in {row}"
            if rate and row["replicas"] * row["capacity_req_per_s"] < rate * (1 - 1e-9):
                return "plan: replicas x capacity below --rate"
    if case.check == "sweep" and (work / "sw" / "results.csv").exists():
        text = (work / "sw" / "results.csv").read_text()
        if any(word in ("inf", "-inf", "nan", "infinity") for word in
               text.lower().replace(",", " ").split()):
            return "sweep: results.csv holds inf/nan"
    return None


def _nonsense(case: Case, work: Path, stdout: str) -> str | None:
    """Why exit 0 produced nonsense, or None."""
    why = _serving_nonsense(case, work, stdout)
    if why:
        return why
    if case.check == "json" and case.argv[0] == "simulate" and "--json" in case.argv:
        rows = json.loads(stdout)
        for row in rows:
            if not _finite_positive([row["tokens_per_s"], row["total_s"], row["decode_s"], row["prefill_s"]]):
                return f"simulate: non-finite or non-positive result {row}"
    if case.check == "profile":
        run = work / case.argv[case.argv.index("--out") + 1] if "--out" in case.argv else work / case.argv[2]
        tree = yaml.safe_load((run / "profile.yaml").read_text())
        for v in _sourced_numbers(tree):
            if not math.isfinite(v) or abs(v) > 1e9:
                return f"profile: value {v} is not plausible"
    if case.check == "sweep":
        import pandas as pd

        frame = pd.read_csv(work / "sw" / "results.csv")
        ok = frame[frame["status"] == "ok"]
        if "rate" in frame.columns:  # serving points: latencies and throughput instead of tokens/s
            if not _finite_positive(ok["throughput_tokens_per_s"].tolist() + ok["ttft_p50_s"].tolist()):
                return "sweep: ok serving rows with non-finite or non-positive throughput or TTFT"
        elif not _finite_positive(ok["tokens_per_s"].tolist()):
            return "sweep: ok rows with non-finite or non-positive tokens/s"
    if case.check == "validation":
        import pandas as pd

        frame = pd.read_csv(work / "rep" / "validation.csv")
        if not _finite_positive(frame["predicted_tokens_per_s"].tolist()):
            return "validate: non-finite predictions"
    if case.argv[0] == "fit":
        target = Path(case.argv[case.argv.index("--out") + 1]) if "--out" in case.argv else None
        for path in [work / target] if target else []:
            path = path if path.suffix in (".yaml", ".yml") else path / "profile.yaml"
            if path.exists():
                for v in _sourced_numbers(yaml.safe_load(path.read_text())):
                    if not math.isfinite(v) or abs(v) > 1e9:
                        return f"fit: value {v} is not plausible"
    elif case.argv[0] in ("simulate", "plan", "serving") and any(
            word.strip(",") in ("nan", "inf", "-inf", "infinity") for word in stdout.lower().split()):
        return "output shows nan/inf"
    return None


def run_case(case: Case, time_limit_s: int = TIME_LIMIT_S) -> tuple[str, str]:
    """(outcome, detail) for ``case``, run in a fresh temporary directory as the working directory;
    the detail of an ``ok`` is its stderr (warnings), of an ``error`` the error line."""
    import os

    with tempfile.TemporaryDirectory(prefix="laddersim-fuzz-") as tmp:
        work = Path(tmp)
        for rel, data in case.files.items():
            path = work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if "hw/p.yaml" in case.files:  # a mutated profile finds the shipped tables beside it
            (work / "hw" / "tables").symlink_to(ROOT / "hardware_profiles" / "tables")
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(time_limit_s)
        code: object = None
        try:
            os.chdir(work)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(list(case.argv))
                except SystemExit as exc:
                    code = exc.code
        except _Hang:
            return "hang", f"over {time_limit_s} s"
        except BaseException:  # noqa: BLE001 - the point is to see any escape
            return "traceback", traceback.format_exc().strip().splitlines()[-1]
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            os.chdir(cwd)
        stderr = err.getvalue()
        if "Traceback" in stderr:
            return "traceback", stderr.strip().splitlines()[-1]
        if code == 2:
            lines = stderr.splitlines()
            if len(lines) == 1 and lines[0].startswith("error: "):
                return "error", lines[0]
            return "multiline", " | ".join(lines)[:400]
        if code == 1 and case.argv[0] == "plan" and (out.getvalue().strip() == "[]"
                                                     or "no configuration" in out.getvalue()):
            return "ok", "no option"
        if code == 0:
            try:
                why = _nonsense(case, work, out.getvalue())
            except Exception as exc:  # noqa: BLE001
                why = f"results unreadable: {type(exc).__name__}: {exc}"
            return ("nonsense", why) if why else ("ok", stderr.strip())
        return "nonsense", f"exit code {code!r}: {stderr.strip()[-300:]}"


GOOD = ("error", "ok")


def main_fuzz(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000, help="total cases, spread evenly over the kinds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--show", action="store_true", help="print every failure")
    parser.add_argument("--save-failures", metavar="DIR", help="write failing cases as corpus JSON files")
    parser.add_argument("--time-limit-s", type=int, default=TIME_LIMIT_S, help="per case; over it is a hang")
    args = parser.parse_args(argv)
    counts: dict[str, Counter] = {k: Counter() for k in args.kinds}
    import time

    seconds: Counter = Counter()
    failures = 0
    per_kind = max(1, args.cases // len(args.kinds))
    for kind in args.kinds:
        for i in range(per_kind):
            case = make_case(kind, args.seed * 1_000_003 + i)
            started = time.monotonic()
            outcome, detail = run_case(case, args.time_limit_s)
            seconds[kind] += time.monotonic() - started
            counts[kind][outcome] += 1
            if outcome not in GOOD:
                failures += 1
                if args.show:
                    print(f"{kind} #{i}: {outcome}: {detail}  argv={case.argv} note={case.note}", file=sys.stderr)
                if args.save_failures:
                    Path(args.save_failures).mkdir(parents=True, exist_ok=True)
                    (Path(args.save_failures) / f"{kind}-{args.seed}-{i}.json").write_text(
                        json.dumps({**case.to_json(), "outcome": outcome, "detail": detail}, indent=1))
        print(f"{kind:<14} " + " ".join(f"{o}={counts[kind][o]}" for o in
                                          ("error", "ok", "traceback", "multiline", "nonsense", "hang"))
              + f"  ({seconds[kind] / per_kind:.2f} s/case)", flush=True)
    total = sum(counts.values(), Counter())
    print(f"{'all':<14} cases={sum(total.values())} " + " ".join(
        f"{o}={total[o]}" for o in ("error", "ok", "traceback", "multiline", "nonsense", "hang")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main_fuzz())
