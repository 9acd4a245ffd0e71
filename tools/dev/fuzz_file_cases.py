"""The fuzzer's cases of the file readers and of the command line (tools/dev/fuzz_inputs.py): a valid
seed input per kind, mutated (tools/dev/fuzz_mutators.py), with the command that reads it. A case is
replayable: tests/data/fuzz_corpus/ keeps past failures as ``Case.to_json()``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fuzz_mutators import (BAD_TEXT, dump_json, dump_yaml, mutate_bytes, mutate_csv, mutate_log,
                           mutate_tree)

ROOT = Path(__file__).resolve().parents[2]
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

