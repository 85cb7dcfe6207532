"""Def-use analysis of a Graph as a networkx DiGraph (networkx never leaks into IR types)."""
from __future__ import annotations

from typing import Any, Iterable, cast

import networkx as nx

from irad.effects import is_impure_prim
from irad.ir import GUARD_PRIMS, Graph, Op
from irad.loops import LOOP_PRIM, step_has_effect


def to_nx(g: Graph) -> nx.DiGraph:
    """Nodes are op indices (and ``"out"``); an edge ``i -> j`` means op ``j`` reads a value op ``i`` defines."""
    dg = nx.DiGraph()
    dg.add_nodes_from(range(len(g.ops)))
    dg.add_node("out")
    definer: dict[int, int] = {}
    edges: list[tuple[Any, Any]] = []  # NOTE: one add_edges_from: add_edge per edge is most of the cost
    for i, op in enumerate(g.ops):
        for v in op.inputs:
            d = definer.get(v.id)
            if d is not None:
                edges.append((d, i))
        for o in op.outs:
            definer[o.id] = i
    for o in g.outputs:
        vid = getattr(o, "id", None)
        if vid is not None and vid in definer:
            edges.append((definer[vid], "out"))
    dg.add_edges_from(edges)
    return dg


def ancestors_of(dg: nx.DiGraph, roots: Iterable[Any]) -> set[Any]:
    """The roots and every node with a path to one of them, in one traversal (``nx.ancestors``
    of each root would be quadratic in a graph with a guard per step).  Adds a node to ``dg``."""
    sink = object()
    roots = list(roots)
    dg.add_edges_from((r, sink) for r in roots)
    return cast("set[Any]", nx.ancestors(dg, sink)) | set(roots)  # (networkx is untyped)


def has_effect(op: Op) -> bool:
    """Ops that must run even if nothing reads them: guards and impure calls (see irad.effects), and
    loops whose step holds a guard (it checks every iteration)."""
    return op.prim in GUARD_PRIMS or is_impure_prim(op.prim) or (op.prim == LOOP_PRIM and step_has_effect(op))
