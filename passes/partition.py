"""Partition a joint graph into its forward and backward halves (``split``, like JAX's
``fwd_and_bwd``), and compute the forward half's residuals from the values reverse mode already
has (``evaluate_residuals``): what ``vjp``, ``linearize``, ``jacrev`` and a loop's step use."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from irad.effects import is_impure_prim
from irad.ir import STATE, Graph, Var, run_ops

if TYPE_CHECKING:
    from irad.ad import Joint


def evaluate_residuals(fwd_g: Graph, joint: Joint, values: dict[int, Any]) -> list[Any]:
    """The residuals of the traced call.  Values the transform computed are reused; residuals
    that passes introduced (inlined rule state) are recomputed from them by the forward ops that
    define them, never by running ``f`` (or its effects) again."""
    # NOTE: rule state may have changed form in the passes (a lifted closure's state is its
    # captured values): state values are recomputed, never reused
    states = _state_ids(joint.graph)  # NOTE: once, not once per value (that was quadratic)
    env = {k: v for k, v in joint.values.items() if k not in states}
    need = [o for o in fwd_g.outputs[joint.n_outputs:] if isinstance(o, Var) and o.id not in env]
    if need:
        run_ops(fwd_g.ops, env, skip=lambda op: all(o.id in env for o in op.outs) or is_impure_prim(op.prim))
    return [env[o.id] if isinstance(o, Var) else o.value for o in fwd_g.outputs[joint.n_outputs:]]


def _state_ids(g: Graph) -> set[int]:
    return {o.id for op in g.ops for o in op.outs if o.type == STATE}


def split(joint: Joint, g: Graph | None = None) -> tuple[Graph, Graph, int]:
    """Partition a joint graph (``joint.graph``, or an optimised version ``g`` of it) into a forward
    graph (outputs + residuals) and a backward graph (residuals + output cotangents -> input
    cotangents), like JAX's ``fwd_and_bwd``."""
    g = joint.graph if g is None else g
    seeds = {v.id for v in joint.ybar_inputs}
    depends = set(seeds)
    fwd_ops, bwd_ops = [], []
    for op in g.ops:
        if any(v.id in depends for v in op.inputs):
            bwd_ops.append(op)
            depends.update(o.id for o in op.outs)
        else:
            fwd_ops.append(op)
    fwd_defined = {v.id: v for v in g.inputs if v.id not in seeds} | {o.id: o for op in fwd_ops for o in op.outs}
    res: dict[int, Var] = {}
    for op in bwd_ops:
        for v in op.inputs:
            if v.id in fwd_defined and v.id not in seeds:
                res.setdefault(v.id, v)
    grad_outs = g.outputs[joint.n_outputs:]
    for o in grad_outs:
        if isinstance(o, Var) and o.id in fwd_defined:
            res.setdefault(o.id, o)
    residuals = tuple(res.values())
    n_in = len(g.inputs) - len(joint.ybar_inputs)
    fwd = Graph(g.name + "_fwd", g.inputs[:n_in], tuple(fwd_ops), tuple(g.outputs[: joint.n_outputs]) + residuals,
                None, None, g.statics, g.provenance + ("split: forward",))
    bwd = Graph(g.name + "_bwd", residuals + joint.ybar_inputs, tuple(bwd_ops), tuple(grad_outs), None, None, (),
                g.provenance + ("split: backward",))
    return fwd, bwd, len(residuals)
