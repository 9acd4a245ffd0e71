"""The README's main job leaves a fresh clone clean: ``laddersim report`` rewrites the committed
report byte for byte and writes nothing else. A committed report that the current code would not
reproduce (a stale figure, a number the model no longer gives) fails here; regenerate it with
``laddersim report`` and commit it.

"A fresh clone" is this working tree as it would be committed (its tracked and untracked,
not-ignored files, so uncommitted code is what runs) copied into a new git repository with one
commit; the report runs there with that copy's code, as ``.venv/bin/laddersim report`` runs in a
clone, and ``git status`` must then be empty."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REPORT_TIMEOUT_S = 900

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                                reason="needs git and a git checkout")


def _git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def _fresh_clone(dest: Path) -> Path:
    listed = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # a file deleted in the working tree is not in the commit either
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "snapshot of the working tree")
    return dest


def test_report_on_a_fresh_clone_leaves_git_status_clean(tmp_path):
    from laddersim.reporting.sections import SECTIONS

    clone = _fresh_clone(tmp_path / "clone")
    assert (clone / "reports" / "index.md").is_file()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(PYTHONPATH=str(clone), MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-m", "laddersim", "report", "--no-progress"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=REPORT_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sections = re.findall(r"report: \[(\d+)/(\d+)\] done", proc.stderr)
    assert [int(i) for i, _ in sections] == list(range(1, len(SECTIONS) + 1))  # report --help names them all
    assert {int(n) for _, n in sections} == {len(SECTIONS)}
    status = _git(clone, "status", "--porcelain", "--untracked-files=all")
    changed = [line[3:] for line in status.splitlines()]
    assert changed == [], ("laddersim report changed the committed report or wrote beside it; regenerate "
                           f"and commit reports/ (git status: {changed[:10]})")
