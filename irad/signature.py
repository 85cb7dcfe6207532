"""The signature of a compiled program: everything it assumes about the world, checked per call.

A compiled program is a bet that the world has not changed since its trace (DESIGN §7).  This
module is the one owner of that bet, and every transform (``compile``'s ``Program``, ``grad``,
``value_and_grad``, ``vjp``, nested transforms) goes through it:

- :func:`call_key`: the cache key of a call.  Pytree structure, dtypes and shapes of the data
  leaves; static leaves by value when hashable, by identity when not (never by ``repr``); the
  rule registry's version.
- the dependencies a trace read from the world (tuples ``(kind, obj, key, expected)`` that the
  tracer records): globals and module attributes, closure cells, attributes of objects the trace
  did not create, the contents of containers reached from those, class attributes (methods,
  properties), the code and defaults of every traced function, singledispatch and plum overloads.
  Arrays read this way are not dependencies: the program reads them live (``Const.live``).
- :class:`Assumptions`: the per-call check, generated once per program as straight-line Python
  (only irad's own names; every object and key is a constant of its namespace), so a cached call
  pays one function call and one identity test per dependency.
- :class:`ProgramCache`: one function's programs by key, bounded (least recently used), safe under
  concurrent first calls, with the warnings for retraces that never settle.
"""
from __future__ import annotations

import os
import sys
import threading
import warnings
import weakref
from collections import OrderedDict
from typing import Any, Callable, Generic, Sequence, TypeVar

import numpy as np

from .rules import registry

MISSING = object()
#: top-level packages whose module attributes hold no user state (their objects are not reached)
LIBRARY_ROOTS = frozenset({"numpy", "scipy", "irad", "networkx", "bytecode"}) | frozenset(sys.stdlib_module_names)
#: programs kept per function (distinct argument signatures); the oldest is dropped past this
MAX_PROGRAMS = 64
#: a value-dependent branch that flips this many times for one key warns (RetraceWarning)
RETRACE_WARN_AFTER = 8
#: a dependency found changed on this many consecutive calls warns: it changes on every call
STALE_WARN_AFTER = 3


def is_library_module(name: str) -> bool:
    """A module of the standard library or of numpy/scipy/irad (whole package names: `mathutils` and
    `__main__` are the user's)."""
    return name.partition(".")[0] in LIBRARY_ROOTS


def effect_dep(what: str) -> tuple[Any, ...]:
    """A side effect the trace made that a compiled program cannot repeat (``global G; G = ...``,
    ``self.last = loss``): the program is stale at once, so every call traces again and the effect
    happens on every call, as in Python."""
    return ("effect", None, what, None)


_IRAD_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning that points at the user's line (the first frame outside irad)."""
    f, level = sys._getframe(1), 1
    while f is not None and f.f_code.co_filename.startswith(_IRAD_DIR):
        f, level = f.f_back, level + 1
    return level


class RetraceWarning(UserWarning):
    """A gradient function keeps retracing: a branch, a global or an argument changes on every call."""


class Identity:
    """A value compared by identity, hashable whatever it is (an array, a list...)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)

    def __repr__(self) -> str:
        return f"Identity({type(self.value).__name__} at {id(self.value):#x})"


class DictRef(Identity):
    """A namespace dict, compared and hashed by identity."""


# ---- the cache key --------------------------------------------------------------------------

def _leaf_key(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return (x.dtype, x.shape)
    tx = type(x)
    if tx is float or tx is complex or isinstance(x, np.generic):
        return tx
    try:
        hash(x)
    except TypeError:
        # NOTE: an unhashable static (a dataclass with eq=True) is keyed by identity, never by
        # repr: two objects with one repr are different programs, and the key holds the object
        # alive only as long as the (bounded) cache keeps its program
        return (tx, Identity(x))
    return (tx, x)  # static: part of the key by value


_FLOAT_ONLY = {float}


def _key(x: Any, leaves: list[Any]) -> Any:
    tx = type(x)
    if tx is np.ndarray:
        leaves.append(x)
        return (x.dtype, x.shape)
    if tx is float:
        leaves.append(x)
        return float
    if tx is list or tx is tuple:
        if x and set(map(type, x)) == _FLOAT_ONLY:
            leaves.extend(x)
            return (tx, "floats", len(x))
        return (tx,) + tuple(_key(e, leaves) for e in x)
    if tx is dict or tx is OrderedDict:  # NOTE: the same containers as irad.pytree flattens
        return (tx,) + tuple((k, _key(v, leaves)) for k, v in x.items())
    if x is None:
        return None
    if isinstance(x, tuple) and hasattr(tx, "_fields"):  # namedtuple
        return (tx,) + tuple(_key(e, leaves) for e in x)
    leaves.append(x)
    return _leaf_key(x)


def call_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The cache key of a call and its flat leaves, in ``flatten((args, kwargs))`` order.

    This is the per-call hot path: a list of Python floats is keyed by its length in one C-level
    pass instead of one Python call per element.
    """
    leaves: list[Any] = []
    key = tuple(_key(a, leaves) for a in args)
    if kwargs:
        key += (("kw",) + tuple((k, _key(v, leaves)) for k, v in kwargs.items()),)
    return (key, registry.version()), leaves


