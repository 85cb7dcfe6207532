"""Calls the tracer treats specially: builtins that iterate, compare, take callbacks or only look
at structure, builtins that dispatch to user dunders, and numpy functions/methods that mutate.

Each handler is ``handler(tracer, args, kwargs)`` (array methods: ``handler(tracer, a, args,
kwargs)``); the tables at the bottom map callables (by identity) to handlers.
"""
from __future__ import annotations

import builtins
import functools
import itertools
import operator
import types
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import hooks
from .instrument import INSTRUMENTED, instrument_function
from .ir import const

if TYPE_CHECKING:
    from .trace import Tracer

Handler = Callable[..., Any]


# ---- callbacks handed to C code -------------------------------------------------------------

def callback(f: Any) -> Any:
    """A callable that C code (map, sorted(key=...), functools.reduce) will call: make its calls
    go through the tracer.  Python functions run instrumented; anything else (numpy functions,
    types, bound methods, callable instances) is wrapped so that the call is recorded."""
    if type(f) is types.FunctionType:
        return f if id(f.__code__) in INSTRUMENTED else instrument_function(f)
    if f is None or not callable(f):
        return f

    def traced_callback(*args: Any, **kwargs: Any) -> Any:
        t = hooks.STATE.tracer
        return f(*args, **kwargs) if t is None else t.call(f, args, kwargs)
    return traced_callback


