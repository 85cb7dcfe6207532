"""The stages depend one way (issue 19; docs/architecture.md).

At import time irad's modules form no cycle.  An import inside a function body can still close a
loop between stages; the ones left are listed in ``BACK_EDGES`` with what they are for, and the
test fails both when a new one appears and when one listed is gone (so the list stays true).
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent

#: function-local imports that close a cycle between modules: (importer, imported)
BACK_EDGES: set[tuple[str, str]] = {
    # irad.compile(..., xp=) is lowered by arrayapi, which compiles the numpy program through api
    ("irad.api", "irad.arrayapi"),
    ("irad.arrayapi", "irad.api"),
    # Graph.to_dot and friends draw the IR with irad.dot, which reads the IR
    ("irad.ir", "irad.dot"),
}


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "passes":  # installed as irad.passes
        parts = ["irad", *parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graphs() -> tuple[nx.DiGraph, nx.DiGraph]:
    """(imports at module level, imports inside functions) between irad's modules."""
    paths = sorted(ROOT.glob("irad/**/*.py")) + sorted(ROOT.glob("passes/*.py"))
    modules = {module_of(p): p for p in paths}
    top, local = nx.DiGraph(), nx.DiGraph()
    top.add_nodes_from(modules)
    for mod, path in modules.items():
        tree = ast.parse(path.read_text())
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        at_top = {id(node) for node in tree.body}
        at_top |= {id(n) for node in tree.body if isinstance(node, ast.If) for n in node.body}  # TYPE_CHECKING
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                targets = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules] or [target]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                while t not in modules and "." in t:
                    t = t.rpartition(".")[0]
                if t in modules and t != mod and not (isinstance(node, ast.ImportFrom) and _type_only(tree, node)):
                    (top if id(node) in at_top else local).add_edge(mod, t)
    return top, local


def _type_only(tree: ast.Module, node: ast.AST) -> bool:
    """Whether an import sits under ``if TYPE_CHECKING:`` (never runs)."""
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.If) and getattr(stmt.test, "id", getattr(stmt.test, "attr", "")) == "TYPE_CHECKING":
            if any(n is node for s in stmt.body for n in ast.walk(s)):
                return True
    return False


def back_edges() -> set[tuple[str, str]]:
    top, local = import_graphs()
    both = nx.compose(top, local)
    reach = {n: nx.descendants(both, n) for n in both}
    return {(a, b) for a, b in local.edges if a in reach[b]}


def test_no_cycle_at_import_time() -> None:
    top, _ = import_graphs()
    assert nx.is_directed_acyclic_graph(top), list(nx.simple_cycles(top))[:5]


def test_function_local_imports_close_only_the_known_loops() -> None:
    found = back_edges()
    assert found - BACK_EDGES == set(), "a new import inside a function closes a loop between modules"
    assert BACK_EDGES - found == set(), "a listed loop is gone: take it off BACK_EDGES"
