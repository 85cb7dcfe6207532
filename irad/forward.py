"""Forward mode: a traced Graph becomes a JVP Graph that computes primals and tangents in one sweep.

Every differentiable op on a path from the differentiated inputs gets its forward form:

- the rule's own ``jvp`` (``Rule.jvp``: scalar rules, ``@irad.custom_jvp``), one ``rule_jvp`` op;
- otherwise one derived from the rule's reverse form.  The op's pullback ``ybar -> xbar`` is
  linear in ``ybar``, so reverse mode applied to it (after the passes have inlined the pullback
  into primitive ops) gives its transpose ``xdot -> ydot``: JAX's linearize-then-transpose, run
  the other way.  The derived ops are spliced into the graph, where the passes see them like
  any others (CSE shares ``cos(x)`` between the primal and the tangent).

Tangents take their primal's type (shape, dtype).  A value that does not depend on the inputs
being differentiated has no tangent (a zero, materialised only where an output needs it).
"""
from __future__ import annotations

import operator
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence, cast

import numpy as np

from . import ad
from . import primitives as irad_ops
from .ad import Joint, _no_rule, _positional, _var_paths
from .api import _aux_split, _check_numbers, _describe_tree, _weakrefable, vjp
from .passes.partition import split
from .errors import GradError, GuardError, MutationError, NoRuleError, def_site
from .hooks import paused
from .ir import STATE, ArrayT, Const, Graph, Op, ScalarT, Var, bind_outputs, const, is_differentiable, map_atoms
from .lower import lower
from .pytree import Depth, flatten, flatten_args, unflatten
from .rules import registry
from .rules.registry import Rule
from .signature import Assumptions, Identity, ProgramCache, call_key, effect_dep
from .trace import trace_values


@dataclass(frozen=True)
class JVPGraph:
    """The graph of a JVP: inputs are ``g``'s inputs then one tangent per ``wrt`` input; outputs are
    ``g``'s outputs then one tangent per output (``n_outputs`` of each)."""

    graph: Graph
    n_outputs: int
    wrt: tuple[int, ...]
    tangent_inputs: tuple[Var, ...]


