"""No import circles among the package's modules and the calibration programs.

Every ``import`` and ``from ... import`` statement of ``laddersim/**`` and ``calibration/*.py``,
at module level or inside a function (a lazy import closes a circle all the same), is an edge
from the importing module to the module it names (but those under ``if TYPE_CHECKING:``, which
never run) (``from pkg import name`` names ``pkg.name``
when that is a module, else ``pkg``). A strongly connected component of more than one module is a
circle: modules that cannot be read, tested or changed one without the other. The calibration
programs have one way in (``calibrate_all`` -> ``bench_launch`` -> the benchmarks, which know
nothing above them); the engine's recorder, replay and order tree import downwards only.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Circles known and being removed elsewhere, each with where it came from; empty when there are none.
# A listed circle that is gone fails test_known_circles_are_still_there: then delete it.
KNOWN: list[frozenset[str]] = []


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    files = sorted((ROOT / "laddersim").rglob("*.py")) + sorted((ROOT / "calibration").glob("*.py"))
    return {module_name(p): p for p in files if "__pycache__" not in p.parts}


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` or its nearest enclosing package that is one of ``modules``."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` but those inside an ``if TYPE_CHECKING:`` body (its else runs)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _is_type_checking(node):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges.update(_known(alias.name, modules) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    edges.add(full if full in modules else _known(base, modules))
        graph[name] = edges - {None, name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_finder_sees_direct_lazy_and_relative_circles(tmp_path, monkeypatch):
    """The finder itself: a circle through a function-level import, one through ``from . import``,
    and a chain that is no circle."""
    pkg = tmp_path / "laddersim"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from laddersim.b import x\n")
    (pkg / "b.py").write_text("def f():\n    import laddersim.a\n")
    (pkg / "sub" / "c.py").write_text("from . import d\n")
    (pkg / "sub" / "d.py").write_text("from laddersim.sub.c import y\n")
    (pkg / "e.py").write_text("from laddersim import a\n")
    (pkg / "f.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from laddersim.g import G\n")
    (pkg / "g.py").write_text("from laddersim.f import F\n")  # f needs g only for its annotations
    (tmp_path / "calibration").mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = set(circles(import_graph(_modules())))
    assert found == {frozenset({"laddersim.a", "laddersim.b"}), frozenset({"laddersim.sub.c", "laddersim.sub.d"})}


def test_no_import_circles():
    found = circles(import_graph(_modules()))
    unexpected = [sorted(c) for c in found if c not in KNOWN]
    assert not unexpected, f"import circles: {unexpected}"


def test_known_circles_are_still_there():
    """KNOWN lists circles still to break, not a licence: one that is gone is taken off the list."""
    found = circles(import_graph(_modules()))
    assert [sorted(c) for c in KNOWN if c not in found] == []


@pytest.mark.parametrize("bench", ["allgather_bench", "allreduce_bench", "gemm_bench", "interference_bench",
                                   "memory_bench", "op_trace", "overhead_bench", "skew_bench"])
def test_the_benchmarks_know_nothing_above_them(bench):
    """The launcher knows the benchmarks; a benchmark imports neither it nor the entry point."""
    graph = import_graph(_modules())
    above = {"calibration.bench_launch", "calibration.calibrate_all"}
    reachable, todo = set(), [f"calibration.{bench}"]
    while todo:
        for nxt in graph[todo.pop()] - reachable:
            reachable.add(nxt)
            todo.append(nxt)
    assert not reachable & above, bench


def _is_cli(module: str) -> bool:
    return module == "laddersim.cli" or module.startswith("laddersim.cli.")


def test_only_the_command_line_imports_it():
    """Data flows one way: the API (laddersim.api) and everything under it know nothing of the
    command line; only laddersim/cli/* and the entry point laddersim/__main__.py import it (every
    import statement counts, lazy ones included, as the circle finder reads them)."""
    graph = import_graph(_modules())
    importers = sorted(name for name, edges in graph.items() if any(_is_cli(e) for e in edges))
    assert "laddersim.__main__" in importers  # the check sees an import of the CLI where there is one
    assert [m for m in importers if not _is_cli(m) and m != "laddersim.__main__"] == []


def test_the_cli_check_sees_a_lazy_import_of_the_command_line(tmp_path, monkeypatch):
    pkg = tmp_path / "laddersim"
    (pkg / "cli").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "cli" / "__init__.py"):
        init.write_text("")
    (pkg / "cli" / "args.py").write_text("")
    (pkg / "api.py").write_text("def f():\n    from laddersim.cli.args import x\n")
    (tmp_path / "calibration").mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = import_graph(_modules())
    assert [name for name, edges in graph.items() if any(_is_cli(e) for e in edges) and not _is_cli(name)] == \
        ["laddersim.api"]
