"""Dead-code elimination."""
from __future__ import annotations

import networkx as nx

from irad.ir import Graph

from .analysis import has_effect, to_nx


def dce(g: Graph) -> Graph:
    """Drop ops whose results reach no output; guards and impure ops always stay.

    Before: ``%3 = numpy.exp(%0)`` with ``%3`` unused.  After: the op is gone.
    """
    dg = to_nx(g)
    roots = ["out"] + [i for i, op in enumerate(g.ops) if has_effect(op)]
    live: set[object] = set(roots)
    for r in roots:
        live |= nx.ancestors(dg, r)
    ops = tuple(op for i, op in enumerate(g.ops) if i in live)
    if len(ops) == len(g.ops):
        return g
    return g.replace(ops=ops, provenance=g.provenance + (f"after dce: removed {len(g.ops) - len(ops)} ops",))