class JvpCall:
    """Calls a rule's forward form and returns ``(y, ydot)`` with ``ydot`` complete: ``None``
    tangents become zeros, and each tangent takes its primal's shape and dtype (a scalar rule's
    ``xdot * d`` has the shape of the argument, not the broadcast output)."""

    def __init__(self, rule: Rule, unpack: bool, tangent_only: bool = False) -> None:
        self.rule = rule
        self.unpack = unpack
        self.tangent_only = tangent_only  # (the primal is its own op: linearize keeps it out of the linear half)
        self.__name__ = self.__qualname__ = "".join(c if c.isalnum() else "_" for c in rule.name) + \
            ("_tangent" if tangent_only else "_jvp")

    def __call__(self, tangents: tuple[Any, ...], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        y, ydot = self.rule.jvp(tangents, *args, **kwargs)  # type: ignore[misc]
        if self.unpack:
            ys = flatten(y)[0]
            ds = flatten(ydot, is_leaf=lambda x: x is None)[0] if ydot is not None else [None] * len(ys)
            dots = tuple(fit_tangent(d, p) for d, p in zip(ds, ys))
            return dots if self.tangent_only else tuple(ys) + dots
        return (fit_tangent(ydot, y),) if self.tangent_only else (y, fit_tangent(ydot, y))


def fit_tangent(t: Any, y: Any) -> Any:
    """``t`` as a tangent of ``y``: zeros for ``None``, broadcast to ``y``'s shape, ``y``'s dtype."""
    if t is None:
        if type(y) in (bool, int, float, complex):
            return type(y)(0)
        return np.zeros_like(y)[()] if isinstance(y, np.generic) else irad_ops.zeros_like(y)
    if isinstance(y, np.ndarray):
        if not isinstance(t, np.ndarray):
            t = np.asarray(t)
        if t.shape != y.shape:
            t = np.broadcast_to(t, y.shape).copy()
        if t.dtype != y.dtype:
            t = t.real.astype(y.dtype) if t.dtype.kind == "c" and y.dtype.kind != "c" else t.astype(y.dtype)
        return t
    if isinstance(y, np.generic):
        t = np.asarray(t)
        if t.dtype.kind == "c" and y.dtype.kind != "c":
            t = t.real
        return t.astype(y.dtype)[()]
    if type(y) is float:
        return float(np.real(t))
    if type(y) is complex:
        return complex(t)
    return t


class _Builder:
    """The JVP graph under construction: ops, trace-time values of primals, tangents by primal id."""

    def __init__(self, g: Graph, values: dict[int, Any]) -> None:
        self.g = g
        self.val = dict(values)
        self.ops: list[Op] = []
        self.next_id = 1 + max([v.id for v in g.inputs] + [o.id for op in g.ops for o in op.outs] + [-1])
        self.tan: dict[int, Any] = {}  # primal var id -> tangent atom
        self.sub: dict[int, Any] = {}  # var id of g -> the atom that replaces it (a derived op's primal)
        self.assumed: list[Any] = []  # what traced rule bodies read from the world (``Graph.assumed``)

    def fresh(self, type_: Any, hint: str = "") -> Var:
        v = Var(self.next_id, type_, hint)
        self.next_id += 1
        return v

    def atom(self, a: Any) -> Any:
        return map_atoms(a, lambda x: self.sub.get(x.id, x) if isinstance(x, Var) else x)

    def value(self, a: Any) -> Any:
        return map_atoms(a, lambda x: self.val[x.id] if isinstance(x, Var) else x.value)


def forward(g: Graph, values: dict[int, Any], wrt: Sequence[int]) -> JVPGraph:
    """The JVP graph of ``g`` with respect to the inputs at positions ``wrt``.

    ``values`` are the trace-time values of ``g``'s vars: derived forward forms are built by
    running the reverse transform on each op at those values, which gives every derived var its
    exact type."""
    # the same refusal as reverse mode: a derivative that would be lost on a trip through an
    # opaque object or raw bytes (json, struct, x.view(int)) is an error, never a silent zero
    active = {g.inputs[i].id for i in wrt if is_differentiable(g.inputs[i].type)}
    for op in g.ops:
        if op.outs and not registry.is_nondiff(op.fn) and any(v.id in active for v in op.inputs):
            active.update(o.id for o in op.outs if is_differentiable(o.type) or op.prim == "irad.primitives.rebuild")
    ad._check_no_opaque_path(g, active, values)
    b = _Builder(g, values)
    tangent_inputs = []
    for i in wrt:
        v = g.inputs[i]
        t = b.fresh(v.type, (v.hint or f"x{i}") + "_dot")
        tangent_inputs.append(t)
        if is_differentiable(v.type):
            b.tan[v.id] = t
    for op in g.ops:
        op = Op(op.prim, tuple(b.atom(a) for a in op.args), tuple((k, b.atom(a)) for k, a in op.kwargs),
                op.outs, op.fn, op.loc, op.unpack)
        if not op.outs or registry.is_nondiff(op.fn) or not any(v.id in b.tan for v in op.inputs):
            b.ops.append(op)
            continue
        if not any(is_differentiable(o.type) or op.prim == "irad.primitives.rebuild" for o in op.outs):
            b.ops.append(op)
            continue
        _forward_op(b, op)
    outs = tuple(b.atom(o) for o in g.outputs)
    touts = []
    for o in outs:
        tg = b.tan.get(o.id) if isinstance(o, Var) else None
        if tg is None:
            tg = _zero_tangent(b, o)
        touts.append(tg)
    jg = Graph(g.name, g.inputs + tuple(tangent_inputs), tuple(b.ops), outs + tuple(touts), None, None, g.statics,
               g.provenance + ("forward mode",), g.assumed + tuple(dict.fromkeys(b.assumed)))
    return JVPGraph(jg, len(outs), tuple(wrt), tuple(tangent_inputs))


def _zero_tangent(b: _Builder, o: Any) -> Any:
    """The tangent of an output that does not depend on the differentiated inputs."""
    if isinstance(o, Const):
        return const(fit_tangent(None, o.value))
    if not is_differentiable(o.type):
        return const(None)
    z = b.fresh(o.type, (o.hint or f"t{o.id}") + "_dot")
    b.ops.append(Op("irad.primitives.zeros_like", (o,), (), (z,), irad_ops.zeros_like, None))
    return z


def _tangents_of(b: _Builder, a: Any) -> Any:
    """The tangent structure of a positional argument: a Var's tangent (None when it has none),
    lists and tuples element by element."""
    if isinstance(a, Var):
        return b.tan.get(a.id)
    if type(a) in (tuple, list):
        parts = [_tangents_of(b, x) for x in a]
        return None if all(p is None for p in parts) else type(a)(const(None) if p is None else p for p in parts)
    return None


def _forward_op(b: _Builder, op: Op) -> None:
    if any(v.id in b.tan for _, a in op.kwargs for _, v in _var_paths(a, ())):
        pre = registry.lookup(op.fn, tuple(b.value(a) for a in op.args))
        op = _positional(op, pre.params if pre is not None else ())
    args = tuple(b.value(a) for a in op.args)
    rule = registry.lookup(op.fn, args)
    if rule is None:
        raise _no_rule(op, list(args))
    for n, a in op.kwargs:
        if any(v.id in b.tan for _, v in _var_paths(a, ())):
            raise GradError(f"{op.prim}: keyword argument {n}= carries a value being differentiated "
                            f"at {op.loc.long if op.loc else '?'}; pass it positionally")
    if rule.jvp is not None:
        _emit_jvp(b, op, rule)
        return
    start, tan = len(b.ops), dict(b.tan)
    if len(op.outs) == 1 and not op.unpack and _structural(b, op):
        b.ops.insert(start, op)  # the primal first, then its tangent
        return
    b.ops[start:], b.tan = [], tan
    _derive(b, op, rule)


def _impl_keys(*fns: Any) -> frozenset[Any]:
    return frozenset(registry.impl_key(f) for f in fns)


#: jointly linear in their float arguments: ``ydot = fn(xdot_0 or 0, xdot_1 or 0)``
_ADDITIVE = _impl_keys(operator.add, operator.sub, operator.neg, operator.pos, np.add, np.subtract, np.negative,
                       np.positive)
#: linear in each array argument separately: ``ydot = sum_i fn(x_0, ..., xdot_i, ..., x_n)``
_MULTILINEAR = _impl_keys(operator.mul, np.multiply, operator.matmul, np.matmul, np.dot, np.inner, np.outer,
                          np.tensordot, np.kron, np.cross, np.einsum, np.ndarray.dot)
#: linear in the first argument (an array, or a list of arrays), the others static parameters:
#: ``ydot = fn(xdot, *rest)`` when only the first argument carries a tangent
_LINEAR_FIRST = _impl_keys(
    operator.getitem, operator.truediv, np.divide, np.sum, np.mean, np.cumsum, np.reshape, np.ravel, np.expand_dims,
    np.squeeze, np.transpose, np.swapaxes, np.moveaxis, np.broadcast_to, np.diagonal, np.flip, np.fliplr, np.flipud,
    np.roll, np.rot90, np.triu, np.tril, np.trace, np.tile, np.repeat, np.diff, np.take, np.real, np.imag,
    np.conjugate, np.copy, np.concatenate, np.stack, np.hstack, np.vstack, np.ndarray.sum, np.ndarray.mean,
    np.ndarray.reshape, np.ndarray.ravel, np.ndarray.flatten, np.ndarray.transpose, np.ndarray.swapaxes,
    np.ndarray.squeeze, np.ndarray.cumsum, np.ndarray.diagonal, np.ndarray.trace, np.ndarray.conj,
    np.ndarray.conjugate, np.ndarray.copy, np.ndarray.repeat, np.ndarray.take)


_DIVISION = _impl_keys(operator.truediv, np.divide)


def _is_float_atom(a: Any) -> bool:
    t = a.type if isinstance(a, Var) else getattr(a, "type", None)
    return t is not None and is_differentiable(t)


def _structural(b: _Builder, op: Op) -> bool:
    """The forward form of a linear or multilinear op, as ops of the same function on tangents
    (``xdot @ W + x @ Wdot``); False when ``op`` is not one (the form is then derived)."""
    try:
        key = registry.impl_key(op.fn)
    except TypeError:
        return False
    y = op.outs[0]
    if not isinstance(y.type, (ArrayT, ScalarT)):
        return False
    if key in _ADDITIVE:
        parts = []
        for a in op.args:
            if isinstance(a, Var) and a.id in b.tan:
                parts.append(b.tan[a.id])
            elif not _is_float_atom(a) and not (isinstance(a, Const) and isinstance(a.value, (int, float, complex))):
                return False
            elif isinstance(a, Var) and isinstance(a.type, ArrayT) and not a.type.scalar:
                parts.append(_emit(b, irad_ops.zeros_like, "irad.primitives.zeros_like", (a,), a.type, a.hint + "_dot", op))
            elif isinstance(a, Const) and np.ndim(a.value):  # an array constant keeps its shape in the sum
                parts.append(const(np.zeros_like(a.value)))
            else:
                parts.append(const(0.0))
        _set_tangent(b, op, _emit(b, op.fn, op.prim, tuple(parts), y.type, _dot_hint(y), op, op.kwargs))
        return True
    if key in _MULTILINEAR:
        terms = []
        for k, a in enumerate(op.args):
            if isinstance(a, Var) and a.id in b.tan:
                args = op.args[:k] + (b.tan[a.id],) + op.args[k + 1:]
                terms.append(_emit(b, op.fn, op.prim, args, y.type, _dot_hint(y), op, op.kwargs))
            elif _is_float_atom(a) or not isinstance(a, (Var, Const)):
                continue
        if not terms:
            return False
        t = terms[0]
        for u in terms[1:]:
            t = _emit(b, operator.add, "operator.add", (t, u), y.type, _dot_hint(y), op)
        _set_tangent(b, op, t)
        return True
    if key in _LINEAR_FIRST:
        first, rest = op.args[0], op.args[1:]
        if any(v.id in b.tan for a in rest for v in _vars(a)):
            return False
        if key not in _DIVISION and any(_is_float_atom(x) for a in rest + tuple(a for _, a in op.kwargs)
                                        for x in _atoms(a)):
            return False  # a float parameter may be an offset (sum's initial=, diff's prepend=)
        if isinstance(first, Var):
            t0: Any = b.tan.get(first.id)
        elif type(first) in (list, tuple) and all(isinstance(a, (Var, Const)) for a in first):
            elems = []
            for a in first:
                if isinstance(a, Var) and a.id in b.tan:
                    elems.append(b.tan[a.id])
                elif isinstance(a, Var) and isinstance(a.type, ArrayT):
                    elems.append(_emit(b, irad_ops.zeros_like, "irad.primitives.zeros_like", (a,), a.type, a.hint + "_dot",
                                       op))
                else:
                    return False
            t0 = type(first)(elems)
        else:
            return False
        if t0 is None:
            return False
        _set_tangent(b, op, _emit(b, op.fn, op.prim, (t0,) + rest, y.type, _dot_hint(y), op, op.kwargs))
        return True
    return False


def _vars(a: Any) -> list[Var]:
    found: list[Var] = []
    map_atoms(a, lambda x: found.append(x) if isinstance(x, Var) else None)
    return found


def _dot_hint(y: Var) -> str:
    return (y.hint or f"t{y.id}") + "_dot"


def _emit(b: _Builder, fn: Any, prim: str, args: tuple[Any, ...], type_: Any, hint: str, at: Op,
          kwargs: tuple[tuple[str, Any], ...] = ()) -> Var:
    out = b.fresh(type_, hint)
    b.ops.append(Op(prim, args, kwargs, (out,), fn, at.loc))
    return out


def _set_tangent(b: _Builder, op: Op, t: Var) -> None:
    """``op`` stays as it is (its primal); ``t`` is the tangent of its output."""
    b.tan[op.outs[0].id] = t


def _emit_jvp(b: _Builder, op: Op, rule: Rule) -> None:
    """``y, ydot = rule_jvp[fn](tangents, *args)``: the rule's own forward form."""
    tans = tuple(const(None) if t is None else t for t in (_tangents_of(b, a) for a in op.args))
    call = JvpCall(rule, bool(op.unpack))
    if _splice_jvp(b, op, call, tans):
        return
    b.ops.append(op)  # the primal stays its own op; the form's call computes the tangents
    touts = tuple(b.fresh(o.type, (o.hint or f"t{o.id}") + "_dot") for o in op.outs)
    b.ops.append(Op("rule_jvp", (tans,) + op.args, (("_rule", Const(rule, STATE)),) + op.kwargs,
                    touts, JvpCall(rule, bool(op.unpack), tangent_only=True), op.loc,
                    tuple((k,) for k in range(len(touts)))))
    for o, t in zip(op.outs, touts):
        if is_differentiable(o.type):
            b.tan[o.id] = t


def _splice_jvp(b: _Builder, op: Op, call: JvpCall, tans: tuple[Any, ...]) -> bool:
    """Inline the rule's forward form as primitive ops (traced as the inline pass traces rule
    bodies), so that the passes see it and ``linearize`` can keep the primal out of the tangent
    half; False (the form stays one call) when its body cannot be traced on sample values."""
    from irad.passes.inline import _Skip, _Splicer, _World
    world = _World()  # (the primal values, and samples of the tangents)
    world.values.update({v.id: b.val[v.id] for v in op.inputs if v.id in b.val})
    for t in _atoms(tans):
        world.sample(t)
    sp = _Splicer(b.next_id)
    kwargs = {k: a for k, a in op.kwargs if not k.startswith("_")}
    n = len(op.outs)
    try:
        with np.errstate(all="ignore"):
            ops, outs, tree, _ = sp.splice(call, (tans,) + op.args, kwargs, (world,), op.loc,
                                           lambda t: dict(enumerate(op.outs)))
    except _Skip:
        return False
    if len(outs) != 2 * n or any(getattr(a, "type", None) != o.type for a, o in zip(outs, op.outs + op.outs)
                                 if isinstance(a, Var)):
        return False
    b.next_id = sp.next_id
    b.assumed.extend(sp.deps)
    b.ops.extend(ops)
    for o, y, t in zip(op.outs, outs[:n], outs[n:]):
        if not (isinstance(y, Var) and y.id == o.id):
            b.sub[o.id] = y
        p = b.sub.get(o.id, o)
        if isinstance(p, Var) and is_differentiable(o.type):
            if not isinstance(t, Var):
                t = _emit(b, irad_ops.zeros_like, "irad.primitives.zeros_like", (p,), o.type, _dot_hint(o), op)
            b.tan[p.id] = t
    return True


def _atoms(a: Any) -> list[Any]:
    found: list[Any] = []
    map_atoms(a, found.append)
    return found


def _run(g: Graph, env: dict[int, Any]) -> None:
    """Evaluate ``g``'s ops into ``env`` (which holds its inputs' values)."""

    def get(a: Any) -> Any:
        return env[a.id] if isinstance(a, Var) else a.value

    for op in g.ops:
        r = cast(Callable[..., Any], op.fn)(*[map_atoms(a, get) for a in op.args],
                                            **{k: map_atoms(a, get) for k, a in op.kwargs if k[0] != "_"})
        bind_outputs(op, r, env)


def _derive(b: _Builder, op: Op, rule: Rule) -> None:
    """Splice in the forward form of ``op`` derived from its reverse rule (see the module doc)."""
    from . import passes as irad_passes

    inputs: list[Var] = []
    seen: set[int] = set()
    for v in op.inputs:
        if v.id not in seen:
            seen.add(v.id)
            inputs.append(v)
    wrt = [k for k, v in enumerate(inputs) if v.id in b.tan]
    mini = Graph(op.prim, tuple(inputs), (op,), op.outs)
    vals = {v.id: b.val[v.id] for v in inputs} | {o.id: b.val[o.id] for o in op.outs}
    with np.errstate(all="ignore"):
        joint = ad.reverse(mini, vals, wrt, seed="input")
    if not joint.ybar_inputs:  # no output carries a tangent (integer outputs)
        b.ops.append(op)
        return
    jg = irad_passes.run(joint.graph)
    n = joint.n_outputs
    env = {v.id: vals[v.id] for v in inputs} | {y.id: joint.values[y.id] for y in joint.ybar_inputs}
    with np.errstate(all="ignore"):
        _run(jg, env)
    grads, primals = jg.outputs[n:], jg.outputs[:n]
    lin = jg.replace(outputs=tuple(grads) + tuple(primals))
    ybar_pos = [len(inputs) + k for k in range(len(joint.ybar_inputs))]
    try:
        with np.errstate(all="ignore"):
            tr = ad.reverse(lin, env, ybar_pos, seed="input", outputs=len(grads))
    except NoRuleError:  # a pullback the passes could not inline: transposed when the program runs
        _emit_transposed(b, op, rule, joint)
        return
    # the derived graph: primals and tangents of op's outputs from its inputs and their tangents
    tout_atoms = tr.graph.outputs[len(lin.outputs):]
    final = tr.graph.replace(outputs=tuple(primals) + tuple(tout_atoms))
    final = irad_passes.run(final)  # (inlines the rules the second transform introduced)
    b.assumed.extend(jg.assumed + final.assumed)
    primals, tout_atoms = final.outputs[:n], final.outputs[n:]
    ren: dict[int, Any] = {v.id: v for v in inputs}
    for y in joint.ybar_inputs:  # the pullback's seeds: it is linear in them, and they are dead here
        ren[y.id] = const(fit_tangent(None, joint.values[y.id]))
    for k, s in zip(tr.seed_outputs, tr.ybar_inputs):
        ren[s.id] = b.tan[inputs[wrt[k]].id]
    tangent_path = {s.id for s in tr.ybar_inputs}
    for dop in final.ops:
        on_path = any(v.id in tangent_path for v in dop.inputs)
        outs = []
        for o in dop.outs:
            # names say what a value is here: a tangent of op's output, or a value the tangent reads
            nv = b.fresh(o.type, _dot_hint(op.outs[0]) if on_path else o.hint.replace("_bar", ""))
            ren[o.id] = nv
            outs.append(nv)
            if on_path:
                tangent_path.add(o.id)
        b.ops.append(Op(dop.prim, tuple(map_atoms(a, lambda x: _ren(ren, x)) for a in dop.args),
                        tuple((k, map_atoms(a, lambda x: _ren(ren, x))) for k, a in dop.kwargs), tuple(outs),
                        dop.fn, op.loc, dop.unpack))
    for o, p in zip(op.outs, primals):
        new = _ren(ren, p)
        b.sub[o.id] = new
        if isinstance(new, Var):
            b.val[new.id] = b.val[o.id]
    seeded = {joint.seed_outputs[k]: t for k, t in enumerate(tout_atoms)}
    for pos, o in enumerate(op.outs):
        t, p = seeded.get(pos), b.sub[o.id]
        if t is None or not is_differentiable(o.type) or not isinstance(p, Var):
            continue
        t = _ren(ren, t)
        if not isinstance(t, Var):  # a zero tangent: materialised, as every active value has one
            z = b.fresh(o.type, (o.hint or f"t{o.id}") + "_dot")
            b.ops.append(Op("irad.primitives.zeros_like", (p,), (), (z,), irad_ops.zeros_like, op.loc))
            t = z
        b.tan[p.id] = t

class TransposedPullback:
    """The forward form of a rule whose pullback stays a call (it branches on values, or its
    state is opaque to the passes): at run time, ``ydot`` is the vjp of ``ybar -> bwd(state, ybar)``
    with the input tangents as cotangent.  irad's ``vjp`` compiles that once per signature."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.__name__ = self.__qualname__ = "".join(c if c.isalnum() else "_" for c in rule.name) + "_jvp_by_transposition"

        def pullback_of(ybar: Any, state: Any) -> Any:
            # (a NotImplemented slot is an argument with no tangent here: custom_vjp's nondiff_argnums)
            return tuple(None if c is NotImplemented else c for c in rule.bwd(state, ybar))
        pullback_of.__name__ = pullback_of.__qualname__ = self.__name__.replace("_jvp_by_transposition", "_pullback")
        self._pullback_of = pullback_of

    def __call__(self, state: Any, y: Any, tangents: tuple[Any, ...]) -> Any:
        ybar0 = unflatten(flatten(y)[1], [irad_ops.zeros_like(v) for v in flatten(y)[0]])
        cots, pb = vjp(self._pullback_of, ybar0, state)
        seed = []
        for k, c in enumerate(cots):
            t = tangents[k] if k < len(tangents) else None
            if isinstance(t, np.ndarray) and isinstance(c, (list, tuple)) and t.ndim and len(c) == len(t):
                t = type(c)(t[i] for i in range(len(t)))  # an array the rule read as a sequence of its rows
            cl, ct = flatten(c, is_leaf=lambda x: x is None)
            tl = flatten(t, is_leaf=lambda x: x is None)[0] if t is not None else [None] * len(cl)
            seed.append(unflatten(ct, [None if a is None else irad_ops.zeros_like(a) if d is None else _seed(d, a)
                                       for a, d in zip(cl, tl)]))
        ydot = pb(tuple(seed) if isinstance(cots, tuple) else type(cots)(seed))[0]
        yl = flatten(y)[0]
        dl = flatten(ydot, is_leaf=lambda x: x is None)[0] if ydot is not None else [None] * len(yl)
        return tuple(fit_tangent(d, v) for d, v in zip(dl, yl))  # one per output leaf (ints get zeros)


def _seed(t: Any, c: Any) -> Any:
    """The input tangent ``t`` as a seed for the pullback's cotangent ``c``: reverse mode fits a
    cotangent to its argument (sums a broadcast one down, casts), so the seed is the transpose of
    that fit: ``t`` broadcast to a larger ``c``, summed down to a smaller one, in ``c``'s type."""
    ts, cs = np.shape(t), np.shape(c)
    if ts != cs:
        t = np.broadcast_to(t, cs) if len(cs) >= len(ts) and np.broadcast_shapes(ts, cs) == cs \
            else irad_ops.sum_to(np.asarray(t), cs)
    return fit_tangent(t, c)


def _emit_transposed(b: _Builder, op: Op, rule: Rule, joint: Any) -> None:
    """``y, s = rule_fwd(...)``, ``ydot = transposed pullback(s, y, tangents)`` (``TransposedPullback``)."""
    s = b.fresh(STATE, f"s{op.outs[0].id}")
    b.ops.append(Op("rule_fwd", op.args, (("_rule", Const(rule, STATE)),) + op.kwargs, op.outs + (s,),
                    rule.fwd, op.loc, "fwd"))
    tans = tuple(const(None) if t is None else t for t in (_tangents_of(b, a) for a in op.args))
    ys = op.outs[0] if len(op.outs) == 1 and not op.unpack else tuple(op.outs)
    touts = tuple(b.fresh(o.type, _dot_hint(o)) for o in op.outs)
    paths = tuple((k,) for k in range(len(op.outs)))
    b.ops.append(Op("transposed_pullback", (s, ys, tans), (("_rule", Const(rule, STATE)),), touts,
                    TransposedPullback(rule), op.loc, paths))
    for o, t in zip(op.outs, touts):
        if is_differentiable(o.type):
            b.tan[o.id] = t


def _ren(ren: dict[int, Any], a: Any) -> Any:
    return ren.get(a.id, a) if isinstance(a, Var) else a


# ---- the API: jvp and linearize -----------------------------------------------------------------

@dataclass
class JVPProgram:
    """A compiled JVP for one argument signature.

    ``fn(*primal inputs, *tangents) -> (*outputs, *output tangents)``; ``lin_fwd`` and ``lin`` are
    the same graph split where the tangents enter (``linearize``): ``lin_fwd(*primal inputs) ->
    (*outputs, *residuals)`` and ``lin(*residuals, *tangents) -> output tangents``."""

    fn: Callable[..., Any]
    source: str
    graph: Graph
    dyn_pos: list[int]  # flat primal leaves that are graph inputs
    tan_pos: list[int]  # flat primal leaves that take a tangent (float inputs), in tangent-input order
    n_out: int
    out_tree: Any
    primal_leaves: list[Any]  # the traced call's leaves (their types check tangents)
    assumptions: Any
    lin_fwd: Callable[..., Any]
    lin: Callable[..., Any]
    lin_source: str
    n_res: int
    #: ``has_aux``: the structure of aux, whose leaves follow y's among the ``n_out`` outputs (no tangents)
    aux_tree: Any = None
    in_tree: Any = None  # the primals' structure (``flatten_args``): tangents must have it
    forward: Graph | None = None  # the traced graph (for logs and pictures, as other programs')

    def outputs(self, flat: Sequence[Any]) -> tuple[Any, Any, Any]:
        """``(y, ydot, aux)`` from the program's flat outputs (``aux`` None without has_aux)."""
        n = self.n_out
        if self.aux_tree is None:
            return unflatten(self.out_tree, flat[:n]), unflatten(self.out_tree, flat[n:]), None
        n_y = self.out_tree.num_leaves
        return (unflatten(self.out_tree, flat[:n_y]), unflatten(self.out_tree, flat[n:]),
                unflatten(self.aux_tree, flat[n_y:n]))


#: jvp's programs, per function (weakly: released with it)
_JVP_CACHE: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _owner(f: Any, key: Any) -> tuple[Any, Any]:
    return (f.__func__, (Identity(f.__self__), key)) if type(f) is types.MethodType else (f, key)


def _programs(f: Any) -> Any:
    owner = f.__func__ if type(f) is types.MethodType else f
    per_f = _JVP_CACHE.get(owner) if _weakrefable(owner) else None
    if per_f is None:
        per_f = ProgramCache(f"jvp({getattr(f, '__name__', 'f')})")
        if _weakrefable(owner):
            _JVP_CACHE[owner] = per_f
    return per_f


def _all(primals: tuple[Any, ...]) -> frozenset[int]:
    """Every primal takes a tangent: its dataclasses and model objects are pytrees (as in ``vjp``)."""
    return frozenset(range(len(primals)))


def _select(f: Callable[..., Any], primals: tuple[Any, ...], run: Callable[[JVPProgram, list[Any]], Any],
            has_aux: bool = False, argnums: tuple[int, ...] | None = None) -> tuple[JVPProgram, Any]:
    """The cached program for this call whose assumptions hold and whose guards pass when ``run``
    runs it, or a new trace; returns the program and what ``run`` returned.  ``argnums``: only
    these positional arguments take tangents (None: all)."""
    key, leaves = call_key(primals, {}, _all(primals))
    if has_aux or argnums is not None:
        key = (has_aux, argnums, key)
    per_f = _programs(f)
    cache_key = _owner(f, key)[1]
    failed = None
    for prog in per_f.get(cache_key) or ():
        if prog.assumptions.check() is not None:
            per_f.drop(cache_key, prog, prog.assumptions.stale() or "a dependency")
            continue
        try:
            return prog, run(prog, leaves)
        except GuardError:
            failed = "a guard"
    prog = _compile_jvp(f, primals, has_aux, argnums)
    key = call_key(primals, {}, _all(primals))[0]  # NOTE: the trace may have registered rules (a lazy SciPy table)
    per_f.add(_owner(f, (has_aux, argnums, key) if has_aux or argnums is not None else key)[1], prog, failed)
    return prog, run(prog, leaves)


def jvp_program(f: Callable[..., Any], primals: tuple[Any, ...], has_aux: bool = False) -> JVPProgram:
    """The compiled JVP program of ``f`` for these primals (traced on a miss), chosen with its
    guards checked by a run of its primal half."""
    return _select(f, primals, lambda p, leaves: p.lin_fwd(*[leaves[i] for i in p.dyn_pos]), has_aux)[0]


def _compile_jvp(f: Callable[..., Any], primals: tuple[Any, ...], has_aux: bool = False,
                 argnums: tuple[int, ...] | None = None) -> JVPProgram:
    from . import passes as irad_passes

    g, tracer, _ = trace_values(f, primals, {}, deep=_all(primals))
    name = getattr(f, "__name__", "f")
    _check_numbers(f, list(g.outputs), "jvp")
    if tracer.mutated_inputs or tracer.mutated_world:
        raise MutationError(f"jvp of {name}: the function updates an argument, or an array it reads from globals, "
                            "closures or attributes, in place; work on a copy")
    leaves = flatten_args(primals, {}, _all(primals))[0]
    statics = {i for i, _ in g.statics}
    dyn_pos = [i for i in range(len(leaves)) if i not in statics]
    selected: set[int] = set()
    start = 0
    for a, p in enumerate(primals):
        n_leaves = flatten(p, depth=Depth.OBJECTS)[1].num_leaves
        if argnums is None or a in argnums:
            selected.update(range(start, start + n_leaves))
        start += n_leaves
    wrt, tan_pos = [], []
    for k, i in enumerate(dyn_pos):
        if g.inputs[k].type.is_float and i in selected:
            wrt.append(k)
            tan_pos.append(i)
    out_tree, aux_tree = g.out_tree or flatten(None)[1], None
    jg = forward(g, tracer.values, wrt)
    if has_aux:
        n_y = _aux_split(g, f, "jvp")
        out_tree, aux_tree = out_tree.children
        n = jg.n_outputs  # aux leaves get no tangent
        jg = JVPGraph(jg.graph.replace(outputs=jg.graph.outputs[:n + n_y]), n, jg.wrt, jg.tangent_inputs)
    opt = irad_passes.run(jg.graph)
    low = lower(opt, f"{name}_jvp")
    fwd_g, lin_g, n_res = split(Joint(opt, jg.n_outputs, (), jg.tangent_inputs, {}), opt)
    fwd_low, lin_low = lower(fwd_g, f"{name}_linearized"), lower(lin_g, f"{name}_linear")
    deps = tuple(tracer.deps) + ((effect_dep("an attribute"),) if tracer.attr_writes else ())
    return JVPProgram(low.fn, low.source, opt, dyn_pos, tan_pos, jg.n_outputs, out_tree, list(leaves),
                      Assumptions(deps + opt.assumed), fwd_low.fn, lin_low.fn, lin_low.source, n_res, aux_tree,
                      flatten_args(primals, {}, _all(primals))[1], g)


def _tangent_leaves(prog: JVPProgram, f: Any, leaves: list[Any], tangents: Any,
                    argnums: tuple[int, ...] | None = None) -> list[Any]:
    """The tangents of the float leaves, in the program's order, checked against the primals'
    structure and leaves (``leaves``: the call's, from ``call_key``; ``argnums``: ``tangents`` has
    one entry per selected argument, the others are held fixed)."""
    n_primals = len(prog.in_tree.children[0].children)
    n = n_primals if argnums is None else len(argnums)
    if type(tangents) not in (tuple, list) or len(tangents) != n:
        raise GradError(f"jvp of {def_site(f) or getattr(f, '__name__', 'f')}: tangents must be a tuple with one "
                        f"entry per primal ({n}), got {type(tangents).__name__}"
                        + (f" of {len(tangents)}" if type(tangents) in (tuple, list) else ""))
    deep = frozenset(range(n_primals))
    if argnums is None:
        tl, ttree = flatten_args(tuple(tangents), {}, deep)
        same = ttree == prog.in_tree
    else:  # only the selected arguments' trees are compared
        trees = prog.in_tree.children[0].children
        tl, same = [None] * len(leaves), True
        starts = [0]
        for t in trees:
            starts.append(starts[-1] + t.num_leaves)
        for a, t in zip(argnums, tangents):
            sub, stree = flatten(t, depth=Depth.OBJECTS)
            same = same and stree == trees[a]
            tl[starts[a]:starts[a + 1]] = sub
        ttree = None
    if not same:
        raise GradError(f"jvp of {def_site(f) or getattr(f, '__name__', 'f')}: the tangents' structure differs from "
                        f"the primals' ({_describe_tree(prog.in_tree.children[0])}); give one tangent per primal "
                        "leaf, in the same containers")
    out = []
    for i in prog.tan_pos:
        p, t = leaves[i], tl[i]
        if np.shape(t) != np.shape(p):
            raise GradError(f"jvp of {def_site(f) or getattr(f, '__name__', 'f')}: the tangent of primal leaf {i} "
                            f"has shape {np.shape(t)}, the primal {np.shape(p)}")
        out.append(fit_tangent(t, p))
    return out


def jvp(f: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], *, has_aux: bool = False) -> Any:
    """``(f(*primals), J·tangents)``: the Jacobian-vector product of ``f`` at ``primals``, in one
    forward sweep of a compiled program (JAX's ``jvp`` layout; with ``has_aux=True``, ``f`` returns
    ``(y, aux)`` and the result is ``(y, ydot, aux)``).

    ``tangents`` has the structure of ``primals``; tangents of non-float leaves (ints, int arrays)
    are ignored.  Programs are cached per function and argument signature, as ``vjp``'s are."""
    if type(primals) not in (tuple, list):
        raise GradError(f"jvp of {def_site(f) or getattr(f, '__name__', 'f')}: primals must be a tuple (or list) of "
                        f"f's positional arguments, got {type(primals).__name__}; write jvp(f, (x,), (v,))")
    primals = tuple(primals)

    def run(prog: JVPProgram, leaves: list[Any]) -> Any:
        return prog.fn(*[leaves[i] for i in prog.dyn_pos], *_tangent_leaves(prog, f, leaves, tangents))

    prog, flat = _select(f, primals, run, has_aux)
    y, ydot, aux = prog.outputs(flat)
    return (y, ydot, aux) if has_aux else (y, ydot)


