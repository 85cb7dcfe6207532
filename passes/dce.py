"""Dead-code elimination."""
from __future__ import annotations

from irad.ir import Graph, collector_paused

from .analysis import ancestors_of, has_effect, to_nx


def dce(g: Graph) -> Graph:
    """Drop ops whose results reach no output; guards and impure ops always stay.

    Before: ``%3 = numpy.exp(%0)`` with ``%3`` unused.  After: the op is gone.
    """
    with collector_paused():
        dg = to_nx(g)
        live = ancestors_of(dg, ["out"] + [i for i, op in enumerate(g.ops) if has_effect(op)])
        ops = tuple(op for i, op in enumerate(g.ops) if i in live)
    if len(ops) == len(g.ops):
        return g
    return g.replace(ops=ops, provenance=g.provenance + (f"after dce: removed {len(g.ops) - len(ops)} ops",))
