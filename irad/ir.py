"""irad's typed SSA IR: four small frozen types, a printer, an evaluator and ``verify``.

Grammar of the printed form (a contract: tests snapshot it)::

    graph  ::= 'graph' NAME '(' binder, ... ')' '->' type ':' (const | op)* 'return' arg, ... ('#' TEXT)*
    const  ::= '$' NAME ':' type '=' ORIGIN                   an array constant the graph reads
    op     ::= binder, ... '=' call  ['#' FILE:LINE]          SSA: every binder is new
             | call ['#' FILE:LINE]                           no outputs (guards, effects)
    call   ::= PRIM ['[' attr, ... ']'] '(' arg, ... ')'      PRIM is an importable qualified name
    attr   ::= NAME '=' arg                                   a keyword argument
             | arg                                            an attribute of the op (rule_fwd[numpy.tanh])
    binder ::= '%' INT ':' type
    arg    ::= atom | '(' arg, ... ')' | '[' arg, ... ']' | '{' KEY: arg, ... '}'
    atom   ::= '%' INT                                        a Var
             | LITERAL | START:STOP:STEP | '...'              a small Const
             | '$' NAME                                       an array Const
    type   ::= DTYPE '[' INT, ... ']'                         ndarray or numpy scalar: f64[3,4], f64[]
             | 'float' | 'int' | 'bool' | 'complex'           Python scalars
             | NAME                                           opaque values: state, object, ...

Positional ``args`` and keyword ``kwargs`` of an op may nest atoms inside tuples, lists and
dicts (``numpy.concatenate([%1, %2])``).  Everything static (axis, shapes, slices) is a Const.
"""
from __future__ import annotations

import contextlib
import gc
import operator
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Sequence, Union, cast

import numpy as np

from .errors import GuardError, VerifyError
from .pytree import TreeDef, flatten, unflatten

# ---- types ----------------------------------------------------------------------------------

_SHORT = {
    "float64": "f64", "float32": "f32", "float16": "f16", "longdouble": "f128",
    "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8",
    "uint64": "u64", "uint32": "u32", "uint16": "u16", "uint8": "u8",
    "bool": "bool", "complex128": "c128", "complex64": "c64",
}


@dataclass(frozen=True)
class ArrayT:
    """An ndarray (``scalar=False``) or a numpy scalar such as ``np.float64`` (``scalar=True``)."""

    dtype: str
    shape: tuple[int, ...]
    scalar: bool = False

    def __str__(self) -> str:
        return f"{_SHORT.get(self.dtype, self.dtype)}[{','.join(map(str, self.shape))}]"

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith(("float", "complex", "longdouble"))


@dataclass(frozen=True)
class ScalarT:
    """A Python scalar: ``float``, ``int``, ``bool`` or ``complex``."""

    kind: str

    def __str__(self) -> str:
        return self.kind

    @property
    def is_float(self) -> bool:
        return self.kind in ("float", "complex")


@dataclass(frozen=True)
class OpaqueT:
    """Any other value: rule state, Python objects, strings."""

    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return False


Type = Union[ArrayT, ScalarT, OpaqueT]
STATE = OpaqueT("state")
FLOAT = ScalarT("float")


_ARRAY_TYPES: dict[tuple[Any, ...], ArrayT] = {}


def typeof(v: Any) -> Type:
    """The IR type of a concrete value."""
    tv = type(v)
    if tv is float:
        return FLOAT
    if isinstance(v, (np.ndarray, np.generic)):
        key = (v.dtype, v.shape, tv is not np.ndarray)
        t = _ARRAY_TYPES.get(key)
        if t is None:
            t = _ARRAY_TYPES[key] = ArrayT(v.dtype.name, v.shape, key[2] and isinstance(v, np.generic))
        return t
    if tv is bool:
        return ScalarT("bool")
    if tv is int:
        return ScalarT("int")
    if tv is float:
        return ScalarT("float")
    if tv is complex:
        return ScalarT("complex")
    return OpaqueT(tv.__name__)


