"""What the package's own text never says: a folder outside the repository (the developers'
``../shared``: a user's clone or wheel has none) or a work item by its number ("issue 40"): comments
and docstrings say what and why, citing the project's own files or a public repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "laddersim"
FORBIDDEN = {
    "a folder outside the repository": re.compile(r"\.\./(shared|docs|reference_data|validation)\b"
                                                  r"|\bshared/(docs|validation|reference_data)\b"),
    "a work item by number": re.compile(r"\b[Ii]ssues?\s+#?\d+"),  # across a line break too
}


def _findings(text: str) -> list[str]:
    return [f"line {text.count(chr(10), 0, m.start()) + 1}: {what}: {m.group(0)!r}"
            for what, pattern in FORBIDDEN.items() for m in pattern.finditer(text)]


@pytest.mark.parametrize("text, found", [
    ("# Shapes from ../shared/docs/ladder-residual.md", True),
    ("(laddersim's serving ran on it until issue\n40)", True),
    ("keep triggering collections (issue 40's sweep)", True),
    ("the Issue 17 rows", True),
    ("NVIDIA/nccl#689 (sjeaugey, 2022): a public repository's thread", False),
    ("a collective's issue time; the issue's launch", False),
    ("laddersim/data/validation/ladder_pp_sweep.csv", False),
])
def test_the_patterns(text, found):
    assert bool(_findings(text)) is found


def test_no_module_mentions_a_folder_outside_the_repository_or_an_issue_number():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 150
    found = {str(p.relative_to(PACKAGE.parent)): hits for p in modules if (hits := _findings(p.read_text()))}
    assert found == {}


@pytest.mark.parametrize("folder", ["fits", "dev"])
def test_every_tool_has_its_line_in_its_folders_readme(folder):
    tools = PACKAGE.parent / "tools" / folder
    readme = (tools / "README.md").read_text()
    scripts = sorted(p.name for p in tools.glob("*.py"))
    assert scripts and [s for s in scripts if f"| `{s}` |" not in readme] == []
    named = set(re.findall(r"^\| `([a-z0-9_]+\.py)` \|", readme, flags=re.M))
    assert named == set(scripts)  # and no line for a script that is gone


def test_the_original_tables_are_read_only_from_the_folder_the_user_names(tmp_path, monkeypatch):
    """The original public measurement files lie outside the repository: laddersim reads them only
    from the folder LADDERSIM_SHARED names, never from a folder it guesses (beside the checkout)."""
    from laddersim.profiles_check import sources

    (tmp_path / "reference_data").mkdir()
    monkeypatch.delenv("LADDERSIM_SHARED", raising=False)
    assert sources.reference_data_root() is None
    monkeypatch.setenv("LADDERSIM_SHARED", str(tmp_path))
    assert sources.reference_data_root() == tmp_path / "reference_data"
    monkeypatch.setenv("LADDERSIM_SHARED", str(tmp_path / "elsewhere"))
    assert sources.reference_data_root() is None
    with pytest.raises(FileNotFoundError, match="LADDERSIM_SHARED"):
        sources.read_gemm_source(next(iter(sources.GEMM_SOURCES)))
