"""Every command block of README.md and calibration/README.md runs, as printed, for a user who
installed the wheel and works in an empty folder (see tests/readme_blocks.py for which blocks
run and the marker that skips one; .ci/run runs the two setup blocks).

The wheel is built from this working tree and installed into a fresh venv (tests/wheel_venv.py);
``laddersim`` and ``python`` on PATH are that venv's, and nothing of the checkout is importable
or lies in the folder: ``examples/...``, the profiles and the calibration programs come from the
installed package. The blocks run in document order (README.md first) in ONE folder, so a block
may use what an earlier one wrote (``plot`` reads the ``sweep`` output) and a command printed in
both READMEs (``calibrate run``) resumes the second time instead of measuring again. A block
fails its test when a command fails, and when its output carries words meant for developers
(reST markup, ../shared, torch profiler lines, a traceback: tests/user_words.py).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from readme_blocks import READMES, REPO, blocks
from user_words import developer_words
from wheel_venv import build_wheel, install_in_fresh_venv, user_env

ALL = [b for f in READMES for b in blocks(f)]
RUN = [b for b in ALL if b.runs]
BLOCK_TIMEOUT_S = 600
NEEDS_TORCH = ("calibrate run", "laddersim program")


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    bin_dir = install_in_fresh_venv(build_wheel(root / "build"), root / "venv")
    env = user_env(bin_dir)
    user = root / "user"
    user.mkdir()
    where = subprocess.run(["python", "-c", "import laddersim, laddersim.support.resources as r; "
                            "print(laddersim.__file__); print(r.source_checkout())"],
                           cwd=user, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(str(root / "venv")) and where[1] == "None", where  # the wheel, not the checkout
    return user, env


def test_blocks_are_found_and_every_skip_says_why():
    """The selection cannot silently run nothing: both READMEs have blocks that run, and the
    skipped command blocks are few and each gives its reason."""
    for readme in READMES:
        assert any(b.runs for b in ALL if b.file == readme), readme
    skipped = [b for b in ALL if b.language in ("bash", "sh", "python") and not b.runs and not b.ci]
    assert all(b.skip_reason.strip() for b in skipped)
    assert len(skipped) <= len(RUN) // 2  # the setup blocks .ci/run runs are not skipped


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_readme_block_runs_from_the_wheel_in_an_empty_folder(block, user_folder):
    root, env = user_folder
    if any(word in block.text for word in NEEDS_TORCH) and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (the README says calibration needs it)")
    if block.language == "python":
        command = ["python", "-c", block.text]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    assert proc.returncode == 0, (f"{block.where} failed (exit {proc.returncode}):\n{block.text}\n"
                                  f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}")
    noise = developer_words(proc.stdout + proc.stderr)
    assert noise == [], f"{block.where} printed words meant for developers:\n" + "\n".join(noise[:10])


def test_ci_runs_exactly_the_readme_setup_blocks():
    """.ci/run takes the setup and test commands from README.md itself (readme_blocks.py ci), so
    the two cannot drift: the first is one line that sets up and runs the report, the second
    the tests."""
    ci = [b for b in ALL if b.ci]
    assert [b.file for b in ci] == ["README.md", "README.md"]
    setup, tests = (b.text.strip().splitlines() for b in ci)
    assert [line for line in setup if not line.startswith("#")] == [
        "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e '.[dev]' && .venv/bin/laddersim report"]
    assert [line for line in tests if not line.startswith("#")] == [".venv/bin/python -m pytest"]
    first_command_block = next(b for b in ALL if b.language in ("bash", "sh", "python"))
    assert first_command_block == ci[0]
    script = (REPO / ".ci" / "run").read_text()
    assert "python3 tests/readme_blocks.py README.md ci" in script
    # .ci/run runs both commands as printed, each on a line of its own, the test command last
    script_lines = [line.strip() for line in script.splitlines()]
    for command in (setup[-1], tests[-1]):
        assert command in script_lines
    assert script_lines[-1] == tests[-1]
    printed = subprocess.run([sys.executable, str(REPO / "tests" / "readme_blocks.py"), "README.md", "ci"],
                             capture_output=True, text=True, check=True).stdout
    assert printed.split("\0") == [b.text for b in ci] + [""]
