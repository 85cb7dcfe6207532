"""Reverse mode: a forward Graph becomes one joint forward+backward Graph.

Every differentiable op on the path from the differentiated inputs to the outputs becomes

    %y, %s = rule_fwd[numpy.tanh](%x)          the rule's named forward: output + explicit state
    %x_bar = pullback[numpy.tanh](%s, %y_bar)  its named backward, a function of state and ybar

so the joint graph holds no closures for built-in rules (seed thread 000).  The transform runs
on the trace's concrete values: each rule is executed once while the graph is built, which
gives every cotangent its exact type and, when the seed is known (``grad``), the gradient of
the call that traced, with no second run of ``f``.  Broadcasting is undone here
(``irad.primitives.sum_to``), not in rules; fan-out accumulates with ``operator.add``.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence, cast

import numpy as np

from . import loops
from . import passes as irad_passes  # a loop's step is a graph of its own: it goes through the pipeline
from . import primitives as irad_ops
from .effects import is_impure_prim
from .errors import GradError, NoRuleError
from .ir import (GUARD_PRIMS, STATE, ArrayT, Const, Graph, OpaqueT, Op, ScalarT, Var, collector_paused, const, is_differentiable,
                 bind_outputs, map_atoms, typeof)
from .roundtrip import EXACT_INT_ENCODINGS
from .rules import registry
from .rules.registry import Rule


@dataclass(frozen=True)
class Joint:
    """The joint graph and what its outputs mean.

    Outputs are ``g``'s outputs, then one gradient per ``wrt`` input.  ``ybar_inputs`` are the
    cotangent inputs appended to ``g``'s inputs when the seed is given by the caller (``vjp``).
    ``values`` are concrete values at the traced call: of ``g``'s vars, the rule states, the
    cotangent inputs and the joint graph's outputs (cotangents on the way are dropped once read).
    """

    graph: Graph
    n_outputs: int
    wrt: tuple[int, ...]
    ybar_inputs: tuple[Var, ...]
    values: dict[int, Any]
    seed_outputs: tuple[int, ...] = ()  # output positions that ``ybar_inputs`` seed, in order


def _seed_value(v: Any) -> Any:
    if type(v) is float:
        return 1.0
    if type(v) is complex:
        return 1.0 + 0j
    return np.ones_like(v)[()] if isinstance(v, np.generic) else np.ones_like(v)


def _hint(v: Var) -> str:
    return v.hint or f"t{v.id}"


def _var_paths(a: Any, path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], Var]]:
    """(index path, Var) of every Var inside a nested positional argument."""
    if isinstance(a, Var):
        return [(path, a)]
    if type(a) in (tuple, list):
        out = []
        for k, x in enumerate(a):
            out += _var_paths(x, path + (k,))
        return out
    if type(a) is dict:
        out = []
        for k, x in a.items():
            out += _var_paths(x, path + (k,))
        return out
    return []


class _Builder:
    def __init__(self, g: Graph, values: dict[int, Any]) -> None:
        self.g = g
        self.val = dict(values)
        self.ops: list[Op] = []
        self.next_id = 1 + max([v.id for v in g.inputs] + [o.id for op in g.ops for o in op.outs] + [-1])
        #: ids from here on are the transform's own (rule state, cotangents), not ``g``'s values
        self.first_new = self.next_id
        #: the transform's own values that must outlive the sweep (the seeds a caller passes)
        self.kept: set[int] = set()

    def release(self, a: Any) -> None:
        """The value of ``a`` is read no more by the transform: let it go (a cotangent already
        summed or passed on).  On big inputs keeping every cotangent of the traced call alive
        would hold many times the data at once."""
        if isinstance(a, Var) and a.id >= self.first_new and a.id not in self.kept:
            self.val.pop(a.id, None)

    def new(self, value: Any, hint: str = "", type_: Any = None) -> Var:
        v = Var(self.next_id, type_ or typeof(value), hint)
        self.next_id += 1
        self.val[v.id] = value
        return v

    def get(self, a: Any) -> Any:
        return self.val[a.id] if isinstance(a, Var) else a.value

    def emit(self, fn: Any, args: tuple[Any, ...], value: Any, hint: str, prim: str | None = None,
             kwargs: tuple[tuple[str, Any], ...] = (), loc: Any = None) -> Var:
        out = self.new(value, hint)
        self.ops.append(Op(prim or registry.qualname(fn), args, kwargs, (out,), fn, loc))
        return out


def reverse(g: Graph, values: dict[int, Any], wrt: Sequence[int], *, seed: str = "one",
            outputs: int | None = None) -> Joint:
    """Differentiate ``g``'s outputs with respect to the inputs at positions ``wrt``.

    ``seed="one"``: the (scalar) outputs are seeded with 1; ``seed="input"``: one cotangent input
    per output is appended to the graph's inputs.  ``outputs``: only the first ``outputs`` outputs
    are differentiated (``has_aux``: the others are carried through as values).

    ``Joint.values`` holds the values of ``g``, the rule states and the joint graph's inputs and
    outputs; the cotangents on the way are dropped once read (on big inputs, keeping them all
    would hold many times the data at once).
    """
    with collector_paused():
        return _reverse(g, values, wrt, seed, outputs)


def _reverse(g: Graph, values: dict[int, Any], wrt: Sequence[int], seed: str, outputs: int | None) -> Joint:
    n_diff = len(g.outputs) if outputs is None else outputs
    b = _Builder(g, values)
    wrt_vars = [g.inputs[i] for i in wrt]
    active: set[int] = {v.id for v in wrt_vars if is_differentiable(v.type)}

    # forward activity: which values depend differentiably on the wrt inputs
    for op in g.ops:
        if op.outs and not registry.is_nondiff(op.fn) and any(v.id in active for v in op.inputs):
            # a user object rebuilt from active attributes carries their gradient (a dict of them)
            active.update(o.id for o in op.outs if is_differentiable(o.type) or op.prim == "irad.primitives.rebuild")
    _check_no_opaque_path(g, active, b.val)
    # backward usefulness: which active values reach an output
    useful: set[int] = {o.id for o in g.outputs[:n_diff] if isinstance(o, Var) and o.id in active}
    on_path: list[bool] = [False] * len(g.ops)
    for k in range(len(g.ops) - 1, -1, -1):
        op = g.ops[k]
        if any(o.id in useful for o in op.outs):
            ins = [v for v in op.inputs if v.id in active]
            if ins:
                on_path[k] = True
                useful.update(v.id for v in ins)

    # forward sweep: rule_fwd for ops on the path, everything else as it was
    states: dict[int, tuple[Rule, Var]] = {}
    fwd_ops: dict[int, Op] = {}  # the forward op as differentiated (keywords made positional)
    scans: dict[int, Any] = {}  # loop ops: what their reverse loop needs (irad.loops)
    for k, op in enumerate(g.ops):
        if not on_path[k]:
            b.ops.append(op)
            continue
        if op.prim == loops.LOOP_PRIM:
            scans[k] = _loop_forward(b, op, active, useful)
            continue
        if any(v.id in active for _, a in op.kwargs for _, v in _var_paths(a, ())):
            pre = registry.lookup(op.fn, tuple(map_atoms(a, b.get) for a in op.args))
            op = _positional(op, pre.params if pre is not None else ())
        args = [map_atoms(a, b.get) for a in op.args]
        kwargs = {n: map_atoms(a, b.get) for n, a in op.kwargs}
        rule = registry.lookup(op.fn, tuple(args))
        if rule is None:
            raise _no_rule(op, args)
        for n, a in op.kwargs:
            if any(v.id in active for _, v in _var_paths(a, ())):
                raise GradError(f"{op.prim}: keyword argument {n}= carries a value being differentiated "
                                f"at {op.loc.long if op.loc else '?'}; pass it positionally")
        y, st = rule.fwd(*args, **kwargs)
        if len(op.outs) == 1 and not op.unpack:
            st = _share_output(st, y, b.val.get(op.outs[0].id))
        del y
        s = b.new(st, f"s{op.outs[0].id}", STATE)
        del st
        fwd_ops[k] = op
        b.ops.append(Op("rule_fwd", op.args, (("_rule", Const(rule, STATE)),) + op.kwargs, op.outs + (s,),
                        rule.fwd, op.loc, "fwd"))
        states[k] = (rule, s)

    # seeds
    cot: dict[int, Any] = {}
    ybar_inputs: list[Var] = []
    seed_outputs: list[int] = []
    for pos, o in enumerate(g.outputs[:n_diff]):
        if not (isinstance(o, Var) and o.id in useful):
            continue
        if seed == "one":
            if isinstance(o.type, ArrayT) and int(np.prod(o.type.shape)) != 1:
                raise GradError(f"grad of {g.name}: output must be a scalar (or have one element), got "
                                f"{o.type}; use irad.vjp for other outputs")
            if o.id not in cot:
                sv = _seed_value(b.val[o.id])
                cot[o.id] = Const(sv, typeof(sv))
        else:
            yb = b.new(_seed_value(b.val[o.id]), _hint(o) + "_bar", o.type)
            b.kept.add(yb.id)
            ybar_inputs.append(yb)
            seed_outputs.append(pos)
            _accumulate(b, cot, o, yb)

    # backward sweep
    for k in range(len(g.ops) - 1, -1, -1):
        if k in scans:
            _loop_backward(b, scans[k], cot)
            continue
        if k not in states:
            continue
        op = fwd_ops[k]
        rule, s = states[k]
        outs_with_cot = [o for o in op.outs if o.id in cot]
        if not outs_with_cot:
            continue
        if len(op.outs) == 1 and not op.unpack:
            ybar = cot[op.outs[0].id]
        else:
            parts = []
            for o in op.outs:
                if o.id in cot:
                    parts.append(cot[o.id])
                else:
                    z = irad_ops.zeros_like(b.val[o.id])
                    parts.append(b.emit(irad_ops.zeros_like, (o,), z, _hint(o) + "_bar", "irad.primitives.zeros_like"))
            ybar = tuple(parts)
        cots = rule.bwd(b.val[s.id], map_atoms(ybar, b.get))
        # NOTE: the cotangents of op's outputs are read by nothing after this (every reader of
        # op's outputs comes later in the forward order: already swept).  The state stays: it is
        # a residual of the backward graph (``split``), which callers may evaluate from ``values``
        map_atoms(ybar, b.release)
        if not isinstance(cots, (tuple, list)):
            raise NoRuleError(f"the pullback of {rule.name} returned {type(cots).__name__}; "
                              "it must return a tuple with one cotangent per positional argument")
        wanted = [(p, v) for i, a in enumerate(op.args) for p, v in _var_paths(a, (i,)) if v.id in active]
        paths, outs, raw = [], [], []
        for p, v in wanted:
            c: Any = cots
            try:
                for idx in p:
                    c = c[idx]
            except (IndexError, TypeError, KeyError):
                c = None
            if c is None:
                continue
            if c is NotImplemented:
                raise GradError(f"{rule.name}: its derivative with respect to positional argument {p[0]} is not "
                                f"implemented (at {op.loc.long if op.loc else '?'}); do not differentiate with "
                                "respect to it, or register a rule that computes it")
            out = b.new(c, _hint(v) + "_bar")
            paths.append(p)
            outs.append(out)
            raw.append(v)
        if not outs:
            continue
        prim = "call_pullback" if rule.kind == "closure" else "pullback"  # state: a closure (not serialisable)
        b.ops.append(Op(prim, (s, ybar), (("_rule", Const(rule, STATE)),), tuple(outs), rule.bwd, op.loc,
                        tuple(paths)))
        del cots
        for v, out in zip(raw, outs):
            mark = b.next_id
            fitted = _fit(b, out, v, op.loc)
            if fitted is not out:  # the raw cotangent and the steps that fitted it are read no more
                b.release(out)
                for vid in range(mark, fitted.id):
                    b.val.pop(vid, None)
            _accumulate(b, cot, v, fitted)

    grads = []
    for v in wrt_vars:
        if v.id in cot:
            grads.append(cot[v.id])
        else:
            z = irad_ops.zeros_like(b.val[v.id])
            grads.append(b.emit(irad_ops.zeros_like, (v,), z, _hint(v) + "_bar", "irad.primitives.zeros_like"))
    joint = Graph(g.name, g.inputs + tuple(ybar_inputs), tuple(b.ops), tuple(g.outputs) + tuple(grads),
                  None, None, g.statics, g.provenance + ("reverse mode",))
    return Joint(joint, len(g.outputs), tuple(wrt), tuple(ybar_inputs), b.val, tuple(seed_outputs))


def _positional(op: Op, names: tuple[str, ...] = ()) -> Op:
    """Move keyword arguments that name positional parameters into ``args`` (``np.sum(a=x)``),
    so that rules, which give cotangents for positional arguments, see them.  ``names``: the
    rule's own list of positional parameters (``Rule.params``), used instead of the signature
    (``scipy.stats.norm.logpdf(x, loc=m)`` runs ``rv_continuous.logpdf(self, x, *args, **kw)``)."""
    import inspect
    kw = dict(op.kwargs)
    args = list(op.args)
    if names:  # each a name, or (name, default): a default fills a gap before a later keyword
        rest = [n if isinstance(n, tuple) else (n,) for n in names[len(args):]]
        last = max((i for i, n in enumerate(rest) if n[0] in kw), default=-1)
        for n in rest[:last + 1]:
            if n[0] in kw:
                args.append(kw.pop(n[0]))
            elif len(n) == 2:
                args.append(const(n[1]))
            else:
                break
        return Op(op.prim, tuple(args), tuple(kw.items()), op.outs, op.fn, op.loc, op.unpack)
    try:
        params = list(inspect.signature(cast(Callable[..., Any], op.fn)).parameters.values())
    except (TypeError, ValueError):
        return op
    for p in params[len(args):]:
        if p.kind is not p.POSITIONAL_OR_KEYWORD or p.name not in kw:
            break
        args.append(kw.pop(p.name))
    return Op(op.prim, tuple(args), tuple(kw.items()), op.outs, op.fn, op.loc, op.unpack)


#: outputs this big are compared with the traced value before a rule's state may share it
_SHARE_MIN = 1 << 15


def _share_output(st: Any, y: Any, traced: Any) -> Any:
    """``st`` with the rule's output ``y`` replaced by the traced call's equal output ``traced``
    (a rule's state often holds its output: ``(args, y)``), so that the transform does not keep
    a second copy of every big output alive.  Only when the two are equal element for element
    (bit for bit, NaNs excepted: those keep their own copy) and ``st`` holds ``y`` itself in plain
    tuples or lists; small outputs are left alone (the copy is cheap; the comparison is not free)."""
    if type(y) is not np.ndarray or y.size < _SHARE_MIN or type(traced) is not np.ndarray or traced is y or \
            traced.dtype != y.dtype or traced.shape != y.shape or traced.strides != y.strides:
        return st
    if not _holds(st, y) or not np.array_equal(y, traced):
        return st
    return _swapped(st, y, traced)


# NOTE: module functions, not closures: a recursive closure is a reference cycle, which would keep
# the arrays it closes over alive until the garbage collector runs
def _holds(x: Any, y: Any) -> bool:
    return x is y or type(x) in (tuple, list) and any(_holds(e, y) for e in x)


def _swapped(x: Any, y: Any, by: Any) -> Any:
    if x is y:
        return by
    return type(x)(_swapped(e, y, by) for e in x) if type(x) in (tuple, list) else x


def _fit(b: _Builder, c: Var, primal: Var, loc: Any) -> Var:
    """Make a cotangent match its primal's type: undo broadcasting, keep floats floats, cast dtypes."""
    pt, ct = primal.type, c.type
    if pt == ct or isinstance(pt, OpaqueT):  # an object's cotangent: a dict of attribute cotangents
        return c
    hint = c.hint
    pshape = getattr(pt, "shape", ())
    if getattr(ct, "shape", ()) != pshape:
        c = _unbroadcast(b, c, pshape, loc)
    kind = getattr(pt, "kind", None)
    if kind in ("float", "complex"):
        fn = float if kind == "float" else complex
        if c.type != pt:
            if kind == "float" and np.iscomplexobj(b.val[c.id]):
                c = b.emit(np.real, (c,), np.real(b.val[c.id]), hint, loc=loc)
            c = b.emit(fn, (c,), fn(b.val[c.id]), hint, f"builtins.{kind}", loc=loc)
        return c
    pdtype = getattr(pt, "dtype", None)
    if pdtype is not None and (getattr(c.type, "dtype", None) != pdtype or not isinstance(c.type, type(pt))):
        scalar = bool(getattr(pt, "scalar", False))
        v = irad_ops.to_dtype(b.val[c.id], np.dtype(pdtype), scalar)
        c = b.emit(irad_ops.to_dtype, (c, const(np.dtype(pdtype)), const(scalar)), v, hint, "irad.primitives.to_dtype",
                   loc=loc)
    return c


def _unbroadcast(b: _Builder, c: Var, pshape: tuple[int, ...], loc: Any) -> Var:
    """Sum a cotangent down to its primal's shape with the axes worked out now (shapes are static):
    ``np.sum(g, axis=0)`` reads like the hand-written line; ``irad.primitives.sum_to`` covers the rest."""
    gshape = getattr(c.type, "shape", ())
    lead = len(gshape) - len(pshape)
    tail = gshape[lead:] if lead >= 0 else ()
    if lead >= 0 and all(g == p or p == 1 for g, p in zip(tail, pshape)):
        kept = tuple(lead + i for i, (g, p) in enumerate(zip(tail, pshape)) if p == 1 and g != 1)
        axes = tuple(range(lead)) + kept
        if kept:
            v = np.sum(b.val[c.id], axis=axes, keepdims=True)
            c = b.emit(np.sum, (c,), v, c.hint, kwargs=(("axis", const(axes)), ("keepdims", const(True))), loc=loc)
            if lead:
                c = b.emit(np.reshape, (c, const(pshape)), np.reshape(v, pshape), c.hint, loc=loc)
            return c
        v = np.sum(b.val[c.id], axis=axes)
        return b.emit(np.sum, (c,), v, c.hint, kwargs=(("axis", const(axes)),), loc=loc)
    v = irad_ops.sum_to(b.val[c.id], pshape)
    return b.emit(irad_ops.sum_to, (c, const(pshape)), v, c.hint, "irad.primitives.sum_to", loc=loc)


def _accumulate(b: _Builder, cot: dict[int, Any], v: Var, c: Any) -> None:
    old = cot.get(v.id)
    if old is None:
        cot[v.id] = c
        return
    total = b.get(old) + b.get(c)
    cot[v.id] = b.emit(operator.add, (old, c), total, _hint(v) + "_bar")
    b.release(old)
    b.release(c)


def _check_no_opaque_path(g: Graph, active: set[int], values: dict[int, Any]) -> None:
    """Refuse a gradient that would be silently lost on a trip out of the float world and back.

    A value made from differentiated values that cannot carry their cotangent is *tainted*: an
    opaque object (a C object such as ``np.poly1d(c)``, ``memoryview(x)``, ``x.tobytes()``, a
    ``Decimal``), or a reinterpretation of the bytes of a float array as another dtype
    (``x.view(np.int64)``, ``np.frombuffer(x, np.int64)``: it shares the array's memory).  What
    is computed from a tainted value is tainted too (``np.frombuffer(x.tobytes(), np.int64)``),
    except its length.  Refused: a float computed from a tainted value that reaches an output
    (its gradient would be zero), and a guard on the raw bytes of a differentiated value
    (``x.tobytes() in cache``, ``hash(x.tobytes())``), which pins the program to that one value.
    Lossy conversions (``astype(int)``, comparisons, ``int(x)``) taint nothing: their zero
    gradient is the right one."""
    tainted: dict[int, Op] = {}  # tainted value -> the op that made the first tainted value on its way
    raw: set[int] = set()  # tainted values computed from raw bytes (buffers and what is made from them)
    reads: list[tuple[Op, Op]] = []  # (op reading a float out of a tainted value, the op that tainted it)
    views: set[int] = set()  # id() of the ops that reinterpret a float array's bytes
    for op in g.ops:
        if op.prim == "irad.primitives.guard":
            for v in op.inputs:
                if v.id in raw:
                    raise _pinned_error(op, tainted[v.id])
            continue
        if not op.outs or op.prim == "irad.primitives.rebuild":
            continue
        src = next((tainted[v.id] for v in op.inputs if v.id in tainted), None)
        nondiff = registry.is_nondiff(op.fn)  # (`b in cache`, `b1 == b2`: carries taint, reads no float)
        act = [v for v in op.inputs if v.id in active] if not nondiff else []
        if src is None and not act:
            continue
        structural = op.fn is len or op.fn is bool  # the size of a buffer, not its contents
        exact_ints = getattr(op.fn, "__name__", None) in EXACT_INT_ENCODINGS  # x.as_integer_ratio()
        from_raw = not structural and (exact_ints or any(v.id in raw for v in op.inputs))
        for o in op.outs:
            if src is not None and not structural and not is_differentiable(o.type):
                if from_raw or not _is_bool(o.type):  # (a comparison of reinterpreted bits is a decision)
                    tainted.setdefault(o.id, src)
            elif _holds_objects(o.type) or exact_ints:
                tainted.setdefault(o.id, src or op)
            elif act and _reinterprets(op, o, act, values):
                tainted.setdefault(o.id, op)
                views.add(id(op))
                if is_differentiable(o.type):  # x.view(np.float32) of float64 data: garbage to differentiate
                    reads.append((op, op))
            if o.id in tainted and (from_raw or _is_buffer(o.type)):
                raw.add(o.id)
        if src is not None and not nondiff and any(is_differentiable(o.type) for o in op.outs):
            reads.append((op, src))
    if not reads:
        return
    needed = {o.id for o in g.outputs if isinstance(o, Var)}
    for op in reversed(g.ops):
        if any(o.id in needed for o in op.outs):
            needed.update(v.id for v in op.inputs)
    for op, src in reads:
        if any(o.id in needed and is_differentiable(o.type) for o in op.outs):
            made = f" at {src.loc.long}" if src.loc else ""
            where = f" at {op.loc.long}" if op.loc else ""
            if id(src) in views:
                as_ = next((str(o.type) for o in src.outs), "another dtype")
                then = f"and {op.prim}{where} computes floats from those bits" if op is not src else \
                    "and the gradient would flow through those bits"
                raise NoRuleError(
                    f"the gradient would be silently lost through a reinterpretation of the bytes of a "
                    f"differentiated array: {src.prim}{made} views its memory as {as_}, {then}; irad does "
                    "not differentiate through raw bits.\n  Use the values themselves (x, x.astype(dtype) to "
                    "convert them), np.frexp / np.ldexp / np.signbit / np.copysign to take a float apart, or do "
                    "the bit manipulation outside the differentiated function.")
            obj = next((o.type for o in src.outs if _holds_objects(o.type)), None)
            hint = ("  A buffer round trip (x.tobytes() / x.data / memoryview(x) / struct.pack, then "
                    "np.frombuffer / struct.unpack) is the identity: use the array itself, or x.copy().\n"
                    if _is_buffer(obj) else "")
            raise NoRuleError(
                f"the gradient would flow through an opaque {obj or 'object'} object: {src.prim}{made} made it from "
                f"differentiated values, and {op.prim}{where} reads a float out of it; irad cannot "
                "differentiate through objects it does not trace (the gradient would be silently lost).\n"
                f"{hint}  Compute with arrays and numpy functions instead, or give {src.prim} a rule (@irad.rrule).")


def _reinterprets(op: Op, o: Var, act: list[Var], values: dict[int, Any]) -> bool:
    """Is ``o`` the bytes of a differentiated input read as another dtype (``x.view(np.int64)``,
    ``np.frombuffer(x, np.int32)``, ``x[0].view(np.uint64)``)?  Arrays: it shares the input's
    memory with another dtype (``z.real``/``z.imag`` of a complex array excepted: they are values);
    scalars: a ``view`` with another dtype."""
    ov = values.get(o.id)
    if not isinstance(ov, (np.ndarray, np.generic)):
        return False
    for v in act:
        pv = values.get(v.id)
        if not isinstance(pv, (np.ndarray, np.generic)) or pv.dtype == ov.dtype:
            continue
        if pv.dtype.kind == "c" and ov.dtype == pv.real.dtype and np.shape(ov) == np.shape(pv):
            continue  # the real or imaginary part, element for element
        if isinstance(ov, np.ndarray) and isinstance(pv, np.ndarray):
            if np.may_share_memory(ov, pv):
                return True
        elif getattr(op.fn, "__name__", "") == "view":
            return True
    return False


def _is_bool(t: Any) -> bool:
    return isinstance(t, ScalarT) and t.kind == "bool" or isinstance(t, ArrayT) and t.dtype == "bool"


def _is_buffer(t: Any) -> bool:
    """Raw bytes: ``x.tobytes()``, ``memoryview(x)``, ``struct.pack``, ``array.array``."""
    return isinstance(t, OpaqueT) and t.name in ("bytes", "bytearray", "memoryview", "array")


def _pinned_error(guard: Op, src: Op) -> NoRuleError:
    made = f" at {src.loc.long}" if src.loc else ""
    where = f" at {guard.loc.long}" if guard.loc else ""
    return NoRuleError(
        f"a branch decides on the exact encoding of a differentiated value (its raw bytes, or the integers of "
        f"its ratio): {src.prim}{made} made it, and the guard{where} depends on it (a cache keyed by "
        "x.tobytes(), a hash, an equality test of bytes, a Fraction built from it); the program would be pinned "
        "to that one exact value, and what the branch returns (a cached result) carries no gradient.\n"
        "  Keep caches and hashes of traced arrays outside the differentiated function (irad already caches "
        "the compiled program), key them on something that is not traced, or compute in floats.")


def _holds_objects(t: Any) -> bool:
    """Values that can hold numbers irad does not see: opaque objects, object and string arrays."""
    if isinstance(t, OpaqueT):
        return True
    return isinstance(t, ArrayT) and not t.dtype.startswith(("float", "complex", "longdouble", "int", "uint", "bool"))


def _no_rule(op: Op, args: list[Any]) -> NoRuleError:
    types_ = ", ".join(str(typeof(a)) if not isinstance(a, (list, tuple)) else type(a).__name__ for a in args)
    where = f" at {op.loc.long}" if op.loc else ""
    short = op.prim.rsplit(".", 1)[-1]
    failed = registry.LIBRARY_FAILURES.get(op.prim)
    why = (f"irad could not trace through its Python body ({failed})" if failed is not None
           else "irad cannot trace through it (it is not Python code)")
    return NoRuleError(
        f"no reverse rule for {op.prim}({types_}){where}; {why}.\n"
        f"  Define one, e.g.\n"
        f"    @irad.rrule({op.prim})\n"
        f"    def _({', '.join('x%d' % i for i in range(len(args)))}):\n"
        f"        y = {short}(...)\n"
        f"        def pullback(ybar): return (...,)   # one cotangent per positional argument\n"
        f"        return y, pullback\n"
        f"  or mark it irad.non_differentiable({op.prim}).")


# ---- loops: a forward loop that also stacks the step's residuals, then a reverse loop ----------------


@dataclass
class _Scan:
    op: Op  # the loop op as traced
    loop: "loops.Loop"  # its forward step, with the residuals as extra ys
    active_carries: list[int]
    seeded: list[int]  # body output positions (in the forward step's order) whose cotangent the step reads
    bwd: Graph  # (residuals..., ybar...) -> cotangents of the wrt body inputs
    wrt: list[int]  # body input positions differentiated
    #: per residual of ``bwd``: ("inv", atom) | ("xs", slot) | ("slot", per-iteration outs) | ("stack", stacked out)
    res_src: list[tuple[str, Any]]
    useful_ys: list[int]


def _body_activity(body: Graph, act_in: set[int]) -> set[int]:
    """Which of ``body``'s values depend differentiably on the inputs at positions ``act_in``."""
    active = {body.inputs[i].id for i in act_in if is_differentiable(body.inputs[i].type)}
    for op in body.ops:
        if op.outs and not registry.is_nondiff(op.fn) and any(v.id in active for v in op.inputs):
            active.update(o.id for o in op.outs if is_differentiable(o.type))
    return active


def _loop_forward(b: _Builder, op: Op, active: set[int], useful: set[int]) -> _Scan:
    """Differentiate the step once (on the first iteration's values), optimise it with the default
    passes, split it into forward and backward steps, and emit the forward loop, whose extra ys
    are what the backward step reads."""
    loop = loops.loop_of(op)
    body, nc, ni = loop.body, loop.n_carry, loop.n_inv
    init, inv, xs = op.args
    outer_in = list(init) + list(inv) + list(xs)

    def is_active(a: Any) -> bool:
        return any(isinstance(v, Var) and v.id in active for v in (a if isinstance(a, tuple) else (a,)))

    act_in = {i for i, a in enumerate(outer_in) if is_active(a)}
    while True:  # a carry is active once its start or its update depends on the differentiated values
        act = _body_activity(body, act_in)
        more = {c for c in range(nc) if isinstance(body.outputs[c], Var) and body.outputs[c].id in act}
        if more <= act_in:
            break
        act_in |= more
    active_carries = [c for c in range(nc) if c in act_in and is_differentiable(body.inputs[c].type)]
    wrt = [i for i in sorted(act_in) if is_differentiable(body.inputs[i].type)]
    ys_outs = _ys_groups(loop, op)
    useful_ys = [j for j, outs in enumerate(ys_outs) if any(o.id in useful for o in outs)]
    order = list(range(nc)) + [nc + j for j in useful_ys]
    order += [nc + j for j in range(len(loop.ys_kinds)) if j not in useful_ys]
    stepped = body.replace(outputs=tuple(body.outputs[i] for i in order))
    i0 = loop.n - 1 if loop.reverse else 0  # the first iteration run
    first = [b.get(a) for a in list(init) + list(inv)]
    first += [b.get(x[i0]) if kind == "each" else b.get(x)[i0] for kind, x in zip(loop.xs_kinds, xs)]
    vals = loops.values_of(stepped, first)
    jb = reverse(stepped, vals, wrt, seed="input", outputs=nc + len(useful_ys))
    opt = irad_passes.run(jb.graph, None)
    fwd_b, bwd_b, n_res = irad_passes.split(jb, opt)
    n_out = len(stepped.outputs)
    if loop.remat:  # keep the step's inputs only; the backward step runs the forward step again first
        fwd_b, bwd_b = _recomputed(fwd_b, bwd_b, n_res, stepped, irad_passes.dce)
    fwd_b, inv = _hoist(b, fwd_b, nc, ni, tuple(inv), op.loc)
    ni_f = len(inv)
    inputs = {v.id: i for i, v in enumerate(fwd_b.inputs)}
    res_src: list[tuple[str, Any]] = []
    extra: list[Any] = []  # residuals the forward step must hand on, per iteration
    for r in fwd_b.outputs[n_out:]:
        i = inputs.get(r.id) if isinstance(r, Var) else None
        if i is not None and nc <= i < nc + ni_f:
            res_src.append(("inv", inv[i - nc]))
        elif i is not None and i >= nc + ni_f:
            res_src.append(("xs", i - nc - ni_f))
        else:
            res_src.append(("slot", len(extra)))
            extra.append(r)
    back = [0] * n_out  # forward-step outputs back in the loop's own order
    for pos, i in enumerate(order):
        back[i] = pos
    step = fwd_b.replace(outputs=tuple(fwd_b.outputs[back[i]] for i in range(n_out)) + tuple(extra),
                         name=body.name)
    # an array residual is stacked into one preallocated array; a scalar one is kept per iteration
    kinds = tuple("stack" if _stackable(r.type) else "each" for r in extra)
    fl = loops.Loop(step, loop.n, nc, ni_f, loop.xs_kinds, loop.ys_kinds + kinds, loop.reverse, loop.remat)
    result = fl([b.get(a) for a in init], [b.get(a) for a in inv],
                [tuple(b.get(x) for x in a) if kind == "each" else b.get(a) for kind, a in zip(loop.xs_kinds, xs)])
    res_outs: list[Var] = []
    at = len(op.outs)
    slots: list[tuple[str, Any]] = []
    for j, kind in enumerate(kinds):
        width = 1 if kind == "stack" else loop.n
        outs = [b.new(result[at + k], f"r{j}") for k in range(width)]
        at += width
        res_outs.extend(outs)
        slots.append(("stack", outs[0]) if kind == "stack" else ("slot", tuple(outs)))
    b.ops.append(loops.make_op(fl, init, inv, xs, op.outs + tuple(res_outs), op.loc))
    res_src = [slots[v] if kind == "slot" else (kind, v) for kind, v in res_src]
    seeded = [order[p] for p in jb.seed_outputs]
    return _Scan(op, fl, active_carries, seeded, bwd_b, wrt, res_src, useful_ys)


def _recomputed(fwd: Graph, bwd: Graph, n_res: int, stepped: Graph, dce: Any) -> tuple[Graph, Graph]:
    """A checkpointed step (``Loop.remat``): the forward step is the traced step, whose residuals
    are the inputs the backward step reads; the backward step is the split forward step (with
    its residuals) followed by the split backward step."""
    assert [v.id for v in fwd.inputs] == [v.id for v in stepped.inputs]
    ybar = bwd.inputs[n_res:]
    glued = dce(Graph(bwd.name, fwd.inputs + ybar, fwd.ops + bwd.ops, bwd.outputs))
    used = {v.id for op in glued.ops for v in op.inputs} | {o.id for o in glued.outputs if isinstance(o, Var)}
    kept = tuple(v for v in fwd.inputs if v.id in used)
    return (stepped.replace(outputs=stepped.outputs + kept),
            glued.replace(inputs=kept + ybar))


def _stackable(t: Any) -> bool:
    """Can per-iteration values of type ``t`` share one preallocated array: an ndarray or a numpy
    scalar of a numeric dtype (``Y[i]`` gives back an ``np.float64``)?  Python scalars stay a list,
    where ``Y[i]`` would turn a ``float`` into an ``np.float64``."""
    return isinstance(t, ArrayT) and t.dtype != "object"


def _hoist(b: _Builder, body: Graph, nc: int, ni: int, inv: tuple[Any, ...], loc: Any) -> tuple[Graph, list[Any]]:
    """Move the step's ops that read only invariants (``W.T``, a zero of ``W``'s shape) out of the
    loop: they run once, and their values become invariants of the step (the same Var ids)."""
    outer: dict[int, Any] = {v.id: a for v, a in zip(body.inputs[nc:nc + ni], inv)}
    kept: list[Op] = []
    moved: list[Var] = []
    for bop in body.ops:
        if bop.outs and bop.prim not in GUARD_PRIMS and bop.prim != loops.LOOP_PRIM and \
                not is_impure_prim(bop.prim) and all(v.id in outer for v in bop.inputs):
            args = loops.atoms(bop)
            new = loops.with_atoms(bop, [outer[x.id] if isinstance(x, Var) else x for x in args])
            fn_args = [map_atoms(a, b.get) for a in new.args]
            r = cast(Callable[..., Any], new.fn)(
                *fn_args, **{k: map_atoms(a, b.get) for k, a in new.kwargs if k[0] != "_"})
            env: dict[int, Any] = {}
            bind_outputs(new, r, env)
            outs = tuple(b.new(env[o.id], o.hint) for o in bop.outs)
            b.ops.append(loops.with_atoms(new, loops.atoms(new), outs))
            for o, no in zip(bop.outs, outs):
                outer[o.id] = no
            moved.extend(bop.outs)
        else:
            kept.append(bop)
    if not moved:
        return body, list(inv)
    used = {v.id for bop in kept for v in bop.inputs} | {o.id for o in body.outputs if isinstance(o, Var)}
    extra = [o for o in moved if o.id in used]
    ins = body.inputs[:nc + ni] + tuple(extra) + body.inputs[nc + ni:]
    return body.replace(inputs=ins, ops=tuple(kept)), list(inv) + [outer[o.id] for o in extra]


def _ys_groups(loop: "loops.Loop", op: Op) -> list[list[Var]]:
    """The loop op's outs for each of its ys: n of them (``each``) or the stacked one."""
    groups, at = [], loop.n_carry
    for kind in loop.ys_kinds:
        width = 1 if kind == "stack" else loop.n
        groups.append(list(op.outs[at: at + width]))
        at += width
    return groups


def _zero_for(b: _Builder, v: Var) -> Var:
    z = irad_ops.zeros_like(b.val[v.id])
    return b.emit(irad_ops.zeros_like, (v,), z, _hint(v) + "_bar", "irad.primitives.zeros_like")


def _loop_backward(b: _Builder, sc: _Scan, cot: dict[int, Any]) -> None:
    """The reverse loop: carries are the carries' cotangents and the invariants' running sums; it
    reads the residuals and the ys' cotangents per iteration, and makes the xs' cotangents."""
    op, bwd = sc.op, sc.bwd
    loop = loops.loop_of(op)  # the traced loop (its forward loop's step has more invariants)
    body = loop.body
    nc, ni = loop.n_carry, loop.n_inv
    init, inv, xs = op.args
    n_res = len(sc.res_src)
    res_in, ybar_in = bwd.inputs[:n_res], bwd.inputs[n_res:]
    ids = max([v.id for v in bwd.inputs] + [o.id for o2 in bwd.ops for o in o2.outs] + [0]) + 1

    def fresh(t: Any, hint: str) -> Var:
        nonlocal ids
        ids += 1
        return Var(ids, t, hint)

    grad_of = dict(zip(sc.wrt, bwd.outputs))
    seeds = dict(zip(sc.seeded, ybar_in))  # body output position -> the bwd step's cotangent input
    # the reverse step's inputs
    cbar = [seeds.get(c) or fresh(body.outputs[c].type if isinstance(body.outputs[c], Var) else typeof(
        body.outputs[c].value), "c_bar") for c in sc.active_carries]
    inv_wrt = [i for i in sc.wrt if nc <= i < nc + ni]
    acc = [fresh(body.inputs[i].type, _hint(body.inputs[i]) + "_acc") for i in inv_wrt]
    r_inv = [(v, a) for v, (kind, a) in zip(res_in, sc.res_src) if kind == "inv"]
    r_xs = [(v, a) for v, (kind, a) in zip(res_in, sc.res_src) if kind in ("xs", "slot", "stack")]
    y_seeded = [p for p in sc.seeded if p >= nc]
    ops = list(bwd.ops)
    acc_out = []
    for v, i in zip(acc, inv_wrt):
        gi = grad_of[i]
        s_ = fresh(v.type, v.hint)
        ops.append(Op("operator.add", (v, gi), (), (s_,), operator.add, op.loc))
        acc_out.append(s_)
    xs_wrt = [i for i in sc.wrt if i >= nc + ni]
    r_init: list[Any] = []
    for c in sc.active_carries:
        o = op.outs[c]
        r_init.append(cot.get(o.id) or _zero_for(b, o))
    for i in inv_wrt:
        r_init.append(_zero_for(b, inv[i - nc]))
    # a carry's cotangent that the step hands on unchanged (a loss summed over the iterations) is an
    # invariant of the reverse loop: ops that read only it run once, before the loop
    c_out = [grad_of[c] for c in sc.active_carries]
    kept = [j for j, (v, o) in enumerate(zip(cbar, c_out)) if not (isinstance(o, Var) and o.id == v.id)]
    frozen = [j for j in range(len(cbar)) if j not in kept]
    rb_in = [cbar[j] for j in kept] + acc + [cbar[j] for j in frozen] + [v for v, _ in r_inv] + \
        [v for v, _ in r_xs] + [seeds[p] for p in y_seeded]
    rb_out = [c_out[j] for j in kept] + acc_out + [grad_of[i] for i in xs_wrt]
    rb = Graph(body.name + "_bar", tuple(rb_in), tuple(ops), tuple(rb_out))
    xs_kinds: list[str] = []
    outer_xs: list[Any] = []
    for kind, a in sc.res_src:
        if kind == "xs":
            xs_kinds.append(loop.xs_kinds[a])
            outer_xs.append(xs[a])
        elif kind in ("slot", "stack"):
            xs_kinds.append("each" if kind == "slot" else "stack")
            outer_xs.append(a)
    groups = _ys_groups(loop, op)
    for p in y_seeded:
        j = p - nc
        kind = loop.ys_kinds[j]
        outs = groups[j]
        if kind == "stack":
            xs_kinds.append("stack")
            outer_xs.append(cot.get(outs[0].id) or _zero_for(b, outs[0]))
        else:
            zero = None
            col = []
            for o in outs:
                ct = cot.get(o.id)
                if ct is None:
                    zero = zero or _zero_for(b, o)
                    ct = zero
                col.append(ct)
            xs_kinds.append("each")
            outer_xs.append(tuple(col))
    ys_kinds = tuple(loop.xs_kinds[i - nc - ni] for i in xs_wrt)
    r_inv_outer = [r_init[j] for j in frozen] + [a for _, a in r_inv]
    n_rc = len(kept) + len(acc)
    rb, r_inv_outer = _hoist(b, rb, n_rc, len(r_inv_outer), tuple(r_inv_outer), op.loc)
    rl = loops.Loop(rb, loop.n, n_rc, len(r_inv_outer), tuple(xs_kinds), ys_kinds, not loop.reverse)
    rl_init = [r_init[j] for j in kept] + r_init[len(cbar):]
    result = rl([b.get(a) for a in rl_init], [b.get(a) for a in r_inv_outer],
                [tuple(b.get(x) for x in a) if kd == "each" else b.get(a) for kd, a in zip(xs_kinds, outer_xs)])
    outs = [b.new(v, "loop_bar") for v in result]
    b.ops.append(loops.make_op(rl, rl_init, r_inv_outer, outer_xs, outs, op.loc))
    # hand the cotangents on
    carry_bars = list(r_init[:len(cbar)])  # a frozen carry's cotangent leaves the loop as it came in
    for j, o in zip(kept, outs):
        carry_bars[j] = o
    for c, o in zip(sc.active_carries, carry_bars):
        a = init[c]
        if isinstance(a, Var):
            _accumulate(b, cot, a, _fit(b, o, a, op.loc))
    for i, o in zip(inv_wrt, outs[len(kept):]):
        a = inv[i - nc]
        if isinstance(a, Var):
            _accumulate(b, cot, a, _fit(b, o, a, op.loc))
    at = n_rc
    for i, kind in zip(xs_wrt, ys_kinds):
        a = xs[i - nc - ni]
        if kind == "stack":
            if isinstance(a, Var):
                _accumulate(b, cot, a, _fit(b, outs[at], a, op.loc))
            at += 1
        else:
            for x in a:
                if isinstance(x, Var):
                    _accumulate(b, cot, x, _fit(b, outs[at], x, op.loc))
                at += 1
