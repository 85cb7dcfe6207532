"""Calls the tracer treats specially: builtins that iterate, compare, take callbacks or only look
at structure, builtins that dispatch to user dunders, and numpy functions/methods that mutate.

Each handler is ``handler(tracer, args, kwargs)`` (array methods: ``handler(tracer, a, args,
kwargs)``); the tables at the bottom map callables (by identity) to handlers.  The tracer is seen
through ``irad.tracer_api.TracerAPI``: the part of ``irad.trace.Tracer`` these handlers use.
"""
from __future__ import annotations

import bisect
import builtins
import collections
import functools
import heapq
import itertools
import operator
import random
import types
from typing import Any

import numpy as np

from . import hooks
from .instrument import INSTRUMENTED, instrument_function
from .ir import const
from .tracer_api import ArrayHandler, Handler, TracerAPI


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
        t = hooks.active_tracer()
        return f(*args, **kwargs) if t is None else t.call(f, args, kwargs)
    return traced_callback


def _traced_add(a: Any, b: Any) -> Any:
    """``a + b`` made through the tracer (the default step of ``itertools.accumulate``)."""
    t = hooks.active_tracer()
    return a + b if t is None else t.binop(a, b, 0)


def _explicit_default(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """C code that would compute on the items itself, natively (``accumulate``'s ``+``), is handed
    that computation as a callback, so that it runs through the tracer: otherwise its results are
    untracked numbers, constants of the trace (stale at the next call)."""
    if fn is itertools.accumulate and args and (len(args) < 2 or args[1] is None) and kwargs.get("func") is None:
        return (args[0], _traced_add) + args[2:], {k: v for k, v in kwargs.items() if k != "func"}
    if (fn is builtins.filter or fn is itertools.filterfalse) and args and args[0] is None:
        return (builtins.bool,) + args[1:], kwargs  # the truth test of each item, traced (and guarded)
    return args, kwargs


def predicate(f: Any) -> Any:
    """``f`` as a predicate C code truth-tests (``filter``, ``takewhile``): traced, and its result's
    truth taken by the tracer (a guard), so that the C code gets a plain bool, not a traced
    comparison whose truth it would take natively and bake into the program."""
    if not callable(f):
        return f

    def traced_predicate(*args: Any, **kwargs: Any) -> bool:
        t = hooks.active_tracer()
        if t is None:
            return bool(f(*args, **kwargs))
        return bool(t.truth_value(t.call(f, args, kwargs)))
    return traced_predicate


def _callbacks_at(fn: Any, positions: tuple[int, ...]) -> Handler:
    wrap = predicate if any(fn is p for p in _PREDICATE_TAKERS) else callback

    def run(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        args, kwargs = _explicit_default(fn, args, kwargs)
        args = tuple(wrap(a) if i in positions else t.iterable(a) for i, a in enumerate(args))
        if "key" in kwargs:
            kwargs = {**kwargs, "key": callback(kwargs["key"])}
        if "func" in kwargs:
            kwargs = {**kwargs, "func": callback(kwargs["func"])}
        return fn(*args, **kwargs)
    return run


# ---- iteration ------------------------------------------------------------------------------

def _iter_consumer(fn: Any) -> Handler:
    def run(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return fn(*(t.iterable(a) for a in args), **kwargs)
    return run


def _compress(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``itertools.compress(data, selectors)``: each selector's truth taken by the tracer (guarded),
    lazily (the selectors may be an endless iterator)."""
    data = args[0] if args else kwargs["data"]
    selectors = args[1] if len(args) > 1 else kwargs["selectors"]
    return itertools.compress(t.iterable(data), (bool(t.truth_value(s)) for s in t.iterable(selectors)))


def _hash_builder(fn: Any) -> Handler:
    """``set(xs)``, ``frozenset(xs)``: the tracer sees the items (rows of a traced array) and notes
    traced members (``Tracer.note_keys``), whose equalities decide what the set holds."""
    def run(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return t.call_prim(fn, tuple(a if isinstance(a, (set, frozenset, dict)) else t.iterable(a) for a in args),
                           kwargs)
    return run


def _reversed(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
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

    def run(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        (it,) = args
        if t.is_tracked(it):  # any(mask) of a traced array: one recorded reduction, one guard
            return bool(t.record(fn, (it,), {}, fn(it)))
        for v in t.iterable(it):
            if bool(t.truth_test(v, 0)) is stop_on:
                return stop_on
        return not stop_on
    return run


def _sum(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    start = args[1] if len(args) > 1 else kwargs.get("start", 0)
    acc = start
    for x in t.iterable(args[0]):
        acc = t.binop(acc, x, 0)
    return acc


# ---- ordering: sorted, min, max -------------------------------------------------------------

class _Key:
    """Orders items the way Python would, but with every comparison made through the tracer."""

    __slots__ = ("t", "v", "what")

    def __init__(self, t: TracerAPI, v: Any, what: str) -> None:
        self.t, self.v, self.what = t, v, what

    def __lt__(self, other: "_Key") -> bool:
        return _less(self.t, self.v, other.v, self.what)


def _less(t: TracerAPI, a: Any, b: Any, what: str) -> bool:
    """``a < b`` as Python decides it, through the tracer: on traced values a recorded comparison
    whose truth is guarded, so that a later call that orders them otherwise traces again."""
    return _decide(t, a, b, 0)


def _decide(t: TracerAPI, a: Any, b: Any, op: int) -> bool:
    """``a <op> b`` (``hooks.COMPARES``: 0 ``<``, 1 ``<=``, 4 ``>``, 5 ``>=``), its truth guarded when
    it depends on traced values; lists and tuples lexicographically (``Tracer.compare``)."""
    return bool(t.truth_value(t.compare(a, b, op)))


def _needs_tracer(t: TracerAPI, keys: list[Any]) -> bool:
    return t.deep_tracked(keys) or any(t.is_pyobject(k) for k in keys) or any(
        isinstance(k, (tuple, list)) and any(t.is_pyobject(e) for e in k) for k in keys)


def _is_number(x: Any) -> bool:
    return (isinstance(x, (float, int, np.floating, np.integer)) and not isinstance(x, (bool, np.bool_))) or \
        (type(x) is np.ndarray and x.ndim == 0 and x.dtype.kind in "fiu")


def _sorted(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any], what: str = "sorted()") -> Any:
    """``sorted(items, key=..., reverse=...)`` of traced values.  Numbers without a key are sorted by
    ``np.sort`` in the program (at each call, ties splitting the gradient as its rule does).
    Otherwise the order is Python's, found on the values, and guarded by the comparisons of the
    neighbours it puts side by side (stable: equal keys keep their order), ``n - 1`` of them: a
    later call whose order differs traces again.  Keys of user classes compare through their
    own (traced) dunders, each comparison a guard."""
    items = list(t.iterable(args[0]))
    key, reverse = kwargs.get("key"), bool(kwargs.get("reverse", False))
    keys = [t.call(key, (x,), {}) for x in items] if key is not None else items
    n = len(items)
    if not _needs_tracer(t, keys) or n < 2:
        order = sorted(range(n), key=keys.__getitem__, reverse=reverse)
        return [items[i] for i in order]
    if key is None and all(_is_number(x) for x in items):
        s = t.call(np.sort, (t.call(np.asarray, (items,), {}),), {})
        if reverse:
            s = t.call(np.flip, (s,), {})
        return [t.call(operator.getitem, (s, i), {}) for i in range(n)]
    if any(t.is_pyobject(k) or (isinstance(k, (tuple, list)) and any(t.is_pyobject(e) for e in k)) for k in keys):
        wrapped = [_Key(t, k, what) for k in keys]
        order = sorted(range(n), key=wrapped.__getitem__, reverse=reverse)
        return [items[i] for i in order]
    order = sorted(range(n), key=keys.__getitem__, reverse=reverse)  # on the values, natively
    for a, b in zip(order, order[1:]):  # a before b: a's key is at most b's (strictly, if b came first)
        if not _decide(t, keys[a], keys[b], (1 if a < b else 0) if not reverse else (5 if a < b else 4)):
            raise AssertionError(f"{what}: the order found and its guard disagree")  # (cannot happen)
    return [items[i] for i in order]


def _nselect(largest: bool) -> Handler:
    """``heapq.nsmallest(n, items, key=...)`` / ``nlargest``: ``sorted(items, key=key)[:n]`` (with
    ``reverse=True``), as the heapq docs define them; guarded as ``sorted`` is."""
    def run(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        n, items = args[0], args[1]
        key = args[2] if len(args) > 2 else kwargs.get("key")
        what = f"heapq.{'nlargest' if largest else 'nsmallest'}()"
        return _sorted(t, (items,), {"key": key, "reverse": largest}, what)[:n] if n > 0 else []
    return run


def _merge(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``heapq.merge(*sorted_iterables, key=..., reverse=...)``: lazily, the head that comes first
    (the earliest iterable on ties), each choice a guarded comparison."""
    key, reverse = kwargs.get("key"), bool(kwargs.get("reverse", False))
    its = [iter(t.iterable(a)) for a in args]

    def merged() -> Any:
        heads: list[tuple[Any, Any, Any]] = []  # (item, its key, its iterator), in iterable order
        for it in its:
            for x in it:
                heads.append((x, t.call(key, (x,), {}) if key is not None else x, it))
                break
        while heads:
            best = 0
            for j in range(1, len(heads)):
                a, b = heads[j][1], heads[best][1]
                if _decide(t, a, b, 4 if reverse else 0):
                    best = j
            x, _, it = heads[best]
            yield x
            for y in it:
                heads[best] = (y, t.call(key, (y,), {}) if key is not None else y, it)
                break
            else:
                del heads[best]
    return merged()


def _insort(bisect_fn: Any) -> Handler:
    """``bisect.insort_left/right(a, x, lo, hi, key=...)``: the position from ``bisect`` (a recorded
    call whose int result is guarded), then ``a.insert``."""
    def run(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        a, x, *rest = args
        key = kwargs.get("key")
        kx = t.call(key, (x,), {}) if key is not None else x
        i = t.call(bisect_fn, (a, kx, *rest), {k: v for k, v in kwargs.items() if k in ("lo", "hi", "key")})
        a.insert(i, x)
    return run


#: methods of a list whose result C code decides by comparing the items
LIST_DECISIONS = frozenset({"sort", "index", "remove", "count"})


def list_decision(t: TracerAPI, items: list[Any], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``items.sort()``, ``.index(v)``, ``.remove(v)``, ``.count(v)`` of a list holding traced
    values: CPython compares the items in C, natively, which would bake the trace's order (or
    match) into the program.  Here every comparison goes through the tracer: equalities guard,
    an order is what ``sorted`` makes of it."""
    if name == "sort":
        if args:
            raise TypeError("sort() takes no positional arguments")
        items[:] = _sorted(t, (list(items),), kwargs, "list.sort()")
        return None
    v = args[0]

    def equal(x: Any) -> bool:  # CPython's PyObject_RichCompare(x, v, Py_EQ), identity first
        return x is v or bool(t.truth_value(t.compare(x, v, 2)))
    if name == "count":
        return sum(1 for x in list(items) if equal(x))
    start, stop = (args[1] if len(args) > 1 else 0), (args[2] if len(args) > 2 else len(items))
    for i in range(*slice(start, stop).indices(len(items))):
        if equal(items[i]):
            if name == "remove":
                del items[i]
                return None
            return i
    raise ValueError(f"list.{name}(x): x not in list")


#: heapq's C heap operations: over a list holding traced values, ``heap_call`` runs them
HEAP_ORDERING = tuple(f for f in (getattr(heapq, n, None) for n in ("heapify", "heappush", "heappop",
                                                                   "heapreplace", "heappushpop")) if f is not None)


def heap_call(t: TracerAPI, name: str, args: tuple[Any, ...]) -> Any:
    """``heapq.heapify/heappush/heappop/heapreplace/heappushpop`` over a list holding traced values:
    the algorithm of CPython's heapq (the C module's is the same, so the heap is the same list),
    with each ``<`` it makes through the tracer, a guard.  Items move as references."""
    heap = args[0]

    def less(a: Any, b: Any) -> bool:
        return _decide(t, a, b, 0)

    def sift_down(start: int, pos: int) -> None:  # move heap[pos] up towards start while it is smaller
        item = heap[pos]
        while pos > start:
            parent = (pos - 1) >> 1
            if not less(item, heap[parent]):
                break
            heap[pos] = heap[parent]
            pos = parent
        heap[pos] = item

    def sift_up(pos: int) -> None:  # bubble the smaller child up to a leaf, then place heap[pos] there
        end, start, item = len(heap), pos, heap[pos]
        child = 2 * pos + 1
        while child < end:
            if child + 1 < end and not less(heap[child], heap[child + 1]):
                child += 1
            heap[pos] = heap[child]
            pos, child = child, 2 * child + 1
        heap[pos] = item
        sift_down(start, pos)

    if name == "heapify":
        for i in reversed(range(len(heap) // 2)):
            sift_up(i)
        return None
    if name == "heappush":
        heap.append(args[1])
        sift_down(0, len(heap) - 1)
        return None
    if name == "heappop":
        last = heap.pop()  # (IndexError when empty, as heapq's)
        if not heap:
            return last
        top, heap[0] = heap[0], last
        sift_up(0)
        return top
    if name == "heapreplace":
        top, heap[0] = heap[0], args[1]
        sift_up(0)
        return top
    item = args[1]  # heappushpop
    if heap and less(heap[0], item):
        item, heap[0] = heap[0], item
        sift_up(0)
    return item


def _minmax(fn: Any) -> Handler:
    def run(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        items = list(t.iterable(args[0])) if len(args) == 1 else list(args)
        key = kwargs.get("key")
        if not items:
            return fn(items, **kwargs)
        if key is None and not _needs_tracer(t, items):
            return fn(items)
        if key is None and all(_is_number(x) or isinstance(x, np.ndarray) for x in items):
            if len(items) == 1:
                return items[0]
            return t.record(fn, tuple(items), {}, fn(*items))  # max(x, y): a primitive with a rule
        keys = [t.call(key, (x,), {}) for x in items] if key is not None else items
        what = f"{fn.__name__}(..., key=...)" if key is not None else f"{fn.__name__}()"
        best = 0  # the first winner, as Python's: each challenger beats it strictly (a guarded comparison)
        for i in range(1, len(items)):
            a, b = (keys[i], keys[best]) if fn is builtins.min else (keys[best], keys[i])
            if _less(t, a, b, what):
                best = i
        return items[best]
    return run


# ---- structure-only builtins: results depend on types and shapes, never on values ------------

def _static(fn: Any) -> Handler:
    def run(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return fn(*args, **kwargs)
    return run


def _id(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``id(v)`` of a traced value in the user's code is refused: each call of a compiled program
    computes new objects, so the number the trace saw would be baked in.  Library code traced
    through (copy.deepcopy's memo, pprint) only compares identities within the call: allowed."""
    if len(args) == 1 and not kwargs and t.is_tracked(args[0]) and not t.is_live(args[0]) and t.user_code_here():
        raise t.unsupported(f"id() of a traced {type(args[0]).__name__}",
                            "a compiled program computes new objects at each call, so the identity the trace saw "
                            "would be baked in; compare objects with `is`, or key what you cache by a name or an "
                            "index instead")
    return builtins.id(*args, **kwargs)


def _len(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    (obj,) = args
    if t.world and id(obj) in t.world:  # `len(HOOKS)`: the items of a container of the world
        t.read_world(obj)
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


def _hasattr(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    try:
        t.getattr(args[0], args[1])
    except AttributeError:
        return False
    return True


def _getattr(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) == 3:
        try:
            return t.getattr(args[0], args[1])
        except AttributeError:
            return args[2]
    return t.getattr(*args)


def _setattr(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    t.setattr(args[0], args[1], args[2])


def _range(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
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


def run_dunder_builtin(t: TracerAPI, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
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

def _copyto(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from . import primitives as irad_ops
    dst, src = args[0], args[1]
    opts = dict(zip(("casting", "where"), args[2:]))
    opts.update(kwargs)
    if opts.keys() - {"casting", "where"}:
        raise t.unsupported(f"np.copyto({', '.join(sorted(opts.keys() - {'casting', 'where'}))}=...)",
                            "use np.where and assignment")
    where = opts.get("where", True)
    np.copyto(np.empty_like(dst), src, **opts)  # numpy's own checks (casting, shapes), without writing dst
    before = t.aliasing.before_mutation(dst, "np.copyto")
    extra = () if where is True else (t.atom(where),)
    atoms: tuple[tuple[Any, ...], dict[str, Any]] = ((before, t.atom(src)) + extra, {})
    np.copyto(dst, src, **opts)
    t.aliasing.rebind(dst, irad_ops.copyto, atoms)


def _fill_diagonal(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from . import primitives as irad_ops
    a, v = args[0], args[1]
    before = t.aliasing.before_mutation(a, "np.fill_diagonal")
    atoms: tuple[tuple[Any, ...], dict[str, Any]] = ((before, t.atom(v)), {k: t.atom(x) for k, x in kwargs.items()})
    np.fill_diagonal(a, v, **kwargs)
    t.aliasing.rebind(a, irad_ops.fill_diagonal, atoms)


def ufunc_at(ufunc: Any) -> Handler:
    def run(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        from . import primitives as irad_ops
        if ufunc is not np.add:
            raise t.unsupported(f"np.{ufunc.__name__}.at", "use np.add.at or an out-of-place form")
        a, idx, v = args
        before = t.aliasing.before_mutation(a, "np.add.at")
        atoms: tuple[tuple[Any, ...], dict[str, Any]] = ((before, t.atom(idx), t.atom(v)), {})
        np.add.at(a, idx, v)
        t.aliasing.rebind(a, irad_ops.add_at, atoms)
    return run


def _put(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``np.put(a, ind, v, mode)`` is ``a.flat[ind] = v`` with ``v`` repeated as needed: an
    assignment at the unravelled indices (the last of repeated indices wins, as in numpy)."""
    a, ind, v = args[:3]
    mode = args[3] if len(args) > 3 else kwargs.get("mode", "raise")
    if t.deep_tracked(ind) or not isinstance(a, np.ndarray):
        raise t.unsupported("np.put with traced indices", "write a[np.unravel_index(ind, a.shape)] = v")
    np.put(np.empty_like(a), ind, np.zeros(np.shape(v)), mode)  # numpy's own checks, without writing a
    flat = np.asarray(ind, dtype=np.intp).ravel()
    if mode == "wrap":
        flat = flat % a.size
    elif mode == "clip":
        flat = np.clip(flat, 0, a.size - 1)
    else:
        flat = np.where(flat < 0, flat + a.size, flat)
    vals = t.call(np.resize, (v, (flat.size,)), {}) if np.size(v) != flat.size else t.call(np.ravel, (v,), {})
    t.setitem(a, np.unravel_index(flat, a.shape), vals)


def _place(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``np.place(a, mask, vals)``: the True positions get ``vals`` repeated, in order."""
    a, mask, vals = (list(args) + [kwargs.get(k) for k in ("arr", "mask", "vals")[len(args):]])[:3]
    if not isinstance(a, np.ndarray):
        raise t.unsupported("np.place on a non-array", "use a[mask] = v")
    m = t.call(np.asarray, (mask,), {})
    if np.shape(m) != a.shape:
        m = t.call(np.reshape, (m, a.shape), {})
    n = int(t.call(np.count_nonzero, (m,), {}))
    if n == 0:
        return None
    t.setitem(a, t.call(np.ndarray.astype, (m, bool), {}), t.call(np.resize, (vals, (n,)), {}))
    return None


def _putmask(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``np.putmask(a, mask, values)``: where mask holds, ``a`` takes ``values`` repeated over all
    of ``a``'s positions (so element k gets ``values[k % len(values)]``)."""
    a, mask, values = args[:3]
    if not isinstance(a, np.ndarray):
        raise t.unsupported("np.putmask on a non-array", "use np.where")
    m = t.call(np.ndarray.astype, (t.call(np.broadcast_to, (mask, a.shape), {}), bool), {})
    full = t.call(np.resize, (values, a.shape), {})
    t.setitem(a, m, t.getitem(full, m))
    return None


def _put_along_axis(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``np.put_along_axis(a, ind, values, axis)``: an assignment at the index ``take_along_axis`` reads."""
    names = ("arr", "indices", "values", "axis")
    o = dict(zip(names, args))
    o.update(kwargs)
    a, ind, axis = o["arr"], o["indices"], o["axis"]
    if not isinstance(a, np.ndarray) or o.keys() - set(names):
        raise t.unsupported("np.put_along_axis with options", "write a[index] = v")
    if not isinstance(ind, np.ndarray):
        ind = np.asarray(ind)
    if axis is None:
        index: Any = t.call(np.unravel_index, (t.call(np.ravel, (ind,), {}), a.shape), {})
        vals = t.call(np.ravel, (t.call(np.broadcast_to, (o["values"], ind.shape), {}),), {})
    else:
        axis %= a.ndim
        index = tuple(ind if d == axis else np.arange(n).reshape([-1 if k == d else 1 for k in range(a.ndim)])
                      for d, n in enumerate(a.shape))
        vals = o["values"]
    t.setitem(a, index, vals)
    return None


def _array_fill(t: TracerAPI, a: np.ndarray, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    from . import primitives as irad_ops
    before = t.aliasing.before_mutation(a, "a.fill")
    atoms: tuple[tuple[Any, ...], dict[str, Any]] = ((before, t.atom(args[0])), {})
    a.fill(args[0])
    t.aliasing.rebind(a, irad_ops.fill, atoms)


def _array_sort(t: TracerAPI, a: np.ndarray, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    before = t.aliasing.before_mutation(a, "a.sort")
    axis = args[0] if args else kwargs.get("axis", -1)
    atoms = ((before,), {"axis": const(axis)})
    a.sort(*args, **kwargs)
    t.aliasing.rebind(a, np.sort, atoms)


def _array_partition(t: TracerAPI, a: np.ndarray, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """``a.partition(kth)`` in place: ``a`` now stands for ``np.partition(a, kth)`` (its rule)."""
    before = t.aliasing.before_mutation(a, "a.partition")
    o = dict(zip(("kth", "axis", "kind", "order"), args), **kwargs)
    atoms = ((before, t.atom(o.pop("kth"))), {k: t.atom(v) for k, v in o.items()})
    a.partition(*args, **kwargs)
    t.aliasing.rebind(a, np.partition, atoms)


def _array_unsupported(name: str) -> ArrayHandler:
    def run(t: TracerAPI, a: np.ndarray, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        raise t.unsupported(f"the in-place method a.{name}() on a traced array", "write the update out of place")
    return run


# ---- random generators reordering a traced array --------------------------------------------

RNG_REORDERS = frozenset({"shuffle", "permutation"})


def rng_reorder(t: TracerAPI, rng: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``rng.shuffle(x)`` / ``rng.permutation(x)`` of a traced array or a list holding traced values
    (numpy's ``Generator`` and ``RandomState``, ``np.random.shuffle``, ``random.shuffle``): the
    order is an op of its own, ``irad.primitives.draw_order(rng, n)`` (impure: a program draws anew at
    each call, exactly as the user's call draws), and the result ``np.take`` of it, whose gradient
    undoes that call's order.  NotImplemented where the library's own call applies (an int for
    ``permutation``, a list of other objects, an axis numpy would refuse)."""
    from . import primitives as irad_ops
    x, extra, opts = (args[0] if args else None), args[1:], dict(kwargs)
    if isinstance(rng, np.random.Generator):
        axis = extra[0] if extra else opts.pop("axis", 0)
        extra = extra[1:]
    else:
        axis = 0
    sequence = type(x) is list and name == "shuffle"
    if sequence:
        if not x or axis != 0:
            return NotImplemented
        if not all(isinstance(v, (np.ndarray, np.generic, float, int)) for v in x) or len({np.shape(v) for v in x}) != 1:
            if not t.deep_tracked(x):
                return NotImplemented
            from .errors import MutationError
            raise MutationError("a shuffle of a list of traced values with other objects (or arrays of several "
                                "shapes) in it: irad can reorder numbers and arrays of one shape only",
                                t.loc().long if t.loc() else "",  # type: ignore[union-attr]  # (both calls: one Loc)
                                "shuffle the positions instead: order = rng.permutation(len(items)); "
                                "items = [items[i] for i in order]")
    elif type(x) is not np.ndarray or x.ndim == 0 or not isinstance(axis, (int, np.integer)) or \
            not -x.ndim <= axis < x.ndim or (isinstance(rng, random.Random) and x.ndim > 1):
        return NotImplemented  # (random.shuffle swaps rows of a 2-d array through views: not a permutation)
    if extra or opts:
        return NotImplemented
    axis = int(axis) % np.ndim(x) if not sequence else 0
    n = len(x) if sequence else x.shape[axis]
    order = irad_ops.draw_order(rng, n, sequence)
    ov = t.new_var(order, "order")
    t.emit(irad_ops.draw_order, (t.atom(rng), const(n), const(sequence)), {}, (ov,))
    t.track(order, ov)
    if sequence:  # the items as one array, reordered, and back
        taken = t.call(np.take, (t.call(np.stack, (list(x),), {}), order), {"axis": 0})
        x[:] = [t.call(operator.getitem, (taken, i), {}) for i in range(n)]
        return None
    if name == "permutation":
        return t.record(np.take, (x, order), {"axis": axis}, np.take(x, order, axis=axis))
    before = t.aliasing.before_mutation(x, "rng.shuffle")
    x[...] = np.take(x, order, axis=axis)
    t.aliasing.rebind(x, np.take, ((before, ov), {"axis": const(axis)}))
    return None


# ---- numpy's internal _array_converter ------------------------------------------------------

try:
    from numpy._core._multiarray_umath import _array_converter as _ArrayConverter
except ImportError:  # older numpy: the functions that use it do not exist there either
    _ArrayConverter = None


class _TracedArrayConverter:
    """Stands in for numpy's C helper ``_array_converter(*arrays)`` (used by np.ediff1d, np.insert,
    np.apply_along_axis, ...) when traced values go in: it hands back the traced arrays themselves,
    and ``wrap`` is plain Python, so the tracer sees everything done to them."""

    def __init__(self, conv: Any, originals: tuple[Any, ...], arrays: tuple[Any, ...]) -> None:
        self._conv, self._originals, self._arrays = conv, originals, arrays
        self.scalar_input = conv.scalar_input

    def __len__(self) -> int:
        return len(self._arrays)

    def __getitem__(self, i: Any) -> Any:
        return self._arrays[i]

    def as_arrays(self, subok: bool = True, pyscalars: str = "convert_if_no_array") -> tuple[Any, ...]:
        native = self._conv.as_arrays(subok=subok, pyscalars=pyscalars)
        return tuple(orig if n is orig or not isinstance(n, np.ndarray) else arr
                     for n, orig, arr in zip(native, self._originals, self._arrays))

    def result_type(self, extra_dtype: Any = None, ensure_inexact: bool = False) -> Any:
        return self._conv.result_type(extra_dtype=extra_dtype, ensure_inexact=ensure_inexact)

    def wrap(self, arr: Any, /, to_scalar: Any = None) -> Any:
        if to_scalar is None:
            to_scalar = all(self.scalar_input)
        if to_scalar and isinstance(arr, np.ndarray) and arr.ndim == 0:
            return arr[()]
        return arr


def _array_converter(t: TracerAPI, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    conv = _ArrayConverter(*args, **kwargs)
    if not t.deep_tracked(args):
        return conv
    arrays = tuple(t.call(np.asanyarray, (a,), {}) if t.deep_tracked(a) and type(a) is not np.ndarray
                   else conv[i] for i, a in enumerate(args))
    for a, arr in zip(args, arrays):
        if t.deep_tracked(a) and type(arr) is not np.ndarray:
            raise t.unsupported(f"numpy's _array_converter of a {type(arr).__name__}", "pass plain arrays")
    return _TracedArrayConverter(conv, args, arrays)


# ---- tables ---------------------------------------------------------------------------------

_ITER_CONSUMERS = (builtins.list, builtins.tuple, builtins.enumerate, builtins.zip, builtins.iter,
                   builtins.set, builtins.frozenset,
                   # itertools that only rearrange the items: they see the tracer's items (rows of a traced array)
                   itertools.combinations, itertools.combinations_with_replacement, itertools.permutations,
                   itertools.product, itertools.chain, itertools.islice, itertools.zip_longest,
                   itertools.cycle, collections.deque, itertools.tee, *([itertools.pairwise]
                                                                        if hasattr(itertools, "pairwise") else []))
_STATIC = (builtins.isinstance, builtins.issubclass, builtins.callable, builtins.id, builtins.type,
           np.shape, np.ndim, np.size, np.iscomplexobj, np.isrealobj, np.isscalar, np.iterable, np.result_type,
           np.can_cast, np.min_scalar_type, np.promote_types)
#: of those, the ones that take the truth of what their callback returns
_PREDICATE_TAKERS = (builtins.filter, itertools.filterfalse, itertools.takewhile, itertools.dropwhile)
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
    *([(_ArrayConverter, _array_converter)] if _ArrayConverter is not None else []),
    (builtins.id, _id), (itertools.compress, _compress),
    (heapq.nsmallest, _nselect(False)), (heapq.nlargest, _nselect(True)), (heapq.merge, _merge),
    (bisect.insort_left, _insort(bisect.bisect_left)), (bisect.insort_right, _insort(bisect.bisect_right)),
    (builtins.set, _hash_builder(builtins.set)), (builtins.frozenset, _hash_builder(builtins.frozenset)),
])

MUTATORS: dict[int, tuple[Any, Handler]] = _table([
    (np.copyto, _copyto), (np.fill_diagonal, _fill_diagonal),
    (np.put, _put), (np.place, _place), (np.putmask, _putmask),
    (np.put_along_axis, _put_along_axis),
])

ARRAY_MUTATORS: dict[str, ArrayHandler] = {
    "fill": _array_fill, "sort": _array_sort, "partition": _array_partition,
    **{n: _array_unsupported(n) for n in ("put", "itemset", "resize", "setfield", "byteswap", "setflags")},
}


# ---- ufunc methods without a rule ------------------------------------------------------------
# ``np.maximum.accumulate``, ``np.logaddexp.reduce``, ``np.add.reduceat``, ``np.maximum.outer``...:
# written out with the ufunc itself (which has a rule), so the tracer records ops it can
# differentiate.  The tracer runs these functions instrumented, like user code.

_NOVALUE = getattr(np, "_NoValue", None)


def ufunc_outer(uf: Any, a: Any, b: Any, **kw: Any) -> Any:
    a, b = np.asanyarray(a), np.asanyarray(b)
    return uf(np.reshape(a, np.shape(a) + (1,) * np.ndim(b)), b, **kw)


def _fold(uf: Any, x: Any, start: Any) -> Any:
    """``uf(...uf(uf(start, x[0]), x[1])..., x[-1])`` over the first axis (``start`` None: x[0] first)."""
    acc = start
    for i in range(np.shape(x)[0]):
        acc = x[i] if acc is None else uf(acc, x[i])
    return acc


def ufunc_accumulate(uf: Any, x: Any, axis: int = 0, dtype: Any = None) -> Any:
    x = np.moveaxis(np.asanyarray(x, dtype=dtype), axis, 0)
    if np.shape(x)[0] == 0:
        return np.moveaxis(x.copy(), 0, axis)
    acc = x[0]
    outs = [acc]
    for i in range(1, np.shape(x)[0]):
        acc = uf(acc, x[i])
        outs.append(acc)
    return np.moveaxis(np.stack(outs), 0, axis)


def ufunc_reduce(uf: Any, x: Any, axis: Any = 0, dtype: Any = None, keepdims: bool = False,
                 initial: Any = _NOVALUE, where: Any = True) -> Any:
    if where is not True:
        return uf.reduce(x, axis=axis, dtype=dtype, keepdims=keepdims, where=where,
                         **({} if initial is _NOVALUE else {"initial": initial}))
    x = np.asanyarray(x, dtype=dtype)
    nd = np.ndim(x)
    axes = tuple(range(nd)) if axis is None else tuple(sorted(a % nd for a in (axis if isinstance(axis, tuple)
                                                                             else (axis,))))
    kept = [np.shape(x)[i] for i in range(nd) if i not in axes]
    flat = np.reshape(np.moveaxis(x, axes, tuple(range(len(axes)))), (-1,) + tuple(kept))
    if np.shape(flat)[0] == 0 and initial is _NOVALUE:
        y = uf.reduce(x, axis=axis, dtype=dtype, keepdims=keepdims)  # the identity (or numpy's error)
        return y
    y = _fold(uf, flat, None if initial is _NOVALUE else initial)
    if keepdims:
        y = np.reshape(y, tuple(1 if i in axes else np.shape(x)[i] for i in range(nd)))
    return y


def ufunc_reduceat(uf: Any, x: Any, indices: Any, axis: int = 0, dtype: Any = None) -> Any:
    x = np.moveaxis(np.asanyarray(x, dtype=dtype), axis, 0)
    idx = [int(i) for i in np.asarray(indices).ravel()]
    outs = []
    for k, i in enumerate(idx):
        j = idx[k + 1] if k + 1 < len(idx) else np.shape(x)[0]
        outs.append(uf.reduce(x[i:j], axis=0) if i < j else x[i])
    return np.moveaxis(np.stack(outs), 0, axis)


UFUNC_METHODS = {"outer": ufunc_outer, "accumulate": ufunc_accumulate, "reduce": ufunc_reduce,
                 "reduceat": ufunc_reduceat}


def vectorize_call(vec: Any, *args: Any) -> Any:
    """``np.vectorize(f)(x, y)`` written out: ``f`` runs traced on every broadcast element, and the
    results are assembled with the dtype numpy would give them (``otypes``, or the first result's)."""
    arrays = np.broadcast_arrays(*[np.asarray(a) for a in args])
    shape = np.shape(arrays[0])
    flats = [np.ravel(a) for a in arrays]
    outs = [vec.pyfunc(*[f[i] for f in flats]) for i in range(np.size(arrays[0]))]
    if type(outs[0]) is tuple:
        return tuple(_assemble([o[k] for o in outs], vec.otypes[k] if vec.otypes else None, shape)
                     for k in range(len(outs[0])))
    return _assemble(outs, vec.otypes[0] if vec.otypes else None, shape)


def _assemble(items: list[Any], otype: Any, shape: tuple[int, ...]) -> Any:
    dtype = np.dtype(otype) if otype is not None else np.asarray(items[0]).dtype
    return np.reshape(np.array(items, dtype=dtype), shape)
