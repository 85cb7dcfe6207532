"""Def-use analysis of a Graph as a networkx DiGraph (networkx never leaks into IR types)."""
from __future__ import annotations

import networkx as nx

from irad.effects import is_impure_prim
from irad.ir import GUARD_PRIMS, Graph, Op


def to_nx(g: Graph) -> nx.DiGraph:
    """Nodes are op indices (and ``"out"``); an edge ``i -> j`` means op ``j`` reads a value op ``i`` defines."""
    dg = nx.DiGraph()
    dg.add_nodes_from(range(len(g.ops)))
    dg.add_node("out")
    definer: dict[int, int] = {}
    for i, op in enumerate(g.ops):
        for v in op.inputs:
            if v.id in definer:
                dg.add_edge(definer[v.id], i)
        for o in op.outs:
            definer[o.id] = i
    for o in g.outputs:
        vid = getattr(o, "id", None)
        if vid is not None and vid in definer:
            dg.add_edge(definer[vid], "out")
    return dg


def has_effect(op: Op) -> bool:
    """Ops that must run even if nothing reads them: guards and impure calls (see irad.effects)."""
    return op.prim in GUARD_PRIMS or is_impure_prim(op.prim)
