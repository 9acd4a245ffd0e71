"""The ``laddersim`` command line.

Each subcommand lives in its own module ``laddersim/cli/<name>_cmd.py`` exposing
``register(subparsers)``; it adds its parser and sets ``func`` to a handler taking the parsed
arguments and returning an exit code. A handler only parses: it calls the task's function in
``laddersim.api`` (which holds the work, the checks and the defaults its flags read) and prints
what it returns. Bad input raises ``UserInputError``: one line, exit 2.

Only the chosen command's module is imported (start-up stays cheap: ``simulate`` needs neither
matplotlib nor scipy); the others appear in ``laddersim --help`` from ``COMMANDS``. A new command
is one line there.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys

from laddersim.errors import UserInputError

# name -> one-line help for ``laddersim --help``; the module is laddersim.cli.<name>_cmd.
COMMANDS = {
    "simulate": "simulate one scenario under one or more schedules",
    "profiles": "hardware profiles: list, show, check, fit, report",
    "calibrate": "measure a cluster and fit a hardware profile",
    "validate": "compare predictions with measured tokens/s (default: every shipped development table, "
                "the README's accuracy table)",
    "fit": "fit framework overhead, collective floor (and interference) to measured runs",
    "sweep": "what-if sweep over a grid; resumable Parquet/CSV table",
    "plot": "plot a results table (PNG and SVG), or a decode-step timeline",
    "plan": "cheapest configurations meeting a throughput/latency target; break-even fabrics",
    "report": "write the report (reports/index.md with figures) from built-in defaults",
    "serving": "one replica under load: continuous batching, TTFT/TPOT percentiles, goodput, capacity",
    "kernels": "one layer's kernels as laddersim prices them: class, count, us (beside a profiler trace)",
    "program": "run a shipped calibration program (ladder_bench, kernel_trace, closed_loop, ...)",
}
DESCRIPTION = ("laddersim: a performance simulator for tensor-parallel LLM inference, the standard and the "
               "Ladder Residual schedules on NVLink, PCIe and InfiniBand machines. laddersim COMMAND --help "
               "tells more; laddersim report writes the main report.")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``error: ...``) and exit code 2, and an option the
    command does not have is named as such (argparse would take the word after it for a
    positional, and blame that: ``invalid choice: '0.99'``)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        prog = self.prog.replace("laddersim ", "", 1) if self.prog != "laddersim" else "laddersim"
        sys.stderr.write(f"error: {one_line(f'{prog}: {message}')}\n")
        raise SystemExit(2)

    def parse_known_args(self, args=None, namespace=None):
        words = sys.argv[1:] if args is None else list(args)
        if (unknown := self._unknown_option(words)) is not None:
            names = [o[2:] for o in self._long_options()]
            close = difflib.get_close_matches(unknown.split("=", 1)[0].lstrip("-"), names, n=1)
            hint = f" (did you mean --{close[0]}?)" if close else ""
            self.error(f"unknown option {unknown}{hint}; {self.prog} --help lists the options")
        return super().parse_known_args(args, namespace)

    def _long_options(self) -> list[str]:
        return [o for o in self._option_string_actions if o.startswith("--")]

    def _unknown_option(self, words: list[str]) -> str | None:
        """The first word this parser would take for an option it does not have, looking only at
        its own words: up to its subcommand's name (the rest is the subcommand's), a ``--``, or,
        for a command passing the rest on (``program NAME ARGS...``), its first positional."""
        commands = {name for a in self._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices}
        passes_on = any(a.nargs == argparse.REMAINDER for a in self._actions)
        for word in words:
            if word == "--" or word in commands:
                return None
            if not word.startswith("-") or word == "-" or " " in word or self._negative_number_matcher.match(word):
                if passes_on:
                    return None
                continue
            name = word.split("=", 1)[0]
            known = name in self._option_string_actions or (
                name.startswith("--") and self.allow_abbrev and any(o.startswith(name) for o in self._long_options()))
            if not known:
                return word
        return None


def _chosen(argv: list[str] | None) -> str | None:
    """The command named on the command line (the first word that is not an option), if any."""
    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    return words[0] if words and words[0] in COMMANDS else None


def build_parser(argv: list[str] | None = None, load_all: bool = False) -> argparse.ArgumentParser:
    """The parser; only the command chosen in ``argv`` (every one with ``load_all``) is imported."""
    parser = OneLineParser(prog="laddersim", description=DESCRIPTION)
    parser.add_argument("--version", action=_Version, nargs=0, help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    chosen = _chosen(argv)
    for name, text in COMMANDS.items():
        if load_all or name == chosen:
            importlib.import_module(f"laddersim.cli.{name}_cmd").register(sub)
        else:
            sub.add_parser(name, help=text, add_help=False)  # listed only: never parsed
    return parser


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked (reading the package
    metadata costs more than a small simulation's start-up can spare)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from laddersim.support.provenance import laddersim_version

        sys.stdout.write(f"laddersim {laddersim_version()}\n")  # (where argparse's version action prints)
        parser.exit()


def one_line(message: str) -> str:
    """``message`` on one line: control characters (a newline in a file name or a YAML key) escaped."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in message)


def main(argv: list[str] | None = None) -> int:
    # Set before anything imports numpy or builds a model (a user who sets either keeps their
    # choice): numpy's BLAS threads only spin around laddersim's small arrays (and sweep workers
    # are processes of their own), and pydantic looks for plugins of its own in every installed
    # package's metadata when it builds the first model, while laddersim's models use none. Both
    # are a noticeable share of a small command's start-up.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserInputError as exc:
        sys.stderr.write(f"error: {one_line(str(exc))}\n")
        return 2
    except OSError as exc:
        # The environment refused (a disk full, a file removed or locked mid-run): one line.
        if isinstance(exc, BrokenPipeError):
            return 0
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"error: {one_line(where + (exc.strerror or str(exc)))}\n")
        return 2
    except KeyboardInterrupt:
        # Resumable commands (sweep, calibrate run) say so in their own note.
        note = getattr(args, "interrupted_note", "stopped before it finished; re-run the same command")
        sys.stderr.write(f"interrupted: {note}\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