def jvp_wrt(f: Callable[..., Any], primals: tuple[Any, ...], argnums: tuple[int, ...], tangents: Sequence[Any]) \
        -> tuple[Any, Any]:
    """``jvp`` with tangents for the arguments ``argnums`` only (the others are held fixed, and
    their zero tangents are never computed): the building block of ``hvp`` and ``jacfwd``."""
    def run(prog: JVPProgram, leaves: list[Any]) -> Any:
        return prog.fn(*[leaves[i] for i in prog.dyn_pos], *_tangent_leaves(prog, f, leaves, tangents, argnums))

    prog, flat = _select(f, primals, run, False, tuple(argnums))
    y, ydot, _ = prog.outputs(flat)
    return y, ydot


def linearize(f: Callable[..., Any], *primals: Any, has_aux: bool = False) -> Any:
    """``y, f_jvp = linearize(f, *primals)``: ``f_jvp(*tangents)`` is ``J·tangents`` at ``primals``,
    computed from residuals saved by one forward run (the primal is not recomputed per call).
    With ``has_aux=True``: ``(y, f_jvp, aux)``."""
    prog, flat = _select(f, primals, lambda p, leaves: p.lin_fwd(*[leaves[i] for i in p.dyn_pos]), has_aux)
    n = prog.n_out
    y, _, aux = prog.outputs(list(flat[:n]) + [None] * prog.out_tree.num_leaves)
    # NOTE: copies: a residual may be a primal (x itself) or an output the caller may update in
    # place; f_jvp must stay the derivative at the point linearize was called at
    residuals = [r.copy() if isinstance(r, np.ndarray) else r for r in flat[n:]]
    leaves = call_key(primals, {}, _all(primals))[1]

    def f_jvp(*tangents: Any) -> Any:
        return unflatten(prog.out_tree, prog.lin(*residuals, *_tangent_leaves(prog, f, leaves, tangents)))

    f_jvp.source = prog.lin_source  # type: ignore[attr-defined]
    return (y, f_jvp, aux) if has_aux else (y, f_jvp)


def _jvp_traced(tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``jvp`` called on traced values (``grad`` of a function that calls ``jvp``): compile
    untraced, then run the program under the tracer, which records its ops like user code."""
    f, primals, tangents = args[0], tuple(args[1]), args[2]
    has_aux = bool(kwargs.get("has_aux", False))
    with paused():
        prog = jvp_program(f, primals, has_aux)
    tracer.deps.update(prog.assumptions.deps)
    deep = _all(primals)
    tracer.reach_arguments(primals, {}, deep)
    leaves = flatten_args(primals, {}, deep)[0]
    tl = flatten_args(tuple(tangents), {}, deep)[0]
    flat = tracer.call(prog.fn, tuple(leaves[i] for i in prog.dyn_pos) + tuple(tl[i] for i in prog.tan_pos), {})
    y, ydot, aux = prog.outputs(flat)
    return (y, ydot, aux) if has_aux else (y, ydot)


jvp.__irad_trace_call__ = _jvp_traced  # type: ignore[attr-defined]
