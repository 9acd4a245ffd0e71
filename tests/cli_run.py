"""Run the command line in-process as a user would: its exit code (argparse's SystemExit included),
stdout and stderr."""
from __future__ import annotations

from laddersim.cli import main


def run_cli(args, capsys):
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err
