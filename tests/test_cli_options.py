"""The command line as a shell over the API: it imports only ``laddersim.api`` (and the support
modules), names an option it does not know on every command and subcommand, lists every
framework in its help and the API's docstrings, and draws progress bars on a terminal only."""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import pydoc
import re
from pathlib import Path

import pytest

import laddersim
from cli_run import run_cli
from laddersim.cli import build_parser
from laddersim.support.choices import FRAMEWORKS

CLI = Path(laddersim.__file__).parent / "cli"
ALLOWED = ("laddersim.api", "laddersim.support", "laddersim.errors", "laddersim.cli")


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in ``path``, at any depth (function-level ones included)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, [alias.name for alias in node.names]))
    return out


def test_the_command_line_imports_only_the_api():
    files = sorted(CLI.glob("*.py"))
    assert len(files) > 10
    outside = [(path.name, module) for path in files for module, _ in _imports(path)
               if module.startswith("laddersim") and module != "laddersim"
               and not any(module == a or module.startswith(a + ".") for a in ALLOWED)]
    assert outside == []
    private = [(path.name, module, name) for path in files for module, names in _imports(path)
               if module.startswith("laddersim.api") for name in names if name.startswith("_")]
    assert private == []


def test_the_check_sees_a_forbidden_import(tmp_path):
    """The walk above finds imports inside functions too (a check that could not fail is none)."""
    path = tmp_path / "x_cmd.py"
    path.write_text("def run():\n    from laddersim.planning.planner import RANK_KEYS\n")
    assert ("laddersim.planning.planner", ["RANK_KEYS"]) in _imports(path)


def _command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand, as the words that name it."""
    out = [path] if path else []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _command_paths(sub, (*path, name))
    return out


PATHS = _command_paths(build_parser(load_all=True))


def test_every_command_and_subcommand_is_walked():
    assert {("simulate",), ("plan",), ("plan", "break-even"), ("profiles", "show"), ("calibrate", "run"),
            ("calibrate", "nccl-log"), ("program",), ("sweep",)} <= set(PATHS)
    assert len(PATHS) >= 20


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) for p in PATHS])
def test_an_unknown_option_is_named_on_every_command(path, capsys):
    code, out, err = run_cli([*path, "--no-such-option", "0.99"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {' '.join(path)}: unknown option --no-such-option; laddersim {' '.join(path)} "
                          "--help lists the options"), err


@pytest.mark.parametrize("argv, where, option", [
    (["--no-such-option", "simulate"], "laddersim", "--no-such-option"),
    (["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "--slo-atainment", "0.99"], "plan",
     "--slo-atainment"),
    (["calibrate", "fit", "run", "--name", "x", "--bse", "h100-sxm-nvswitch"], "calibrate fit", "--bse"),
    (["profiles", "--verbose", "list"], "profiles", "--verbose"),
])
def test_an_unknown_option_before_or_after_values_is_named(argv, where, option, capsys):
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.startswith(f"error: {where}: unknown option {option}") and err.count("\n") == 1


def test_a_near_miss_is_suggested_and_an_abbreviation_still_works(capsys):
    code, _, err = run_cli(["simulate", "--jiter", "0.1"], capsys)
    assert code == 2 and "unknown option --jiter (did you mean --jitter?)" in err
    args = build_parser(["simulate"]).parse_args(["simulate", "--model", "m", "--hardware", "h", "--tp", "2",
                                                  "--prompt", "64", "--seed=3"])
    assert (args.prompt_len, args.seed) == (64, 3)


def test_program_passes_its_options_on():
    args = build_parser(["program"]).parse_args(["program", "ladder_bench", "--steps", "3"])
    assert (args.name, args.args) == ("ladder_bench", ["--steps", "3"])


# ---- every framework in the help ------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n in laddersim.api.PUBLIC
                                  if "framework" in inspect.signature(getattr(laddersim, n)).parameters])
def test_api_help_lists_every_framework(name):
    text = pydoc.render_doc(getattr(laddersim, name), renderer=pydoc.plaintext)
    assert all(framework in text for framework in FRAMEWORKS), name


@pytest.mark.parametrize("command", ["simulate", "kernels", "serving", "validate", "fit"])
def test_command_help_lists_every_framework(command, capsys):
    code, out, _ = run_cli([command, "--help"], capsys)
    assert code == 0 and "--framework" in out
    text = " ".join(re.sub(r"-\n\s+", "-", out).split())  # argparse wraps within hyphenated names
    assert all(framework in text for framework in FRAMEWORKS), command


# ---- progress bars only on a terminal ----------------------------------------------------------------

class _Stderr(io.StringIO):
    def __init__(self, terminal: bool):
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


PLAN = ["plan", "--model", "llama-3.1-8b", "--profiles", "h100-sxm-nvswitch", "--tp", "1", "2", "--batch", "1",
        "--prompt-len", "64", "--gen-len", "4", "--workers", "1", "--min-user-tokens-per-s", "5", "--json"]


@pytest.mark.parametrize("terminal", [False, True])
def test_plan_draws_its_bar_on_a_terminal_only(terminal, monkeypatch, capsys):
    from laddersim.cli import main

    stderr = _Stderr(terminal)
    monkeypatch.setattr("sys.stderr", stderr)
    assert main(PLAN) == 0
    assert ("plan: 100%" in stderr.getvalue()) is terminal
    assert capsys.readouterr().out.startswith("[")


@pytest.mark.parametrize("terminal", [False, True])
def test_the_simulation_bar_and_counted_bars_follow_the_terminal(terminal, monkeypatch):
    from laddersim.support.progress import ProgressBar, progress_bar

    stderr = _Stderr(terminal)
    monkeypatch.setattr("sys.stderr", stderr)
    with ProgressBar("simulate ladder") as bar:
        for done in range(1, 4):
            bar.update(done, 3, ProgressBar.OP_RANKS)
    with progress_bar(5, "sweep", "pt") as counted:
        counted.update(5)
    with progress_bar(5, "off", "pt", enabled=False) as off:
        off.update(5)
    text = stderr.getvalue()
    assert ("simulate ladder" in text and "sweep: 100%" in text) is terminal
    assert "off" not in text and (text == "") is not terminal
