"""Start-up: commands import what they use, when they use it (timings: benchmarks/bench_startup.py)."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import numpy as np

from laddersim.cli import COMMANDS, build_parser

HEAVY = ("pandas", "matplotlib", "scipy")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + f"\nimport sys; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_simulate_command_runs_without_pandas_matplotlib_or_scipy():
    code = ("import contextlib, io\nfrom laddersim.cli import main\nwith contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    assert main(['simulate', '--model', 'llama-3.1-8b', '--hardware', 'h100-sxm-nvswitch', '--tp', '2',"
            " '--prompt-len', '64', '--gen-len', '4', '--json']) == 0\nassert '\"tokens_per_s\"' in out.getvalue()")
    assert _modules_after(code) == set()


def test_import_laddersim_and_its_parser_stay_light():
    assert _modules_after("import laddersim, laddersim.simulation.simulate\nfrom laddersim.cli import build_parser\nbuild_parser([])") == set()


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {choice.dest: choice.help for choice in sub._choices_actions}


def test_help_lists_every_command_with_the_help_its_module_registers():
    listed = _helps(build_parser([]))
    loaded = _helps(build_parser(load_all=True))
    assert list(listed) == list(COMMANDS) == list(loaded)
    assert listed == loaded  # the table's one-line help is the module's own


def test_the_chosen_command_parses_its_own_arguments():
    args = build_parser(["simulate", "--model", "m", "--hardware", "h", "--tp", "4"]).parse_args(
        ["simulate", "--model", "m", "--hardware", "h", "--tp", "4"])
    assert (args.command, args.tp) == ("simulate", 4)


def test_numpy_table_reader_matches_the_pandas_one_on_every_shipped_allreduce_table():
    from laddersim.hardware.profile import profiles_dir
    from laddersim.hardware.table_files import read_table_arrays, read_table_csv

    tables = [p for p in sorted((profiles_dir() / "tables").glob("*.csv"))
              if "gemm" not in p.name and "host_link" not in p.name]  # GEMM and host-link tables: other columns
    assert tables
    for path in tables:
        arrays, frame = read_table_arrays(path), read_table_csv(path)
        for name, column in arrays.items():
            assert np.array_equal(column, frame[name].to_numpy()), (path.name, name)


def test_simulate_loads_its_own_task_only_and_no_simpy():
    """The API's modules load on first use of their names; the simulate path runs the engine
    without SimPy (SimPy, the reference, loads only where asked for)."""
    code = ("import contextlib, io, sys\nfrom laddersim.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    assert main(['simulate', '--model', 'llama-3.1-8b', '--hardware', 'h100-sxm-nvswitch', '--tp', '2',"
            " '--prompt-len', '64', '--gen-len', '4']) == 0\n"
            "print(' '.join(sorted(m for m in sys.modules if m == 'numpy.ma' or m.startswith(('laddersim.api.',"
            " 'laddersim.measure', 'laddersim.fitting', 'laddersim.traffic', 'laddersim.planning', 'simpy')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["laddersim.api.common", "laddersim.api.params", "laddersim.api.scenario"]


def test_every_api_name_loads_from_its_module():
    import laddersim.api as api

    assert set(api._MODULE_OF) == set(api.__all__)
    for name in api.__all__:
        value = getattr(api, name)
        assert value is getattr(importlib.import_module(f"laddersim.api.{api._MODULE_OF[name]}"), name)
