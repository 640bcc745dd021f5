"""No import circle between the modules of the tree: every ``autarch.*`` package, read statically.

A module's imports are every ``import``/``from … import`` statement in it, wherever it stands: at the top, inside
a function (a lazy import is still a dependency) and under ``if TYPE_CHECKING:`` (a type-only import is still a
dependency between the two modules; ``from __future__ import annotations`` only hides its circle at run time).
Importing ``a.b.c`` also runs the packages ``a`` and ``a.b``, so it depends on their ``__init__`` modules too,
except those of the importing module's own packages (they were initialised before it ran).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"contracts": "autarch.contracts", "runtime": "autarch.runtime", "cli": "autarch.cli",
            "services": "autarch.services", "gateway": "autarch.gateway"}
"""The folders ``pyproject.toml`` maps onto ``autarch.*``."""


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the tree: name → (file, whether it is a package's ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            if is_init:
                parts = parts[:-1]
            found[".".join([package, *parts])] = (path, is_init)
    return found


def _imported(tree: ast.Module, package: str) -> set[str]:
    """The modules (and ``from`` names) a module's import statements name, relative ones resolved."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_init) in modules.items():
        package = name if is_init else name.rpartition(".")[0]
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        edges: set[str] = set()
        for imported in _imported(ast.parse(path.read_text(), str(path)), package):
            while imported:
                if imported in modules and imported != name and imported not in own:
                    edges.add(imported)
                imported = imported.rpartition(".")[0]
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_tree_has_no_import_circle() -> None:
    graph = import_graph()
    assert len(graph) > 200, "the tree was not found"
    assert circles(graph) == []


def test_a_circle_is_found_even_through_a_type_only_or_lazy_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .x import Y\n"
                     "def f():\n    from ..z import w\n")
    assert {"autarch.p.x", "autarch.z.w"} <= _imported(tree, "autarch.p")
