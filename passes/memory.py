"""Memory: accumulate cotangents into buffers that are dead anyway."""
from __future__ import annotations

from irad import primitives as irad_ops
from irad.ir import ArrayT, Graph, Op, Var

#: ops whose result is a fresh, writable array of its own (never a view of another value)
_FRESH = frozenset({"operator.add", "operator.sub", "operator.mul", "operator.truediv", "operator.neg",
                    "operator.matmul", "operator.pow", "numpy.add", "numpy.subtract", "numpy.multiply",
                    "numpy.divide", "numpy.true_divide", "numpy.negative", "numpy.matmul", "numpy.dot",
                    "numpy.exp", "numpy.tanh", "numpy.outer", "irad.primitives.setitem", "irad.primitives.add_into",
                    "irad.primitives.add_at", "irad.primitives.zeros_like"})


def accumulate_in_place(g: Graph) -> Graph:
    """Turn ``c = a + b`` into ``c = np.add(a, b, out=a)`` where ``a`` is a fresh array that dies there.

    Before: ``%9: f64[64,128] = operator.add(%7, %8)`` (``%7`` read nowhere else).
    After:  ``%9: f64[64,128] = irad.primitives.add_into(%7, %8)``: no new buffer for the sum.
    """
    last: dict[int, int] = {}
    for i, op in enumerate(g.ops):
        for v in op.inputs:
            last[v.id] = i
    for o in g.outputs:
        if isinstance(o, Var):
            last[o.id] = len(g.ops)
    fresh: set[int] = set()
    ops = []
    changed = 0
    for i, op in enumerate(g.ops):
        if op.prim == "operator.add" and not op.kwargs and len(op.args) == 2 and len(op.outs) == 1:
            a, b = op.args
            out = op.outs[0]
            if isinstance(a, Var) and a.id in fresh and last.get(a.id) == i and a != b and \
                    isinstance(out.type, ArrayT) and not out.type.scalar and a.type == out.type:
                op = Op("irad.primitives.add_into", op.args, (), op.outs, irad_ops.add_into, op.loc)
                changed += 1
        if op.prim in _FRESH and len(op.outs) == 1 and not op.unpack:
            fresh.add(op.outs[0].id)
        ops.append(op)
    if not changed:
        return g
    return g.replace(ops=tuple(ops), provenance=g.provenance + (f"after accumulate_in_place: {changed} sums "
                                                                f"written into dead buffers",))

