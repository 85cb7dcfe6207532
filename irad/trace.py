"""The tracer: run instrumented user code on real values and record every operation on them.

Values are tracked by identity (``id(obj) -> Var``).  The mitigations that make identity
tracking sound (TRACER-NOTES §3): inputs are copied to fresh objects; only floats, complex
numbers, numpy scalars and arrays are tracked; every tracked object is kept alive; a result
that *is* one of its arguments (``np.asarray(x)``, ``max(x, 2.0)``) is copied so that values
and constants never alias; in-place updates snapshot the old value and rebind the name to a new
SSA value; a Python bool or int computed from traced values cannot be tracked, so it becomes a
guard on its traced value.
"""
from __future__ import annotations

import builtins
import functools
import inspect
import math
import operator
import sys
import types
from collections import deque
from typing import Any, Callable

import numpy as np

from . import hooks
from .effects import is_impure
from .errors import MutationError, TraceError, UnsupportedError
from .instrument import INSTRUMENTED, instrument_function
from .ir import Const, Graph, Loc, Op, Var, const, typeof
from .pytree import flatten
from .rules import registry

_TRACKED_TYPES = (float, complex, np.ndarray, np.generic)
_CONTAINERS = (list, dict, set, tuple, str, bytes, bytearray, deque, frozenset)
#: numpy functions whose list arguments are sequences of arrays (not array-likes to convert)
_SEQUENCE_FUNCS = {np.concatenate, np.stack, np.vstack, np.hstack, np.dstack, np.column_stack, np.block,
                   np.einsum, np.array, np.asarray, np.asanyarray, np.ascontiguousarray, np.broadcast_arrays,
                   np.meshgrid, np.linalg.multi_dot, np.select, np.piecewise, np.atleast_1d, np.atleast_2d,
                   np.atleast_3d}
_STATIC_ATTRS = frozenset({"shape", "ndim", "dtype", "size", "itemsize", "nbytes", "strides", "flags",
                           "__class__", "base", "__array_priority__", "__array_interface__", "data", "ctypes"})
_DATA_SHAPED = {np.nonzero, np.unique, np.argwhere, np.flatnonzero, np.extract, np.compress, np.trim_zeros}
_ITER_CONSUMERS = {builtins.list, builtins.tuple, builtins.enumerate, builtins.zip, builtins.iter,
                   builtins.reversed, builtins.map, builtins.filter, builtins.set, builtins.frozenset,
                   builtins.dict}


def trackable(x: Any) -> bool:
    return isinstance(x, _TRACKED_TYPES) and not isinstance(x, np.bool_)