# ---- dependencies ---------------------------------------------------------------------------

def class_attr(tp: type, name: str) -> Any:
    """The raw attribute ``name`` as the class ``tp`` resolves it (None when absent)."""
    for klass in tp.__mro__:
        d = vars(klass)
        if name in d:
            return d[name]
    return None


def _same_seq(seq: Any, snapshot: tuple[Any, ...]) -> bool:
    if len(seq) != len(snapshot):
        return False
    for a, b in zip(seq, snapshot):
        if a is not b:
            return False
    return True


def _same_items(d: dict[Any, Any], snapshot: tuple[tuple[Any, Any], ...]) -> bool:
    """The same keys in the same order (code may iterate them), each holding the same object."""
    if len(d) != len(snapshot):
        return False
    for (k, v), k2 in zip(snapshot, d):
        if (k2 is not k and k2 != k) or d[k2] is not v:
            return False
    return True


def _same_kwdefaults(kw: dict[str, Any] | None, snapshot: tuple[tuple[str, Any], ...] | None) -> bool:
    if kw is None or snapshot is None:
        return kw is None and snapshot is None
    return _same_items(kw, snapshot)


def function_dep(fn: Any) -> tuple[Any, ...]:
    """The code and defaults of a traced function: reassigning ``__code__``, ``__defaults__`` or a
    keyword default invalidates a program.

    The function is held weakly: a program cached *for* a function (``vjp``'s cache is keyed by it,
    weakly) must not keep it alive, and a function that is gone cannot have changed."""
    kw = fn.__kwdefaults__
    return ("function", weakref.ref(fn), None,
            Identity((fn.__code__, fn.__defaults__, None if kw is None else tuple(kw.items()))))


def contents_dep(c: Any) -> tuple[Any, ...]:
    """The items of a list, dict or set the trace read (a global list of coefficients, a dict of layers)."""
    if isinstance(c, dict):
        return ("contents", Identity(c), "dict", Identity(tuple(c.items())))
    if isinstance(c, (set, frozenset)):
        return ("contents", Identity(c), "set", Identity(frozenset(c)))
    return ("contents", Identity(c), "seq", Identity(tuple(c)))


def describe(dep: tuple[Any, ...]) -> str:
    """What a dependency is, for a message (never evaluated as code)."""
    kind, obj, key, expected = dep
    if kind == "global":
        mod = obj.value.get("__name__", "?") if isinstance(obj.value, dict) else "?"
        return f"global {key!r} of module {mod}"
    if kind == "cell":
        return f"closure variable {key!r}" if key else "a closure variable"
    if kind == "attr":
        return f"{getattr(obj, '__qualname__', obj)}.{key}"
    if kind == "inst":
        return f"attribute {key!r} of a {type(obj.value).__name__} object"
    if kind == "contents":
        return f"the items of a {type(obj.value).__name__} the function read"
    if kind == "effect":
        return f"{key}, which the function assigns,"
    if kind == "layout":
        return f"the shape or dtype of an array the function read ({expected.value[0]} {expected.value[1]})"
    if kind == "function":
        return f"the code or defaults of {getattr(obj(), '__qualname__', 'a function')}"
    if kind == "dispatch":
        return f"the overloads of {getattr(obj, '__qualname__', obj)}"
    if kind == "plum":
        return "the methods of a plum function"
    return kind


