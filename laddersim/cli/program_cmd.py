"""``laddersim program``: run one of the shipped calibration programs from any folder.

The programs (``ladder_bench``, ``kernel_trace``, ``closed_loop``...) are Python files in the
repository's ``calibration/`` folder and inside an installed wheel; this command finds them
through ``laddersim.support.resources``, so the same line works from a checkout and from a wheel, and
replaces itself with ``python PROGRAM.py ARGS`` (signals, exit codes and Ctrl-C are the
program's own).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
from pathlib import Path

from laddersim.api.calibration_task import TORCH_INSTALL
from laddersim.errors import UserInputError


def register(sub) -> None:
    p = sub.add_parser(
        "program", help="run a shipped calibration program (ladder_bench, kernel_trace, closed_loop, ...)",
        description="Run one of the calibration programs shipped with laddersim, from any folder: "
                    "laddersim program NAME ARGS... is python calibration/NAME.py ARGS... of a checkout. "
                    "--list names them; --path NAME prints the file (for torchrun).")
    p.add_argument("name", nargs="?", metavar="NAME", help="the program, e.g. ladder_bench")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="the program's own options (laddersim program NAME --help lists them)")
    p.add_argument("--list", action="store_true", help="list the programs, one line each")
    p.add_argument("--path", action="store_true", help="print the program's file instead of running it")
    p.set_defaults(func=run)


def programs() -> dict[str, str]:
    """Runnable program name -> the first line of its docstring."""
    from laddersim.support.resources import resource_path

    out = {}
    for path in sorted(resource_path("calibration").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if '__name__ == "__main__"' not in text:
            continue  # a module of the programs, not a program
        doc = ast.get_docstring(ast.parse(text)) or ""
        out[path.stem] = doc.splitlines()[0].replace("``", "") if doc else ""  # no reST markup
    return out


def program_file(name: str) -> Path:
    """The file of a runnable program; a name that is none is one error line."""
    from laddersim.support.resources import resource_path

    known = programs()
    if name not in known:
        raise UserInputError(f"program: unknown program '{name}'; allowed: {', '.join(known)}")
    return resource_path("calibration", f"{name}.py")


def run(args: argparse.Namespace) -> int:
    if args.list:
        if args.name:
            raise UserInputError("list: lists every program; give either --list or a NAME")
        known = programs()
        width = max(map(len, known))
        for name, line in known.items():
            print(f"{name:<{width}}  {line}")
        return 0
    if not args.name:
        raise UserInputError("program: give a NAME (laddersim program --list names them)")
    path = program_file(args.name)
    if args.path:
        if args.args:
            raise UserInputError(f"path: prints the file only; drop the program's options {' '.join(args.args)}")
        print(path)
        return 0
    if importlib.util.find_spec("torch") is None:
        raise UserInputError(f"program: {args.name} needs torch, which is not installed; {TORCH_INSTALL}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, str(path), *args.args])
    return 0  # not reached
