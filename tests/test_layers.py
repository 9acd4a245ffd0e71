"""The package's shape, held: layers import downward only, no module reaches into another module's
private names, few modules at the root, none over ~400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "laddersim"
# Lowest first; a module may import its own layer and the layers below it.
LAYERS = (
    ("support",),
    ("model", "hardware"),
    ("costs", "schedules"),
    ("engine",),
    ("simulation",),
    ("traffic", "sweeps", "planning", "fitting", "measure", "validation", "plots", "profiles_check", "reporting"),
    ("api",),
    ("cli",),
)
RANK = {name: i for i, group in enumerate(LAYERS) for name in group}
ROOT_MODULES_AT_MOST = 6
LINES_AT_MOST = 400


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module imported, names imported from it)`` for every import, nested ones included,
    relative imports resolved."""
    package = list(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            out.append((module, [alias.name for alias in node.names]))
    return out


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "laddersim" and len(parts) > 1 and parts[1] in RANK else None


def test_the_layers_name_every_subpackage():
    subpackages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()
                   or p.is_dir() and any(p.glob("*.py"))}
    assert subpackages - {"data"} == set(RANK)


def test_every_import_goes_down_the_layers():
    upward = []
    for path in _modules():
        mine = _layer(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        if mine is None:
            continue
        for module, _ in _imports(path):
            other = _layer(module)
            if other is not None and RANK[other] > RANK[mine]:
                upward.append(f"{path.relative_to(PACKAGE.parent)} imports {module}")
    assert upward == []


def test_no_module_imports_another_modules_private_name():
    found = [f"{path.relative_to(PACKAGE.parent)}: from {module} import {name}"
             for path in _modules() for module, names in _imports(path) if module.startswith("laddersim")
             for name in names if name.startswith("_") and not name.startswith("__")]
    assert found == []


def test_few_modules_at_the_root():
    assert len(list(PACKAGE.glob("*.py"))) <= ROOT_MODULES_AT_MOST


def test_no_module_over_the_line_limit():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in _modules()
            if (n := p.read_text().count("\n")) > LINES_AT_MOST}
    assert long == {}


@pytest.mark.parametrize("source, expected", [
    ("from laddersim.api import params\n", [("laddersim.api", ["params"])]),
    ("def f():\n    from .program import _x\n", [("laddersim.schedules.program", ["_x"])]),
    ("from .. import errors\n", [("laddersim", ["errors"])]),
])
def test_imports_are_read_as_written(tmp_path, monkeypatch, source, expected):
    fake = PACKAGE / "schedules" / "stages.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source)
    assert _imports(fake) == expected