def _callbacks_at(fn: Any, positions: tuple[int, ...]) -> Handler:
    def run(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        args = tuple(callback(a) if i in positions else t.iterable(a) for i, a in enumerate(args))
        if "key" in kwargs:
            kwargs = {**kwargs, "key": callback(kwargs["key"])}
        if "func" in kwargs:
            kwargs = {**kwargs, "func": callback(kwargs["func"])}
        return fn(*args, **kwargs)
    return run


# ---- iteration ------------------------------------------------------------------------------

def _iter_consumer(fn: Any) -> Handler:
    def run(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return fn(*(t.iterable(a) for a in args), **kwargs)
    return run


def _reversed(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    (seq,) = args
    if t.is_pyobject(seq):
        d = t.dunder(type(seq), "__reversed__")
        if isinstance(d, types.FunctionType):
            return t.call(d, (seq,), {})
        if isinstance(t.dunder(type(seq), "__getitem__"), types.FunctionType):
            n = t.call(builtins.len, (seq,), {})
            return iter([t.getitem(seq, i) for i in range(n - 1, -1, -1)])
    return reversed(t.iterable(seq))


def _any_all(fn: Any) -> Handler:
    """``any``/``all``: every truth test made through the tracer (guarded), short-circuiting."""
    stop_on = fn is builtins.any  # any() stops at the first true item, all() at the first false one

    def run(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        (it,) = args
        if t.is_tracked(it):  # any(mask) of a traced array: one recorded reduction, one guard
            return bool(t.record(fn, (it,), {}, fn(it)))
        for v in t.iterable(it):
            if bool(t.truth_test(v, 0)) is stop_on:
                return stop_on
        return not stop_on
    return run


def _sum(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    start = args[1] if len(args) > 1 else kwargs.get("start", 0)
    acc = start
    for x in t.iterable(args[0]):
        acc = t.binop(acc, x, 0)
    return acc


# ---- ordering: sorted, min, max -------------------------------------------------------------

class _Key:
    """Orders items the way Python would, but with every comparison made through the tracer."""

    __slots__ = ("t", "v", "what")

    def __init__(self, t: Tracer, v: Any, what: str) -> None:
        self.t, self.v, self.what = t, v, what

    def __lt__(self, other: "_Key") -> bool:
        return _less(self.t, self.v, other.v, self.what)


def _less(t: Tracer, a: Any, b: Any, what: str) -> bool:
    ta, tb = type(a), type(b)
    if ta is tb and ta in (tuple, list):  # lexicographic, like CPython: first unequal items decide
        for x, y in zip(a, b):
            if x is y:
                continue
            if not _equal(t, x, y, what):
                return _less(t, x, y, what)
        return len(a) < len(b)
    if t.is_tracked(a) or t.is_tracked(b):
        raise t.unsupported(f"{what} of traced values (their order depends on the data)",
                            "use np.sort / np.argsort, whose gradients irad knows")
    return bool(t.compare(a, b, 0))


def _equal(t: Tracer, a: Any, b: Any, what: str) -> bool:
    if t.is_tracked(a) or t.is_tracked(b):
        raise t.unsupported(f"{what} of traced values (their order depends on the data)",
                            "use np.sort / np.argsort, whose gradients irad knows")
    return bool(t.compare(a, b, 2))


def _plainly_tracked(t: Tracer, v: Any) -> bool:
    """A traced value, or a tuple/list holding one: comparing it natively would decide on data."""
    if t.is_tracked(v):
        return True
    return type(v) in (tuple, list) and any(_plainly_tracked(t, e) for e in v)


def _needs_tracer(t: Tracer, keys: list[Any]) -> bool:
    return t.deep_tracked(keys) or any(t.is_pyobject(k) for k in keys) or any(
        type(k) in (tuple, list) and any(t.is_pyobject(e) for e in k) for k in keys)


def _sorted(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    items = list(t.iterable(args[0]))
    key, reverse = kwargs.get("key"), kwargs.get("reverse", False)
    keys = [t.call(key, (x,), {}) for x in items] if key is not None else items
    if not _needs_tracer(t, keys):
        order = sorted(range(len(items)), key=keys.__getitem__, reverse=reverse)
    else:
        wrapped = [_Key(t, k, "sorted()") for k in keys]
        order = sorted(range(len(items)), key=wrapped.__getitem__, reverse=reverse)
    return [items[i] for i in order]


def _minmax(fn: Any) -> Handler:
    def run(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        items = list(t.iterable(args[0])) if len(args) == 1 else list(args)
        key = kwargs.get("key")
        if not items:
            return fn(items, **kwargs)
        if key is None and not _needs_tracer(t, items):
            return fn(items)
        if key is None and not any(t.is_pyobject(x) for x in items):
            if len(items) == 1:
                return items[0]
            return t.record(fn, tuple(items), {}, fn(*items))  # max(x, y): a primitive with a rule
        keys = [t.call(key, (x,), {}) for x in items] if key is not None else items
        what = f"{fn.__name__}(..., key=...)" if key is not None else f"{fn.__name__}()"
        best = 0
        for i in range(1, len(items)):
            a, b = (keys[i], keys[best]) if fn is builtins.min else (keys[best], keys[i])
            if _plainly_tracked(t, a) or _plainly_tracked(t, b):  # (user objects compare with traced dunders)
                raise t.unsupported(f"{what} over traced values (the winner depends on the data)",
                                    "use np.argmax/np.argmin on an array of the keys, or write the comparison "
                                    "with an if-statement")
            if _less(t, a, b, what):
                best = i
        return items[best]
    return run


# ---- structure-only builtins: results depend on types and shapes, never on values ------------

def _static(fn: Any) -> Handler:
    def run(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return fn(*args, **kwargs)
    return run


def _len(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    (obj,) = args
    if t.is_pyobject(obj):
        d = t.dunder(type(obj), "__len__")
        if isinstance(d, types.FunctionType):
            n = t.call(d, (obj,), {})
            if t.is_tracked(n):
                t.guard_value(n)
            return operator.index(n)
    if t.is_tracked(obj) and not isinstance(obj, np.ndarray):  # a string made from traced values
        return t.record(builtins.len, (obj,), {}, builtins.len(obj))
    return builtins.len(obj)


def _hasattr(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    try:
        t.getattr(args[0], args[1])
    except AttributeError:
        return False
    return True


def _getattr(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) == 3:
        try:
            return t.getattr(args[0], args[1])
        except AttributeError:
            return args[2]
    return t.getattr(*args)


def _setattr(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    t.setattr(args[0], args[1], args[2])


def _range(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    for a in args:
        if t.is_tracked(a):
            t.guard_value(a)
    return range(*args)


# ---- builtins that run a user dunder --------------------------------------------------------

#: builtin -> the dunders it tries on a user object, in order
DUNDER_BUILTINS: dict[Any, tuple[str, ...]] = {
    builtins.abs: ("__abs__",), builtins.float: ("__float__", "__index__"), builtins.int: ("__int__", "__index__"),
    builtins.complex: ("__complex__", "__float__", "__index__"), builtins.bool: ("__bool__", "__len__"),
    builtins.str: ("__str__", "__repr__"), builtins.repr: ("__repr__",), builtins.format: ("__format__",),
    builtins.round: ("__round__",), builtins.hash: ("__hash__",), builtins.next: ("__next__",),
    builtins.divmod: ("__divmod__",),
}


def run_dunder_builtin(t: Tracer, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``f(obj, ...)`` for a user object whose dunder is Python code: run that code traced.

    Returns ``NotImplemented`` when no Python dunder applies (the caller then calls ``f``)."""
    if not args or kwargs or not t.is_pyobject(args[0]) or (f is builtins.iter and len(args) != 1):
        return NotImplemented
    for name in DUNDER_BUILTINS[f]:
        d = t.dunder(type(args[0]), name)
        if d is None or d is getattr(object, name, None):
            continue
        if not isinstance(d, types.FunctionType):
            return NotImplemented
        if name == "__format__" and len(args) == 1:
            args = (args[0], "")
        r = t.call(d, args, {})
        if f is builtins.bool:
            r = t.truth_value(t.compare(r, 0, 3) if name == "__len__" else r)
        elif f is builtins.float and name == "__index__":
            r = t.call(builtins.float, (r,), {})
        return r
    return NotImplemented


# ---- mutating numpy functions and array methods ---------------------------------------------

def _copyto(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from . import ops as irad_ops
    dst, src = args[0], args[1]
    if kwargs or len(args) > 2:
        raise t.unsupported("np.copyto with casting=/where=", "use np.where and assignment")
    before = t.before_mutation(dst, "np.copyto")
    atoms: tuple[tuple[Any, ...], dict[str, Any]] = ((before, t.atom(src)), {})
    np.copyto(dst, src)
    t.rebind(dst, irad_ops.copyto, atoms)


def _fill_diagonal(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from . import ops as irad_ops
    a, v = args[0], args[1]
    before = t.before_mutation(a, "np.fill_diagonal")
    atoms: tuple[tuple[Any, ...], dict[str, Any]] = ((before, t.atom(v)), {k: t.atom(x) for k, x in kwargs.items()})
    np.fill_diagonal(a, v, **kwargs)
    t.rebind(a, irad_ops.fill_diagonal, atoms)


def ufunc_at(ufunc: Any) -> Handler:
    def run(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        from . import ops as irad_ops
        if ufunc is not np.add:
            raise t.unsupported(f"np.{ufunc.__name__}.at", "use np.add.at or an out-of-place form")
        a, idx, v = args
        before = t.before_mutation(a, "np.add.at")
        atoms: tuple[tuple[Any, ...], dict[str, Any]] = ((before, t.atom(idx), t.atom(v)), {})
        np.add.at(a, idx, v)
        t.rebind(a, irad_ops.add_at, atoms)
    return run


def _unsupported_mutator(name: str) -> Handler:
    def run(t: Tracer, *rest: Any) -> Any:
        raise t.unsupported(f"the in-place function {name} on traced values",
                            "write the update out of place (e.g. with np.where or a[i] = v)")
    return run


def _array_fill(t: Tracer, a: np.ndarray, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    from . import ops as irad_ops
    before = t.before_mutation(a, "a.fill")
    atoms: tuple[tuple[Any, ...], dict[str, Any]] = ((before, t.atom(args[0])), {})
    a.fill(args[0])
    t.rebind(a, irad_ops.fill, atoms)


def _array_sort(t: Tracer, a: np.ndarray, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    before = t.before_mutation(a, "a.sort")
    axis = args[0] if args else kwargs.get("axis", -1)
    atoms = ((before,), {"axis": const(axis)})
    a.sort(*args, **kwargs)
    t.rebind(a, np.sort, atoms)


def _array_unsupported(name: str) -> Handler:
    def run(t: Tracer, a: np.ndarray, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        raise t.unsupported(f"the in-place method a.{name}() on a traced array", "write the update out of place")
    return run


# ---- tables ---------------------------------------------------------------------------------

_ITER_CONSUMERS = (builtins.list, builtins.tuple, builtins.enumerate, builtins.zip, builtins.iter,
                   builtins.set, builtins.frozenset)
_STATIC = (builtins.isinstance, builtins.issubclass, builtins.callable, builtins.id, builtins.type,
           np.shape, np.ndim, np.size, np.iscomplexobj, np.isrealobj, np.isscalar, np.iterable, np.result_type,
           np.can_cast, np.min_scalar_type, np.promote_types)
_CALLBACK_TAKERS: tuple[tuple[Any, tuple[int, ...]], ...] = (
    (builtins.map, (0,)), (builtins.filter, (0,)), (functools.reduce, (0,)), (itertools.starmap, (0,)),
    (itertools.filterfalse, (0,)), (itertools.takewhile, (0,)), (itertools.dropwhile, (0,)),
    (itertools.accumulate, (1,)), (itertools.groupby, (1,)),
)


def _table(pairs: Any) -> dict[int, tuple[Any, Handler]]:
    return {id(f): (f, h) for f, h in pairs}


SPECIAL: dict[int, tuple[Any, Handler]] = _table([
    (builtins.sum, _sum), (builtins.min, _minmax(builtins.min)), (builtins.max, _minmax(builtins.max)),
    (builtins.sorted, _sorted), (builtins.range, _range), (builtins.getattr, _getattr),
    (builtins.hasattr, _hasattr), (builtins.setattr, _setattr), (builtins.len, _len),
    (builtins.reversed, _reversed), (builtins.any, _any_all(builtins.any)), (builtins.all, _any_all(builtins.all)),
    *[(f, _iter_consumer(f)) for f in _ITER_CONSUMERS],
    *[(f, _static(f)) for f in _STATIC],
    *[(f, _callbacks_at(f, pos)) for f, pos in _CALLBACK_TAKERS],
])

MUTATORS: dict[int, tuple[Any, Handler]] = _table([
    (np.copyto, _copyto), (np.fill_diagonal, _fill_diagonal),
    (np.put, _unsupported_mutator("np.put")), (np.place, _unsupported_mutator("np.place")),
    (np.putmask, _unsupported_mutator("np.putmask")),
    (np.put_along_axis, _unsupported_mutator("np.put_along_axis")),
])

ARRAY_MUTATORS: dict[str, Handler] = {
    "fill": _array_fill, "sort": _array_sort,
    **{n: _array_unsupported(n) for n in ("put", "itemset", "resize", "partition", "setfield", "byteswap",
                                          "setflags")},
}
