"""Batching: a ``Graph -> Graph`` transform that maps a graph over a new leading axis (JAX's ``vmap``).

``batch(g, batched, size)``: the inputs at positions ``batched`` gain a leading axis of length
``size``.  Every op that reads a batched value is rewritten by the batching rule of its function
(``RULES``, keyed by implementation as the rule registry is: ``impl_key``; the rows are in
``irad/rules/batch_rules.py``, registered when irad is imported), so that its outputs
carry the axis too; outputs that do not depend on the batched inputs are repeated along it at
the end, so every output has it.  The batch axis of a batched value is always its axis 0, so a
rule only says where the op's own axes went (``np.sum(x, axis=0)`` becomes ``axis=(1,)``).  A
batched Python scalar becomes a 1-d float64 (int64, complex128, bool) array, and from there on
follows numpy's rules: ``0.0 / 0.0`` is ``nan`` with a warning where Python would raise.

An op with no rule, or a case its rule does not cover (a batched index, a rule's pullback that
the passes did not inline), becomes a loop over the batch inside the program
(``irad.batching.loop_call``: the op applied row by row, the rows stacked).  Every graph
batches correctly; looped ops run at Python speed.

Before (``batch(g, [1], 5)``: ``%1`` gains an axis of 5)::

    graph f(%0: f64[3,4], %1: f64[4]) -> f64[3]:
      %2: f64[3] = operator.matmul(%0, %1)
      %3: f64[3] = numpy.tanh(%2)
      return %3

After::

    graph f(%0: f64[3,4], %4: f64[5,4]) -> f64[5,3]:
      %5: f64[4,3] = numpy.transpose(%0, None)
      %6: f64[5,3] = numpy.matmul(%4, %5)
      %7: f64[5,3] = numpy.tanh(%6)
      return %7
    # after batch: 2 ops over an axis of 5

(``W @ x`` for a batch of vectors ``x`` is ``x @ W.T``: one matrix-matrix product.)
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .effects import is_impure_prim
from .ir import ArrayT, Const, Graph, Loc, OpaqueT, Op, ScalarT, Type, Var, const, map_atoms
from .pytree import flatten
from .rules.registry import impl_key, qualname

#: the dtype a batched Python scalar gets (numpy's default for the kind)
SCALAR_DTYPES = {"float": "float64", "int": "int64", "bool": "bool", "complex": "complex128"}
#: the type of a batched value that is not a number (rule state): its ``Rows``
ROWS = OpaqueT("rows")


class Rows:
    """The rows of a batched value that is not a number (a rule's state, an object): ``rows[i]``.
    Not a list, so that a pytree flatten keeps it whole (it is one value)."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __getitem__(self, i: int) -> Any:
        return self.items[i]

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"Rows({len(self.items)})"


def batched_type(t: Type, size: int) -> Type:
    """The type of a value of type ``t`` with a leading batch axis of ``size``."""
    if isinstance(t, ArrayT):
        return ArrayT(t.dtype, (size,) + t.shape)
    if isinstance(t, ScalarT):
        return ArrayT(SCALAR_DTYPES[t.kind], (size,))
    return ROWS


class Fallback(Exception):
    """A batching rule does not cover this call: the op is looped over the batch instead."""


# ---- the program-side helpers the batched graph calls -------------------------------------------


def _row(a: Any, axes: Any, i: int) -> Any:
    """Row ``i`` of an argument whose batched parts ``axes`` marks (0: batched, None: not)."""
    if axes is None:
        return a
    if axes == 0 and type(axes) is int:
        return a[i]
    if isinstance(axes, dict):
        return {k: _row(a[k], axes[k], i) for k in a}
    return type(a)(_row(x, ax, i) for x, ax in zip(a, axes))


def _stack(rows: list[Any]) -> Any:
    """Rows of numbers or arrays as one array with the batch axis first; other values as ``Rows``."""
    if all(isinstance(r, (np.ndarray, np.generic, float, int, complex)) for r in rows):
        return np.stack([np.asarray(r) for r in rows])
    return Rows(list(rows))


def _result_leaves(r: Any, unpack: Any, n_outs: int) -> list[Any]:
    """The values an op's ``n_outs`` outs bind from its result ``r`` (``irad.ir.bind_outputs``'s cases)."""
    if unpack is True:
        return flatten(r)[0]
    if unpack == "fwd":  # a rule's (y, state)
        return (flatten(r[0])[0] if n_outs > 2 else [r[0]]) + [r[1]]
    out = []
    for path in unpack:
        x = r
        for k in path:
            x = x[k]
        out.append(x)
    return out


def loop_call(fn: Callable[..., Any], in_axes: tuple[Any, ...], size: int, n_outs: int, unpack: Any,
              *args: Any, **kwargs: Any) -> Any:
    """``fn`` applied to each of ``size`` rows of its batched arguments, the results stacked.

    ``in_axes``: one entry per positional then keyword argument, 0 for a batched one, None for one
    that every row shares (containers: a container of entries).  With ``n_outs != 1`` or
    ``unpack``, a tuple with one stacked value per output (as ``Op.unpack`` picks them per row),
    whose pytree leaves are those values (the op binds them with ``unpack=True``).
    """
    kw_axes = in_axes[len(args):]
    rows = [fn(*[_row(a, ax, i) for a, ax in zip(args, in_axes)],
               **{k: _row(v, ax, i) for (k, v), ax in zip(kwargs.items(), kw_axes)}) for i in range(size)]
    if n_outs == 0:
        return None
    if n_outs == 1 and not unpack:
        return _stack(rows)
    per_row = [_result_leaves(r, unpack, n_outs) for r in rows]
    return tuple(_stack([leaves[k] for leaves in per_row]) for k in range(n_outs))


class Looped:
    """An op's callable mapped over the batch by ``loop_call``: what the program calls
    (``loop_solve(t3, t8)``), named after the function it loops."""

    __slots__ = ("fn", "in_axes", "size", "n_outs", "unpack", "__name__")

    def __init__(self, fn: Callable[..., Any], in_axes: tuple[Any, ...], size: int, n_outs: int,
                 unpack: Any) -> None:
        self.fn, self.in_axes, self.size, self.n_outs, self.unpack = fn, in_axes, size, n_outs, unpack
        name = getattr(fn, "__name__", None)
        self.__name__ = "loop_" + (name if type(name) is str and name.isidentifier() else "call")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return loop_call(self.fn, self.in_axes, self.size, self.n_outs, self.unpack, *args, **kwargs)


def broadcast_batch(x: Any, size: int) -> Any:
    """``x`` repeated ``size`` times along a new leading axis: an output that does not depend on the
    batched inputs.  A fresh array (the caller may write to it); of other values, ``Rows``."""
    if isinstance(x, (np.ndarray, np.generic, float, int, complex)):
        return np.repeat(np.asarray(x)[None], size, axis=0)
    return Rows([x] * size)


# ---- the transform --------------------------------------------------------------------------------


Rule = Callable[["Batcher", Op, tuple[Any, ...], dict[str, Any]], Sequence[Any]]


class Batcher:
    """The batched graph being built: its ops, which of its Vars carry the batch axis, and the
    helpers rules emit ops with (stamped with the location of the op being rewritten)."""

    def __init__(self, size: int, next_id: int) -> None:
        self.size = size
        self.next_id = next_id
        self.ops: list[Op] = []
        self.batched: set[int] = set()
        self.loc: Loc | None = None

    # ---- what a value is ----

    def is_b(self, a: Any) -> bool:
        return isinstance(a, Var) and a.id in self.batched

    def any_b(self, a: Any) -> bool:
        """Does ``a`` (an atom or a container of atoms) hold a batched value?"""
        if isinstance(a, Var):
            return a.id in self.batched
        if isinstance(a, (tuple, list)):
            return any(self.any_b(x) for x in a)
        if isinstance(a, dict):
            return any(self.any_b(x) for x in a.values())
        return False

    def shape(self, a: Any) -> tuple[int, ...]:
        """The shape of one row of ``a`` (of ``a`` itself when it is not batched)."""
        t = a.type if isinstance(a, (Var, Const)) else None
        if isinstance(t, ArrayT):
            return t.shape[1:] if self.is_b(a) else t.shape
        if isinstance(t, ScalarT):
            return ()
        if isinstance(a, Const):
            try:
                return tuple(np.shape(a.value))
            except Exception:  # noqa: BLE001  (not array-like: no axes)
                return ()
        raise Fallback(f"{a} has no shape")

    def rank(self, a: Any) -> int:
        return len(self.shape(a))

    # ---- emitting ops ----

    def new(self, t: Type, hint: str = "", batched: bool = True) -> Var:
        v = Var(self.next_id, t, hint)
        self.next_id += 1
        if batched:
            self.batched.add(v.id)
        return v

    def emit(self, fn: Callable[..., Any], args: tuple[Any, ...], t: Type, kwargs: dict[str, Any] | None = None,
             batched: bool = True, prim: str | None = None) -> Var:
        """One new op ``fn(*args, **kwargs)`` of type ``t``; its output is batched unless told."""
        out = self.new(t, batched=batched)
        self.ops.append(Op(prim or qualname(fn), tuple(args), tuple((kwargs or {}).items()), (out,), fn, self.loc))
        return out

    def rewrite(self, op: Op, fn: Callable[..., Any] | None, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None,
                dtypes: Sequence[str | None] | None = None) -> list[Var]:
        """``op`` as ``fn(*args, **kwargs)`` whose outputs are ``op``'s with the batch axis (and
        ``dtypes``, where given)."""
        outs = []
        for k, o in enumerate(op.outs):
            t = batched_type(o.type, self.size)
            d = dtypes[k] if dtypes is not None else None
            if d is not None and isinstance(t, ArrayT) and d != t.dtype:
                t = ArrayT(d, t.shape)
            outs.append(self.new(t, o.hint))
        prim = op.prim if fn is op.fn or fn is None else qualname(fn)
        self.ops.append(Op(prim, tuple(args), tuple((kwargs or {}).items()), tuple(outs), fn, self.loc, op.unpack))
        return outs

    def align(self, x: Any, r: int) -> Any:
        """Batched ``x`` with unit axes inserted after the batch axis up to ``r`` axes per row, so
        that it broadcasts against unbatched operands of rank ``r`` as each row would."""
        k = self.rank(x)
        if not self.is_b(x) or k >= r:
            return x
        t = x.type
        return self.emit(operator.getitem, (x, const((slice(None),) + (None,) * (r - k))),
                         ArrayT(t.dtype, (self.size,) + (1,) * (r - k) + t.shape[1:]))

    def lift(self, x: Any) -> Any:
        """Unbatched ``x`` broadcast along a batch axis (a read-only view: for ops that copy it)."""
        if self.is_b(x):
            return x
        shape = self.shape(x)
        return self.emit(np.broadcast_to, (x, const((self.size,) + shape)),
                         ArrayT(dtype_of(x), (self.size,) + shape))

    def index(self, x: Any, idx: tuple[Any, ...], shape: tuple[int, ...]) -> Var:
        """``x[idx]`` (``idx`` static) of the given ``shape``, batched when ``x`` is."""
        return self.emit(operator.getitem, (x, const(idx)), ArrayT(dtype_of(x), shape), batched=self.is_b(x))


def dtype_of(a: Any) -> str:
    """The dtype of an atom as an array (a Python float's is float64)."""
    t = a.type
    if isinstance(t, ArrayT):
        return t.dtype
    if isinstance(t, ScalarT):
        return SCALAR_DTYPES[t.kind]
    if isinstance(a, Const):
        return str(np.asarray(a.value).dtype.name)
    raise Fallback(f"{a} is not a number")


# ---- the rule registry (the rows: irad/rules/batch_rules.py) ----

#: batching rules by implementation (``impl_key``); an op whose function has none is looped
RULES: dict[Any, Rule] = {}


def register(fns: Iterable[Any], rule: Rule) -> None:
    """One rule for a family of functions."""
    for f in fns:
        RULES[impl_key(f)] = rule


#: ops that call a rule's Python functions: always looped
_RULE_CALLS = frozenset({"rule_fwd", "pullback", "call_pullback"})


def rule_for(op: Op) -> Rule | None:
    """The batching rule of ``op``'s function, or None (it is looped)."""
    if op.prim in _RULE_CALLS:
        return None
    try:
        key = impl_key(op.fn)
        rule = RULES.get(key)
    except TypeError:  # an unhashable callable
        return None
    if rule is not None:
        return rule
    if isinstance(op.fn, np.ufunc) and op.fn.signature is None:
        return RULES.get(np.ufunc)
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], np.ufunc) and key[1] == "outer":
        return RULES.get((np.ufunc, "outer"))
    return None


