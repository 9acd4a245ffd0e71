"""The fuzzer's mutations (tools/dev/fuzz_inputs.py): bad values worth trying, and edits of bytes, of a
YAML/JSON tree, of a CSV and of an nccl-tests log, each drawn from a seeded ``random.Random``."""

from __future__ import annotations

import json
import random

import yaml

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

