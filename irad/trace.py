"""The tracer: run instrumented user code on real values and record every operation on them.

Values are tracked by identity (``id(obj) -> Var``).  The mitigations that make identity
tracking sound (TRACER-NOTES §3): inputs are copied to fresh objects; only floats, complex
numbers, numpy scalars and arrays are tracked as data (strings and other objects that recorded
ops return are tracked as opaque values); every tracked object is kept alive; a result that *is*
one of its arguments (``np.asarray(x)``, ``max(x, 2.0)``) is copied so that values and
constants never alias; a Python bool or int computed from traced values cannot be tracked, so
it becomes a guard on its traced value.

In-place updates are functionalised: the updated array is rebound to a new SSA value; when it
is a view made by indexing (``a[1:3] += b``) the update is written back into the array it views;
every other array that shares the memory becomes *stale* and is re-derived from its base when
it is used next (or raises ``MutationError`` when irad does not know how it was made).
"""
from __future__ import annotations

import builtins
import functools
import gc
import importlib
import inspect
import math
import operator
import os
import random
import sys
import sysconfig
import types
import collections
from collections import deque
from typing import Any, Callable, Sequence

import numpy as np

from . import hooks
from .effects import is_impure
from .signature import (MISSING, DictRef, Identity, class_attr, contents_dep, function_dep,
                        effect_dep, is_library_module)
from .errors import GradError, MutationError, NoRuleError, UnsupportedError, def_site
from .instrument import GLOBAL_NAMES, INSTRUMENTED, STORES_GLOBALS, instrument_function
from . import intdata
from .intdata import IntData, TracedInt
from .ir import Const, Graph, Loc, Op, Var, const, is_differentiable, map_atoms, typeof
from .roundtrip import BUFFER_BUILDERS, STATISTICS, exact_ratio_error
from .pytree import Depth, TreeDef, flatten, flatten_args, node_of, unflatten
from .rules import registry
from .views import Aliasing, by_id, member, root_of
from .weakcache import WeakIdMap
from .specials import (ARRAY_MUTATORS, DUNDER_BUILTINS, HEAP_ORDERING, LIST_DECISIONS, MUTATORS, RNG_REORDERS,
                       SPECIAL, UFUNC_METHODS, callback, heap_call, list_decision, rng_reorder, run_dunder_builtin,
                       ufunc_at, vectorize_call)
from .tracer_api import Handler

_TRACKED_TYPES = (float, complex, np.ndarray, np.generic)
#: containers whose methods only move references around: called natively, never recorded
_MUTABLE_CONTAINERS = (list, dict, set, deque, bytearray, types.GeneratorType)
_RNGS = (np.random.Generator, np.random.RandomState, random.Random)
#: results of recorded calls that stay constants (types, functions, containers, ...)
_UNTRACKED_RESULTS = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                      tuple, list, dict, set, frozenset, deque, range, slice, np.dtype, type(Ellipsis),
                      type(NotImplemented))
#: numpy functions whose list arguments are sequences of arrays (not array-likes to convert)
_SEQUENCE_FUNCS = {np.concatenate, np.stack, np.vstack, np.hstack, np.dstack, np.column_stack, np.block,
                   np.einsum, np.array, np.asarray, np.asanyarray, np.ascontiguousarray, np.broadcast_arrays,
                   np.meshgrid, np.linalg.multi_dot, np.select, np.piecewise, np.atleast_1d, np.atleast_2d,
                   np.atleast_3d}
_STATIC_ATTRS = frozenset({"shape", "ndim", "dtype", "size", "itemsize", "nbytes", "strides", "flags",
                           "__class__", "base", "__array_priority__", "__array_interface__", "data", "ctypes"})
#: SciPy functions that C code runs a user callback for (a solver, an integrator): ``(module,
#: name) -> "irad_module:handler"``, each ``handler(tracer, fn, args, kwargs)`` returning the
#: traced result or NotImplemented (the call then goes the ordinary way).  Names, not functions,
#: so that the handler's module (it builds on ad and lower) loads only when one is called.
_SOLVER_CALLS: dict[tuple[str, str], str] = {
    ("scipy.optimize._minimize", "minimize"): "solvers:minimize_call",
    ("scipy.optimize._minpack_py", "fsolve"): "solvers:root_vector_call",
    ("scipy.optimize._root", "root"): "solvers:root_vector_call",
    ("scipy.integrate._odepack_py", "odeint"): "odes:odeint_call",
    ("scipy.integrate._ivp.ivp", "solve_ivp"): "odes:solve_ivp_call",
    ("scipy.integrate._quadpack_py", "quad"): "quadrature:quad_call",
    ("scipy.integrate._quad_vec", "quad_vec"): "quadrature:quad_vec_call",
    ("scipy.integrate._quadpack_py", "nquad"): "quadrature:nquad_call",  # dblquad, tplquad call it
    **{("scipy.optimize._zeros_py", name): "solvers:root_scalar_call"
       for name in ("brentq", "brenth", "ridder", "bisect", "toms748")},
    ("scipy.optimize._zeros_py", "newton"): "solvers:newton_call",
}
_SOLVER_NAMES = frozenset(name for _, name in _SOLVER_CALLS)  # (a set test first: most calls are not these)
#: functions whose result is real or complex depending on the values (a guard on its dtype)
_DATA_DTYPED = frozenset({"numpy.linalg.eig", "numpy.linalg.eigvals", "scipy.linalg.sqrtm", "scipy.linalg.logm",
                          "scipy.linalg.eig", "scipy.linalg.eigvals", "scipy.linalg.fractional_matrix_power",
                          "scipy.linalg.funm"})
_DATA_SHAPED = {np.nonzero, np.unique, np.argwhere, np.flatnonzero, np.extract, np.compress, np.trim_zeros}
#: C functions that only store references (never recorded)
_TRANSPARENT = [object.__setattr__, object.__delattr__, object.__init__, builtins.setattr, builtins.delattr]
#: view-making functions whose element mapping the tracer can replay on an index array, so that a
#: write into the view can be written back into its base

_SEQUENCE_FUNCS_ = by_id(_SEQUENCE_FUNCS)
#: functions of shapes and dtypes only: never recorded, never guarded (shapes are static)
_STATIC_FUNCS_ = by_id([np.shape, np.ndim, np.size, np.iscomplexobj, np.isrealobj, np.result_type, np.can_cast,
                         np.isscalar, np.iterable, np.min_scalar_type, np.promote_types, builtins.len,
                         builtins.isinstance, builtins.type, builtins.id, builtins.callable, builtins.issubclass])
_DATA_SHAPED_ = by_id(_DATA_SHAPED)
_TRANSPARENT_ = by_id(_TRANSPARENT)
_HEAP_ORDERING_ = by_id(HEAP_ORDERING)
#: C functions that update a container by moving the references they are handed (no decision)
_REFERENCE_MOVERS_ = by_id((operator.setitem, operator.delitem, operator.iadd, operator.iconcat))
_DUNDER_BUILTINS_ = by_id(DUNDER_BUILTINS)


def _object_fields(x: Any) -> dict[str, Any] | None:
    """The attributes of an instance of a user class (plain ``__dict__`` objects), else None."""
    tx = type(x)
    if _native_class(tx) or isinstance(x, (type, types.ModuleType, types.FunctionType,
                                                                 types.MethodType, np.ndarray, np.generic)):
        return None
    d = getattr(x, "__dict__", None)
    return d if type(d) is dict else None


def _native_class(tp: type) -> bool:
    """Python's and numpy's own classes (not traced through); a class of exec'd code without
    ``__name__`` has the module "builtins" too, but it is a heap type."""
    return tp.__module__ == "numpy" or (tp.__module__ == "builtins" and not tp.__flags__ & (1 << 9))


def _python_class(tp: type) -> bool:
    """Is ``tp`` a user class whose dunders or properties are Python code (``Tracer._is_pyclass``)?"""
    return not _native_class(tp) and not issubclass(tp, (np.ndarray, np.generic)) and any(
        isinstance(v, (types.FunctionType, property, functools.cached_property))
        for klass in tp.__mro__[:-1] for k, v in vars(klass).items() if k.startswith("__") or
        isinstance(v, (property, functools.cached_property)))


#: class attributes of an ndarray subclass that do not change what its arithmetic computes
_INERT_SUBCLASS_ATTRS = frozenset({
    "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__", "__annotations__",
    "__firstlineno__", "__static_attributes__", "__orig_bases__", "__parameters__", "__new__", "__init__",
    "__array_finalize__", "__repr__", "__str__", "__init_subclass__", "__class_getitem__", "__reduce__",
    "__reduce_ex__", "__setstate__", "__getstate__", "__array_priority__"})
_FOREIGN_ARRAYS: WeakIdMap[type, str] = WeakIdMap()


def foreign_array(tp: type) -> str:
    """Why values of the ndarray subclass ``tp`` cannot be traced as plain arrays ("" when they
    can): numpy's masked arrays and matrices compute differently from ndarray, and a subclass
    that overrides an operator, ``__array_ufunc__``, indexing or a property would run its own code
    (natively, unseen) where irad records numpy's.  ``np.memmap`` and subclasses that only add
    plain methods or attributes are plain arrays to the tracer."""
    hit = _FOREIGN_ARRAYS.get(tp)
    if hit is not None:
        return hit
    why = ""
    for klass in tp.__mro__:
        if klass is np.ndarray or klass is object or klass is np.memmap:
            continue
        if klass.__module__.startswith("numpy"):  # np.ma.MaskedArray, np.matrix, np.recarray, ...
            why = f"numpy's {klass.__name__} computes differently from a plain ndarray"
            break
        over = sorted(k for k, v in vars(klass).items() if k not in _INERT_SUBCLASS_ATTRS and (
            (k.startswith("__") and k.endswith("__")) or isinstance(v, (property, functools.cached_property))
            or (not callable(v) and hasattr(type(v), "__get__"))))
        if over:
            why = f"it overrides {', '.join(over)}, which irad would not run (it records numpy's own operations)"
            break
    _FOREIGN_ARRAYS[tp] = why
    return why


def _foreign_hint(tp: type) -> str:
    if issubclass(tp, np.ma.MaskedArray):
        return ("pass the data and the mask as plain arrays (np.ma.getdata(x), np.ma.getmaskarray(x)) and write "
                "the masking with np.where")
    return (f"pass a plain ndarray (np.asarray(x)); for {tp.__name__}'s own behaviour, hold the array in an "
            "ordinary class instead: irad traces the Python dunders of user classes")


def _is_one_of(x: Any, items: Any) -> bool:
    for a in items:
        if a is x:
            return True
    return False


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


def _same_index(i: Any, j: Any) -> bool:
    """Do two indices select the same elements?  (Conservative: ``False`` when unsure.)"""
    if i is j:
        return True
    if type(i) is not type(j):
        return False
    if type(i) is tuple:
        return len(i) == len(j) and all(_same_index(x, y) for x, y in zip(i, j))
    if isinstance(i, (int, slice)) or i is None or i is Ellipsis:
        try:
            return bool(i == j)
        except Exception:
            return False
    return False