def is_differentiable(t: Type) -> bool:
    """Only floating (and complex) values carry cotangents."""
    return t.is_float


# ---- atoms, ops, graphs ---------------------------------------------------------------------


@dataclass(frozen=True, init=False)
class Var:
    """An SSA value.  ``hint`` is a readable name for printing and lowering (not part of equality)."""

    id: int
    type: Type
    hint: str = field(default="", compare=False)

    def __init__(self, id: int, type: Type, hint: str = "") -> None:
        # NOTE: the tracer makes one per recorded op; writing __dict__ directly is 3x faster
        # than the frozen dataclass __init__ (which goes through object.__setattr__ per field)
        d = self.__dict__
        d["id"], d["type"], d["hint"] = id, type, hint

    def __str__(self) -> str:
        return f"%{self.id}"


@dataclass(frozen=True, eq=False)
class Const:
    """A value baked into the graph.  ``origin`` says where it came from (``global W``, ...).

    ``live``: an array of the user's world (a global, a closure cell, an attribute) that the
    program reads at each call.  It may be mutated in place between calls, so passes never fold
    it, never cache anything by its contents, and never copy it (DESIGN §7).
    """

    value: Any
    type: Type
    origin: str = ""
    live: bool = False

    def _key(self) -> Any:
        return _const_key(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return _fmt_value(self.value)

    @property
    def is_array(self) -> bool:
        return isinstance(self.value, np.ndarray)


def _const_key(v: Any) -> Any:
    """Equality of constants: by type and value; arrays and other mutable values by identity.
    Slices and tuples are compared structurally (slices are unhashable before 3.12)."""
    tv = type(v)
    if tv is slice:
        return (slice, _const_key(v.start), _const_key(v.stop), _const_key(v.step))
    if tv is tuple:
        return (tuple, tuple(_const_key(x) for x in v))
    if isinstance(v, (np.ndarray, np.generic)) or not _hashable(v):
        return ("id", id(v))
    return (tv, v)


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def const(v: Any, origin: str = "") -> Const:
    return Const(v, typeof(v), origin)


Atom = Union[Var, Const]


@dataclass(frozen=True)
class Loc:
    """Where user code produced an op."""

    file: str
    line: int
    func: str = ""
    #: the library code traced through that made it (``shorten (textwrap.py:349)``), when not the user's
    inner: str = ""

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"

    @property
    def long(self) -> str:
        at = f"{self.func} ({self.file}:{self.line})" if self.func else f"{self.file}:{self.line}"
        return f"{at}, in {self.inner}" if self.inner else at


#: how an op's outs bind its result, a closed set of modes (see ``Op``): ``False``, ``True``,
#: ``"fwd"``, or a tuple of index paths
Unpack = Union[bool, Literal["fwd"], tuple[tuple[Any, ...], ...]]


@dataclass(frozen=True, init=False)
class Op:
    """``outs = prim[kwargs](*args)``.  ``fn`` is the callable that evaluates it; keyword
    entries whose name starts with ``_`` are attributes of the op (``_rule``), not arguments.

    ``unpack`` (an ``Unpack``) says how ``outs`` bind the result: ``False``: the result itself;
    ``True``: the leaves of the result pytree; ``"fwd"``: a rule's ``(y, state)``: the leaves of
    ``y``, then the state; a tuple of index paths (``paths``): ``result[p0][p1]...`` for each out
    (a pullback's cotangents, a loop's outs).
    """

    prim: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()
    outs: tuple[Var, ...] = ()
    fn: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    loc: Loc | None = field(default=None, compare=False)
    unpack: Unpack = False

    def __init__(self, prim: str, args: tuple[Any, ...], kwargs: tuple[tuple[str, Any], ...] = (),
                 outs: tuple[Var, ...] = (), fn: Callable[..., Any] | None = None, loc: Loc | None = None,
                 unpack: Unpack = False) -> None:
        d = self.__dict__  # NOTE: see Var.__init__
        d["prim"], d["args"], d["kwargs"], d["outs"] = prim, args, kwargs, outs
        d["fn"], d["loc"], d["unpack"] = fn, loc, unpack

    @property
    def out(self) -> Var:
        (o,) = self.outs
        return o

    @property
    def paths(self) -> tuple[tuple[Any, ...], ...]:
        """The index paths of an op whose outs bind ``result[p0][p1]...`` (a pullback's cotangents,
        a loop's outs): its ``unpack``, in that mode."""
        return cast("tuple[tuple[Any, ...], ...]", self.unpack)

    @property
    def inputs(self) -> list[Var]:
        """The Vars this op reads, in order of appearance (duplicates kept)."""
        found: list[Var] = []
        for a in self.args:
            if type(a) is Var:  # NOTE: the common case inline (this runs for every op in every pass)
                found.append(a)
            elif type(a) is not Const:
                _collect_vars(a, found)
        for _, a in self.kwargs:
            _collect_vars(a, found)
        return found

    def kw(self, name: str, default: Any = None) -> Any:
        for k, v in self.kwargs:
            if k == name:
                return v.value if isinstance(v, Const) else v
        return default


def _collect_vars(a: Any, found: list[Var]) -> None:
    if isinstance(a, Var):
        found.append(a)
    elif isinstance(a, (tuple, list)):
        for x in a:
            _collect_vars(x, found)
    elif isinstance(a, dict):
        for x in a.values():
            _collect_vars(x, found)


def map_atoms(a: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every atom (Var or Const) of a nested argument structure."""
    if isinstance(a, (Var, Const)):
        return fn(a)
    if type(a) is tuple:
        return tuple(map_atoms(x, fn) for x in a)
    if type(a) is list:
        return [map_atoms(x, fn) for x in a]
    if type(a) is dict:
        return {k: map_atoms(x, fn) for k, x in a.items()}
    return a


@dataclass(frozen=True)
class Graph:
    """A traced function: typed inputs, ops in order, output atoms, and the pytree boundary.

    ``in_tree`` describes ``(args, kwargs)``; its leaves are the dynamic inputs (``inputs``, in
    order) and the static ones (``statics``: ``(leaf index, value)``), which calls must repeat.
    """

    name: str
    inputs: tuple[Var, ...]
    ops: tuple[Op, ...]
    outputs: tuple[Any, ...]
    in_tree: TreeDef | None = None
    out_tree: TreeDef | None = None
    statics: tuple[tuple[int, Any], ...] = ()
    provenance: tuple[str, ...] = ()
    #: what code that a pass traced into the graph read from the world (an inlined rule body's
    #: globals and closures: ``irad.signature`` deps); a program compiled from the graph checks
    #: them on every call, as it checks its own trace's
    assumed: tuple[Any, ...] = field(default=(), compare=False)

    @property
    def guards(self) -> list[Op]:
        return [op for op in self.ops if op.prim in GUARD_PRIMS]

    def __str__(self) -> str:
        return format_graph(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, tree = flatten((args, kwargs))
        if self.in_tree is not None and tree != self.in_tree:
            raise TypeError(f"graph {self.name}: arguments have structure {tree}, traced with {self.in_tree}")
        statics = dict(self.statics)
        dyn = []
        for i, leaf in enumerate(leaves):
            if i in statics:
                if not _same_static(statics[i], leaf):
                    raise GuardError(
                        f"graph {self.name}: static argument {i} was {statics[i]!r} when traced, got {leaf!r}; "
                        "trace again with the new value")
            else:
                dyn.append(leaf)
        outs = evaluate(self, dyn)
        if self.out_tree is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        return unflatten(self.out_tree, outs)

    def replace(self, **changes: Any) -> "Graph":
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d.update(changes)
        return Graph(**d)

    # NOTE: pictures are their own stage (irad.dot reads the IR, runs Graphviz); these thin methods
    # exist because notebooks look for _repr_svg_/_repr_html_ on the class itself
    def to_dot(self, *, title: str | None = None) -> str:
        """Graphviz DOT source of this graph (``irad.dot.to_dot``)."""
        from . import dot
        return dot.to_dot(self, title=title)

    def _repr_svg_(self) -> str | None:
        from . import dot
        return dot.repr_svg(self)

    def _repr_html_(self) -> str | None:
        from . import dot
        return dot.repr_html(self)


def _same_static(a: Any, b: Any) -> bool:
    """Is ``b`` the static argument ``a`` the graph was traced with?  Objects whose ``==`` is not a
    plain bool (they hold arrays, say) must be the very same object."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        eq = a == b
        return eq if type(eq) is bool else False
    except Exception:
        return False


GUARD_PRIMS = frozenset({"irad.primitives.guard", "irad.primitives.guard_shape", "irad.primitives.guard_dtype"})


def evaluate(g: Graph, inputs: Sequence[Any]) -> list[Any]:
    """Run the ops of ``g`` on concrete input values; returns the flat outputs."""
    env = run_ops(g.ops, {v.id: x for v, x in zip(g.inputs, inputs)}, graph=g.name)
    return [map_atoms(a, lambda x: env[x.id] if isinstance(x, Var) else x.value) for a in g.outputs]


def run_ops(ops: Sequence[Op], env: dict[int, Any], *, skip: Callable[[Op], bool] | None = None,
            graph: str | None = None) -> dict[int, Any]:
    """Run ``ops`` in order on ``env`` (Var id -> value), binding their outs into it, and return it:
    the one evaluator (``evaluate``, a loop step's values, the residuals of a split).  ``skip(op)``:
    ops not to run.  ``graph``: a failing guard names the op's line and this graph."""

    def get(a: Any) -> Any:
        return env[a.id] if isinstance(a, Var) else a.value

    for op in ops:
        if skip is not None and skip(op):
            continue
        assert op.fn is not None, f"op {op.prim} has no callable"
        args = [map_atoms(a, get) for a in op.args]
        kwargs = {k: map_atoms(a, get) for k, a in op.kwargs if k[0] != "_"}  # "_name": an attribute only
        if graph is None:
            r = op.fn(*args, **kwargs)
        else:
            try:
                r = op.fn(*args, **kwargs)
            except GuardError as e:
                where = f" at {op.loc.long}" if op.loc else ""
                raise GuardError(f"{e}{where}; the traced branch no longer applies (graph {graph})") from None
        bind_outputs(op, r, env)
    return env


def bind_outputs(op: Op, r: Any, env: dict[int, Any]) -> None:
    """Bind the result ``r`` of ``op`` to its outs, following ``op.unpack``."""
    u = op.unpack
    if not u:
        if len(op.outs) == 1:
            env[op.outs[0].id] = r
        return
    if u is True:
        leaves = flatten(r)[0]
    elif u == "fwd":  # rule_fwd: (y, state) -> leaves of y, then the state
        leaves = (flatten(r[0])[0] if len(op.outs) > 2 else [r[0]]) + [r[1]]
    else:  # a tuple of index paths into the result
        leaves = []
        for path in op.paths:
            x = r
            for k in path:
                x = x[k]
            leaves.append(x)
    for o, x in zip(op.outs, leaves):
        env[o.id] = x


# ---- printing -------------------------------------------------------------------------------


def _fmt_slice(s: slice) -> str:
    parts = ["" if s.start is None else _fmt_value(s.start), "" if s.stop is None else _fmt_value(s.stop)]
    if s.step is not None:
        parts.append(_fmt_value(s.step))
    return ":".join(parts)


def _fmt_value(v: Any) -> str:
    if isinstance(v, slice):
        return _fmt_slice(v)
    if v is Ellipsis:
        return "..."
    if isinstance(v, np.ndarray):
        return f"<{typeof(v)}>"
    if isinstance(v, np.generic):
        return f"{type(v).__name__}({v.item()!r})"
    if type(v).__name__ == "Rule" and hasattr(v, "name"):  # rule_fwd[numpy.tanh]
        return str(v.name)
    if isinstance(v, np.dtype):
        return f"dtype({v.name})"
    if isinstance(v, type):
        return f"{v.__module__}.{v.__qualname__}" if v.__module__ != "builtins" else v.__name__
    if callable(v) and hasattr(v, "__name__"):
        return cast(str, getattr(v, "__qualname__", v.__name__))
    if isinstance(v, (int, float, complex, str, bytes, bool)) or v is None:
        return repr(v)
    r = repr(v)  # (an address in it would make the dump differ from run to run)
    return r if len(r) < 40 and "\n" not in r and " at 0x" not in r else f"<{type(v).__name__}>"


class _Namer:
    """Assigns ``$name`` to array constants in order of appearance."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.consts: list[tuple[str, Const]] = []

    def name(self, c: Const) -> str:
        key = id(c.value)
        if key not in self.names:
            base = c.origin.split()[-1] if c.origin else f"c{len(self.consts)}"
            base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in base)
            name, k = base, 1
            while name in self.names.values():
                name, k = f"{base}_{k}", k + 1
            self.names[key] = name
            self.consts.append((name, c))
        return "$" + self.names[key]


def _fmt_arg(a: Any, namer: _Namer) -> str:
    if isinstance(a, Var):
        return str(a)
    if isinstance(a, Const):
        if a.is_array:
            return namer.name(a)
        if isinstance(a.value, tuple):
            return "(" + ", ".join(_fmt_arg(Const(x, typeof(x)), namer) for x in a.value) + ("," if len(a.value) == 1 else "") + ")"
        return str(a)
    if type(a) is tuple:
        inner = ", ".join(_fmt_arg(x, namer) for x in a)
        return f"({inner},)" if len(a) == 1 else f"({inner})"
    if type(a) is list:
        return "[" + ", ".join(_fmt_arg(x, namer) for x in a) + "]"
    if type(a) is dict:
        return "{" + ", ".join(f"{k!r}: {_fmt_arg(x, namer)}" for k, x in a.items()) + "}"
    return _fmt_value(a)


def format_op(op: Op, namer: _Namer | None = None) -> str:
    """One op, without its location comment."""
    namer = namer or _Namer()
    lhs = ", ".join(f"{o}: {o.type}" for o in op.outs)
    attrs = ""
    if op.kwargs:
        attrs = "[" + ", ".join(_fmt_arg(v, namer) if k.startswith("_") else f"{k}={_fmt_arg(v, namer)}"
                                for k, v in op.kwargs) + "]"
    call = f"{op.prim}{attrs}(" + ", ".join(_fmt_arg(a, namer) for a in op.args) + ")"
    return f"{lhs} = {call}" if lhs else call


def _fmt_type_tuple(types: list[str]) -> str:
    return types[0] if len(types) == 1 else "(" + ", ".join(types) + ")"


def format_graph(g: Graph) -> str:
    namer = _Namer()
    body = []
    for op in g.ops:
        text = "  " + format_op(op, namer)
        if op.loc is not None:
            text = f"{text:<44} # {op.loc}"
        body.append(text)
        if op.prim == "irad.loop":  # the step, nested and indented under its loop
            body.extend("      " + ln for ln in format_graph(op.kw("_loop").body).splitlines())
    outs = [_fmt_arg(o, namer) for o in g.outputs]
    out_types = [str(o.type) for o in g.outputs]
    params = ", ".join(f"{v}: {v.type}" for v in g.inputs)
    lines = [f"graph {g.name}({params}) -> {_fmt_type_tuple(out_types)}:"]
    for name, c in namer.consts:
        lines.append(f"  ${name}: {c.type} = {c.origin or 'constant'}")
    lines.extend(body)
    lines.append("  return " + ", ".join(outs))
    for p in g.provenance:
        lines.append(f"# {p}")
    return "\n".join(lines)


# ---- verification ---------------------------------------------------------------------------


def verify(g: Graph) -> Graph:
    """Check single assignment, definition before use and types; return ``g`` unchanged.

    On failure raises ``VerifyError`` naming the problem and quoting the graph around it.
    """
    defined: dict[int, Var] = {}

    def fail(msg: str, index: int) -> None:
        lines = str(g).splitlines()
        n_consts = sum(1 for ln in lines[1:] if ln.startswith("  $"))
        at = 0 if index < 0 else 1 + n_consts + index  # header, consts, then one line per op
        lo, hi = max(0, at - 5), min(len(lines), at + 6)
        quoted = "\n".join(("> " if i == at else "  ") + lines[i] for i in range(lo, hi))
        raise VerifyError(f"{msg}\nwhile checking graph:\n{quoted}")

    for v in g.inputs:
        if not isinstance(v, Var):
            fail(f"input {v!r} is not a Var", -1)
        if v.id in defined:
            fail(f"{v} is defined twice (input)", -1)
        defined[v.id] = v
    for i, op in enumerate(g.ops):
        if not isinstance(op, Op):
            fail(f"op {i} is not an Op: {op!r}", i)
        for v in op.inputs:
            if v.id not in defined:
                fail(f"{v} used before definition", i)
            if defined[v.id].type != v.type:
                fail(f"{v} used as {v.type} but defined as {defined[v.id].type}", i)
        for o in op.outs:
            if not isinstance(o, Var):
                fail(f"output {o!r} of {op.prim} is not a Var", i)
            if o.id in defined:
                fail(f"{o} is assigned twice (single assignment violated)", i)
            defined[o.id] = o
        if op.fn is None:
            fail(f"op {op.prim} has no callable", i)
        if op.prim == "irad.loop":
            _verify_loop(op, fail, i)
        else:
            wrong = abstract_mismatch(op)
            if wrong is not None:
                fail(wrong, i)
    for o in g.outputs:
        if isinstance(o, Var):
            if o.id not in defined:
                fail(f"output {o} is never defined", len(g.ops))
            if defined[o.id].type != o.type:
                fail(f"output {o} returned as {o.type} but defined as {defined[o.id].type}", len(g.ops))
        elif not isinstance(o, Const):
            fail(f"output {o!r} is not an atom", len(g.ops))
    return g


#: numpy functions and methods whose output type ``verify`` recomputes from their inputs' types
#: (with the ufuncs and the ``operator`` functions): the array plumbing passes write most
_SHAPE_FNS: frozenset[Any] = frozenset({
    np.sum, np.mean, np.prod, np.max, np.min, np.dot, np.outer, np.tensordot, np.transpose, np.reshape,
    np.broadcast_to, np.expand_dims, np.squeeze, np.swapaxes, np.moveaxis, np.where, np.stack,
    np.concatenate, np.trace, np.diagonal, np.cumsum, np.clip, np.zeros_like, np.ones_like,
    np.ndarray.sum, np.ndarray.mean, np.ndarray.prod, np.ndarray.max, np.ndarray.min, np.ndarray.reshape,
    np.ndarray.transpose, np.ndarray.dot, np.ndarray.astype, np.ndarray.ravel, np.ravel,
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
    operator.pow, operator.matmul, operator.neg, operator.pos, operator.abs, operator.lt, operator.le,
    operator.eq, operator.ne, operator.gt, operator.ge, operator.and_, operator.or_, operator.xor,
    operator.invert})
#: stand-ins larger than this are not built: ``verify`` stays cheap on graphs of big arrays
_ABSTRACT_MAX_ELEMENTS = 1 << 16
_STAND_IN_SCALARS: dict[str, Any] = {"float": 1.0, "int": 1, "bool": True, "complex": 1 + 0j}


class _NotChecked(Exception):
    """An input ``abstract_mismatch`` cannot stand in for (an opaque value, a big array)."""


def _stand_in(a: Any) -> Any:
    """A value of atom ``a``'s type: ones of its dtype and shape, the constant itself for a Const."""
    if isinstance(a, Const):
        return a.value
    t = a.type
    if isinstance(t, ScalarT) and t.kind in _STAND_IN_SCALARS:
        return _STAND_IN_SCALARS[t.kind]
    if isinstance(t, ArrayT) and int(np.prod(t.shape)) <= _ABSTRACT_MAX_ELEMENTS:
        try:
            dt = np.dtype(t.dtype)
        except TypeError:
            raise _NotChecked from None
        return dt.type(1) if t.scalar else np.ones(t.shape, dt)
    raise _NotChecked


def abstract_mismatch(op: Op) -> str | None:
    """What is wrong with ``op``'s declared output type, recomputed by running its prim on stand-ins
    of its inputs' types (for the ufuncs, the ``operator`` functions and ``_SHAPE_FNS``); None when it
    agrees, or when the op is not one of these, has several outputs, or reads a value with no stand-in.

    The stand-ins are small arrays of ones: a prim whose output type depends on its inputs' values is
    not in the table.  An op that fails on its stand-ins is not judged (the values may be what fail)."""
    fn = op.fn
    if len(op.outs) != 1 or op.unpack or not (isinstance(fn, np.ufunc) or _hashable_in(fn, _SHAPE_FNS)):
        return None
    if any(k == "out" for k, _ in op.kwargs):
        return None
    try:
        args = [map_atoms(a, _stand_in) for a in op.args]
        kwargs = {k: map_atoms(a, _stand_in) for k, a in op.kwargs if not k.startswith("_")}
    except _NotChecked:
        return None
    try:
        with np.errstate(all="ignore"):
            got = typeof(cast(Callable[..., Any], fn)(*args, **kwargs))
    except Exception:  # NOTE: judged on its real values only: its stand-ins may be what fails
        return None
    o = op.outs[0]
    if got != o.type:
        return f"{op.prim} of these input types gives {got}, but its output {o} is declared {o.type}"
    return None


def _hashable_in(fn: Any, table: frozenset[Any]) -> bool:
    try:
        return fn in table
    except TypeError:  # an unhashable callable
        return False


def _verify_loop(op: Op, fail: Callable[[str, int], None], i: int) -> None:
    """A loop op's step is a graph of its own, closed over its inputs, and its outs have the step's types."""
    loop = op.kw("_loop")
    body = loop.body
    try:
        verify(body)
    except VerifyError as e:
        fail(f"the body of {loop!r} does not verify: {e}", i)
    init, inv, xs = op.args
    nc, ni = loop.n_carry, loop.n_inv
    if (len(init), len(inv), len(xs)) != (nc, ni, len(loop.xs_kinds)) or \
            len(body.inputs) != nc + ni + len(xs) or len(body.outputs) != nc + len(loop.ys_kinds):
        fail(f"{loop!r}: its arguments do not match its body's inputs and outputs", i)
    want = [o.type for o in body.outputs[:nc]]
    for kind, o in zip(loop.ys_kinds, body.outputs[nc:]):
        if kind == "stack":
            t = o.type
            want.append(ArrayT(getattr(t, "dtype", "float64" if t == FLOAT else "complex128"),
                               (loop.n,) + tuple(getattr(t, "shape", ()))))
        else:
            want.extend([o.type] * loop.n)
    if [o.type for o in op.outs] != want:
        fail(f"{loop!r}: its outs are typed {[str(o.type) for o in op.outs]}, its body makes {[str(t) for t in want]}", i)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a stage that makes many small objects which all
    stay alive (Vars, Ops, graphs): the collector would scan them again and again, which costs
    more than the stage's own work on a long graph.  Reference counting still frees everything
    that is not in a cycle.  Nested and concurrent uses leave it to the outermost to resume."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def iter_vars(g: Graph) -> Iterator[Var]:
    """Every Var the graph defines: inputs, then op outputs in order."""
    yield from g.inputs
    for op in g.ops:
        yield from op.outs