def _fresh(x: Any) -> Any:
    """A new object equal to ``x`` (so it can carry its own Var)."""
    if isinstance(x, np.ndarray):
        return x.view()
    if type(x) is float:
        return x * 1.0
    if type(x) is complex:
        return complex(x.real, x.imag)
    if isinstance(x, np.generic):
        return x.copy()
    return x


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class Tracer:
    """Records one call of a function into ops; ``graph()`` assembles the result."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.vars: dict[int, Var] = {}
        self.keep: list[Any] = []
        self.values: dict[int, Any] = {}  # var id -> value at trace time (snapshotted on mutation)
        self.ops: list[Op] = []
        self.next_id = 0
        self.consts: dict[int, Const] = {}
        self.views: dict[int, list[np.ndarray]] = {}  # id(root) -> tracked arrays on that memory
        self._pyclass: dict[type, bool] = {}

    # ---- values ---------------------------------------------------------------------------

    def new_var(self, value: Any, hint: str = "") -> Var:
        v = Var(self.next_id, typeof(value), hint)
        self.next_id += 1
        return v

    def track(self, obj: Any, var: Var) -> None:
        self.vars[id(obj)] = var
        self.keep.append(obj)
        self.values[var.id] = obj
        if isinstance(obj, np.ndarray) and obj.base is not None:
            self.views.setdefault(id(_root(obj)), []).append(obj)

    def input(self, x: Any, hint: str) -> tuple[Any, Var]:
        """A fresh copy of an argument, tracked as a graph input."""
        y = _fresh(x)
        v = self.new_var(y, hint)
        self.track(y, v)
        return y, v

    def is_tracked(self, x: Any) -> bool:
        return id(x) in self.vars

    def deep_tracked(self, x: Any) -> bool:
        if id(x) in self.vars:
            return True
        tx = type(x)
        if tx is tuple or tx is list:
            return any(self.deep_tracked(e) for e in x)
        if tx is dict:
            return any(self.deep_tracked(e) for e in x.values())
        if tx is slice:
            return self.deep_tracked((x.start, x.stop, x.step))
        return False

    def atom(self, x: Any) -> Any:
        """The IR argument for a raw value: Vars for tracked values, Consts otherwise."""
        v = self.vars.get(id(x))
        if v is not None:
            return v
        tx = type(x)
        if tx is tuple or tx is list:
            items = [self.atom(e) for e in x]
            if any(not isinstance(e, Const) for e in items):
                return tuple(items) if tx is tuple else items
            return self.const(x)
        if tx is dict and self.deep_tracked(x):
            return {k: self.atom(e) for k, e in x.items()}
        if tx is slice and self.deep_tracked(x):
            for part in (x.start, x.stop, x.step):
                if self.is_tracked(part):
                    self._guard_value(part)
        return self.const(x)

    def const(self, x: Any) -> Const:
        if isinstance(x, np.ndarray):
            c = self.consts.get(id(x))
            if c is None:
                c = Const(x, typeof(x), self._origin(x))
                self.consts[id(x)] = c
                self.keep.append(x)
            return c
        return const(x)

    def _origin(self, x: Any) -> str:
        frame = self._user_frame()
        if frame is None:
            return ""
        code = frame.f_code
        for name, val in frame.f_locals.items():
            if val is x:
                kind = "closure" if name in code.co_freevars else "local"
                return f"{kind} {name}"
        for name, val in frame.f_globals.items():
            if val is x:
                return f"global {name}"
        return ""

    # ---- recording ------------------------------------------------------------------------

    def _user_frame(self) -> Any:
        f = sys._getframe(2)
        while f is not None and id(f.f_code) not in INSTRUMENTED:
            f = f.f_back
        return f

    def loc(self) -> Loc | None:
        f = self._user_frame()
        if f is None:
            return None
        key = (id(f.f_code), f.f_lineno)
        loc = _LOCS.get(key)
        if loc is None:
            loc = _LOCS[key] = Loc(f.f_code.co_filename, f.f_lineno or 0, f.f_code.co_qualname)
        return loc

    def emit(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], outs: tuple[Var, ...],
             unpack: bool = False, prim: str | None = None) -> Op:
        op = Op(prim or registry.qualname(fn), tuple(args), tuple(kwargs.items()) if kwargs else (), outs, fn,
                self.loc(), unpack)
        self.ops.append(op)
        return op

    def record(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], result: Any,
               *, rebind: bool = False, atoms: tuple[tuple[Any, ...], dict[str, Any]] | None = None) -> Any:
        """Record ``result = fn(*args, **kwargs)`` (already computed) and return what user code sees."""
        if atoms is not None:
            a_args, a_kwargs = atoms
        else:
            a_args = tuple([self.atom(a) for a in args])
            a_kwargs = {k: self.atom(v) for k, v in kwargs.items()} if kwargs else {}
        if trackable(result):
            if not rebind and (id(result) in self.vars or _is_one_of(result, args)
                               or (kwargs and _is_one_of(result, kwargs.values()))):
                result = _fresh(result)
            v = self.new_var(result)
            self.emit(fn, a_args, a_kwargs, (v,))
            self.track(result, v)
            return result
        if isinstance(result, (bool, int, np.bool_)):
            v = self.new_var(result)
            self.emit(fn, a_args, a_kwargs, (v,))
            self.values[v.id] = result
            self._guard(v, result)
            return result
        if isinstance(result, (tuple, list)) and result and any(trackable(x) or isinstance(x, (bool, int, np.bool_))
                                                              for x in flatten(result)[0]):
            return self._record_container(fn, a_args, a_kwargs, result, args)
        self.emit(fn, a_args, a_kwargs, ())
        return result

    def _record_container(self, fn: Any, a_args: tuple[Any, ...], a_kwargs: dict[str, Any], result: Any,
                          raw_args: tuple[Any, ...]) -> Any:
        leaves, tree = flatten(result)
        outs, new_leaves, guards = [], [], []
        for x in leaves:
            if trackable(x) and (id(x) in self.vars or any(x is a for a in raw_args)):
                x = _fresh(x)
            v = self.new_var(x)
            outs.append(v)
            new_leaves.append(x)
            self.values[v.id] = x
            if isinstance(x, (bool, int, np.bool_)):
                guards.append((v, x))
        self.emit(fn, a_args, a_kwargs, tuple(outs), unpack=True)
        for v, x in zip(outs, new_leaves):
            if trackable(x):
                self.track(x, v)
        for v, x in guards:
            self._guard(v, x)
        if any(a is not b for a, b in zip(leaves, new_leaves)):
            from .pytree import unflatten
            result = unflatten(tree, new_leaves)
        return result

    def _guard(self, v: Var, value: Any) -> None:
        from . import ops as irad_ops
        expected = value.item() if isinstance(value, np.generic) else value
        self.emit(irad_ops.guard, (v,), {"expected": Const(expected, typeof(expected))}, (),
                  prim="irad.ops.guard")

    def _guard_value(self, x: Any) -> None:
        """A tracked value was used where only its concrete value matters (an index bound...)."""
        self._guard(self.vars[id(x)], x)

    def _guard_shape(self, x: Any) -> None:
        from . import ops as irad_ops
        if self.is_tracked(x):
            self.emit(irad_ops.guard_shape, (self.vars[id(x)],), {"expected": const(tuple(np.shape(x)))}, (),
                      prim="irad.ops.guard_shape")

    # ---- mutation -------------------------------------------------------------------------

    def before_mutation(self, a: np.ndarray, what: str) -> Any:
        """Check that mutating ``a`` cannot change other traced values behind irad's back, and
        return the atom for ``a``'s value before the mutation (a snapshot)."""
        root = _root(a)
        for other in self.views.get(id(root), ()):
            if other is a or not np.may_share_memory(a, other):
                continue
            if sys.getrefcount(other) > 4 + sum(1 for w in self.views[id(root)] if w.base is other):
                self._mutation_error(what, "another traced array that shares its memory (a view) is still in use")
        if a is not root and self.is_tracked(root) and \
                sys.getrefcount(root) > 3 + sum(1 for w in self.views.get(id(root), ()) if w.base is root):
            self._mutation_error(what, "it is a view of a traced array that is still in use")
        if not self.is_tracked(a) and a.base is not None and not self.is_tracked(root) and \
                sys.getrefcount(root) > 3 and id(root) not in self.views:
            self._mutation_error(what, "it is a view of an array irad does not track")
        # constants that alias the memory about to change keep their old contents
        for c in self.consts.values():
            if isinstance(c.value, np.ndarray) and np.may_share_memory(c.value, a):
                object.__setattr__(c, "value", c.value.copy())
        v = self.vars.get(id(a))
        if v is not None:
            self.values[v.id] = a.copy()
            return v
        return self.const(a.copy())

    def _mutation_error(self, what: str, why: str) -> None:
        loc = self.loc()
        raise MutationError(
            f"in-place update ({what}) of an array while {why}: irad cannot express its effect",
            loc.long if loc else "",
            "copy first (`v = a[...].copy()`), or write the update out of place (`a = a + b`)")

    def rebind(self, a: Any, fn: Callable[..., Any], atoms: tuple[tuple[Any, ...], dict[str, Any]],
               prim: str | None = None) -> Any:
        """Record a mutation of ``a`` as a new SSA value that ``a`` now stands for."""
        v = self.new_var(a)
        self.emit(fn, atoms[0], atoms[1], (v,), prim=prim)
        self.track(a, v)
        return a

    # ---- operators ------------------------------------------------------------------------

    def _is_pyclass(self, tp: type) -> bool:
        r = self._pyclass.get(tp)
        if r is None:
            r = tp.__module__ not in ("builtins", "numpy") and not issubclass(tp, (np.ndarray, np.generic)) and any(
                isinstance(v, (types.FunctionType, property, functools.cached_property))
                for klass in tp.__mro__[:-1] for k, v in vars(klass).items() if k.startswith("__") or
                isinstance(v, (property, functools.cached_property)))
            self._pyclass[tp] = r
        return r

    def _dunder(self, tp: type, name: str) -> Any:
        for klass in tp.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
        return None

    def _dispatch_binary(self, a: Any, b: Any, op: int) -> Any:
        """Python's binary-operator protocol, with user dunders run instrumented."""
        name = hooks._NAMES[op % hooks.N_BINOPS].rstrip("_")
        ta, tb = type(a), type(b)
        if op >= hooks.N_BINOPS:
            f = self._dunder(ta, f"__i{name}__")
            if f is not None:
                r = self.call(f, (a, b), {})
                if r is not NotImplemented:
                    return r
        fwd, rev = self._dunder(ta, f"__{name}__"), self._dunder(tb, f"__r{name}__")
        order = [(fwd, a, b), (rev, b, a)] if ta is not tb else [(fwd, a, b)]
        if ta is not tb and issubclass(tb, ta) and rev is not None and rev is not self._dunder(ta, f"__r{name}__"):
            order.reverse()
        for f, x, y in order:
            if f is None:
                continue
            if not isinstance(f, types.FunctionType):
                return self._binop_native(a, b, op)
            r = self.call(f, (x, y), {})
            if r is not NotImplemented:
                return r
        raise TypeError(f"unsupported operand type(s) for {name}: '{ta.__name__}' and '{tb.__name__}'")

    def binop(self, a: Any, b: Any, op: int) -> Any:
        ta, tb = type(a), type(b)
        if (ta not in _FAST and self._is_pyclass(ta)) or (tb not in _FAST and self._is_pyclass(tb)):
            return self._dispatch_binary(a, b, op)
        return self._binop_native(a, b, op)

    def _binop_native(self, a: Any, b: Any, op: int) -> Any:
        vars_ = self.vars
        if id(a) not in vars_ and id(b) not in vars_:
            return hooks.BINOPS[op](a, b)
        fn = hooks.OUT_OF_PLACE[op]
        if op >= hooks.N_BINOPS and isinstance(a, np.ndarray):  # a genuine in-place update
            before = self.before_mutation(a, f"{hooks._NAMES[op - hooks.N_BINOPS].rstrip('_')}=")
            atoms = ((before, self.atom(b)), {})
            out_dtype = np.result_type(a, b) if not isinstance(b, (float, int, complex)) else None
            hooks.BINOPS[op](a, b)
            if out_dtype is not None and out_dtype != a.dtype:
                tmp = fn(self.values[before.id] if isinstance(before, Var) else before.value, b)
                tv = self.new_var(tmp)
                self.emit(fn, atoms[0], {}, (tv,))
                self.keep.append(tmp)
                return self.rebind(a, np.ndarray.astype, ((tv, const(a.dtype)), {}))
            return self.rebind(a, fn, atoms)
        # NOTE: the hot path of scalar code: record inline instead of through record()
        r = fn(a, b)
        if not trackable(r):
            return self.record(fn, (a, b), {}, r)
        if r is a or r is b or id(r) in vars_:
            r = _fresh(r)
        va, vb = vars_.get(id(a)), vars_.get(id(b))
        v = Var(self.next_id, typeof(r))
        self.next_id += 1
        self.ops.append(Op(_OP_NAMES[op], (va if va is not None else self.atom(a), vb if vb is not None else
                                           self.atom(b)), (), (v,), fn, self.loc(), False))
        vars_[id(r)] = v
        self.keep.append(r)
        self.values[v.id] = r
        if isinstance(r, np.ndarray) and r.base is not None:
            self.views.setdefault(id(_root(r)), []).append(r)
        return r

    def compare(self, a: Any, b: Any, op: int) -> Any:
        fn = hooks.COMPARES[op & 15]
        ta, tb = type(a), type(b)
        if (ta not in _FAST and self._is_pyclass(ta)) or (tb not in _FAST and self._is_pyclass(tb)):
            names = ["lt", "le", "eq", "ne", "gt", "ge"]
            refl = ["gt", "ge", "eq", "ne", "lt", "le"]
            i = op & 15
            r: Any = NotImplemented
            for f, x, y in ((self._dunder(ta, f"__{names[i]}__"), a, b), (self._dunder(tb, f"__{refl[i]}__"), b, a)):
                if isinstance(f, types.FunctionType):
                    r = self.call(f, (x, y), {})
                    if r is not NotImplemented:
                        break
            if r is NotImplemented:
                r = fn(a, b)
        elif id(a) in self.vars or id(b) in self.vars:
            r = self.record(fn, (a, b), {}, fn(a, b))
        else:
            r = fn(a, b)
        if op & 16:
            self.truth(r) if id(r) in self.vars else None
            return bool(r)
        return r

    def contains(self, a: Any, b: Any, invert: int) -> bool:
        if self.deep_tracked(a) or self.is_tracked(b):
            r = self.record(operator.contains, (b, a), {}, operator.contains(b, a))
        else:
            r = a in b
        return (not r) if invert else bool(r)

    def unary(self, a: Any, name: str) -> Any:
        fn = hooks.UNARY[name]
        if type(a) not in _FAST and self._is_pyclass(type(a)):
            f = self._dunder(type(a), {"UNARY_NEGATIVE": "__neg__", "UNARY_INVERT": "__invert__",
                                       "UNARY_POSITIVE": "__pos__"}[name])
            if isinstance(f, types.FunctionType):
                return self.call(f, (a,), {})
        if id(a) not in self.vars:
            return fn(a)
        return self.record(fn, (a,), {}, fn(a))

    def truth(self, v: Any) -> None:
        """``bool(v)`` of a traced value decides control flow: guard on it."""
        self.record(builtins.bool, (v,), {}, bool(v))

    # ---- indexing -------------------------------------------------------------------------

    def getitem(self, a: Any, i: Any) -> Any:
        ta = type(a)
        if ta not in _FAST and ta not in _CONTAINER_FAST and self._is_pyclass(ta):
            f = self._dunder(ta, "__getitem__")
            if isinstance(f, types.FunctionType):
                return self.call(f, (a, i), {})
        if id(a) in self.vars:
            r = self.record(operator.getitem, (a, i), {}, a[i])
            if _is_mask_index(i):
                self._guard_shape(r)
            return r
        if self.deep_tracked(i):
            if isinstance(a, np.ndarray):
                r = self.record(operator.getitem, (a, i), {}, a[i])
                if _is_mask_index(i):
                    self._guard_shape(r)
                return r
            for part in (i if type(i) is tuple else (i,)):
                if self.is_tracked(part):
                    self._guard_value(part)
        return a[i]

    def setitem(self, a: Any, i: Any, v: Any) -> None:
        ta = type(a)
        if ta not in _FAST and ta not in _CONTAINER_FAST and self._is_pyclass(ta):
            f = self._dunder(ta, "__setitem__")
            if isinstance(f, types.FunctionType):
                self.call(f, (a, i, v), {})
                return
        if isinstance(a, np.ndarray) and (id(a) in self.vars or self.deep_tracked(v) or self.deep_tracked(i)):
            from . import ops as irad_ops
            before = self.before_mutation(a, "a[i] = v")
            atoms = ((before, self.atom(i), self.atom(v)), {})
            a[i] = v
            self.rebind(a, irad_ops.setitem, atoms)
            return
        if self.deep_tracked(i) and not isinstance(a, np.ndarray):
            for part in (i if type(i) is tuple else (i,)):
                if self.is_tracked(part):
                    self._guard_value(part)
        a[i] = v

    def rows(self, a: np.ndarray) -> list[Any]:
        if a.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return [self.getitem(a, k) for k in range(a.shape[0])]

    def iterable(self, v: Any) -> Any:
        if id(v) in self.vars and isinstance(v, np.ndarray):
            return self.rows(v)
        tv = type(v)
        if tv not in _FAST and tv not in _CONTAINER_FAST and self._is_pyclass(tv):
            f = self._dunder(tv, "__iter__")
            if isinstance(f, types.FunctionType):
                return self.call(f, (v,), {})
        return v

    # ---- attributes -----------------------------------------------------------------------

    def getattr(self, o: Any, name: str) -> Any:
        to = type(o)
        if to is types.ModuleType:
            return getattr(o, name)
        if id(o) in self.vars:
            if name in _STATIC_ATTRS:
                return getattr(o, name)
            if name == "T":
                return self.call_prim(np.transpose, (o,), {})
            if name == "mT":
                return self.call_prim(np.swapaxes, (o, -1, -2), {})
            if name == "real":
                return self.call_prim(np.real, (o,), {})
            if name == "imag":
                return self.call_prim(np.imag, (o,), {})
            if name == "flat":
                raise self._unsupported("the .flat iterator of a traced array", "use a.ravel() instead")
            return getattr(o, name)
        if to not in _FAST and self._is_pyclass(to):
            d = self._dunder(to, name)
            if isinstance(d, property) and isinstance(d.fget, types.FunctionType):
                return self.call(d.fget, (o,), {})
            if isinstance(d, functools.cached_property) and name not in getattr(o, "__dict__", {}):
                val = self.call(d.func, (o,), {})
                o.__dict__[name] = val
                return val
        return getattr(o, name)

    def _unsupported(self, what: str, hint: str) -> UnsupportedError:
        loc = self.loc()
        return UnsupportedError(f"{what} cannot be traced", loc.long if loc else "", hint)

    # ---- calls ----------------------------------------------------------------------------

    def call(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tf = type(f)
        if tf is types.FunctionType:
            return self.call_python(f, args, kwargs)
        if tf is types.MethodType:
            fn = f.__func__
            if type(fn) is types.FunctionType:
                return self.call_python(fn, (f.__self__,) + args, kwargs)
            return self.call_prim(f, args, kwargs)
        if tf is functools.partial:
            return self.call(f.func, f.args + args, {**f.keywords, **kwargs})
        special = _SPECIAL.get(id(f))
        if special is not None and special[0] is f:
            return special[1](self, args, kwargs)
        if isinstance(f, type):
            if self._is_pyclass(f) and type(f) is type:
                return self.construct(f, args, kwargs)
            return self.call_prim(f, args, kwargs)
        if tf not in _FAST and self._is_pyclass(tf):
            d = self._dunder(tf, "__call__")
            if isinstance(d, types.FunctionType):
                return self.call_python(d, (f,) + args, kwargs)
        if tf is staticmethod or tf is classmethod:
            return self.call(f.__func__, args, kwargs)
        return self.call_prim(f, args, kwargs)

    def call_python(self, fn: types.FunctionType, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if registry.lookup(fn, args) is not None or registry.is_nondiff(fn) or \
                (fn.__module__ or "").startswith("numpy"):
            return self.call_prim(fn, args, kwargs)
        return instrument_function(fn)(*args, **kwargs)

    def construct(self, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        new = cls.__new__
        if isinstance(self._dunder(cls, "__new__"), (types.FunctionType, staticmethod)):
            obj = self.call(new, (cls,) + args, kwargs)
        elif new is object.__new__:
            obj = object.__new__(cls)
        else:
            obj = new(cls, *args, **kwargs)
        if isinstance(obj, cls):
            init = self._dunder(cls, "__init__")
            if isinstance(init, types.FunctionType):
                self.call_python(init, (obj,) + args, kwargs)
            elif init is not None and init is not object.__init__:
                init(obj, *args, **kwargs)
        return obj

    def call_prim(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call into code irad does not trace through: record it if traced values flow in."""
        if f in _STATIC_FUNCS if _hashable(f) else False:
            return f(*args, **kwargs)  # depends on shapes and dtypes only
        owner = getattr(f, "__self__", None)
        tracked = self.deep_tracked(args) or self.deep_tracked(kwargs) or id(owner) in self.vars
        impure = is_impure(f)
        if not tracked and not impure:
            return f(*args, **kwargs)
        if isinstance(owner, _CONTAINERS) and not impure:
            return f(*args, **kwargs)  # list.append(x) & co keep object identity
        if isinstance(f, (types.BuiltinMethodType, types.MethodWrapperType)) and owner is not None and \
                id(owner) in self.vars:
            return self.call_method(owner, f.__name__, args, kwargs)
        if isinstance(owner, np.ufunc) and getattr(f, "__name__", "") == "at":
            return _ufunc_at(owner)(self, args, kwargs)
        mut = _MUTATORS.get(id(f))
        if mut is not None and mut[0] is f:
            return mut[1](self, args, kwargs)
        if "out" in kwargs and kwargs["out"] is not None:
            return self._call_with_out(f, args, kwargs)
        if tracked and _is_numpy_callable(f) and f not in _SEQUENCE_FUNCS:
            args = tuple(self._as_array(a) for a in args)
        args = tuple(_instrument_callbacks(a) for a in args)
        r = f(*args, **kwargs)
        r = self.record(f, args, kwargs, r)
        if f in _DATA_SHAPED or (f is np.where and len(args) == 1):
            for x in (r if isinstance(r, tuple) else (r,)):
                self._guard_shape(x)
        return r

    def _as_array(self, a: Any) -> Any:
        if type(a) in (list, tuple) and self.deep_tracked(a):
            return self.record(np.asarray, (a,), {}, np.asarray(a))
        return a

    def call_method(self, obj: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``obj.name(...)`` on a traced numpy value: recorded with the unbound method."""
        meth = getattr(type(obj), name)
        mut = _ARRAY_MUTATORS.get(name)
        if mut is not None and isinstance(obj, np.ndarray):
            return mut(self, obj, args, kwargs)
        if "out" in kwargs and kwargs["out"] is not None:
            return self._call_with_out(meth, (obj,) + args, kwargs)
        return self.record(meth, (obj,) + args, kwargs, meth(obj, *args, **kwargs))

    def _call_with_out(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = kwargs["out"]
        target = out[0] if isinstance(out, tuple) and len(out) == 1 else out
        if not isinstance(target, np.ndarray):
            raise self._unsupported(f"{registry.qualname(f)}(..., out=...) with several outputs",
                                    "assign the result instead of passing out=")
        rest = {k: v for k, v in kwargs.items() if k != "out"}
        before = self.before_mutation(target, f"{registry.qualname(f)}(out=...)")
        atoms = (tuple(before if a is target else self.atom(a) for a in args),
                 {k: self.atom(v) for k, v in rest.items()})
        f(*args, **kwargs)
        return self.rebind(target, f, atoms)

    # ---- the whole trace ------------------------------------------------------------------

    def graph(self, inputs: tuple[Var, ...], outputs: Any, in_tree: Any, statics: tuple[tuple[int, Any], ...]) \
            -> Graph:
        leaves, out_tree = flatten(outputs)
        outs = tuple(self.atom(x) for x in leaves)
        return Graph(self.name, inputs, tuple(self.ops), outs, in_tree, out_tree, statics)


_OP_NAMES = [registry.qualname(f) for f in hooks.OUT_OF_PLACE]
#: functions of shapes and dtypes only: never recorded, never guarded (shapes are static)
_STATIC_FUNCS = {np.shape, np.ndim, np.size, np.iscomplexobj, np.isrealobj, np.result_type, np.can_cast,
                 np.isscalar, np.iterable, np.min_scalar_type, np.promote_types, builtins.len, builtins.isinstance,
                 builtins.type, builtins.id, builtins.callable, builtins.hasattr, builtins.issubclass}


def _hashable(x: Any) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False
_LOCS: dict[tuple[int, int], Loc] = {}  # keyed by instrumented code objects, which stay alive


def _is_one_of(x: Any, items: Any) -> bool:
    for a in items:
        if a is x:
            return True
    return False


def _is_mask_index(i: Any) -> bool:
    for part in (i if type(i) is tuple else (i,)):
        if isinstance(part, np.ndarray) and part.dtype == np.bool_:
            return True
    return False


def _is_numpy_callable(f: Any) -> bool:
    if isinstance(f, np.ufunc):
        return True
    mod = getattr(f, "__module__", None) or ""
    return mod.startswith("numpy") and not isinstance(f, type)


def _instrument_callbacks(a: Any) -> Any:
    """Python callbacks handed to C code (map, sorted(key=...)) run instrumented."""
    if type(a) is types.FunctionType and id(a.__code__) not in INSTRUMENTED:
        return instrument_function(a)
    return a


_FAST = frozenset({float, int, bool, complex, np.ndarray, np.float64, np.float32, np.int64, str, type(None)})
_CONTAINER_FAST = frozenset({list, tuple, dict, set, str, range})


# ---- special builtins -----------------------------------------------------------------------

def _sum(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    it = args[0]
    start = args[1] if len(args) > 1 else kwargs.get("start", 0)
    items = t.rows(it) if t.is_tracked(it) and isinstance(it, np.ndarray) else list(it)
    acc = start
    for x in items:
        acc = t.binop(acc, x, 0)
    return acc


def _minmax(fn: Any) -> Callable[[Tracer, tuple[Any, ...], dict[str, Any]], Any]:
    def run(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        items = args
        if len(args) == 1:
            it = args[0]
            items = tuple(t.rows(it) if t.is_tracked(it) and isinstance(it, np.ndarray) else it)
        if not t.deep_tracked(items):
            return fn(*args, **kwargs)
        if kwargs:
            raise t._unsupported(f"{fn.__name__}(..., key=/default=) over traced values",
                                 "use np.max/np.min or write the comparison explicitly")
        return t.record(fn, items, {}, fn(*items))
    return run


def _iter_consumer(fn: Any) -> Callable[[Tracer, tuple[Any, ...], dict[str, Any]], Any]:
    def run(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        conv = tuple(t.rows(a) if t.is_tracked(a) and isinstance(a, np.ndarray) else _instrument_callbacks(a)
                     for a in args)
        return fn(*conv, **kwargs)
    return run


def _sorted(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    items = list(t.rows(args[0]) if t.is_tracked(args[0]) and isinstance(args[0], np.ndarray) else args[0])
    if t.deep_tracked(items):
        raise t._unsupported("sorted() of traced values", "use np.sort, whose gradient irad knows")
    return sorted(items, **{k: _instrument_callbacks(v) for k, v in kwargs.items()})


def _range(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    for a in args:
        if t.is_tracked(a):
            t._guard_value(a)
    return range(*args)


def _getattr_builtin(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) == 3:
        try:
            return t.getattr(args[0], args[1])
        except AttributeError:
            return args[2]
    return t.getattr(*args)


_SPECIAL: dict[int, tuple[Any, Callable[..., Any]]] = {
    id(f): (f, h) for f, h in [
        (builtins.sum, _sum), (builtins.min, _minmax(builtins.min)), (builtins.max, _minmax(builtins.max)),
        (builtins.sorted, _sorted), (builtins.range, _range), (builtins.getattr, _getattr_builtin),
        *[(f, _iter_consumer(f)) for f in _ITER_CONSUMERS],
    ]
}


# ---- mutating calls -------------------------------------------------------------------------

def _copyto(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from . import ops as irad_ops
    dst, src = args[0], args[1]
    if kwargs or len(args) > 2:
        raise t._unsupported("np.copyto with casting/where", "use np.where and assignment")
    before = t.before_mutation(dst, "np.copyto")
    atoms = ((before, t.atom(src)), {})
    np.copyto(dst, src)
    t.rebind(dst, irad_ops.copyto, atoms)


def _fill_diagonal(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from . import ops as irad_ops
    a, v = args[0], args[1]
    before = t.before_mutation(a, "np.fill_diagonal")
    atoms = ((before, t.atom(v)), {k: t.atom(x) for k, x in kwargs.items()})
    np.fill_diagonal(a, v, **kwargs)
    t.rebind(a, irad_ops.fill_diagonal, atoms)


def _ufunc_at(ufunc: Any) -> Callable[..., Any]:
    def run(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        from . import ops as irad_ops
        if ufunc is not np.add:
            raise t._unsupported(f"np.{ufunc.__name__}.at", "use np.add.at or an out-of-place form")
        a, idx, v = args
        before = t.before_mutation(a, "np.add.at")
        atoms = ((before, t.atom(idx), t.atom(v)), {})
        np.add.at(a, idx, v)
        t.rebind(a, irad_ops.add_at, atoms)
    return run


def _unsupported_mutator(name: str) -> Callable[..., Any]:
    def run(t: Tracer, *rest: Any) -> Any:
        raise t._unsupported(f"the in-place function {name} on traced values",
                             "write the update out of place (e.g. with np.where or a[i] = v)")
    return run


_MUTATORS: dict[int, tuple[Any, Callable[..., Any]]] = {
    id(f): (f, h) for f, h in [
        (np.copyto, _copyto), (np.fill_diagonal, _fill_diagonal),
        (np.put, _unsupported_mutator("np.put")), (np.place, _unsupported_mutator("np.place")),
        (np.putmask, _unsupported_mutator("np.putmask")),
        (np.put_along_axis, _unsupported_mutator("np.put_along_axis")),
    ]
}


def _array_fill(t: Tracer, a: np.ndarray, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    from . import ops as irad_ops
    before = t.before_mutation(a, "a.fill")
    atoms = ((before, t.atom(args[0])), {})
    a.fill(args[0])
    t.rebind(a, irad_ops.fill, atoms)


def _array_sort(t: Tracer, a: np.ndarray, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    before = t.before_mutation(a, "a.sort")
    axis = args[0] if args else kwargs.get("axis", -1)
    atoms = ((before,), {"axis": const(axis)})
    a.sort(*args, **kwargs)
    t.rebind(a, np.sort, atoms)


def _array_unsupported(name: str) -> Callable[..., Any]:
    def run(t: Tracer, a: np.ndarray, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        raise t._unsupported(f"the in-place method a.{name}() on a traced array",
                             "write the update out of place")
    return run


_ARRAY_MUTATORS: dict[str, Callable[..., Any]] = {
    "fill": _array_fill, "sort": _array_sort,
    **{n: _array_unsupported(n) for n in ("put", "itemset", "resize", "partition", "setfield", "byteswap",
                                          "setflags")},
}


# ---- entry point ----------------------------------------------------------------------------

def _arg_hints(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    try:
        params = list(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        params = []
    hints: list[str] = []
    for i, a in enumerate(args):
        base = params[i] if i < len(params) else f"arg{i}"
        hints.extend(flatten(a)[1].paths(base))
    for k, a in kwargs.items():
        hints.extend(flatten(a)[1].paths(k))
    return hints


def trace_values(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) \
        -> tuple[Graph, Tracer, Any]:
    """Trace one call of ``f``.  Returns the graph, the tracer (trace-time values) and f's result."""
    name = getattr(f, "__name__", type(f).__name__)
    t = Tracer(name)
    leaves, in_tree = flatten((args, kwargs))
    hints = _arg_hints(f, args, kwargs)
    new_leaves, inputs, statics = [], [], []
    for i, x in enumerate(leaves):
        if trackable(x):
            y, v = t.input(x, hints[i] if i < len(hints) else f"x{i}")
            new_leaves.append(y)
            inputs.append(v)
        else:
            new_leaves.append(x)
            statics.append((i, x))
    from .pytree import unflatten
    targs, tkwargs = unflatten(in_tree, new_leaves)
    prev = hooks.STATE.tracer
    hooks.STATE.tracer = t
    try:
        result = t.call(f, tuple(targs), dict(tkwargs))
    finally:
        hooks.STATE.tracer = prev
    g = t.graph(tuple(inputs), result, in_tree, tuple(statics))
    return g, t, result


def trace(f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The typed SSA IR of one call ``f(*args, **kwargs)``; ``trace(f)`` alone returns a tracing function."""
    if not args and not kwargs:
        @functools.wraps(f)
        def curried(*a: Any, **k: Any) -> Graph:
            return trace_values(f, a, k)[0]
        return curried
    return trace_values(f, args, kwargs)[0]

