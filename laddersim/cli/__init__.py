"""The ``laddersim`` command line.

Each subcommand lives in its own module ``laddersim/cli/<name>_cmd.py`` exposing
``register(subparsers)``; it adds its parser and sets ``func`` to a handler taking the parsed
arguments and returning an exit code. Bad input raises ``UserInputError``: one line, exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from laddersim.errors import UserInputError

COMMAND_MODULES = (
    "simulate", "profiles", "calibrate", "validate", "fit", "sweep", "plot", "plan", "report", "serving",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``error: ...``) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        prog = self.prog.replace("laddersim ", "", 1) if self.prog != "laddersim" else "laddersim"
        sys.stderr.write(f"error: {prog}: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="laddersim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"laddersim.cli.{name}_cmd")
        except ModuleNotFoundError as exc:
            if exc.name == f"laddersim.cli.{name}_cmd":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserInputError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        # Resumable commands (sweep, calibrate run) say so in their own note.
        note = getattr(args, "interrupted_note", "stopped before it finished; re-run the same command")
        sys.stderr.write(f"interrupted: {note}\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
