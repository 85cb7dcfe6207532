"""Common-subexpression elimination."""
from __future__ import annotations

from typing import Any

from irad.ir import Const, Graph, Op, Var, collector_paused, map_atoms

from .analysis import has_effect


def _freeze(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return (type(x).__name__,) + tuple(_freeze(e) for e in x)
    if isinstance(x, dict):
        return ("dict",) + tuple((k, _freeze(e)) for k, e in x.items())
    return x


def _atom_key(a: Any) -> Any:
    return ("v", a.id) if isinstance(a, Var) else ("c", a)


def _key(op: Op) -> Any:
    """Ops are the same computation when operator, callable, arguments and attributes agree."""
    try:
        args = op.args
        if all(type(a) is Var or type(a) is Const for a in args):  # NOTE: the common case, as _freeze keys it
            akey: Any = ("tuple",) + tuple([("tuple", "v", a.id) if type(a) is Var else ("tuple", "c", a)
                                            for a in args])
        else:
            akey = _freeze(map_atoms(args, _atom_key))
        key = (op.prim, id(op.fn), akey,
               tuple((k, _freeze(map_atoms(v, _atom_key))) for k, v in op.kwargs) if op.kwargs else (),
               op.unpack, tuple([o.type for o in op.outs]))
        hash(key)
        return key
    except TypeError:
        return None


def cse(g: Graph) -> Graph:
    """Merge ops that compute the same thing from the same inputs; impure ops and guards never merge.

    Before: ``%2 = numpy.cos(%0)`` and ``%5 = numpy.cos(%0)``.  After: one ``numpy.cos``; uses of ``%5`` read ``%2``.
    """
    env: dict[int, Var] = {}
    seen: dict[Any, Op] = {}
    ops: list[Op] = []
    removed = 0

    def sub(a: Any) -> Any:
        return env.get(a.id, a) if isinstance(a, Var) else a

    with collector_paused():
        for op in g.ops:
            new = op
            if env and any(v.id in env for v in op.inputs):
                new = Op(op.prim, tuple(map_atoms(a, sub) for a in op.args),
                         tuple((k, map_atoms(v, sub)) for k, v in op.kwargs), op.outs, op.fn, op.loc, op.unpack)
            key = None if has_effect(new) or not new.outs else _key(new)
            prev = seen.get(key) if key is not None else None
            if prev is not None:
                for o, p in zip(new.outs, prev.outs):
                    env[o.id] = p
                removed += 1
                continue
            if key is not None:
                seen[key] = new
            ops.append(new)
    if not removed:
        return g
    outputs = tuple(map_atoms(o, sub) for o in g.outputs)
    return g.replace(ops=tuple(ops), outputs=outputs,
                     provenance=g.provenance + (f"after cse: merged {removed} ops",))
