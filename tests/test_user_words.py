"""What a user reads speaks to a user: no ``--help`` of any command, and no message of the commands
run here, carries reST markup, a path into the developers' shared folder, or torch profiler noise.
(Every README command block's output is checked the same way in tests/test_readme.py, which
includes a calibrate run with the profiler-using ops benchmark.)"""

from __future__ import annotations

import argparse

import pytest

from laddersim.cli import build_parser, main

from user_words import developer_words


def _parsers(parser: argparse.ArgumentParser, path: str = "laddersim"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


HELP = dict(_parsers(build_parser(load_all=True)))


def test_the_walk_reaches_every_command_and_verb():
    from laddersim.cli import COMMANDS

    assert {f"laddersim {name}" for name in COMMANDS} <= set(HELP)
    for nested in ("laddersim profiles check", "laddersim calibrate run", "laddersim plan break-even"):
        assert nested in HELP
    assert len(HELP) >= len(COMMANDS) + 8


@pytest.mark.parametrize("command", sorted(HELP))
def test_help_has_no_developer_words(command):
    text = HELP[command].format_help()
    assert developer_words(text) == [], f"{command} --help"


def test_the_pattern_catches_what_it_is_for():
    for bad in ("see ``laddersim.simulate``", "calls :func:`simulate`", "needs ../shared/reference_data",
                "USDT:2026-11-26 18:57:28 6267:6267 SyncActivityProfilerHandler.cpp:52] profiler_start",
                "Traceback (most recent call last):", "the measurement of issue 19"):
        assert developer_words(bad) == [bad]
    assert developer_words("laddersim simulate --model llama-3.1-8b (shared by every rank)") == []


def test_main_help_describes_the_tool_not_its_module(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "command line" not in out.lower().split("positional")[0]
    assert "simulator for tensor-parallel LLM inference" in " ".join(out.split())


def test_report_help_names_every_section():
    from laddersim.reporting.sections import SECTIONS

    text = " ".join(HELP["laddersim report"].format_help().split())
    assert f"{len(SECTIONS)} sections" in text and all(" ".join(s.split()) in text for s in SECTIONS)


def test_profiles_report_without_the_reference_files_says_so_in_user_words(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LADDERSIM_SHARED", str(tmp_path / "none"))
    from laddersim.profiles_check import report

    monkeypatch.setattr(report, "write_report", lambda out: tmp_path / "collectives.md")
    assert main(["profiles", "report", "--out", str(tmp_path / "collectives.md")]) == 0
    err = capsys.readouterr().err
    assert "original measurement files are not on this machine" in err
    assert developer_words(err) == []


def test_the_readmes_point_users_at_nothing_outside_their_install():
    """A user has no ../shared (the developers' reference folder): the READMEs name the original
    measurement files by LADDERSIM_SHARED instead."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    for readme in ("README.md", "calibration/README.md"):
        lines = (repo / readme).read_text().splitlines()
        assert [f"{readme}:{i}" for i, line in enumerate(lines, 1) if "../shared" in line] == []