def _dep_test(i: int, dep: tuple[Any, ...], ns: dict[str, Any]) -> str:
    """One line of the generated check: an expression that is True while ``dep`` holds."""
    kind, obj, key, expected = dep
    o, k, v = f"_o{i}", f"_k{i}", f"_v{i}"
    ns[k] = key
    if kind == "global":
        ns[o], ns[v] = obj.value, expected.value
        return f"{o}.get({k}, _M) is {v}"
    if kind == "cell":
        ns[o], ns[v] = obj.value, expected.value
        return f"{o}.cell_contents is {v}"
    if kind == "attr":
        ns[o], ns[v] = obj, expected.value
        mro = ns[f"_mro{i}"] = obj.__mro__
        for j, klass in enumerate(mro):  # unrolled: the class that defines it, and none before it
            if key in vars(klass):
                tests = [f"{o}.__mro__ is _mro{i}"]
                for m in range(j + 1):
                    ns[f"_d{i}_{m}"] = vars(mro[m])  # a live view of the class's namespace
                    tests.append(f"{k} not in _d{i}_{m}" if m < j else f"_d{i}_{m}.get({k}, _M) is {v}")
                return " and ".join(tests)
        return f"{o}.__mro__ is _mro{i} and _class_attr({o}, {k}) is {v}"
    if kind == "inst":  # NOTE: `o.__class__ = B` changes every attribute lookup of o
        ns[o], ns[v], ns[f"_t{i}"] = obj.value, expected.value, type(obj.value)
        if type(getattr(obj.value, "__dict__", None)) is dict:
            return f"{o}.__class__ is _t{i} and {o}.__dict__.get({k}, _M) is {v}"
        return f"{o}.__class__ is _t{i} and getattr({o}, {k}, _M) is {v}"
    if kind == "effect":
        return "False"
    if kind == "layout":
        ns[o] = obj.value
        ns[f"_s{i}"], ns[f"_dt{i}"] = expected.value
        return f"{o}.shape == _s{i} and {o}.dtype == _dt{i}"
    if kind == "contents":
        ns[o], ns[v] = obj.value, expected.value
        if key == "set":
            return f"{o} == {v}"
        return f"_same_items({o}, {v})" if key == "dict" else f"_same_seq({o}, {v})"
    if kind == "function":
        ns[o] = obj
        ns[f"_c{i}"], ns[f"_df{i}"], ns[f"_kw{i}"] = expected.value
        kw = "_f.__kwdefaults__ is None" if expected.value[2] is None else f"_same_kwdefaults(_f.__kwdefaults__, _kw{i})"
        # inline (a helper call costs more than the test): a function that is gone has not changed
        return f"((_f := {o}()) is None or _f.__code__ is _c{i} and _f.__defaults__ is _df{i} and {kw})"
    if kind == "dispatch":
        ns[o], ns[v] = obj, expected
        return f"{o}.dispatch({k}) is {v}"
    if kind == "plum":
        ns[o], ns[v], ns["_implementation"] = obj, expected, registry.implementation
        return f"_implementation({o}, {k}) is {v}"
    raise ValueError(f"unknown dependency kind {kind!r}")


class Assumptions:
    """What one program read from the world, and ``stale()``: None while all of it holds, else
    which dependency changed.  The check is generated Python: one identity test per dependency."""

    __slots__ = ("deps", "check")

    def __init__(self, deps: Sequence[tuple[Any, ...]]) -> None:
        self.deps = tuple(deps)
        ns: dict[str, Any] = {"_M": MISSING, "_same_seq": _same_seq, "_same_items": _same_items,
                              "_same_kwdefaults": _same_kwdefaults, "_class_attr": class_attr}
        lines = ["def check():", "    try:", "        pass"]
        for i, dep in enumerate(self.deps):
            lines.append(f"        if not ({_dep_test(i, dep, ns)}): return {i}")
        lines += ["    except Exception:", "        return -1", "    return None"]
        exec(compile("\n".join(lines), "<irad assumptions>", "exec"), ns)  # noqa: S102 - irad's own names only
        self.check: Callable[[], int | None] = ns.pop("check")  # no cycle through its own globals

    def stale(self) -> str | None:
        """None when everything the trace read is unchanged; else what changed."""
        i = self.check()
        if i is None:
            return None
        if i < 0:
            return "a dependency could not be checked"
        return f"{describe(self.deps[i])} changed"

    def __len__(self) -> int:
        return len(self.deps)


NO_ASSUMPTIONS = Assumptions(())


def check_deps(deps: Sequence[tuple[Any, ...]]) -> str | None:
    """None when every dependency in ``deps`` holds, else what changed (uncached: for tools)."""
    return Assumptions(deps).stale()