def _in_axes(b: Batcher, a: Any) -> Any:
    """``loop_call``'s axis entry for an argument: 0 batched, None shared, containers alike."""
    if isinstance(a, (tuple, list)) and b.any_b(a):
        return type(a)(_in_axes(b, x) for x in a)
    if isinstance(a, dict) and b.any_b(a):
        return {k: _in_axes(b, x) for k, x in a.items()}
    return 0 if b.is_b(a) else None


def _loop(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``op`` applied row by row (``loop_call``).  An impure op keeps its own name, so that the
    passes keep it (``irad.effects``)."""
    kw = {k: v for k, v in kwargs.items() if not k.startswith("_")}
    in_axes = tuple(_in_axes(b, a) for a in args) + tuple(_in_axes(b, v) for v in kw.values())
    fn = Looped(op.fn, in_axes, b.size, len(op.outs), op.unpack)  # type: ignore[arg-type]
    rule = op.kw("_rule")
    label = f"{op.prim}[{rule.name}]" if rule is not None and hasattr(rule, "name") else op.prim
    outs = [b.new(batched_type(o.type, b.size), o.hint) for o in op.outs]
    unpack = len(outs) != 1 or bool(op.unpack)
    prim = op.prim if is_impure_prim(op.prim) else "irad.batching.loop_call"
    attrs = (("_of", const(label)), ("_in_axes", const(in_axes)))
    b.ops.append(Op(prim, args, attrs + tuple(kw.items()), tuple(outs), fn, op.loc, unpack))
    return outs


def batch(g: Graph, batched: Sequence[int], size: int) -> Graph:
    """``g`` mapped over a new leading axis of length ``size`` of its inputs at positions ``batched``
    (JAX's ``vmap`` with ``in_axes=0`` there and ``None`` elsewhere, ``out_axes=0``).

    Before: ``graph f(%0: f64[3], %1: f64[]) -> f64[3]: %2 = operator.mul(%0, %1)``, batched at ``[1]``
    with size 4.  After: ``graph f(%0: f64[3], %3: f64[4]) -> f64[4,3]``,
    ``%4: f64[4,1] = operator.getitem(%3, (:, None))``, ``%5: f64[4,3] = operator.mul(%0, %4)``.
    ``g`` itself is not changed; ops that read no batched value are kept as they are.
    """
    if type(size) is not int or size < 1:
        raise ValueError(f"batch: size must be a positive int, got {size!r}")
    positions = set()
    for k in batched:
        if not -len(g.inputs) <= k < len(g.inputs):
            raise ValueError(f"batch: input position {k} is out of range for {len(g.inputs)} inputs of {g.name}")
        positions.add(k % len(g.inputs))
    ids = [v.id for v in g.inputs] + [o.id for op in g.ops for o in op.outs]
    b = Batcher(size, 1 + max(ids, default=-1))
    env: dict[int, Var] = {}
    inputs = []
    for k, v in enumerate(g.inputs):
        if k in positions:
            env[v.id] = b.new(batched_type(v.type, size), v.hint)
            inputs.append(env[v.id])
        else:
            inputs.append(v)

    def sub(a: Any) -> Any:
        return env.get(a.id, a) if isinstance(a, Var) else a

    rewritten = looped = 0
    for op in g.ops:
        args = tuple(map_atoms(a, sub) for a in op.args)
        kwargs = {k: map_atoms(v, sub) for k, v in op.kwargs}
        if not any(b.any_b(a) for a in args) and not any(b.any_b(v) for v in kwargs.values()):
            b.ops.append(op)  # NOTE: it reads no batched value, so every Var it reads is g's own
            continue
        b.loc = op.loc
        start = len(b.ops)
        rule = rule_for(op)
        try:
            if rule is None:
                raise Fallback("no rule")
            outs = list(rule(b, op, args, kwargs))
        except Fallback:
            del b.ops[start:]
            outs = _loop(b, op, args, kwargs)
            looped += 1
        rewritten += 1
        assert len(outs) == len(op.outs), f"batching rule of {op.prim} gave {len(outs)} outputs for {len(op.outs)}"
        for o, n in zip(op.outs, outs):
            env[o.id] = n
    b.loc = None
    outputs = []
    for o in g.outputs:
        a = sub(o)
        if not b.is_b(a):
            a = b.emit(broadcast_batch, (a, const(size)), batched_type(o.type, size))
        outputs.append(a)
    note = f"after batch: {rewritten} op{'s' if rewritten != 1 else ''} over an axis of {size}" + \
        (f", {looped} by a loop" if looped else "")
    return Graph(g.name, tuple(inputs), tuple(b.ops), tuple(outputs), g.in_tree, g.out_tree, g.statics,
                 g.provenance + (note,))
