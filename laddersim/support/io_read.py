"""The reading layer: every file laddersim reads (YAML, JSON, CSV, logs) comes in through here.

Whatever goes wrong (the file is missing, a directory, unreadable, binary, too large, not UTF-8,
not YAML/JSON/CSV, or a YAML tag whose constructor fails, ``!!float 'nope'``) becomes one
``UserInputError`` line naming the file, the line where it can be told, and what is allowed.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import yaml

from laddersim.errors import UserInputError

# Larger inputs are refused before they are read: a profile, grid or config.json is a few KiB,
# the largest measured table or log a few MiB.
MAX_INPUT_BYTES = 64 * 1024**2


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when it has none): one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_bytes(path: str | Path, what: str, max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path``; ``what`` names the input in errors."""
    path = Path(path)
    try:
        if path.is_dir():
            raise UserInputError(f"{what}: {path} is a directory; allowed: a file")
        size = path.stat().st_size
        if size > max_bytes:
            raise UserInputError(f"{what}: {path} is {size} bytes; allowed: at most {max_bytes} bytes")
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)  # /proc-like files report size 0
    except OSError as exc:
        raise UserInputError(f"{what}: cannot read {path}: {exc.strerror or first_line(exc)}") from None
    if len(data) > max_bytes:
        raise UserInputError(f"{what}: {path} is larger than {max_bytes} bytes; allowed: at most that")
    return data


def read_text(path: str | Path, what: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of ``path``: binary (NUL bytes) or non-UTF-8 input is one error line."""
    data = read_bytes(path, what, max_bytes)
    nul = data.find(b"\0")
    if nul >= 0:
        line = data[:nul].count(b"\n") + 1
        raise UserInputError(f"{what}: {path}:{line}: binary data (a NUL byte); allowed: a UTF-8 text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UserInputError(f"{what}: {path}:{line}: byte 0x{data[exc.start]:02x} is not UTF-8; "
                             "allowed: a UTF-8 text file") from None


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str, where: str):
    """``yaml.safe_load(text)``; syntax and constructor errors are one line naming ``where``.

    libyaml's loader where PyYAML has it (~10x faster); a document it refuses is parsed again by the
    pure-Python loader, whose error messages (line and column) are the ones users see."""
    try:
        try:
            return yaml.load(text, Loader=_FAST_LOADER)
        except Exception:  # noqa: BLE001 - the pure-Python loader below raises the real error
            pass
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f":{mark.line + 1}" if mark is not None else ""
        raise UserInputError(f"{where}{at}: not valid YAML: {exc.problem or exc.context or 'syntax error'}") from None
    except yaml.YAMLError as exc:
        raise UserInputError(f"{where}: not valid YAML: {first_line(exc)}") from None
    except (ValueError, TypeError, OverflowError, RecursionError, AttributeError) as exc:
        # A tag's constructor failed (!!float 'nope', !!timestamp 'x', !!binary '*'), or the
        # nesting is deeper than Python's stack.
        raise UserInputError(f"{where}: a YAML value cannot be built: {first_line(exc)}; allowed: plain "
                             "numbers, strings, lists and mappings") from None


MAX_DEPTH = 64  # nesting of a YAML/JSON input; deeper is a recursive alias (&a [*a]) or garbage
# Nodes of a YAML/JSON tree with every alias expanded: the largest real input (a measured table
# as YAML) has tens of thousands; a "billion laughs" document (9 aliases of 9 aliases of ...)
# has ~9^9 and hangs every reader that walks it, however small its text.
MAX_NODES = 2_000_000


def check_tree(tree, where: str) -> None:
    """Refuse a tree nested deeper than MAX_DEPTH, holding itself (a recursive YAML alias), or
    expanding to more than MAX_NODES nodes once its aliases are expanded (an alias bomb).

    A YAML alias is the same Python object at every place it occurs, so each distinct list or
    mapping is visited once and its expanded size and depth memoised (by identity): the cost is
    the parsed size, never the expanded one."""
    size: dict[int, int] = {}  # id -> nodes of the expanded subtree
    depth: dict[int, int] = {}  # id -> levels of lists/mappings, itself included
    on_path: set[int] = set()
    stack: list[tuple[object, bool]] = [(tree, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        key = id(node)
        children = [c for c in (node.values() if isinstance(node, dict) else node) if isinstance(c, (dict, list))]
        if done:
            on_path.discard(key)
            size[key] = 1 + (len(node) - len(children)) + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            if size[key] > MAX_NODES:
                raise UserInputError(f"{where}: expands to more than {MAX_NODES} nodes (YAML aliases of aliases?); "
                                     "allowed: plain nested mappings and lists")
            if depth[key] > MAX_DEPTH:
                raise UserInputError(f"{where}: nested deeper than {MAX_DEPTH} levels (or a recursive alias); "
                                     "allowed: plain nested mappings and lists")
            continue
        if key in size:
            continue
        if key in on_path or len(on_path) >= MAX_DEPTH:
            raise UserInputError(f"{where}: nested deeper than {MAX_DEPTH} levels (or a recursive alias); "
                                 "allowed: plain nested mappings and lists")
        on_path.add(key)  # (ids are unique: the tree holds every node while it is checked)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)


def read_yaml(path: str | Path, what: str):
    """The YAML document in ``path`` (any type; callers check the shape)."""
    tree = parse_yaml(read_text(path, what), f"{what}: {path}")
    check_tree(tree, f"{what}: {path}")
    return tree


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number; allowed: finite numbers")


def parse_json(text: str, where: str):
    """``json.loads(text)``, refusing NaN/Infinity; errors are one line naming ``where``."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise UserInputError(f"{where}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        raise UserInputError(f"{where}: not valid JSON: {first_line(exc)}") from None


def read_json(path: str | Path, what: str):
    """The JSON document in ``path`` (any type; callers check the shape)."""
    return parse_json(read_text(path, what), f"{what}: {path}")


def read_csv(path: str | Path, what: str, **kwargs):
    """A pandas DataFrame of the CSV in ``path`` (``kwargs`` go to ``pandas.read_csv``)."""
    import pandas as pd

    text = read_text(path, what)
    try:
        return pd.read_csv(io.StringIO(text), **kwargs)
    except pd.errors.EmptyDataError:
        raise UserInputError(f"{what}: {path} is empty; allowed: a CSV file with a header line") from None
    except (pd.errors.ParserError, ValueError, csv.Error) as exc:
        raise UserInputError(f"{what}: cannot read {path}: {first_line(exc)}") from None