# ---- the per-function program cache ---------------------------------------------------------

P = TypeVar("P")


class ProgramCache(Generic[P]):
    """One function's compiled programs by call key: each key holds the programs of the paths its
    guards chose (most recently used first).

    Bounded: past ``MAX_PROGRAMS`` keys the least recently used is dropped, and a warning names the
    argument that keeps changing.  Concurrent first calls trace in parallel (each thread has its
    own tracer) and publish under a lock; a cached call takes no lock.
    """

    def __init__(self, name: str, arg_names: Callable[[], Sequence[str]] | None = None,
                 max_keys: int = MAX_PROGRAMS) -> None:
        self.name = name
        self.max_keys = max_keys
        self._arg_names = arg_names
        self._entries: "OrderedDict[Any, list[P]]" = OrderedDict()
        #: the programs of a key, or None (the hot path: a bound C method, no Python frame)
        self.get: Callable[[Any], list[P] | None] = self._entries.get
        #: mark a key the most recently used (KeyError when it was dropped meanwhile)
        self.touch: Callable[[Any], None] = self._entries.move_to_end
        self._lock = threading.Lock()
        #: why -> how many calls in a row found it changed (cleared when a cached program runs)
        self.stale_counts: dict[str, int] = {}
        self._warned: set[str] = set()
        self.flips: dict[Any, int] = {}

    def __contains__(self, key: Any) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def promote(self, key: Any, progs: list[P], k: int) -> None:
        """Program ``k`` of ``key`` passed its guards: try it first next time."""
        with self._lock:
            if k < len(progs):
                progs.insert(0, progs.pop(k))

    def drop(self, key: Any, prog: P, why: str) -> None:
        """``prog`` is stale (``why``): remove it; warn once when the same thing changes every call."""
        with self._lock:
            progs = self._entries.get(key)
            if progs is not None:
                for j, p in enumerate(progs):
                    if p is prog:
                        del progs[j]
                        break
            n = self.stale_counts[why] = self.stale_counts.get(why, 0) + 1
        if n == STALE_WARN_AFTER and why not in self._warned:
            self._warned.add(why)
            warnings.warn(f"{self.name} is traced again on every call because {why} on every call; each "
                          "call traces and compiles anew (correct, but slow). When the function itself changes "
                          "it (a side effect), move that out of the differentiated function; else pass the "
                          "value that changes as an argument.", RetraceWarning, stacklevel=user_stacklevel())

    def settled(self) -> None:
        """A cached program ran: what went stale before was a one-off change, not a per-call one."""
        self.stale_counts.clear()

    def add(self, key: Any, prog: P, flipped: str | None = None) -> None:
        """Publish a new program for ``key`` (first when ``flipped``: a guard chose another path)."""
        evicted = None
        with self._lock:
            progs = self._entries.get(key)
            if progs is None:
                progs = self._entries[key] = []
                if len(self._entries) > self.max_keys:
                    evicted = self._entries.popitem(last=False)[0]
                    self.flips.pop(evicted, None)
            else:
                self._entries.move_to_end(key)
            progs.insert(0, prog)
            n = 0
            if flipped:
                n = self.flips[key] = self.flips.get(key, 0) + 1
        if evicted is not None and "keys" not in self._warned:
            self._warned.add("keys")
            warnings.warn(f"{self.name} has compiled programs for more than {self.max_keys} argument "
                          f"signatures; {self._changing(key, evicted)} keeps changing (its shape, dtype or "
                          "static value is part of the key). The least recently used programs are dropped.",
                          RetraceWarning, stacklevel=user_stacklevel())
        if n == RETRACE_WARN_AFTER:
            warnings.warn(
                f"{self.name} retraced {n} times for the same argument shapes because value-dependent "
                f"branches keep changing (guard at {flipped}); each new path is traced and compiled. "
                "Consider np.where or moving the branch out of the differentiated function.",
                RetraceWarning, stacklevel=user_stacklevel())

    def _changing(self, new: Any, old: Any) -> str:
        """Which argument differs between two keys (for the eviction warning)."""
        a, b = new[0], old[0]
        names = list(self._arg_names()) if self._arg_names is not None else []
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                if isinstance(x, tuple) and x and x[0] == "kw":
                    return "a keyword argument"
                return f"argument {i}" + (f" ({names[i]})" if i < len(names) else "")
        return "the registry of rules" if new[1] != old[1] else "an argument"
