"""Constant folding."""
from __future__ import annotations

from typing import Any

import numpy as np

from irad.ir import Const, Graph, Op, Var, map_atoms, typeof

from .analysis import has_effect


def fold_constants(g: Graph) -> Graph:
    """Evaluate pure ops whose inputs are all constants, once, at compile time.

    Before: ``%7: f64[] = operator.mul(float64(1.0), 2.0)``.  After: uses of ``%7`` read ``float64(2.0)``.
    Only values irad made are folded: a live constant (the user's array, read at each call) may
    change in place between calls, so an op that reads one runs at each call.
    """
    env: dict[int, Const] = {}
    ops: list[Op] = []

    def sub(a: Any) -> Any:
        return env.get(a.id, a) if isinstance(a, Var) else a

    for op in g.ops:
        if env:
            op = Op(op.prim, tuple(map_atoms(a, sub) for a in op.args),
                    tuple((k, map_atoms(v, sub)) for k, v in op.kwargs), op.outs, op.fn, op.loc, op.unpack)
        if len(op.outs) == 1 and not op.unpack and not op.inputs and not has_effect(op) and op.fn is not None \
                and not _reads_live(op):
            args = [map_atoms(a, lambda c: c.value) for a in op.args]
            kwargs = {k: map_atoms(v, lambda c: c.value) for k, v in op.kwargs if k[0] != "_"}
            try:
                with np.errstate(all="ignore"):
                    value = op.fn(*args, **kwargs)
            except Exception:  # leave it to run (and raise) at run time
                ops.append(op)
                continue
            if typeof(value) == op.outs[0].type:
                env[op.outs[0].id] = Const(value, typeof(value))
                continue
        ops.append(op)
    if not env:
        return g
    outputs = tuple(map_atoms(o, sub) for o in g.outputs)
    return g.replace(ops=tuple(ops), outputs=outputs,
                     provenance=g.provenance + (f"after fold_constants: folded {len(env)} ops",))


def _reads_live(op: Op) -> bool:
    found = False

    def see(c: Any) -> Any:
        nonlocal found
        found = found or (isinstance(c, Const) and c.live)
        return c
    for a in op.args:
        map_atoms(a, see)
    for k, v in op.kwargs:
        if k[0] != "_":
            map_atoms(v, see)
    return found
