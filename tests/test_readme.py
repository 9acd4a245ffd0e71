"""Every command block of README.md and calibration/README.md runs, as printed (see
tests/readme_blocks.py for which blocks run and the marker that skips one).

The blocks run in document order (README.md first) in ONE scratch folder shared by all of them,
so a block may use what an earlier one wrote (``plot`` reads the ``sweep`` output) and a command
printed in both READMEs (``calibrate run``) resumes the second time instead of measuring again.
The scratch folder holds copies of the checkout's data folders (``examples/``, ``calibration/``,
``benchmarks/``, ``hardware_profiles/``), so relative paths in the blocks work and every output
(``runs/``, ``reports/``, ``out.csv``) stays out of the checkout. ``laddersim`` and ``python`` on
PATH run this checkout's code with this interpreter. A failing command fails its block's test
with the block's location and the command's output.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest

from readme_blocks import READMES, REPO, blocks

COPIED = ("examples", "calibration", "benchmarks", "hardware_profiles")
ALL = [b for f in READMES for b in blocks(f)]
RUN = [b for b in ALL if b.runs]
BLOCK_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    for folder in COPIED:
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir = root / ".bin"
    bin_dir.mkdir()
    for name, line in (("laddersim", f'exec "{sys.executable}" -m laddersim "$@"'),
                       ("python", f'exec "{sys.executable}" "$@"'), ("python3", f'exec "{sys.executable}" "$@"')):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{line}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return root, env


def test_blocks_are_found_and_every_skip_says_why():
    """The selection cannot silently run nothing: both READMEs have blocks that run, and the
    skipped command blocks are few and each gives its reason."""
    for readme in READMES:
        assert any(b.runs for b in ALL if b.file == readme), readme
    skipped = [b for b in ALL if b.language in ("bash", "sh", "python") and not b.runs]
    assert all(b.skip_reason.strip() for b in skipped)
    assert len(skipped) <= len(RUN) // 2


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_readme_block_runs(block, scratch):
    root, env = scratch
    if block.language == "python":
        command = [sys.executable, "-c", block.text]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    assert proc.returncode == 0, (f"{block.where} failed (exit {proc.returncode}):\n{block.text}\n"
                                  f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}")