class DepSet(dict):  # type: ignore[type-arg]
    """The dependencies a trace recorded, once each, in the order it read them (so the one a stale
    program names is always the same)."""

    def add(self, dep: tuple[Any, ...]) -> None:
        self[dep] = None

    def update(self, deps: Any = (), **_: Any) -> None:  # type: ignore[override]
        for d in deps:
            self[d] = None


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
        self._pyclass: dict[type, bool] = {}
        self._boxed: set[int] = set()  # id() of the 0-d arrays that stand for np.bool_ results
        #: what the trace read that user code may rebind: (kind, object, key, value); see irad.signature
        self.deps: DepSet = DepSet()
        #: containers and objects that existed before the trace and that it reached (id -> object):
        #: what it reads of them is a dependency.  Objects the trace made are in ``born`` instead.
        self.world: dict[int, Any] = {}
        self.born: set[int] = set()
        self._world_read: set[int] = set()
        self.attr_write_atoms: list[tuple[Any, str, Any]] = []
        #: (id(obj), name) -> (obj, name, value): attributes of objects of the world the function set;
        #: a compiled program sets them again at each call (what is read of them afterwards is not a
        #: dependency: it is the function's own value)
        self.attr_writes: dict[tuple[int, str], tuple[Any, str, Any]] = {}
        #: (input position, the Var it ends as): arguments the function updated in place, which a
        #: compiled program writes back so that every call mutates the caller's array, as Python does
        self.mutated_inputs: list[tuple[int, Any]] = []
        #: arrays of the world (globals, cells, attributes) the trace follows: Var id -> their live
        #: constant, which replaces the Var in the graph (see ``track_live``)
        self._live: dict[int, Const] = {}
        #: (array of the world, the Var it ends as): updated in place by the function, written back
        self.mutated_world: list[tuple[np.ndarray, Any]] = []
        #: while tracing through library code: the Vars rebound by in-place updates (see call_library)
        self._rebinds: list[int] | None = None
        #: values an enclosing (paused) trace follows, by id: the closures of a nested transform's function
        self._captured: dict[int, Any] = _captured_values(hooks.OUTER.get())
        #: views and in-place updates (irad/views.py): it shares the tables above
        self.aliasing = Aliasing(self)
        self._capture_ops: list[Op] = []
        #: Var id -> what made it: the values of a callback's trace cut out into a solver's program
        #: (see ``confine``), which exist in that program only
        self._confined: dict[int, str] = {}
        #: dicts and sets that traced values key (id -> the container, kept alive), and the keys that met
        #: them: constant keys (key -> label) and traced ones; see ``note_keys``
        self._keyed: dict[int, Any] = {}
        self._key_table: dict[Any, int] = {}
        self._key_tracked: list[Any] = []
        self._key_ids: set[int] = set()
        self._key_loc: Loc | None = None
        self._order_guarded: set[int] = set()
        #: the trace's int arguments and what it did with them (None: it has none; see irad.intdata)
        self.ints: IntData | None = None

    # ---- values ---------------------------------------------------------------------------

    def new_var(self, value: Any, hint: str = "") -> Var:
        v = Var(self.next_id, typeof(value), hint)
        self.next_id += 1
        return v

    def track(self, obj: Any, var: Var) -> None:
        if self._rebinds is not None:
            old = self.vars.get(id(obj))
            if old is not None:
                self._rebinds.append(old.id)
        self.vars[id(obj)] = var
        self.keep.append(obj)
        self.values[var.id] = obj
        if self.aliasing.stale:
            self.aliasing.stale.pop(id(obj), None)
        if isinstance(obj, np.ndarray):
            root = root_of(obj)
            self.aliasing.traced_roots.add(id(root))
            if root is not obj:
                self.aliasing.views.setdefault(id(root), {})[id(obj)] = obj

    def input(self, x: Any, hint: str) -> tuple[Any, Var]:
        """A fresh copy of an argument, tracked as a graph input."""
        y = _fresh(x)
        v = self.new_var(y, hint)
        self.track(y, v)
        return y, v

    def int_input(self, x: int, hint: str) -> tuple[TracedInt, Var]:
        """An int argument as a graph input: an int object of its own, so identity follows it."""
        if self.ints is None:
            self.ints = IntData()
        y = TracedInt(x)
        v = Var(self.next_id, intdata.INT, hint)
        self.next_id += 1
        self.track(y, v)
        self.values[v.id] = int(x)  # (values reach the caller as results: a plain int)
        return y, v

    def _adopt_capture(self, x: Any) -> Var:
        """A value of an enclosing trace read by this (nested) trace: a Var defined by
        ``irad.primitives.capture``, which hands the enclosing tracer its own object back."""
        from . import primitives as irad_ops
        v = self.new_var(x, "captured")
        holder = irad_ops.Captured(x)
        self._capture_ops.append(Op("irad.primitives.capture", (Const(holder, typeof(holder)),), (), (v,),
                                    irad_ops.capture, None))
        self.track(x, v)
        return v

    def is_tracked(self, x: Any) -> bool:
        return id(x) in self.vars

    def deep_tracked(self, x: Any, depth: int = 0) -> bool:
        if id(x) in self.vars or self.aliasing.seen(x):
            return True
        tx = type(x)
        if tx is tuple or tx is list:
            return any(self.deep_tracked(e, depth) for e in x)
        if tx is dict:
            return any(self.deep_tracked(e, depth) for e in x.values())
        if tx is slice:
            return self.deep_tracked((x.start, x.stop, x.step))
        if isinstance(x, (tuple, list)) and depth < 3:  # a namedtuple, a list subclass
            return any(self.deep_tracked(e, depth + 1) for e in x)
        fields = _object_fields(x)
        if fields is not None and depth < 3:
            return any(self.deep_tracked(e, depth + 1) for e in fields.values())
        return False

    def atom(self, x: Any) -> Any:
        """The IR argument for a raw value: Vars for tracked values, Consts otherwise."""
        v = self.vars.get(id(x))
        if v is not None:
            if self.aliasing.stale and id(x) in self.aliasing.stale:
                return self.aliasing.refresh(x)
            return v
        tx = type(x)
        if tx is np.ndarray and x.base is not None and id(root_of(x)) in self.vars:
            return self.aliasing.adopt_view(x)
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
                    self.guard_value(part)
            if self.ints is not None:  # (the program's constant holds plain ints)
                return self.const(intdata.plain(self, x))
        fields = _object_fields(x)
        if fields is not None and self.deep_tracked(x):
            return self._rebuild(x, fields)
        if self._captured and id(x) in self._captured:
            return self._adopt_capture(x)
        return self.const(x)

    def _rebuild(self, obj: Any, fields: dict[str, Any]) -> Var:
        """A user object that holds traced values, passed to a rule (``m.total()`` with a rule for
        ``Matrix.total``): the graph rebuilds it from its attributes, so gradients reach them."""
        from . import primitives as irad_ops
        attrs = {k: self.atom(v) for k, v in fields.items()}
        v = self.new_var(obj)
        self.emit(irad_ops.rebuild, (const(type(obj)), attrs), {}, (v,), prim="irad.primitives.rebuild")
        self.values[v.id] = obj
        return v

    def const(self, x: Any, origin: str | None = None) -> Const:
        if isinstance(x, np.ndarray):
            c = self.consts.get(id(x))
            if c is None:
                # NOTE: an array that existed before the trace is the user's: live (read at each
                # call, never folded); one an untraced call made during the trace is irad's
                c = Const(x, typeof(x), self._origin(x) if origin is None else origin, id(x) not in self.born)
                self.consts[id(x)] = c
                self.aliasing.const_roots.add(id(root_of(x)))
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
        f: Any = sys._getframe(2)
        while f is not None and id(f.f_code) not in INSTRUMENTED:
            f = f.f_back
        return f

    def loc(self) -> Loc | None:
        f = self._user_frame()
        # library code traced through (numpy's or SciPy's Python, the stdlib, irad's own written-out
        # helpers) reports the user's call site, what an error or a dump should point at, and the
        # library's line as the inner one
        inner = None
        while f is not None and f.f_code.co_filename.startswith(_INSTALLED_DIRS):
            g = f.f_back
            while g is not None and id(g.f_code) not in INSTRUMENTED:
                g = g.f_back
            if g is None:
                break
            if inner is None and not f.f_code.co_filename.startswith(_LIBRARY_DIRS):
                inner = f  # (numpy's and irad's own lines say nothing the user can act on)
            f = g
        if f is None:
            return None
        code, line = f.f_code, f.f_lineno or 0
        per_line = _LOCS.get(code)
        if per_line is None:
            per_line = {}
            _LOCS[code] = per_line
        key = line if inner is None else (line, inner.f_code.co_filename, inner.f_lineno)
        loc = per_line.get(key)
        if loc is None:
            where = "" if inner is None else \
                f"{inner.f_code.co_qualname} ({os.path.basename(inner.f_code.co_filename)}:{inner.f_lineno})"
            loc = per_line[key] = Loc(code.co_filename, line, code.co_qualname, where)
        return loc

    def emit(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], outs: tuple[Var, ...],
             unpack: bool = False, prim: str | None = None) -> Op:
        for k in kwargs:
            if k[:1] == "_":  # NOTE: op kwargs named `_...` are irad's own attributes (`_rule`): never the user's
                raise self.unsupported(f"the keyword argument {k!r} (a name starting with '_') in a call of "
                                       f"{registry.qualname(fn)}",
                                       "pass it positionally, or rename it")
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
        if isinstance(result, np.ndarray) and type(result) is not np.ndarray and \
                (self._rebinds is not None or foreign_array(type(result))):
            # inside a numpy function traced through: masked arrays and matrices are not followed;
            # elsewhere a subclass whose own code would compute (np.ma, matrix, an overridden __mul__)
            why = foreign_array(type(result))
            raise self.unsupported(f"a {type(result).__module__}.{type(result).__qualname__} (an ndarray subclass"
                                   f"{'; ' + why if why else ''}) made by {registry.qualname(fn)}",
                                   _foreign_hint(type(result)) if why else "")
        if trackable(result):
            if not rebind and (id(result) in self.vars or _is_one_of(result, args)
                               or (kwargs and _is_one_of(result, kwargs.values()))):
                result = _fresh(result)
            v = self.new_var(result)
            self.emit(fn, a_args, a_kwargs, (v,))
            self.track(result, v)
            if isinstance(result, np.ndarray) and result.base is not None:
                self.aliasing.note_view(result, fn, args, kwargs)
            return result
        if type(result) is np.bool_:
            # NOTE: np.True_/np.False_ are singletons that identity cannot track; user code gets
            # a fresh read-only 0-d bool array instead, typed as the np.bool_ the program will
            # compute, so that ``np.where(s > 0, ...)`` on a scalar ``s`` stays data and only a
            # truth test (``if s > 0:``) guards.  ``m |= ...`` on it rebinds, as on np.bool_.
            box = np.array(result)
            box.flags.writeable = False
            v = self.new_var(result)
            self.emit(fn, a_args, a_kwargs, (v,))
            self.track(box, v)
            self._boxed.add(id(box))
            return box
        if isinstance(result, (bool, int, np.bool_)):
            if type(result) is int and self.ints is not None and intdata.is_data_call(self, fn, args, kwargs):
                return intdata.result(self, fn, a_args, a_kwargs, result)  # `i + 1`: data again
            if type(result) is TracedInt:  # (max(i, 3) is one of its arguments)
                result = int(result)
            v = self.new_var(result)
            self.emit(fn, a_args, a_kwargs, (v,))
            self.values[v.id] = result
            self._guard(v, result)
            return result
        # (a list the call was handed and returns, operator.iadd's: its items keep their Vars)
        if isinstance(result, (tuple, list)) and result and \
                not (type(result) is list and _is_one_of(result, args)) and \
                any(trackable(x) or isinstance(x, (bool, int, np.bool_, str, bytes)) for x in flatten(result)[0]):
            return self._record_container(fn, a_args, a_kwargs, result, args)
        if result is None or isinstance(result, _UNTRACKED_RESULTS) or id(result) in self.vars or \
                _is_one_of(result, args):
            self.emit(fn, a_args, a_kwargs, ())
            return result
        if not is_impure(fn) and any(x is result for x in flatten((args, kwargs))[0]):
            return result  # an untracked item picked out of the arguments (itemgetter(0)((k, v))): a constant
        # an opaque value (a string, a random generator, ...) that depends on what flowed in
        v = self.new_var(result)
        self.emit(fn, a_args, a_kwargs, (v,))
        if isinstance(result, (str, bytes)) and len(result) < 2:
            self.values[v.id] = result
            self._guard(v, result)  # CPython shares short strings: they cannot carry a Var
        else:
            self.track(result, v)
        return result

    def _record_container(self, fn: Any, a_args: tuple[Any, ...], a_kwargs: dict[str, Any], result: Any,
                          raw_args: tuple[Any, ...]) -> Any:
        refused = exact_ratio_error(self, fn, a_args)  # x.as_integer_ratio(): exact ints that would be guarded
        if refused is not None:
            raise refused
        leaves, tree = flatten(result)
        outs, new_leaves, guards = [], [], []
        for x in leaves:
            if trackable(x) and (id(x) in self.vars or any(x is a for a in raw_args)):
                x = _fresh(x)
            v = self.new_var(x)
            outs.append(v)
            new_leaves.append(x)
            self.values[v.id] = x
            if isinstance(x, (bool, int, np.bool_)) or (isinstance(x, (str, bytes)) and len(x) < 2):
                guards.append((v, x))
        self.emit(fn, a_args, a_kwargs, tuple(outs), unpack=True)
        for v, x in zip(outs, new_leaves):
            if trackable(x) or (isinstance(x, (str, bytes)) and len(x) >= 2 and id(x) not in self.vars):
                self.track(x, v)
        for v, x in guards:
            self._guard(v, x)
        if any(a is not b for a, b in zip(leaves, new_leaves)):
            result = unflatten(tree, new_leaves)
        return result

    def _guard(self, v: Var, value: Any) -> None:
        from . import primitives as irad_ops
        expected = value.item() if isinstance(value, np.generic) else \
            int(value) if type(value) is TracedInt else value  # (a plain int in the program)
        self.emit(irad_ops.guard, (v,), {"expected": Const(expected, typeof(expected))}, (),
                  prim="irad.primitives.guard")

    def guard_value(self, x: Any) -> None:
        """A tracked value was used where only its concrete value matters (an index bound...)."""
        self._guard(self.atom(x), x)

    def _guard_dtype(self, x: Any) -> None:
        from . import primitives as irad_ops
        if self.is_tracked(x) and isinstance(x, np.ndarray):
            self.emit(irad_ops.guard_dtype, (self.atom(x),), {"expected": const(x.dtype)}, (),
                      prim="irad.primitives.guard_dtype")

    def _guard_shape(self, x: Any) -> None:
        from . import primitives as irad_ops
        if self.is_tracked(x):
            self.emit(irad_ops.guard_shape, (self.atom(x),), {"expected": const(tuple(np.shape(x)))}, (),
                      prim="irad.primitives.guard_shape")

    def truth(self, v: Any) -> None:
        """``bool(v)`` of a traced value decides control flow: guard on it."""
        if id(v) in self._boxed:  # a comparison result: guard on it directly
            self._guard(self.atom(v), bool(v))
            return
        self.record(builtins.bool, (v,), {}, bool(v))

    def truth_value(self, v: Any) -> bool:
        if id(v) in self.vars:
            self.truth(v)
        return bool(v)

    def truth_test(self, v: Any, keep: int) -> Any:
        """A truth test in user code (``if v``, ``not v``, ``a or b``)."""
        if id(v) in self.vars:
            self.truth(v)
            return v
        if self.world and id(v) in self.world:  # `if HOOKS:` on a container of the world
            self.read_world(v)
        if self.is_pyobject(v):
            r = run_dunder_builtin(self, builtins.bool, (v,), {})
            if r is not NotImplemented and not keep:
                return r
        return v

    # ---- operators ------------------------------------------------------------------------

    def _is_pyclass(self, tp: type) -> bool:
        r = self._pyclass.get(tp)
        if r is None:
            r = self._pyclass[tp] = _python_class(tp)
        return r

    def is_pyobject(self, x: Any) -> bool:
        """Is ``x`` an instance of a user class with Python dunders or properties?"""
        tx = type(x)
        return tx not in _FAST and tx not in _CONTAINER_FAST and self._is_pyclass(tx)

    def dunder(self, tp: type, name: str) -> Any:
        """The raw class attribute ``name`` of ``tp`` (a compiled program re-checks it)."""
        found = None
        for klass in tp.__mro__:
            if name in vars(klass):
                found = vars(klass)[name]
                break
        if isinstance(found, (types.FunctionType, property, functools.cached_property, staticmethod, classmethod)):
            self.deps.add(("attr", tp, name, Identity(found)))
        return found

    def _dispatch_binary(self, a: Any, b: Any, op: int) -> Any:
        """Python's binary-operator protocol, with user dunders run instrumented."""
        name = hooks._NAMES[op % hooks.N_BINOPS].rstrip("_")
        ta, tb = type(a), type(b)
        if op >= hooks.N_BINOPS:
            f = self.dunder(ta, f"__i{name}__")
            if isinstance(f, types.FunctionType):
                r = self.call(f, (a, b), {})
                if r is not NotImplemented:
                    return r
            elif f is not None and not self.is_pyobject(b):
                return self._binop_native(a, b, op)
        fwd, rev = self.dunder(ta, f"__{name}__"), self.dunder(tb, f"__r{name}__")
        order = [(fwd, a, b), (rev, b, a)] if ta is not tb else [(fwd, a, b)]
        if ta is not tb and issubclass(tb, ta) and rev is not None and rev is not self.dunder(ta, f"__r{name}__"):
            order.reverse()
        for f, x, y in order:
            if f is None:
                continue
            if isinstance(f, types.FunctionType):
                r = self.call(f, (x, y), {})
            else:  # a C slot (float.__mul__, ...): NotImplemented for user objects
                r = f(x, y)
                if r is not NotImplemented and (self.deep_tracked(x) or self.deep_tracked(y)):
                    r = self.record(hooks.OUT_OF_PLACE[op], (a, b), {}, r)
            if r is not NotImplemented:
                return r
        raise TypeError(f"unsupported operand type(s) for {name}: '{ta.__name__}' and '{tb.__name__}'")

    def binop(self, a: Any, b: Any, op: int) -> Any:
        ta, tb = type(a), type(b)
        if (ta not in _FAST and self._is_pyclass(ta)) or (tb not in _FAST and self._is_pyclass(tb)):
            return self._dispatch_binary(a, b, op)
        return self._binop_native(a, b, op)

    def _binop_native(self, a: Any, b: Any, op: int) -> Any:
        if self.ints is not None and (type(a) is TracedInt or type(b) is TracedInt):
            a, b = intdata.operands(self, a, b, op)
            if (type(a) is TracedInt or type(b) is TracedInt) and intdata.numpy_partner(a, b):
                return intdata.numpy_binop(self, a, b, op)
        vars_ = self.vars
        inplace_array = op >= hooks.N_BINOPS and isinstance(a, np.ndarray)
        if inplace_array and id(a) in self._boxed:  # a boxed np.bool_ (see record): not in place
            op -= hooks.N_BINOPS
            inplace_array = False
        if id(a) not in vars_ and id(b) not in vars_ and not (self.aliasing.seen(a) | self.aliasing.seen(b)):
            if op == _MOD and type(a) in (str, bytes) and self.deep_tracked(b):  # "%.3f %s" % (x, y)
                return self.record(operator.mod, (a, b), {}, a % b)
            if inplace_array:
                if self.aliasing.touches_traced_memory(a):
                    return self._binop_inplace(a, b, op)
                self.aliasing.protect_consts(a)
            if self._keyed and (id(a) in self._keyed or id(b) in self._keyed):  # s | t, d | e of keyed sets, dicts
                r = hooks.BINOPS[op](a, b)
                self.note_keys((), (a, b, r))
                return r
            return hooks.BINOPS[op](a, b)
        if inplace_array:
            return self._binop_inplace(a, b, op)
        fn = hooks.OUT_OF_PLACE[op]
        # NOTE: the hot path of scalar code: record inline instead of through record()
        r = fn(a, b)
        if not trackable(r):
            return self.record(fn, (a, b), {}, r)
        if r is a or r is b or id(r) in vars_:
            r = _fresh(r)
        va, vb = vars_.get(id(a)), vars_.get(id(b))
        if self.aliasing.stale:
            va, vb = (self.atom(a) if va is not None else None), (self.atom(b) if vb is not None else None)
        v = Var(self.next_id, typeof(r))
        self.next_id += 1
        self.ops.append(Op(_OP_NAMES[op], (va if va is not None else self.atom(a), vb if vb is not None else
                                           self.atom(b)), (), (v,), fn, self.loc(), False))
        self.track(r, v)
        return r

    def _binop_inplace(self, a: np.ndarray, b: Any, op: int, b_atom: Any = None) -> Any:
        """``a op= b`` on an array: a genuine in-place update (``b_atom``: what ``b`` is in the graph
        when it is not ``b``'s own atom: a traced int's Var, ``b`` its plain value)."""
        fn = hooks.OUT_OF_PLACE[op]
        before = self.aliasing.before_mutation(a, f"{hooks._NAMES[op - hooks.N_BINOPS].rstrip('_')}=")
        atoms: tuple[tuple[Any, ...], dict[str, Any]] = ((before, self.atom(b) if b_atom is None else b_atom), {})
        out_dtype = np.result_type(a, b) if not isinstance(b, (float, int, complex)) else None
        hooks.BINOPS[op](a, b)
        if out_dtype is not None and out_dtype != a.dtype:
            tmp = fn(self.values[before.id] if isinstance(before, Var) else before.value, b)
            tv = self.new_var(tmp)
            self.emit(fn, atoms[0], {}, (tv,))
            self.keep.append(tmp)
            return self.aliasing.rebind(a, np.ndarray.astype, ((tv, const(a.dtype)), {}))
        return self.aliasing.rebind(a, fn, atoms)

    def compare(self, a: Any, b: Any, op: int) -> Any:
        fn = hooks.COMPARES[op & 15]
        ta, tb = type(a), type(b)
        if (ta not in _FAST and self._is_pyclass(ta)) or (tb not in _FAST and self._is_pyclass(tb)):
            names = ["lt", "le", "eq", "ne", "gt", "ge"]
            refl = ["gt", "ge", "eq", "ne", "lt", "le"]
            i = op & 15
            r: Any = NotImplemented
            for f, x, y in ((self.dunder(ta, f"__{names[i]}__"), a, b), (self.dunder(tb, f"__{refl[i]}__"), b, a)):
                if isinstance(f, types.FunctionType):
                    r = self.call(f, (x, y), {})
                    if r is not NotImplemented:
                        break
            if r is NotImplemented:  # (a namedtuple of traced values compares as a tuple, through the tracer)
                r = self._compare_sequences(a, b, i) if isinstance(a, tuple) and isinstance(b, tuple) and \
                    self.deep_tracked((a, b)) else fn(a, b)
        elif self.aliasing.seen(a) | self.aliasing.seen(b):
            r = intdata.compare(self, fn, a, b) if self.ints is not None and (ta is TracedInt or tb is TracedInt) \
                else self.record(fn, (a, b), {}, fn(a, b))
        elif (ta is tb is list or (isinstance(a, tuple) and isinstance(b, tuple))) and self.deep_tracked((a, b)):
            r = self._compare_sequences(a, b, op & 15)
        else:
            if self._keyed and (id(a) in self._keyed or id(b) in self._keyed):  # s <= t, d == e
                self.note_keys((), (a, b))
            r = fn(a, b)
        if op & 16:
            return self.truth_value(r)
        return r

    def _compare_sequences(self, a: Any, b: Any, op: int) -> bool:
        """``a == b``, ``a < b`` & co of two lists (or tuples) holding traced values, as CPython
        compares them (the first items that differ decide), with every item comparison made
        through the tracer, so that each decision guards instead of being made natively in C."""
        if op in (2, 3) and len(a) != len(b):
            return op == 3
        for x, y in zip(a, b):
            if x is y or self.truth_value(self.compare(x, y, 2)):
                continue
            if op in (2, 3):
                return op == 3
            return self.truth_value(self.compare(x, y, op))
        r: bool = hooks.COMPARES[op](len(a), len(b))
        return r

    def contains(self, a: Any, b: Any, invert: int) -> bool:
        if self.is_pyobject(b):
            d = self.dunder(type(b), "__contains__")
            if isinstance(d, types.FunctionType):
                r = self.truth_value(self.call(d, (b, a), {}))
                return (not r) if invert else r
        if self.world and id(b) in self.world:  # `"scale" in CFG`: its items are a dependency
            self.read_world(b)
        if isinstance(b, _HASHED) and (self._keyed or self._traced_key(a)):
            self.note_keys((a,), (b,))  # whether `k in s` holds depends on which keys are equal
            r = a in b
        elif self.deep_tracked(a) or self.is_tracked(b) or (type(b) in (list, tuple) and self.deep_tracked(b)):
            # (`3 in [n, 5]`: the items are compared to `a` in C, so the result depends on them)
            r = self.record(operator.contains, (b, a), {}, operator.contains(b, a))
        else:
            r = a in b
        return (not r) if invert else bool(r)

    def unary(self, a: Any, name: str) -> Any:
        fn = hooks.UNARY[name]
        if type(a) not in _FAST and self._is_pyclass(type(a)):
            f = self.dunder(type(a), {"UNARY_NEGATIVE": "__neg__", "UNARY_INVERT": "__invert__",
                                      "UNARY_POSITIVE": "__pos__"}[name])
            if isinstance(f, types.FunctionType):
                return self.call(f, (a,), {})
        if not self.aliasing.seen(a):
            return fn(a)
        return self.record(fn, (a,), {}, fn(a))

    # ---- dict keys and set members ----------------------------------------------------------

    def _traced_key(self, k: Any) -> bool:
        """A traced value (or a tuple holding one) used as a dict key or set member."""
        return id(k) in self.vars or (type(k) is tuple and any(self._traced_key(e) for e in k))

    def note_keys(self, keys: Any, containers: Any) -> None:
        """``keys`` enter, leave or are looked up in the dicts and sets among ``containers``.  Which
        keys are equal decides the result (``{x[0]: 1.0, x[1]: 2.0}`` has one entry when they
        coincide), so when traced values key a container the trace must not bake in what it saw:
        every key that meets such a container takes part in one guard on the pattern of their
        equalities (``irad.primitives.key_classes``), emitted when the graph is assembled."""
        keyed = self._keyed
        hashed = [c for c in containers if isinstance(c, _HASHED) and not self.is_pyobject(c)]
        if not any(id(c) in keyed for c in hashed) and not any(self._traced_key(k) for k in keys):
            return
        if self._key_loc is None:
            self._key_loc = self.loc()
        for c in hashed:
            if id(c) not in keyed:
                keyed[id(c)] = c
                for k in list(c):
                    self._add_key(k)
        for k in keys:
            self._add_key(k)

    def _add_key(self, k: Any) -> None:
        if self._traced_key(k):
            try:
                hash(k)
            except TypeError:  # (an array in a tuple): the operation itself raises
                return
            if id(k) not in self._key_ids:
                self._key_ids.add(id(k))
                self._key_tracked.append(k)
                self.keep.append(k)
            return
        try:
            self._key_table.setdefault(k, len(self._key_table))
        except TypeError:  # unhashable: the operation itself raises
            pass

    def _flush_keys(self) -> None:
        """The guard ``note_keys`` promised: one op for the whole trace, at the first keyed line."""
        if not self._key_tracked:
            return
        from . import primitives as irad_ops
        table, keys = dict(self._key_table), tuple(self._key_tracked)
        self._key_tracked = []
        labels = irad_ops.key_classes(table, keys)
        v = self.new_var(labels, "keys")
        self.values[v.id] = labels
        self.ops.append(Op("irad.primitives.key_classes", (self.const(table), tuple(self.atom(k) for k in keys)), (),
                           (v,), irad_ops.key_classes, self._key_loc, False))
        self.ops.append(Op("irad.primitives.guard", (v,), (("expected", Const(labels, typeof(labels))),), (),
                           irad_ops.guard, self._key_loc, False))

    def _guard_members(self, s: Any) -> None:
        """Iterating a set that traced values are members of: its order follows their hashes, that
        is their values, which are guarded."""
        for e in s:
            for part in (e if type(e) is tuple else (e,)):
                if id(part) in self.vars and id(part) not in self._order_guarded:
                    self._order_guarded.add(id(part))
                    self.guard_value(part)

    def build_map(self, items: tuple[Any, ...]) -> dict[Any, Any]:
        """``{k0: v0, k1: v1, ...}`` (BUILD_MAP)."""
        keys = items[0::2]
        d = dict(zip(keys, items[1::2]))
        self.note_keys(keys, (d,))
        return d

    def build_set(self, items: tuple[Any, ...]) -> set[Any]:
        """``{a, b, ...}`` (BUILD_SET)."""
        s = set(items)
        self.note_keys(items, (s,))
        return s

    def hash_add(self, c: Any, item: Any, kind: int) -> Any:
        """Before a comprehension or display adds to the dict/set ``c``: ``item`` is one key
        (``kind`` 1: MAP_ADD, SET_ADD) or a mapping/iterable whose keys/items go in (2: DICT_UPDATE,
        SET_UPDATE); returns what the instruction then consumes."""
        if kind == 1:
            self.note_keys((item,), (c,))
            return item
        if isinstance(item, _HASHED):
            self.note_keys((), (c, item))
        elif type(item) is list or type(item) is tuple:
            self.note_keys(item, (c,))
        elif _is_iterator(item) and not isinstance(item, (str, bytes)):
            item = list(item)
            self.note_keys(item, (c,))
        return item

    def delitem(self, a: Any, i: Any) -> None:
        """``del a[i]``."""
        ta = type(a)
        if ta not in _FAST and ta not in _CONTAINER_FAST and self._is_pyclass(ta):
            f = self.dunder(ta, "__delitem__")
            if isinstance(f, types.FunctionType):
                self.call(f, (a, i), {})
                return
        if isinstance(a, dict):
            self.note_keys((i,), (a,))
        elif self.deep_tracked(i) and not isinstance(a, np.ndarray):
            self._guard_index(i)
        del a[i]

    def _hash_call(self, f: Any, owner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A C method of a dict or set, or a constructor of one (``dict(zip(ks, vs))``,
        ``d.get(k)``, ``s.update(xs)``): it only moves references, so it runs natively, and the keys
        it was handed are noted (``note_keys``).  Iterators are read first, so their items are seen."""
        name = getattr(f, "__name__", "")
        single = name in _ONE_KEY_METHODS and not isinstance(owner, type)  # d.get(k), s.add(k): k is one key
        args = tuple(list(a) if _is_iterator(a) and not isinstance(a, _HASHED) else
                     self.iterable(a) if not single and type(a) is np.ndarray and a.ndim and self.aliasing.seen(a) else a
                     for a in args)  # an iterator's items, a traced array's rows (dict.fromkeys(x), s.update(x))
        keys: list[Any] = []
        if f is _COUNT_ELEMENTS or isinstance(owner, type):  # _count_elements(counter, xs), dict.fromkeys(xs)
            src = args[-1] if f is _COUNT_ELEMENTS else (args[0] if args else ())
            keys = list(src) if type(src) is list or type(src) is tuple else []
        elif isinstance(owner, dict) or (isinstance(f, type) and issubclass(f, dict)):
            if isinstance(f, type) or name == "update":  # dict(pairs), d.update(pairs): the first items
                src = args[-1] if args else ()
                if type(src) is list or type(src) is tuple:
                    keys = [e[0] for e in src if (type(e) is tuple or type(e) is list) and len(e) == 2]
            else:  # d.get(k, default), d.pop(k), d.setdefault(k, v), d.__getitem__(k), ...
                keys = list(args[:1])
        else:  # sets: s.add(k), s.update(xs, ...), set(xs), s | t
            for a in args:
                if isinstance(a, _HASHED):
                    continue
                if type(a) is list or type(a) is tuple:
                    keys.extend(a)
                else:
                    keys.append(a)
        if isinstance(owner, (set, frozenset)) and getattr(f, "__name__", "") == "pop" and id(owner) in self._keyed:
            self._guard_members(owner)  # which member pop() takes follows the hashes
        r = f(*args, **kwargs)
        if id(r) not in self.world:
            self.born.add(id(r))
        self.note_keys(keys, (owner, r, *args, *kwargs.values()))
        return r

    # ---- strings --------------------------------------------------------------------------

    def format_value(self, v: Any, spec: Any, conv: int) -> Any:
        """``f"{v!conv:spec}"``."""
        if conv:
            v = self.call((builtins.str, builtins.repr, builtins.ascii)[conv - 1], (v,), {})
        elif spec == "" and self.is_pyobject(v):
            v = self.call(builtins.str, (v,), {})
        if type(v) is str and spec == "":
            return v
        return self.call(builtins.format, (v, spec), {})

    def build_string(self, pieces: tuple[Any, ...]) -> str:
        s = "".join(pieces)
        if any(id(p) in self.vars for p in pieces):
            return self.record(str.join, ("", list(pieces)), {}, s)  # type: ignore[no-any-return]
        return s

    # ---- indexing -------------------------------------------------------------------------

    def _guard_index(self, i: Any) -> None:
        """An index into a container that is not an array (``xs[i]``, ``xs[:n]``): the structure of
        what it selects is fixed by the trace, so the traced parts of the index are guarded."""
        for part in (i if type(i) is tuple else (i,)):
            for p in ((part.start, part.stop, part.step) if type(part) is slice else (part,)):
                if self.is_tracked(p):
                    self.guard_value(p)

    def _tracked_mask(self, i: Any) -> bool:
        for part in (i if type(i) is tuple else (i,)):
            if isinstance(part, np.ndarray) and part.dtype == np.bool_ and id(part) in self.vars:
                return True
        return False

    def getitem(self, a: Any, i: Any) -> Any:
        ta = type(a)
        if ta not in _FAST and ta not in _CONTAINER_FAST and self._is_pyclass(ta):
            f = self.dunder(ta, "__getitem__")
            if isinstance(f, types.FunctionType):
                return self.call(f, (a, i), {})
        if self.aliasing.seen(a) or (self.deep_tracked(i) and isinstance(a, np.ndarray)):
            r = self.record(operator.getitem, (a, i), {}, a[i])
            if self._tracked_mask(i):
                self._guard_shape(r)
            return r
        if isinstance(a, dict) and (self._keyed or self._traced_key(i)):
            self.note_keys((i,), (a,))  # which entry d[k] finds depends on which keys are equal
        elif self.deep_tracked(i):
            self._guard_index(i)
        if self.world and id(a) in self.world:
            self.read_world(a)
        r = a[i]
        if ta is np.ndarray and isinstance(r, np.ndarray) and r.base is not None:
            self.aliasing.note_untracked_view(r, operator.getitem, (a, i), {})
        return r

    def setitem(self, a: Any, i: Any, v: Any) -> None:
        ta = type(a)
        if ta not in _FAST and ta not in _CONTAINER_FAST and self._is_pyclass(ta):
            f = self.dunder(ta, "__setitem__")
            if isinstance(f, types.FunctionType):
                self.call(f, (a, i, v), {})
                return
        if isinstance(a, np.ndarray) and not (self.deep_tracked(v) or self.deep_tracked(i) or
                                              self.aliasing.touches_traced_memory(a)):
            self.aliasing.protect_consts(a)
        elif isinstance(a, np.ndarray):
            d = self.aliasing.derived.get(id(v))
            if d is not None and d[0] is operator.getitem and d[3] is a and _same_index(d[1][1], i):
                a[i] = v  # `a[i] += b` stores the view of a[i] back: its update is already written back
                return
            from . import primitives as irad_ops
            before = self.aliasing.before_mutation(a, "a[i] = v")
            atoms: tuple[tuple[Any, ...], dict[str, Any]] = ((before, self.atom(i), self.atom(v)), {})
            a[i] = v
            self.aliasing.rebind(a, irad_ops.setitem, atoms)
            return
        if isinstance(a, dict) and (self._keyed or self._traced_key(i)):
            self.note_keys((i,), (a,))
        elif self.deep_tracked(i) and not isinstance(a, np.ndarray):
            self._guard_index(i)
        if self.world and id(a) in self.world:  # `CACHE[k] = v` into a container of the world
            self.deps.add(effect_dep(f"an item of a {ta.__name__}"))
        a[i] = v

    def rows(self, a: np.ndarray) -> list[Any]:
        if a.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return [self.getitem(a, k) for k in range(a.shape[0])]

    def iterable(self, v: Any) -> Any:
        """What iterating over ``v`` should iterate: rows of a traced array, a user ``__iter__``."""
        if self.world and id(v) in self.world:
            self.read_world(v)
        if self._keyed and id(v) in self._keyed and isinstance(v, (set, frozenset)):
            self._guard_members(v)
        if type(v) is np.ndarray and v.ndim >= 2 and not self.aliasing.seen(v):
            return self.rows(v)  # rows are views: a later write through one must reach `v`
        if id(v) in self.vars:
            if isinstance(v, np.ndarray):
                return self.rows(v)
            if isinstance(v, (str, bytes)):  # each character depends on the data: recorded, guarded
                return [self.getitem(v, k) for k in range(self.call(builtins.len, (v,), {}))]
            if not isinstance(v, _TRACKED_TYPES):
                raise self.unsupported(f"iterating over a traced {type(v).__name__} object",
                                       "convert it to an array (np.asarray) or a list first, outside the loop")
        tv = type(v)
        if tv not in _FAST and tv not in _CONTAINER_FAST and self._is_pyclass(tv):
            f = self.dunder(tv, "__iter__")
            if isinstance(f, types.FunctionType):
                return self.call(f, (v,), {})
            if f is None and isinstance(self.dunder(tv, "__getitem__"), types.FunctionType):
                return _sequence_iter(v)
        return v

    # ---- attributes -----------------------------------------------------------------------

    def getattr(self, o: Any, name: str) -> Any:
        to = type(o)
        if to is types.ModuleType:
            v = getattr(o, name)
            if name in vars(o):  # `config.scale` may be rebound, `np.sin` monkeypatched
                self.deps.add(("global", DictRef(vars(o)), name, Identity(v)))
                if not is_library_module(o.__name__):
                    self.reach(v, f"global {name}")
            return v
        if id(o) in self.vars or (to is np.ndarray and name in _VIEW_ATTRS):
            if to is TracedInt:
                return intdata.attribute(self, o, name)
            if name in _BUFFER_ATTRS and _is_one_of(getattr(to, name, None), _BUFFER_DESCRIPTORS):
                if name == "data":  # a.data is memoryview(a): an opaque value made from it, recorded
                    return self.call(builtins.memoryview, (o,), {})
                raise self.unsupported(f"a.{name} (a raw pointer to the memory) of a traced array",
                                       "pass the array itself to numpy functions, or register a rule for the C "
                                       "function that reads it")
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
                raise self.unsupported("the .flat iterator of a traced array", "use a.ravel() instead")
            r = getattr(o, name)
            if callable(r) or isinstance(o, _TRACKED_TYPES):
                return r
            return self.record(builtins.getattr, (o, name), {}, r)  # data attribute of an opaque value
        if to not in _FAST and self._is_pyclass(to):
            d = self.dunder(to, name)
            if isinstance(d, property) and isinstance(d.fget, types.FunctionType):
                return self.call(d.fget, (o,), {})
            if d is not None and type(d) not in _FAST and self._is_pyclass(type(d)):  # a user descriptor
                get = self.dunder(type(d), "__get__")
                if isinstance(get, types.FunctionType) and (self.dunder(type(d), "__set__") is not None or
                                                            name not in getattr(o, "__dict__", {})):
                    return self.call(get, (d, o, to), {})
            if isinstance(d, functools.cached_property) and name not in getattr(o, "__dict__", {}):
                if id(o) not in self.born:  # once cached, Python reads the cached value: so must the program
                    self.deps.add(("inst", Identity(o), name, Identity(MISSING)))
                val = self.call(d.func, (o,), {})
                o.__dict__[name] = val
                return val
            gab, ga = self.dunder(to, "__getattribute__"), self.dunder(to, "__getattr__")
            if isinstance(gab, types.FunctionType):
                try:
                    return self.call(gab, (o, name), {})
                except AttributeError:
                    if not isinstance(ga, types.FunctionType):
                        raise
                    return self.call(ga, (o, name), {})
            if isinstance(ga, types.FunctionType):  # CPython would call it natively: call it traced
                try:
                    r = gab(o, name)
                except AttributeError:
                    return self.call(ga, (o, name), {})
                self._read_attr(o, name, r)
                return r
        try:
            r = getattr(o, name)
        except AttributeError:  # `hasattr(o, "bias")`, `getattr(o, "s", None)`: its absence is read too
            self._read_attr(o, name, MISSING)
            raise
        self._read_attr(o, name, r)
        return r

    def _read_attr(self, o: Any, name: str, r: Any) -> None:
        """The trace read ``o.name`` of an object it did not make: what it read is a dependency
        (``model.w = new``, ``model.flag = True``, an instance attribute shadowing a method)."""
        if id(o) in self.born or id(o) in self.vars or (self.attr_writes and (id(o), name) in self.attr_writes):
            return
        to = type(o)
        if isinstance(o, type):
            if not _native_class(o):  # a class attribute: `Model.scale`
                self.deps.add(("attr", o, name, Identity(class_attr(o, name))))
                self.reach(r, f"attribute {name}")
            return
        d = getattr(o, "__dict__", None)
        if type(d) is dict:
            self.deps.add(("inst", Identity(o), name, Identity(d.get(name, MISSING))))
            if name not in d and not _native_class(to):  # from the class: a method, a class-level default
                self.deps.add(("attr", to, name, Identity(class_attr(to, name))))
        elif not _native_class(to) and isinstance(class_attr(to, name), types.MemberDescriptorType):  # __slots__
            self.deps.add(("inst", Identity(o), name, Identity(r)))
        else:
            return
        self.reach(r, f"attribute {name}")

    def setattr(self, o: Any, name: str, v: Any) -> None:
        to = type(o)
        if to not in _FAST and to is not types.ModuleType and self._is_pyclass(to):
            d = self.dunder(to, name)
            if isinstance(d, property) and isinstance(d.fset, types.FunctionType):
                self.call(d.fset, (o, v), {})
                return
            sa = self.dunder(to, "__setattr__")
            if isinstance(sa, types.FunctionType):
                self.call(sa, (o, name, v), {})
                return
        if isinstance(o, np.ndarray) and name in _ARRAY_SETATTRS and (self.aliasing.seen(o) or self.deep_tracked(v)):
            self._set_array_attr(o, name, v)
            return
        if id(o) not in self.born and id(o) not in self.vars and not isinstance(o, np.ndarray) and \
                to is not types.ModuleType:
            # `self.inp = x`, `self.training = True`: a compiled program replays the write at each call
            # (``attr_writes``); a value it cannot replay (a container of traced values) is a change to
            # the world that only tracing again repeats
            if id(v) in self.vars or not self.deep_tracked(v):
                self.attr_writes[(id(o), name)] = (o, name, v)
            else:
                self.deps.add(effect_dep(f"attribute {name!r} of a {to.__name__}"))
        elif to is types.ModuleType and not is_library_module(o.__name__):
            self.deps.add(effect_dep(f"attribute {name!r} of module {o.__name__}"))
        setattr(o, name, v)
        if self.ints is not None and id(o) not in self.born and intdata.holds_int(v):
            self.ints.homes.append(("attr", o, name))  # a plain int goes back after the trace

    def _set_array_attr(self, a: np.ndarray, name: str, v: Any) -> None:
        """``a.shape = s`` on a traced array: ``a`` now stands for ``reshape(a, s)`` (same memory);
        other attributes that reinterpret or rewrite the memory are refused."""
        if name == "dtype" and np.dtype(v) == a.dtype:
            return  # numpy's own code re-asserts the dtype (np.lib.stride_tricks.as_strided): nothing changes
        if name != "shape":
            raise self.unsupported(f"assigning a.{name} of a traced array",
                                   "write a[...] = v, or use a.astype / a.view out of place")
        old = self.atom(a)
        if isinstance(old, Var) and self.values.get(old.id) is a:
            self.values[old.id] = a.copy()  # the value the old Var stands for keeps its shape
        setattr(a, "shape", v)
        var = self.new_var(a)
        self.emit(np.reshape, (old, const(a.shape)), {}, (var,))
        self.track(a, var)
        # derivations that replay an op on `a` (or made `a`) no longer give these shapes: derive those
        # arrays from the memory positions of their root instead, or forget how they were made
        group = self.aliasing.views.get(id(root_of(a)), {})
        for k in [k for k, d in self.aliasing.derived.items() if d[3] is a or k == id(a)]:
            del self.aliasing.derived[k]
            x = a if k == id(a) else group.get(k)
            if x is not None and x.base is not None:
                try:
                    self.aliasing.flat_view_derivation(x)
                except MutationError:
                    pass

    def unsupported(self, what: str, hint: str) -> UnsupportedError:
        loc = self.loc()
        return UnsupportedError(f"{what} cannot be traced", loc.long if loc else "", hint)

    # ---- with-blocks ----------------------------------------------------------------------

    def context(self, mgr: Any) -> Any:
        """The object a ``with`` statement enters: user ``__enter__``/``__exit__`` run traced."""
        if not self.is_pyobject(mgr):
            return mgr
        enter, exit_ = self.dunder(type(mgr), "__enter__"), self.dunder(type(mgr), "__exit__")
        if not isinstance(enter, types.FunctionType) and not isinstance(exit_, types.FunctionType):
            return mgr
        return _TracedContext(mgr, enter, exit_)

    # ---- calls ----------------------------------------------------------------------------

    def call(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``f(*args, **kwargs)`` in traced code.  How it is traced is decided, in this order, by
        ``type(f)`` alone where no later check can claim a callable of that type (``_CALL_BY_TYPE``:
        a plain function, a bound method, a partial, a numpy ufunc, ...), then by the ordered checks
        below (each may claim callables of many types: their order is semantics), and whatever none
        of them takes is a primitive (``call_prim``)."""
        tf = type(f)
        by_type = _CALL_BY_TYPE.get(tf)
        if by_type is not None:
            return by_type(self, f, args, kwargs)
        nested = getattr(tf, "__irad_trace_call__", None)
        if nested is not None:  # an irad transform (grad of grad): it knows how to be traced
            return nested(f, self, args, kwargs)
        if member(f, _DUNDER_BUILTINS_) and args and self.is_pyobject(args[0]):
            r = run_dunder_builtin(self, f, args, kwargs)  # float(obj), abs(obj): the user's dunder, traced
            if r is not NotImplemented:
                return r
        special = SPECIAL.get(id(f))
        if special is not None and special[0] is f:
            return self._call_special(f, special[1], args, kwargs)
        if isinstance(f, type):
            if self._is_pyclass(f) and (type(f) is type or self.dunder(type(f), "__call__") is _TYPE_CALL):
                return self.construct(f, args, kwargs)  # also classes of metaclasses (abc.ABC) that keep type.__call__
            return self.call_prim(f, args, kwargs)
        if tf not in _FAST and self._is_pyclass(tf):  # an instance of a user class with a Python __call__
            d = self.dunder(tf, "__call__")
            if isinstance(d, types.FunctionType):
                return self.call_python(d, (f,) + args, kwargs)
        if registry.is_plum(f):  # plum multiple dispatch: the method plum resolves is what runs
            impl = registry.implementation(f, tuple(type(a) for a in args))
            self.deps.add(("plum", f, tuple(type(a) for a in args), impl))
            return self.call(impl, args, kwargs)
        return self.call_prim(f, args, kwargs)

    # ---- calls decided by the callable's type (the rows of _CALL_BY_TYPE) ----
    # Each takes ``(f, args, kwargs)`` and decides the call in full: what it does not trace itself is
    # a primitive, as the end of ``call`` would make it (no ordered check claims these types).

    def _call_function(self, f: types.FunctionType, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A plain Python function: traced through (``call_python``), unless it is irad's capture or a
        SciPy solver or integrator (its implicit-function or adjoint rule)."""
        if f is _CAPTURE:  # a nested program reads a value this trace follows: the object itself
            return args[0].value
        if f.__name__ in _SOLVER_NAMES:  # (a set test first: most calls are not these)
            handler = _SOLVER_CALLS.get((f.__module__, f.__name__))
            if handler is not None:
                module, name = handler.split(":")
                r = getattr(importlib.import_module("irad." + module), name)(self, f, args, dict(kwargs))
                if r is not NotImplemented:
                    return r
        return self.call_python(f, args, kwargs)

    def _call_method(self, f: types.MethodType, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A bound method of Python code: its function traced with ``self`` first (the method a later
        call finds on the class is a dependency); a bound C method is a primitive."""
        fn = f.__func__
        if type(fn) is types.FunctionType:
            owner = f.__self__ if isinstance(f.__self__, type) else type(f.__self__)
            self.deps.add(("attr", owner, fn.__name__, Identity(self.dunder(owner, fn.__name__))))
            return self.call_python(fn, (f.__self__,) + args, kwargs)
        return self.call_prim(f, args, kwargs)

    def _call_partial(self, f: functools.partial[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``functools.partial``: the function it wraps, called with what it holds (what it holds of the
        world a dependency)."""
        if id(f) not in self.born:  # `grad(partial(loss, params))`: what it holds is of the world
            for a in f.args:
                self.reach(a, "partial argument")
            self.reach(f.keywords, "partial keyword")
            self.read_world(f.keywords)
        return self.call(f.func, f.args + args, {**f.keywords, **kwargs})

    def _call_wrapped(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A ``staticmethod`` or ``classmethod`` object called as it is: the function it wraps."""
        return self.call(f.__func__, args, kwargs)

    def _call_lru(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``functools.lru_cache``/``cache`` of a Python function: the function itself traced when traced
        values flow in, else the cached value (of the world, as Python returns it)."""
        if type(getattr(f, "__wrapped__", None)) is not types.FunctionType:
            return self.call_prim(f, args, kwargs)
        if not self.deep_tracked(args) and not self.deep_tracked(kwargs):
            r = f(*args, **kwargs)  # the cached value itself, as Python returns it: of the world
            self.reach(r, "lru_cache")
            return r
        return self.call_python(f.__wrapped__, args, kwargs)  # lru_cache/cache: trace the function itself

    def _call_vectorize(self, f: np.vectorize, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``np.vectorize(f)(x, ...)`` of traced floats: ``f`` runs traced on every element
        (``vectorize_call``); other calls (signatures, excluded arguments, empty arrays) are primitives."""
        if not kwargs and f.signature is None and not f.excluded and args and \
                all(np.size(a) for a in args) and self._floats_flow_in(args, kwargs):
            return self.call(vectorize_call, (f,) + args, {})
        return self.call_prim(f, args, kwargs)

    def _call_unbound(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A container's C method called through its class (``dict.get(d, k)``, ``list.__getitem__(xs,
        i)``, ``functools.partial(dict.get, d)``): what ``d.get(k)`` and ``xs[i]`` do; other method and
        slot descriptors are primitives."""
        if not args or not isinstance(args[0], _BINDABLE) or not isinstance(args[0], f.__objclass__):
            return self.call_prim(f, args, kwargs)
        obj, rest = args[0], args[1:]
        name = f.__name__
        if type(obj) in _CONTAINER_FAST and not kwargs:
            if name == "__getitem__" and len(rest) == 1:
                return self.getitem(obj, rest[0])
            if name == "__setitem__" and len(rest) == 2:
                return self.setitem(obj, rest[0], rest[1])
            if name == "__delitem__" and len(rest) == 1:
                return self.delitem(obj, rest[0])
        return self.call(f.__get__(obj, type(obj)), rest, kwargs)

    def _call_getter(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``operator.itemgetter(k)(obj)``, ``attrgetter("a.b")(obj)``, ``methodcaller("get", k)(obj)``:
        the item, attribute or method call itself (so that dict and list items keep their values)."""
        if len(args) != 1 or kwargs:
            return self.call_prim(f, args, kwargs)
        obj = args[0]
        ctor, spec = f.__reduce__()
        if type(f) is operator.methodcaller:
            if type(ctor) is functools.partial:  # methodcaller(name, *args, **kwargs)
                name, margs, mkw = ctor.args[0], tuple(spec), dict(ctor.keywords)
            else:
                name, margs, mkw = spec[0], tuple(spec[1:]), {}
            return self.call(self.getattr(obj, name), margs, mkw)
        got: tuple[Any, ...] | list[Any]
        if type(f) is operator.itemgetter:
            got = tuple(self.getitem(obj, k) for k in spec)
        else:
            got = []
            for path in spec:
                v = obj
                for part in path.split("."):
                    v = self.getattr(v, part)
                got.append(v)
            got = tuple(got)
        return got[0] if len(spec) == 1 else got

    def _call_dispatcher(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A numpy function written in Python (``np.cov``, ``np.gradient``, ...): traced through its body
        (``call_library``) when it has no rule, does not mutate and is not a function of shapes only."""
        special = SPECIAL.get(id(f))
        if special is not None and special[0] is f:
            # NOTE: np.shape, np.ndim, np.result_type & co are dispatchers with SPECIAL rows: the
            # ordered check `call` makes for SPECIAL, made here first (no other ordered check claims
            # a dispatcher)
            return self._call_special(f, special[1], args, kwargs)
        impl = getattr(f, "__wrapped__", None)
        if type(impl) is types.FunctionType and registry.lookup(f, args) is None and \
                not registry.is_nondiff(f) and not is_impure(f) and not member(f, _STATIC_FUNCS_) and \
                MUTATORS.get(id(f)) is None:
            return self.call_library(f, impl, args, kwargs)
        return self.call_prim(f, args, kwargs)

    def _call_special(self, f: Any, handler: Handler, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A builtin with a row in ``SPECIAL`` (sorted, min, len, map, ...): its handler, after the
        int arguments are made data or guarded."""
        if self.ints is not None:
            if f is builtins.type and len(args) == 1 and type(args[0]) is TracedInt:
                return int
            args, kwargs = intdata.at_call(self, f, args, kwargs, special=True)
        return handler(self, args, kwargs)

    def call_python(self, fn: types.FunctionType, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        nested = getattr(fn, "__irad_trace_call__", None)
        if nested is not None:
            return nested(self, args, kwargs)
        if fn is _NAMEDTUPLE and not self.deep_tracked((args, kwargs)):
            # a class factory (it exec's the class's source): run natively, the class's methods are traced
            # when they are called; its module is the user's, as when namedtuple is called untraced
            frame = self._user_frame()
            if "module" not in kwargs and frame is not None:
                kwargs = {**kwargs, "module": frame.f_globals.get("__name__", "__main__")}
            return fn(*args, **kwargs)
        alt = STATISTICS.get(id(fn))
        if alt is not None and alt[0] is fn:  # statistics.mean & co of traced floats: float arithmetic
            r = alt[1](self, args, kwargs)
            if r is not NotImplemented:
                return r
        special = SPECIAL.get(id(fn))
        if special is not None and special[0] is fn:  # heapq.nsmallest & co: Python over C orderings
            return special[1](self, args, kwargs)
        if fn is random.Random.shuffle and args and self.deep_tracked(args[1:2]):  # random.shuffle(l)
            r = rng_reorder(self, args[0], "shuffle", args[1:], kwargs)
            if r is not NotImplemented:
                return r
        if args and registry.is_singledispatch(fn):
            cls = type(args[0])
            self.deps.add(("dispatch", fn, cls, fn.dispatch(cls)))  # type: ignore[attr-defined]  # singledispatch
        if registry.lookup(fn, args) is not None or registry.is_nondiff(fn) or is_impure(fn) or \
                member(fn, _STATIC_FUNCS_) or MUTATORS.get(id(fn)) is not None:
            return self.call_prim(fn, args, kwargs)
        if (fn.__module__ or "").startswith("numpy"):
            return self.call_library(fn, fn, args, kwargs)
        inst = instrument_function(fn)
        self._depend_on(fn, inst)
        return inst(*args, **kwargs)

    def call_library(self, f: Any, impl: types.FunctionType, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A numpy function without a rule whose implementation is Python (``np.cov``, ``np.r_[...]``):
        when floating-point traced values flow in, trace through its body like user code, so that
        the functions it calls (which have rules) are what gets differentiated.  When the body does
        something irad cannot trace, the trace of it is dropped and the call is recorded as one
        primitive, as for C functions (it needs a rule only if a gradient flows through it; the
        error then says why the body could not be traced)."""
        if not self._floats_flow_in(args, kwargs):
            return self.call_prim(f, args, kwargs)
        outer = self._rebinds
        self._rebinds = []
        n_ops, n_vars = len(self.ops), self.next_id
        inst = instrument_function(impl)
        try:
            return inst(*args, **kwargs)
        except Exception as e:
            if outer is not None or any(i < n_vars for i in self._rebinds) or \
                    any(not isinstance(x, _RERUNNABLE) for x in flatten((args, kwargs))[0]):
                # inside another numpy function: that one becomes the primitive (the one the user called);
                # a value that existed before was updated in place, or an object was handed in that the
                # attempt may have changed (np.save's file): running the call again cannot undo that
                raise
            del self.ops[n_ops:]
            why = str(e).split("\n", 1)[0]
            registry.LIBRARY_FAILURES[registry.qualname(f)] = f"{type(e).__name__}: {why}"
        finally:
            if outer is not None:
                outer.extend(self._rebinds)
            self._rebinds = outer
        return self.call_prim(f, args, kwargs)

    def _floats_flow_in(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a traced floating-point (or complex) value is among the arguments."""
        for x in flatten((args, kwargs))[0]:
            v = self.vars.get(id(x))
            if v is not None and is_differentiable(v.type):
                return True
            if not isinstance(x, (np.ndarray, np.generic, float, complex, int, str, bytes, type(None))) and \
                    self.deep_tracked(x):
                return True
        return False

    def _depend_on(self, fn: types.FunctionType, inst: types.FunctionType) -> None:
        """Record what the trace of ``fn`` reads that the user may change later: its code and
        defaults, its globals and closure cells (a compiled program checks them before each call,
        see ``irad.signature``).  Their values are the roots of the world the trace reaches."""
        self.deps.add(function_dep(fn))
        stored = STORES_GLOBALS.get(id(inst.__code__))
        if stored:  # `global G; G = ...`: repeated only by tracing again
            self.deps.add(effect_dep("global " + ", ".join(map(repr, stored))))
            if self.ints is not None:
                self.ints.homes.append(("globals", fn.__globals__, stored))
        g = fn.__globals__
        for name in GLOBAL_NAMES.get(id(inst.__code__), ()):
            v = g.get(name, MISSING)
            self.deps.add(("global", DictRef(g), name, Identity(v)))
            self.reach(v, f"global {name}")
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                v = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned later)
                continue
            self.deps.add(("cell", Identity(cell), name, Identity(v)))
            self.reach(v, f"closure {name}")
        for v in fn.__defaults__ or ():
            self.reach(v, "default")
        for k, v in (fn.__kwdefaults__ or {}).items():
            self.reach(v, f"default {k}")

    def reach(self, v: Any, origin: str = "") -> None:
        """``v`` existed before the trace (a global, a cell, an attribute of an older object): a
        container or object whose contents the trace reads becomes a dependency, an array is
        followed as a live constant."""
        tv = type(v)
        if id(v) in self.vars or id(v) in self.born:
            return
        if tv is np.ndarray:
            self.track_live(v, origin)
            return
        if tv in _WORLD_SKIP:
            return
        if tv is list or tv is dict or tv is tuple or tv is set or tv is deque or _object_fields(v) is not None \
                or (not _native_class(tv) and not isinstance(v, (type, types.ModuleType, types.FunctionType))):
            self.world[id(v)] = v

    def track_live(self, x: np.ndarray, origin: str) -> None:
        """Follow an array of the world like a traced value, so that every op on it is recorded
        and runs at each call (``np.ones(3) * W`` must not be computed once at trace time).  In
        the graph it is a live constant: the program reads the array itself, whatever it holds."""
        # NOTE: a negative id: the Var never reaches the graph, and the printed numbering stays
        v = Var(-2 - len(self._live), typeof(x), origin.rsplit(" ", 1)[-1] if origin else "")
        self._live[v.id] = Const(x, typeof(x), origin, True)
        self.deps.add(("layout", Identity(x), None, Identity((x.shape, x.dtype))))  # `W.shape = ...` in place
        self.track(x, v)

    def reach_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any], deep: frozenset[int]) -> None:
        """A transform called inside this trace (``grad(loss)(model, x)`` in a differentiated
        function) reads its arguments natively, for its call key: what of them is the world (a
        global dict of arrays, a model object) becomes a dependency of this trace and its arrays
        live constants, as if the function had read them itself, so that no program goes stale."""
        for i, a in enumerate(args):
            self._reach_tree(a, Depth.OBJECTS if i in deep else Depth.REGISTERED)
        self._reach_tree(kwargs, Depth.REGISTERED)

    def _reach_tree(self, x: Any, depth: Depth) -> None:
        tx = type(x)
        if tx is np.ndarray or id(x) in self.vars:
            return
        if tx is list or tx is tuple or tx is dict or tx is collections.OrderedDict or \
                isinstance(x, tuple) and hasattr(tx, "_fields"):
            self.read_world(x)
            for c in (x.values() if isinstance(x, dict) else x):
                self._reach_tree(c, depth)
            return
        node = node_of(x, depth)
        if node is None:
            return
        d = getattr(x, "__dict__", None)
        if type(d) is dict:
            for k, v in list(d.items()):
                self._read_attr(x, k, v)
        for c in node[2]:
            self.reach(c, "argument")
            self._reach_tree(c, depth)

    def read_world(self, c: Any) -> None:
        """The trace reads the items of ``c`` (indexing, iteration, a method): when ``c`` is a
        mutable container of the world, its items are a dependency, and what they hold is world."""
        if id(c) not in self.world or id(c) in self._world_read:
            return
        self._world_read.add(id(c))
        if isinstance(c, (list, dict, deque, set)):  # subclasses too: OrderedDict, defaultdict, ...
            self.deps.add(contents_dep(c))
        if isinstance(c, (tuple, list, deque)):
            for e in c:
                self.reach(e, "item")
        elif isinstance(c, dict):
            for e in c.values():
                self.reach(e, "item")

    def construct(self, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        new: Callable[..., Any] = cls.__new__
        if isinstance(self.dunder(cls, "__new__"), (types.FunctionType, staticmethod)):
            obj = self.call(new, (cls,) + args, kwargs)
        elif new is object.__new__:
            obj = object.__new__(cls)
        else:
            if self.ints is not None:  # C code reads the value (`class Size(int)`)
                args, kwargs = intdata.at_call(self, new, args, kwargs)
            obj = new(cls, *args, **kwargs)
        self.born.add(id(obj))  # what the trace reads of it is not a dependency
        if isinstance(obj, cls):
            init = self.dunder(cls, "__init__")
            if isinstance(init, types.FunctionType):
                self.call_python(init, (obj,) + args, kwargs)
            elif init is not None and init is not object.__init__:
                if self.ints is not None:
                    args, kwargs = intdata.at_call(self, init, args, kwargs)
                init(obj, *args, **kwargs)
        return obj

    def call_prim(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call into code irad does not trace through: record it if traced values flow in."""
        if self.ints is not None:  # an int argument: data for arithmetic, else the value is guarded
            if intdata.is_numpy_data(f, args, kwargs):
                return intdata.numpy_call(self, f, args)
            args, kwargs = intdata.at_call(self, f, args, kwargs)
        if id(f) in self.vars and not isinstance(f, type):
            # a callable computed from traced values (np.poly1d(c)): it is an input of the call
            return self.call_prim(operator.call, (f,) + args, kwargs)
        if type(f) is types.BuiltinFunctionType:
            f = _public_numpy(f)  # numpy's own code calls the C function behind np.concatenate & co
        if self.world and member(f, _STATIC_FUNCS_):  # `len(HOOKS)`: the items of a container of the world
            for a in args:
                if id(a) in self.world:
                    self.read_world(a)
        if member(f, _STATIC_FUNCS_):
            return f(*args, **kwargs)  # depends on shapes and dtypes only
        if member(f, _COPIERS_) and args and isinstance(args[0], (np.ndarray, np.generic)) and self.aliasing.seen(args[0]):
            return self.call_method(args[0], f.__name__, args[1:], kwargs)  # copy.copy(x): np.ndarray.__copy__(x)
        if f is _TUPLE_NEW and len(args) == 2 and not kwargs and isinstance(args[0], type) and \
                issubclass(args[0], tuple):  # a namedtuple's __new__/_make: it only packs references
            return f(args[0], self.iterable(args[1]))
        owner = getattr(f, "__self__", None)
        if self.world:  # `d.items()`, `np.array(coeffs)`: the items of a container of the world
            for a in (owner,) + args:
                if id(a) in self.world:
                    self.read_world(a)
        if (((isinstance(owner, _HASHED) or (isinstance(owner, type) and issubclass(owner, _HASHED))) and
                not self.is_pyobject(owner)) or (isinstance(f, type) and issubclass(f, _HASHED)) or
                (f is _COUNT_ELEMENTS and f is not None)) and \
                (self._keyed or self.deep_tracked(args) or self.deep_tracked(kwargs) or any(map(_is_iterator, args))):
            return self._hash_call(f, owner, args, kwargs)  # d.get(k), set(xs), dict(zip(ks, vs)) with traced keys
        if _reduces_iterable(f, owner) and any(_is_iterator(a) for a in args):
            # math.fsum(map(...)), "".join(generator): let the tracer see the items
            args = tuple(list(self.iterable(a)) if _is_iterator(a) else a for a in args)
        if kwargs.get("key") is not None and not _is_numpy_callable(f):
            kwargs = {**kwargs, "key": callback(kwargs["key"])}
        if _is_numpy_callable(f) and any(self.is_pyobject(a) for a in args):
            args = tuple(self._array_of(a) for a in args)  # a user __array__ runs traced
        tracked = self.deep_tracked(args) or self.deep_tracked(kwargs) or self.aliasing.seen(owner)
        impure = is_impure(f)
        if type(owner) is list and getattr(f, "__name__", "") in LIST_DECISIONS and self.deep_tracked((owner, args)):
            return list_decision(self, owner, f.__name__, args, kwargs)  # l.sort(), l.index(v): compared traced
        if member(f, _HEAP_ORDERING_) and self.deep_tracked(args) and not kwargs:
            return heap_call(self, f.__name__, args)  # heapq's C heap operations, compared through the tracer
        if not tracked and isinstance(owner, np.ndarray) and f.__name__ in ARRAY_MUTATORS and \
                self.aliasing.touches_traced_memory(owner):
            tracked = True
        if not tracked and not impure:
            # NOTE: not a class: constructors (partial, map, property) store the callback, never call it now
            probe = _CallbackProbe(self) if not isinstance(f, type) and f is not builtins.__build_class__ and \
                any(_is_python_callable(a) for a in args) else None
            if probe is not None:  # C code that calls back into Python (a solver, an integrator)
                args = tuple(probe.wrap(a) for a in args)
                kwargs = {k: probe.wrap(v) for k, v in kwargs.items()}
            r = f(*args, **kwargs)
            if probe is not None and probe.loc is not None:
                probe.check(f, r)
            if id(r) in self.world or (type(r) not in _WORLD_SKIP and sys.getrefcount(r) > 2):
                # held elsewhere too (`P.get("layer")`, `ref()`, an lru_cache'd value): of the world
                self.reach(r, "returned")
            else:  # made by this call: a constant of irad's
                self.born.add(id(r))
            if type(r) is np.ndarray and r.base is not None:
                if isinstance(owner, np.ndarray) and hasattr(np.ndarray, getattr(f, "__name__", "")):
                    self.aliasing.note_untracked_view(r, getattr(np.ndarray, f.__name__), (owner,) + args, kwargs)
                elif _is_numpy_callable(f):
                    self.aliasing.note_untracked_view(r, f, args, kwargs)
            return r
        if (isinstance(owner, _MUTABLE_CONTAINERS) and not impure) or member(f, _TRANSPARENT_):
            return f(*args, **kwargs)  # list.append(x) & co keep object identity
        if isinstance(owner, _RNGS) and getattr(f, "__name__", "") in RNG_REORDERS:
            r = rng_reorder(self, owner, f.__name__, args, kwargs)  # a gather, its order drawn at each call
            if r is not NotImplemented:
                return r
        if isinstance(f, (types.BuiltinMethodType, types.MethodWrapperType, types.MethodType)) and \
                owner is not None and hasattr(type(owner), f.__name__) and \
                (id(owner) in self.vars or isinstance(owner, (np.ndarray, np.generic, str, bytes))):
            return self.call_method(owner, f.__name__, args, kwargs)
        if isinstance(owner, np.ufunc) and getattr(f, "__name__", "") == "at":
            return ufunc_at(owner)(self, args, kwargs)
        if isinstance(owner, np.ufunc) and f.__name__ in UFUNC_METHODS and owner.nin == 2 and \
                kwargs.get("out") is None and registry.lookup(f, args) is None and \
                not registry.is_nondiff(f) and not registry.is_nondiff(owner) and self._floats_flow_in(args, kwargs):
            # np.maximum.accumulate & co without a rule: written out with the ufunc, which has one
            return self.call(UFUNC_METHODS[f.__name__], (owner,) + args, {k: v for k, v in kwargs.items()
                                                                          if k != "out"})
        mut = MUTATORS.get(id(f))
        if mut is not None and mut[0] is f:
            return mut[1](self, args, kwargs)
        if _is_numpy_callable(f):
            args, kwargs = _out_by_keyword(f, args, kwargs, 0)
            if kwargs and any(v is _NOVALUE for v in kwargs.values()):  # numpy's "not given" sentinel
                kwargs = {k: v for k, v in kwargs.items() if v is not _NOVALUE}
        if "out" in kwargs and kwargs["out"] is not None:
            return self._call_with_out(f, args, kwargs)
        if tracked and _is_numpy_callable(f) and not member(f, _SEQUENCE_FUNCS_) and \
                not getattr(f, "__name__", "_").startswith("_"):  # (numpy's private C helpers take tuples as such)
            args = tuple(self._as_array(a) for a in args)
        args = tuple(_instrument_callbacks(a) for a in args)
        r = self._call_read_only(f, args, kwargs)
        r = self.record(f, args, kwargs, r)
        if registry.qualname(f) in _DATA_DTYPED:
            for x in flatten(r)[0]:
                self._guard_dtype(x)
        if member(f, _DATA_SHAPED_) or (f is np.where and len(args) == 1):
            for x in (r if isinstance(r, tuple) else (r,)):
                self._guard_shape(x)
        return r

    def _call_read_only(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``f`` (code irad does not trace) with the traced arrays it is handed made read-only:
        an update it would make in place (a BLAS routine, a C routine overwriting its input)
        is a MutationError instead of an update the graph never sees."""
        if registry.lookup(f, args) is not None:  # a rule says what the call does
            if any(k.startswith("overwrite_") for k in kwargs):
                # SciPy's overwrite_a=True & co only permit reusing the input's memory: the same
                # result without it, and the arrays the program and the pullback read stay intact
                kwargs = {k: (False if k.startswith("overwrite_") else v) for k, v in kwargs.items()}
            return f(*args, **kwargs)
        locked = []
        owner = getattr(f, "__self__", None)
        for a in flatten((owner, args, kwargs))[0]:
            if type(a) is np.ndarray and a.base is None and a.flags.writeable and id(a) in self.vars:
                a.flags.writeable = False
                locked.append(a)
        # a list or dict holding traced values that C code reorders or refills (random.shuffle(l))
        boxes = [(c, list(c.items()) if isinstance(c, dict) else list(c))
                 for c in (*args, *kwargs.values()) if isinstance(c, (list, dict)) and self.deep_tracked(c)] \
            if not member(f, _REFERENCE_MOVERS_) else []
        # arrays irad does not follow that the call may write a result into (an `output` buffer)
        sinks = [(a, a.tobytes()) for a in flatten((args, kwargs))[0] if type(a) is np.ndarray and a.size and
                 a.flags.writeable and id(a) not in self.vars] if locked or self.deep_tracked((args, kwargs)) else []
        if not locked and not boxes and not sinks:
            return f(*args, **kwargs)
        if not locked:
            r = f(*args, **kwargs)
            self._check_boxes(f, boxes)
            self._check_sinks(f, sinks)
            return r
        # NOTE: C code may write through the flag (Cython, Fortran): compare the bytes too
        before = [(a, a.tobytes()) for a in locked]
        try:
            r = f(*args, **kwargs)
        except ValueError as e:
            if "read-only" not in str(e):
                raise
            raise self._untraced_update(f) from e
        finally:
            for a in locked:
                a.flags.writeable = True
        for a, b in before:
            if a.tobytes() != b:
                raise self._untraced_update(f)
        self._check_boxes(f, boxes)
        self._check_sinks(f, sinks)
        for x in flatten(r)[0]:  # a view the call returned inherited the lock: lift it
            if type(x) is np.ndarray and not x.flags.writeable and x.base is not None and \
                    any(np.may_share_memory(x, a) for a in locked):
                try:
                    x.flags.writeable = True
                except ValueError:
                    pass
        return r

    def is_live(self, x: Any) -> bool:
        """Is ``x`` an array of the user's world that the trace follows (the program reads that very object)?"""
        return any(c.value is x for c in self._live.values())

    def user_code_here(self) -> bool:
        """Is the innermost traced frame the user's own code (not an installed package or the stdlib)?"""
        f = self._user_frame()
        return f is not None and not f.f_code.co_filename.startswith(_INSTALLED_DIRS)

    def _user_site(self) -> str:
        """Where the user's own code is: the innermost traced frame outside installed packages."""
        loc = self.loc()
        where = loc.long if loc else ""
        f: Any = sys._getframe(1)
        while f is not None:
            name = f.f_code.co_filename
            if id(f.f_code) in INSTRUMENTED and not name.startswith(_INSTALLED_DIRS):
                if loc is None or name != loc.file:
                    where += f"{', called from ' if where else ''}{f.f_code.co_qualname} ({name}:{f.f_lineno})"
                break
            f = f.f_back
        return where

    def _check_sinks(self, f: Any, sinks: list[tuple[np.ndarray, bytes]]) -> None:
        """No array irad does not follow was written by a call that traced values flowed into: the
        result C code writes into an ``output`` buffer (``scipy.ndimage``'s filters, a Cython
        evaluator) would be a constant of the program, and carry no gradient."""
        for a, b in sinks:
            if a.tobytes() != b:
                raise NoRuleError(f"{registry.qualname(f)} writes what it computes from traced values into an array "
                                  f"irad does not follow (an output buffer), in code irad does not trace\n"
                                  f"  at {self._user_site()}\n  register a rule for the function that calls it, "
                                  "or compute the result with numpy functions irad has rules for")

    def _check_boxes(self, f: Any, boxes: list[tuple[Any, list[Any]]]) -> None:
        """A list or dict the call was handed holds the same objects, in the same order, as before."""
        for c, was in boxes:
            now = list(c.items()) if isinstance(c, dict) else list(c)
            if len(now) != len(was) or any(x is not y and not (type(x) is tuple and x == y) for x, y in zip(now, was)):
                raise MutationError(f"{registry.qualname(f)} rearranges or replaces the items of a "
                                    f"{type(c).__name__} holding traced values (code irad does not trace)",
                                    self._user_site(), "build a new list from the values instead, or "
                                    "register a rule for the function")

    def _untraced_update(self, f: Any) -> MutationError:
        return MutationError(f"{registry.qualname(f)} updates a traced array in place (code irad does not trace, and "
                             "no rule says what the update is)", self._user_site(),
                             "pass a copy and use its result, write the update out of place with numpy, "
                             "or register a rule for the function")

    def _array_of(self, a: Any) -> Any:
        """A user object handed to numpy: run its Python ``__array__`` traced."""
        if self.is_pyobject(a):
            d = self.dunder(type(a), "__array__")
            if isinstance(d, types.FunctionType):
                return self.call(d, (a,), {})
        return a

    def _as_array(self, a: Any) -> Any:
        if type(a) in (list, tuple) and self.deep_tracked(a):
            return self.record(np.asarray, (a,), {}, np.asarray(a))
        return a

    def call_method(self, obj: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``obj.name(...)`` on a traced value: recorded with the unbound method."""
        if (name == "__copy__" or name == "__deepcopy__") and isinstance(obj, (np.ndarray, np.generic)) and \
                obj.dtype.kind in "biufc":  # copy.copy / copy.deepcopy of a traced array: a copy
            return self.call_method(obj, "copy", (), {})
        if name[:2] == "__" and not kwargs:
            direct = self._dunder_call(obj, name, args)
            if direct is not _NO_DUNDER:
                return direct
        meth = getattr(type(obj), name)
        mut = ARRAY_MUTATORS.get(name)
        if mut is not None and isinstance(obj, np.ndarray):
            return mut(self, obj, args, kwargs)
        if isinstance(obj, (np.ndarray, np.generic)):
            args, kwargs = _out_by_keyword(meth, args, kwargs, 1)
            if kwargs and any(v is _NOVALUE for v in kwargs.values()):
                kwargs = {k: v for k, v in kwargs.items() if v is not _NOVALUE}
        if "out" in kwargs and kwargs["out"] is not None:
            return self._call_with_out(meth, (obj,) + args, kwargs)
        r = self._call_read_only(meth, (obj,) + args, kwargs)
        if r is None and isinstance(obj, np.ndarray):
            # a method that returns nothing changed the array in place: never record it silently
            raise self.unsupported(f"the in-place method a.{name}() on a traced array",
                                   "write the update out of place")
        return self.record(meth, (obj,) + args, kwargs, r)

    def _dunder_call(self, obj: Any, name: str, args: tuple[Any, ...]) -> Any:
        """``a.__add__(b)``, ``a.__setitem__(i, v)``...: the same as the operator they implement."""
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(obj, args[0])
        if name == "__setitem__" and len(args) == 2:
            return self.setitem(obj, args[0], args[1])
        if len(args) == 1:
            k = _DUNDER_BINOPS.get(name)
            if k is not None:
                return self.binop(obj, args[0], k)
            k = _DUNDER_RBINOPS.get(name)
            if k is not None:
                return self.binop(args[0], obj, k)
            k = _DUNDER_COMPARES.get(name)
            if k is not None:
                return self.compare(obj, args[0], k)
        if not args and name in _DUNDER_UNARY:
            return self.unary(obj, _DUNDER_UNARY[name]) if _DUNDER_UNARY[name] else \
                self.call_prim(builtins.abs, (obj,), {})
        return _NO_DUNDER

    def _call_with_out(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = kwargs["out"]
        target = out[0] if isinstance(out, tuple) and len(out) == 1 else out
        if not isinstance(target, np.ndarray):
            raise self.unsupported(f"{registry.qualname(f)}(..., out=...) with several outputs",
                                   "assign the result instead of passing out=")
        where = kwargs.get("where", True)
        rest = {k: v for k, v in kwargs.items() if k != "out" and (k != "where" or where is True)}
        before = self.aliasing.before_mutation(target, f"{registry.qualname(f)}(out=...)")
        old = self.values[before.id] if isinstance(before, Var) else before.value
        atoms = (tuple(before if a is target else self.atom(a) for a in args),
                 {k: self.atom(v) for k, v in rest.items()})
        # the new contents of `target`: f(...), where= keeps the old entries, cast to target's dtype
        steps: list[tuple[Any, Any, Any]] = [(f, atoms, f(*(old if a is target else a for a in args), **rest))]
        if where is not True:
            r = steps[-1][2]
            steps.append((np.where, ((self.atom(where), None, before), {}), np.where(where, r, old)))
        if np.result_type(steps[-1][2]) != target.dtype:
            steps.append((np.ndarray.astype, ((None, const(target.dtype)), {}), target))
        f(*args, **kwargs)
        prev: Any = None
        for k, (fn, (a_args, a_kwargs), value) in enumerate(steps):
            a_args = tuple(prev if a is None else a for a in a_args)
            if k == len(steps) - 1:
                return self.aliasing.rebind(target, fn, (a_args, a_kwargs))
            prev = self.new_var(value)
            self.emit(fn, a_args, a_kwargs, (prev,))
            self.keep.append(value)
            self.values[prev.id] = value

    # ---- the whole trace ------------------------------------------------------------------

    def confine(self, ops: Sequence[Op], fresh: Sequence[Var], what: str) -> None:
        """``ops`` were cut out of this trace into the program of a callback a solver calls (a
        residual, an integrand, a vector field), traced once at ``fresh``: what they make exists in
        that program only.  A value the callback kept (in a dict, a list, a ``nonlocal``, an array it
        updated) and this trace used later would be the trace point's, and undefined in the
        program: ``graph`` refuses it."""
        for v in fresh:
            self._confined[v.id] = what
        for op in ops:
            for o in op.outs:
                self._confined[o.id] = what

    def unconfine(self, ops: Sequence[Op]) -> None:
        """``ops`` of a callback's trace are put back into this trace (a guard on its parameters)."""
        for op in ops:
            for o in op.outs:
                self._confined.pop(o.id, None)

    def _check_confined(self, ops: Sequence[Op], outs: Sequence[Any]) -> None:
        uses: list[tuple[Any, Loc | None]] = [(v, op.loc) for op in ops for v in op.inputs]
        uses += [(a, None) for a in outs] + [(a, None) for _, a in self.mutated_inputs + self.mutated_world]
        uses += [(a, None) for _, _, a in self.attr_write_atoms]
        for a, loc in uses:
            what = self._confined.get(a.id) if isinstance(a, Var) else None
            if what is not None:
                raise UnsupportedError(
                    f"{what} keeps a value it computed, which is used after the call"
                    f"{' at ' + loc.long if loc else ''}; but irad traces the callback once, and the solver "
                    "calls it many times", "",
                    "make the callback a pure function of its arguments and what it reads, and compute what "
                    "else you need outside the solver call")

    def graph(self, inputs: tuple[Var, ...], outputs: Any, in_tree: Any, statics: tuple[tuple[int, Any], ...]) \
            -> Graph:
        self._flush_keys()
        leaves, out_tree = flatten(outputs, depth=Depth.DATACLASSES)  # a returned dataclass is a pytree
        outs = tuple(self.atom(x) for x in leaves)
        from . import primitives as irad_ops
        reads: list[Op] = []
        env: dict[int, Any] = dict(self._live)
        for vid, c in self._live.items():  # the world's arrays the function updated in place
            v = self.vars.get(id(c.value))
            if v is not None and v.id not in self._live:
                others = [o.value for o in self._live.values() if o is not c and np.may_share_memory(o.value, c.value)]
                if c.value.base is not None or others:
                    raise MutationError(
                        f"in-place update of the array `{c.origin or 'of the world'}`, which shares its memory with "
                        "other arrays the function reads (a view, or the base of one): a compiled program cannot "
                        "write that update back", "",
                        "update the base array itself, or work on a copy")
                self.mutated_world.append((c.value, self.atom(c.value)))
                # NOTE: a Var, not the constant: at trace time the array already holds its update,
                # the uses before it need the snapshot taken when it changed (values[vid])
                r = env[vid] = Var(self.next_id, c.type, c.origin.rsplit(" ", 1)[-1])
                self.next_id += 1
                self.values[r.id] = self.values[vid]
                reads.append(Op("irad.primitives.read_live", (c,), (), (r,), irad_ops.read_live, None))
        #: (object, attribute, atom): the attribute writes a compiled program replays
        self.attr_write_atoms = [(o, name, self.atom(v) if id(v) in self.vars else Const(v, typeof(v)))
                                 for o, name, v in self.attr_writes.values()]
        ops = tuple(reads) + tuple(self._capture_ops) + tuple(self.ops)
        if self._confined:
            self._check_confined(ops, outs)
        if self._live:
            ops, outs = _substitute(ops, outs, env)
            self.mutated_inputs = [(k, env.get(a.id, a)) for k, a in self.mutated_inputs]
            self.mutated_world = [(o, env.get(a.id, a)) for o, a in self.mutated_world]
            self.attr_write_atoms = [(o, n, env.get(a.id, a) if isinstance(a, Var) else a)
                                     for o, n, a in self.attr_write_atoms]
        return Graph(self.name, inputs, ops, outs, in_tree, out_tree, statics)


def _substitute(ops: tuple[Op, ...], outs: tuple[Any, ...], env: dict[int, Any]) -> tuple[tuple[Op, ...], tuple[Any, ...]]:
    """Replace the Vars in ``env`` by their constants in every op and output."""
    def sub(a: Any) -> Any:
        return env.get(a.id, a) if isinstance(a, Var) else a
    new_ops = []
    for op in ops:
        if any(isinstance(a, Var) and a.id in env for a in op.inputs):
            op = Op(op.prim, tuple(map_atoms(a, sub) for a in op.args),
                    tuple((k, map_atoms(v, sub)) for k, v in op.kwargs), op.outs, op.fn, op.loc, op.unpack)
        new_ops.append(op)
    return tuple(new_ops), tuple(map_atoms(o, sub) for o in outs)


def _sequence_iter(obj: Any) -> Any:
    """Iteration through ``__getitem__`` (the old sequence protocol), each item fetched traced."""
    i = 0
    while True:
        try:
            x = hooks.h_getitem(obj, i)
        except IndexError:
            return
        yield x
        i += 1


class _TracedContext:
    """Stands in for a user context manager so that its ``__enter__``/``__exit__`` run traced."""

    __slots__ = ("mgr", "enter", "exit")

    def __init__(self, mgr: Any, enter: Any, exit_: Any) -> None:
        self.mgr, self.enter, self.exit = mgr, enter, exit_

    def __enter__(self) -> Any:
        t = hooks.active_tracer()
        return self.enter(self.mgr) if t is None else t.call(self.enter, (self.mgr,), {})

    def __exit__(self, *exc: Any) -> Any:
        t = hooks.active_tracer()
        return self.exit(self.mgr, *exc) if t is None else t.call(self.exit, (self.mgr,) + exc, {})


def _is_iterator(a: Any) -> bool:
    return hasattr(type(a), "__next__") and not isinstance(a, (np.ndarray, np.generic))


def _reduces_iterable(f: Any, owner: Any) -> bool:
    """C functions that consume a whole iterable and compute one value from its items."""
    if f is math.fsum or f is math.prod or f is np.fromiter or _is_one_of(f, BUFFER_BUILDERS):
        return True
    return isinstance(owner, (str, bytes)) and getattr(f, "__name__", "") == "join"


def _is_numpy_callable(f: Any) -> bool:
    if isinstance(f, np.ufunc):
        return True
    mod = getattr(f, "__module__", None) or ""
    return mod.startswith("numpy") and not isinstance(f, type)


def _out_by_keyword(f: Any, args: tuple[Any, ...], kwargs: dict[str, Any], skip: int) \
        -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``np.add(a, b, c)``, ``np.sum(a, 0, None, c)``: an ``out`` array passed positionally is moved
    to ``out=`` (with the positional arguments after it), so the in-place write is seen.  ``skip``:
    the positional arguments of ``f`` not in ``args`` (``self`` of a method)."""
    if isinstance(f, np.ufunc):
        if len(args) <= f.nin:
            return args, kwargs
        outs = args[f.nin:]
        return args[:f.nin], {**kwargs, "out": outs[0] if len(outs) == 1 else tuple(outs)}
    names = _out_params(f)
    if not names:
        return args, kwargs
    k = names.index("out") - skip
    if len(args) <= k:
        return args, kwargs
    rest = dict(zip(names[k + skip:], args[k:]))
    if rest.get("out") is None:
        rest.pop("out")
    return args[:k], {**kwargs, **rest}


_NOVALUE = getattr(np, "_NoValue", object())
#: f -> its positional parameter names when one is `out` (weakly: a user's callable is released)
_OUT_PARAMS: WeakIdMap[Any, tuple[str, ...]] = WeakIdMap()
_OUT_PARAMS_STRONG: dict[int, tuple[Any, tuple[str, ...]]] = {}  # for callables a module owns (ufuncs, builtins)


def _out_params(f: Any) -> tuple[str, ...]:
    bound = getattr(f, "__self__", None)
    per_call = bound is not None and not isinstance(bound, (types.ModuleType, type))  # a bound method
    if not per_call:
        names = _OUT_PARAMS.get(f)
        if names is not None:
            return names
        hit = _OUT_PARAMS_STRONG.get(id(f))
        if hit is not None and hit[0] is f:
            return hit[1]
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        params = []
    pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = tuple(pos) if "out" in pos else ()
    if not per_call:
        try:
            _OUT_PARAMS[f] = names
        except TypeError:  # not weak-referenceable: a ufunc or builtin, owned by its module
            if len(_OUT_PARAMS_STRONG) < 4096:
                _OUT_PARAMS_STRONG[id(f)] = (f, names)
    return names


def _captured_values(outer: tuple[Any, ...]) -> dict[int, Any]:
    """id -> value for the traced values of the enclosing (paused) tracers (computed once per
    nesting, shared by the tracers of one nested compile)."""
    if not outer:
        return {}
    key = tuple((t, len(t.keep)) for t in outer)  # an enclosing trace that went on since: recompute
    cached = _CAPTURED_CACHE.get(key)
    if cached is None:
        cached = {}
        for t in outer:
            for obj in t.keep:
                v = t.vars.get(id(obj))
                if v is not None and v.id >= 0 and trackable(obj):
                    cached[id(obj)] = obj
        _CAPTURED_CACHE.clear()  # one nesting at a time: no growth
        _CAPTURED_CACHE[key] = cached
    return cached


_CAPTURED_CACHE: dict[tuple[tuple[Any, int], ...], dict[int, Any]] = {}


def _public_numpy(f: Any) -> Any:
    """The public numpy function (``np.concatenate``) whose C implementation ``f`` is, else ``f``."""
    global _PUBLIC
    if _PUBLIC is None:
        public: dict[int, tuple[Any, Any]] = {}  # NOTE: published whole: other threads read it at once
        for mod in (np, np.linalg, np.fft):
            for pub in list(vars(mod).values()):  # (not getattr: numpy's lazy submodules stay unloaded)
                raw = getattr(pub, "__wrapped__", None) if type(pub) is _DISPATCHER else None
                if type(raw) is types.BuiltinFunctionType:
                    public.setdefault(id(raw), (raw, pub))
        _PUBLIC = public
    hit = _PUBLIC.get(id(f))
    return hit[1] if hit is not None and hit[0] is f else f


_PUBLIC: dict[int, tuple[Any, Any]] | None = None


def _is_python_callable(a: Any) -> bool:
    ta = type(a)
    return ta is types.FunctionType or ta is functools.partial or \
        (ta is types.MethodType and type(a.__func__) is types.FunctionType)


class _CallbackProbe:
    """Callbacks handed to C code that irad does not trace (``brentq(lambda t: t**3 - a, 0, 5)``):
    they run traced, and when one computes with traced values while the C code turns what they
    return into a new number, the gradient through the C code would silently be zero.  irad
    refuses that (``check``) instead: the boundary has a rule, or it is an error."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.loc: Any = None  # where a callback first returned a traced value

    def wrap(self, a: Any) -> Any:
        if not _is_python_callable(a):
            return a
        t = self.tracer

        def probed(*args: Any, **kwargs: Any) -> Any:
            if hooks.active_tracer() is not t:  # kept by the C code and called after the trace
                return a(*args, **kwargs)
            n = len(t.ops)
            try:
                r = t.call(a, args, kwargs)
            except UnsupportedError:
                if any(t.deep_tracked(x) for x in args) or len(t.ops) > n:
                    raise
                return a(*args, **kwargs)  # a callback of constants that irad cannot trace: it runs as before
            if self.loc is None and t.deep_tracked(r):  # where the callback computed with traced values
                locs = [op.loc for op in t.ops[n:] if op.loc is not None]  # the user's own line first
                self.loc = next((lc for lc in locs if not lc.file.startswith(_INSTALLED_DIRS)), None) or \
                    next(iter(locs), None) or getattr(getattr(a, "__code__", None), "co_qualname", "a callback")
            return r
        return probed

    def check(self, f: Any, r: Any) -> None:
        t = self.tracer
        leaves = flatten(r)[0]
        if all(not isinstance(x, (float, complex, np.ndarray, np.generic)) or t.is_tracked(x) for x in leaves):
            return  # the C code only handed back what a callback returned (max(key=...) & co)
        name = registry.qualname(f)
        where = self.loc.long if isinstance(self.loc, Loc) else str(self.loc)
        site = t._user_site()
        raise NoRuleError(
            f"{name} (code irad does not trace) called back into Python, and the callback computed with "
            f"traced values (at {where}); what {name} returns depends on them through code irad cannot "
            "differentiate, so its gradient would silently be zero. Register a rule for the function you "
            "call (@irad.rrule), compute the quantity with numpy code irad traces, or call it outside the "
            f"differentiated function" + (f"\n  called at {site}" if site and site not in where else ""))


def _instrument_callbacks(a: Any) -> Any:
    """Python callbacks handed to C code run instrumented."""
    if type(a) is types.FunctionType and id(a.__code__) not in INSTRUMENTED:
        return instrument_function(a)
    return a


_VIEW_ATTRS = frozenset({"T", "mT", "real", "imag"})
#: attributes of a traced array that hand out its memory (see irad.roundtrip)
_BUFFER_ATTRS = frozenset({"data", "ctypes", "__array_interface__", "__array_struct__"})
_BUFFER_DESCRIPTORS = (np.ndarray.data, np.ndarray.ctypes, np.generic.data,  # (np.ma's .data is its own)
                       np.ndarray.__array_interface__, np.ndarray.__array_struct__,
                       np.generic.__array_interface__, np.generic.__array_struct__)
_ARRAY_SETATTRS = frozenset({"shape", "dtype", "strides", "data", "real", "imag", "flat"})
_DISPATCHER = type(np.cov)
_CAPTURE = None  # irad.primitives.capture, bound below (irad.primitives imports nothing from here)
#: numpy's and irad's own source: ops traced there report the user's line (Tracer.loc)
_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(m)) + os.sep for m in (np.__file__, __file__))
#: installed packages (numpy, scipy, ...) and irad: not the user's own code, for error messages
_INSTALLED_DIRS = _LIBRARY_DIRS + tuple({sysconfig.get_paths()[k] + os.sep for k in ("purelib", "platlib", "stdlib")})
_TYPE_CALL = vars(type)["__call__"]
_TUPLE_NEW = tuple.__new__
_HASHED = (dict, set, frozenset)
#: methods of dicts and sets whose first argument is one key (not an iterable of them)
_ONE_KEY_METHODS = frozenset({"get", "pop", "setdefault", "add", "discard", "remove", "__contains__", "__getitem__",
                              "__setitem__", "__delitem__"})
_COUNT_ELEMENTS = getattr(__import__("_collections"), "_count_elements", None)
_COPIERS_ = by_id([np.ndarray.__copy__, np.ndarray.__deepcopy__, np.generic.__copy__, np.generic.__deepcopy__])
_NAMEDTUPLE = collections.namedtuple
_LRU_WRAPPER = type(functools.lru_cache(lambda: None))
_MOD = hooks._NAMES.index("mod")
_OP_NAMES = [registry.qualname(f) for f in hooks.OUT_OF_PLACE]
#: code object -> line -> Loc; by identity and weakly (a dead code's id is reused by the next)
_LOCS: WeakIdMap[types.CodeType, dict[Any, Loc]] = WeakIdMap()
_NO_DUNDER = object()
_DUNDER_BINOPS = {f"__{n.rstrip('_')}__": k for k, n in enumerate(hooks._NAMES)} | \
    {f"__i{n.rstrip('_')}__": k + hooks.N_BINOPS for k, n in enumerate(hooks._NAMES)}
_DUNDER_BINOPS["__div__"] = _DUNDER_BINOPS["__truediv__"]
_DUNDER_RBINOPS = {f"__r{n.rstrip('_')}__": k for k, n in enumerate(hooks._NAMES)}
_DUNDER_COMPARES = {"__lt__": 0, "__le__": 1, "__eq__": 2, "__ne__": 3, "__gt__": 4, "__ge__": 5}
_DUNDER_UNARY = {"__neg__": "UNARY_NEGATIVE", "__pos__": "UNARY_POSITIVE", "__invert__": "UNARY_INVERT",
                 "__abs__": ""}  # keyed by instrumented code objects, which stay alive
_FAST = frozenset({float, int, bool, complex, np.ndarray, np.float64, np.float32, np.int64, str, type(None)})
_CONTAINER_FAST = frozenset({list, tuple, dict, set, str, range})
#: containers whose C methods called through the class (``dict.get(d, k)``) run as bound methods
_BINDABLE = (dict, list, tuple, set, frozenset, deque)
_GETTERS = frozenset({operator.itemgetter, operator.attrgetter, operator.methodcaller})
#: what a numpy function's arguments can be for irad to run it again after a failed trace of its body
_RERUNNABLE = (np.ndarray, np.generic, int, float, complex, str, bytes, type(None), np.dtype, type, slice,
               type(Ellipsis), types.FunctionType, types.BuiltinFunctionType, np.ufunc, functools.partial)
#: values that are never containers of the world (arrays read from it are live constants)
_WORLD_SKIP = _FAST | {np.float32, np.int32, np.bool_, slice, range, types.FunctionType, types.ModuleType,
                       types.BuiltinFunctionType, type, np.ufunc, bytes}

#: how ``Tracer.call`` traces a callable decided by its type alone (exact types: an instance of a
#: subclass goes the ordered checks' way, as it did when each of these was a ``tf is X`` branch).
#: These rows come ahead of the ordered checks, and several of them came after some of those checks
#: in the old if-chain; a type is here only where none of the ordered checks can claim a callable of
#: it, so that moving it first changes nothing (``call_order_problems`` below checks each point):
#:  - ``__irad_trace_call__``: C types cannot be given one, and irad gives np.vectorize none;
#:  - ``DUNDER_BUILTINS``: its rows are builtin functions and types, none of these types;
#:  - ``SPECIAL``: its rows are builtin functions, types, plain functions and numpy dispatchers
#:    (np.shape, np.ndim, np.result_type, ...).  Plain functions always came first (``call_python``
#:    looks ``SPECIAL`` up itself); ``_call_dispatcher`` makes the ``SPECIAL`` check first;
#:  - ``isinstance(f, type)``: none of these types is a metaclass;
#:  - a user class's ``__call__``, plum: none is a class with Python dunders, nor plum's.
#: What a row does not trace itself is a primitive, as the end of the chain made it (the checks that
#: followed a type-keyed branch were other types' branches, or the ones above, which never fire).
_CALL_BY_TYPE: dict[type, Callable[[Tracer, Any, tuple[Any, ...], dict[str, Any]], Any]] = {
    types.FunctionType: Tracer._call_function,  # first in the old chain too
    np.ufunc: Tracer.call_prim,  # np.sin, np.add: a primitive (the chain's end; the commonest C call)
    _DISPATCHER: Tracer._call_dispatcher,  # np.sum, np.cov (was last, after SPECIAL: see its handler)
    types.MethodType: Tracer._call_method,
    functools.partial: Tracer._call_partial,
    staticmethod: Tracer._call_wrapped,
    classmethod: Tracer._call_wrapped,
    _LRU_WRAPPER: Tracer._call_lru,  # (was after SPECIAL and isinstance(f, type))
    np.vectorize: Tracer._call_vectorize,  # (a numpy class: _native_class, so never a "user class")
    types.MethodDescriptorType: Tracer._call_unbound,  # dict.get, list.append through the class
    types.WrapperDescriptorType: Tracer._call_unbound,  # list.__getitem__, dict.__setitem__
    **{getter: Tracer._call_getter for getter in _GETTERS},  # operator.itemgetter & co
}


def call_order_problems() -> list[str]:
    """The ordering argument of ``_CALL_BY_TYPE``, as a check (``tests/test_trace_dispatch.py``; the
    tables may grow): what an ordered check of ``Tracer.call`` could claim of a type the table decides."""
    problems = [f"{tp!r} could be claimed by an ordered check" for tp in _CALL_BY_TYPE
                if getattr(tp, "__irad_trace_call__", None) is not None or issubclass(tp, type)
                or _python_class(tp) or tp.__module__.startswith("plum")]
    problems += [f"{f!r} has a DUNDER_BUILTINS row: Tracer.call would never see it"
                 for f in DUNDER_BUILTINS if type(f) in _CALL_BY_TYPE]
    problems += [f"{f!r} has a SPECIAL row: Tracer.call would never see it" for f, _ in SPECIAL.values()
                 if type(f) in _CALL_BY_TYPE and type(f) not in (types.FunctionType, _DISPATCHER)]
    return problems


# ---- entry point ----------------------------------------------------------------------------

def _arg_hints(f: Callable[..., Any], in_tree: TreeDef) -> list[str]:
    """Readable names of the leaves of ``(args, kwargs)`` (``params.W1``, ``model.layers[0].b``)."""
    try:
        params = list(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        params = []
    hints: list[str] = []
    args_tree, kw_tree = in_tree.children
    for i, a in enumerate(args_tree.children):
        hints.extend(a.paths(params[i] if i < len(params) else f"arg{i}"))
    for k, a in zip(kw_tree.keys, kw_tree.children):
        hints.extend(a.paths(k))
    return hints


def trace_values(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 constant: frozenset[int] = frozenset(), deep: frozenset[int] = frozenset(), ints: bool = True) \
        -> tuple[Graph, Tracer, Any]:
    """Trace one call of ``f``.  Returns the graph, the tracer (trace-time values) and f's result.
    Leaves at the flat positions in ``constant`` are not inputs but constants of the graph.
    ``ints``: Python int leaves are inputs (``irad.intdata``; what ``irad.signature.call_key``
    assumes), else constants, as ``irad.trace`` shows them.
    ``deep``: the positions of the differentiated arguments, whose dataclasses and objects of the
    user's classes are flattened too (``irad.pytree.Depth.OBJECTS``): ``f`` gets copies of them."""
    name = getattr(f, "__name__", type(f).__name__)
    t = Tracer(name)
    originals: list[Any] = []
    leaves, in_tree = flatten_args(args, kwargs, deep, originals)
    hints = _arg_hints(f, in_tree)
    new_leaves, inputs, statics = [], [], []
    for i, x in enumerate(leaves):
        if isinstance(x, np.ndarray) and type(x) is not np.ndarray and foreign_array(type(x)):
            tp = type(x)
            raise UnsupportedError(f"argument {hints[i] if i < len(hints) else i} of {name}: a {tp.__module__}."
                                   f"{tp.__qualname__} (an ndarray subclass; {foreign_array(tp)}) cannot be traced",
                                   def_site(f), _foreign_hint(tp))
        if trackable(x) and i not in constant:
            y, v = t.input(x, hints[i] if i < len(hints) else f"x{i}")
            new_leaves.append(y)
            inputs.append(v)
        elif ints and intdata.is_int_leaf(x) and i not in constant:  # data unless it shapes the program
            y, v = t.int_input(x, hints[i] if i < len(hints) else f"x{i}")
            new_leaves.append(y)
            inputs.append(v)
        else:
            new_leaves.append(x)
            statics.append((i, x))
            if i in constant and type(x) is np.ndarray:
                # NOTE: a constant of the host graph (a rule body traced by passes/inline.py), not an
                # array of the user's world: a plain constant of the body too, which passes may fold
                t.born.add(id(x))
    copies: list[Any] = []
    targs, tkwargs = unflatten(in_tree, new_leaves, copies)
    # NOTE: everything a copy holds is a leaf (an input, or a static in the cache key) or static
    # structure: reading it is no dependency, as for objects the function makes
    t.born.update(id(c) for c in copies)
    for _, x in statics:  # an object argument (a config, a model): what the trace reads of it is a dependency
        if not isinstance(x, np.ndarray):
            t.reach(x, "argument")
    prev = hooks.TRACER.get()  # this thread's/task's (see hooks.TRACER)
    hooks.TRACER.set(t)
    # NOTE: a trace allocates many small objects that all stay alive (values, Vars, Ops): the
    # cyclic collector would rescan them again and again (it was most of the tracing time)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        result = t.call(f, tuple(targs), dict(tkwargs))
        after, after_tree = flatten_args(targs, tkwargs, deep)
        if after_tree != in_tree or any(a is not b for a, b in zip(after, new_leaves)):
            raise MutationError(
                f"{name} changes an argument container in place (an item or key of a list or dict it was passed, "
                "or an attribute of an object it differentiates): irad passes a compiled program the leaves of its "
                "arguments, and the function a copy of such an object, so that change would not reach the caller",
                "", "return the new value instead, or copy the container inside the function")
        if originals:  # (one also passed as a static argument is read as that argument: not behind a copy)
            _no_reads_behind_copies(t, f, [o for o in originals if all(o is not x for _, x in statics)])
        fresh = [y for i, y in enumerate(new_leaves)
                 if (trackable(leaves[i]) or (ints and intdata.is_int_leaf(leaves[i]))) and i not in constant]
        for k, (y, v) in enumerate(zip(fresh, inputs)):
            if isinstance(y, np.ndarray) and t.vars.get(id(y)) is not v:
                t.mutated_inputs.append((k, t.atom(y)))
        g = t.graph(tuple(inputs), result, in_tree, tuple(statics))
    finally:
        hooks.TRACER.set(prev)
        if gc_was_enabled:
            gc.enable()
        intdata.release(t)
    return g, t, result


def _no_reads_behind_copies(t: Tracer, f: Callable[..., Any], originals: list[Any]) -> None:
    """A differentiated object reaches ``f`` as a copy whose attributes are the graph's inputs; a
    read of the original's attributes (through a global, a closure, a method bound to it and
    stored on it) would be a constant with no gradient: an error, never a silently partial gradient."""
    ids = {id(o) for o in originals}
    for d in t.deps:
        if d[0] == "inst" and id(d[1].value) in ids:
            o, name = d[1].value, getattr(f, "__name__", type(f).__name__)
            raise GradError(f"{name} reads attribute {d[2]!r} of the {type(o).__qualname__} object it "
                            "differentiates through another reference to that object (a global, a closure, or a "
                            "method bound to it and stored on it, like self.act = self.relu): irad differentiates "
                            "the argument, which the function gets as a copy, so that read would get no gradient"
                            f"\n  at {def_site(f) or name}\n  use the argument only (store plain functions, "
                            "not bound methods, as attributes), or pass the other object as a separate argument")


def trace(f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The typed SSA IR of one call ``f(*args, **kwargs)``; ``trace(f)`` alone returns a tracing function."""
    if not args and not kwargs:
        @functools.wraps(f)
        def curried(*a: Any, **k: Any) -> Graph:
            return trace_values(f, a, k, ints=False)[0]
        return curried
    # NOTE: the graph of this one call: its ints are constants (a compiled program takes them as inputs)
    return trace_values(f, args, kwargs, ints=False)[0]


def _bind_capture() -> None:
    global _CAPTURE
    from . import primitives as irad_ops
    from .effects import mark_impure
    _CAPTURE = irad_ops.capture
    mark_impure(irad_ops.capture)  # passes never fold, merge or drop it: it must run to hand the value over


_bind_capture()
