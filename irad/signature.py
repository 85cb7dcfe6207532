"""The signature of a compiled program: everything it assumes about the world, checked per call.

A compiled program is a bet that the world has not changed since its trace (DESIGN §7).  This
module is the one owner of that bet, and every transform (``compile``'s ``Program``, ``grad``,
``value_and_grad``, ``vjp``, nested transforms) goes through it:

- :func:`call_key`: the cache key of a call.  Pytree structure, dtypes and shapes of the data
  leaves; static leaves by value when hashable, by identity when not (never by ``repr``); the
  rule registry's version.
- the dependencies a trace read from the world (:class:`Dep` ``(kind, obj, key, expected)``, each
  kind a row of ``KINDS``): globals and module attributes, closure cells, attributes of objects the trace
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
from typing import TYPE_CHECKING, Any, Callable, Generic, NamedTuple, Sequence, TypeVar

import numpy as np

from . import log
from .pytree import REGISTRY, Depth, flatten_args, node_of
from .intdata import TracedInt
from .rules import registry

if TYPE_CHECKING:
    from types import FrameType

MISSING = object()
#: top-level packages whose module attributes hold no user state (their objects are not reached)
LIBRARY_ROOTS = frozenset({"numpy", "scipy", "irad", "networkx", "bytecode"}) | frozenset(sys.stdlib_module_names)
#: programs kept per function (distinct argument signatures); the oldest is dropped past this
MAX_PROGRAMS = 64
#: programs kept per argument signature (the paths its guards chose: branches, the values of ints
#: that shape the program); the least recently used is dropped past this
MAX_PATHS = 32
#: a value-dependent branch that flips this many times for one key warns (RetraceWarning)
RETRACE_WARN_AFTER = 8
#: a dependency found changed on this many consecutive calls warns: it changes on every call
STALE_WARN_AFTER = 3


def is_library_module(name: str) -> bool:
    """A module of the standard library or of numpy/scipy/irad (whole package names: `mathutils` and
    `__main__` are the user's)."""
    return name.partition(".")[0] in LIBRARY_ROOTS


_IRAD_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning that points at the user's line (the first frame outside irad)."""
    f: FrameType | None
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
    if tx is TracedInt:  # an int of an enclosing trace (grad of grad): data, as the int itself
        return int
    try:
        hash(x)
    except TypeError:
        # NOTE: an unhashable static (a dataclass with eq=True) is keyed by identity, never by
        # repr: two objects with one repr are different programs, and the key holds the object
        # alive only as long as the (bounded) cache keeps its program
        return (tx, Identity(x))
    return (tx, x)  # static: part of the key by value


_REGISTERED = REGISTRY.registered  # the classes of irad.register_pytree (the same dict)


def _key(x: Any, leaves: list[Any], deep: bool = False) -> Any:
    tx = type(x)
    if tx is np.ndarray:
        leaves.append(x)
        return (x.dtype, x.shape)
    if tx is float or tx is int:  # NOTE: an int is data unless its trace guards its value (irad.intdata)
        leaves.append(x)
        return tx
    if tx is list or tx is tuple:
        if x and list(map(type, x)).count(float) == len(x):  # NOTE: ~30% faster than a set of the types
            leaves.extend(x)
            return (tx, "floats", len(x))
        return (tx,) + tuple(_key(e, leaves, deep) for e in x)
    if tx is dict or tx is OrderedDict:  # NOTE: the same containers as irad.pytree flattens
        parts: list[Any] = [tx]
        for k, v in x.items():
            if type(v) is np.ndarray:  # NOTE: a dict of arrays (parameters) without a call per entry
                leaves.append(v)
                parts.append((k, (v.dtype, v.shape)))
            else:
                parts.append((k, _key(v, leaves, deep)))
        return tuple(parts)
    if x is None:
        return None
    if isinstance(x, tuple) and hasattr(tx, "_fields"):  # namedtuple
        return (tx,) + tuple(_key(e, leaves, deep) for e in x)
    if deep or tx in _REGISTERED:  # a user pytree node: its class, static part and field names, then its children
        node = node_of(x, Depth.OBJECTS if deep else Depth.REGISTERED)
        if node is not None:
            return node[:2] + tuple(_key(c, leaves, deep) for c in node[2])
    leaves.append(x)
    return _leaf_key(x)


def call_key(args: tuple[Any, ...], kwargs: dict[str, Any], deep: frozenset[int] = frozenset()) \
        -> tuple[Any, list[Any]]:
    """The cache key of a call and its flat leaves, in ``irad.pytree.flatten_args(args, kwargs,
    deep)`` order (``deep``: the positions of the differentiated arguments, whose dataclasses and
    objects are pytrees too).

    This is the per-call hot path: a list of Python floats is keyed by its length in one C-level
    pass instead of one Python call per element.
    """
    leaves: list[Any] = []
    try:
        key = tuple([_key(a, leaves, i in deep) for i, a in enumerate(args)]) if deep else \
            tuple([_key(a, leaves) for a in args])
    except RecursionError:
        flatten_args(args, kwargs, deep)  # names the object that contains itself
        raise
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


def effect_dep(what: str) -> Dep:
    """A side effect the trace made that a compiled program cannot repeat (``global G; G = ...``,
    ``self.last = loss``): the program is stale at once, so every call traces again and the effect
    happens on every call, as in Python."""
    return Dep("effect", None, what, None)


def function_dep(fn: Any) -> Dep:
    """The code and defaults of a traced function: reassigning ``__code__``, ``__defaults__`` or a
    keyword default invalidates a program.

    The function is held weakly: a program cached *for* a function (``vjp``'s cache is keyed by it,
    weakly) must not keep it alive, and a function that is gone cannot have changed."""
    kw = fn.__kwdefaults__
    return Dep("function", weakref.ref(fn), None,
               Identity((fn.__code__, fn.__defaults__, None if kw is None else tuple(kw.items()))))


def contents_dep(c: Any) -> Dep:
    """The items of a list, dict or set the trace read (a global list of coefficients, a dict of layers)."""
    if isinstance(c, dict):
        return Dep("contents", Identity(c), "dict", Identity(tuple(c.items())))
    if isinstance(c, (set, frozenset)):
        return Dep("contents", Identity(c), "set", Identity(frozenset(c)))
    return Dep("contents", Identity(c), "seq", Identity(tuple(c)))


class Dep(NamedTuple):
    """One thing a trace read from the world: ``kind`` says how ``obj`` and ``key`` are read and
    what ``expected`` (what the trace saw) is compared with; see ``KINDS``."""

    kind: str
    obj: Any
    key: Any
    expected: Any


class _Kind(NamedTuple):
    """How a kind of dependency is checked and named.  ``test(dep, names, ns)`` returns a Python
    expression that is True while the dependency holds, over the names ``names(x)`` it put in
    ``ns``; ``describe(dep)`` says what it is, for a message (never evaluated as code)."""

    test: Callable[[Dep, Callable[[str], str], dict[str, Any]], str]
    describe: Callable[[Dep], str]


def _bind(ns: dict[str, Any], names: Callable[[str], str], **values: Any) -> None:
    for k, v in values.items():
        ns[names(k)] = v


def _test_global(d: Dep, n: Callable[[str], str], ns: dict[str, Any]) -> str:
    _bind(ns, n, o=d.obj.value, k=d.key, v=d.expected.value)
    return f"{n('o')}.get({n('k')}, _M) is {n('v')}"


def _test_cell(d: Dep, n: Callable[[str], str], ns: dict[str, Any]) -> str:
    _bind(ns, n, o=d.obj.value, v=d.expected.value)
    return f"{n('o')}.cell_contents is {n('v')}"


def _test_attr(d: Dep, n: Callable[[str], str], ns: dict[str, Any]) -> str:
    mro = d.obj.__mro__
    _bind(ns, n, o=d.obj, k=d.key, v=d.expected.value, mro=mro)
    tests = [f"{n('o')}.__mro__ is {n('mro')}"]
    for j, klass in enumerate(mro):  # unrolled: the class that defines it, and none before it
        if d.key in vars(klass):
            for m in range(j + 1):
                ns[n(f"d{m}")] = vars(mro[m])  # a live view of the class's namespace
                tests.append(f"{n('k')} not in {n(f'd{m}')}" if m < j else f"{n(f'd{m}')}.get({n('k')}, _M) is {n('v')}")
            return " and ".join(tests)
    return f"{tests[0]} and _class_attr({n('o')}, {n('k')}) is {n('v')}"


def _test_inst(d: Dep, n: Callable[[str], str], ns: dict[str, Any]) -> str:
    o = d.obj.value  # NOTE: `o.__class__ = B` changes every attribute lookup of o
    _bind(ns, n, o=o, k=d.key, v=d.expected.value, t=type(o))
    read = f"{n('o')}.__dict__.get({n('k')}, _M)" if type(getattr(o, "__dict__", None)) is dict \
        else f"getattr({n('o')}, {n('k')}, _M)"
    return f"{n('o')}.__class__ is {n('t')} and {read} is {n('v')}"


def _test_contents(d: Dep, n: Callable[[str], str], ns: dict[str, Any]) -> str:
    _bind(ns, n, o=d.obj.value, v=d.expected.value)
    if d.key == "set":
        return f"{n('o')} == {n('v')}"
    return f"{'_same_items' if d.key == 'dict' else '_same_seq'}({n('o')}, {n('v')})"


def _test_layout(d: Dep, n: Callable[[str], str], ns: dict[str, Any]) -> str:
    shape, dtype = d.expected.value
    _bind(ns, n, o=d.obj.value, s=shape, dt=dtype)
    return f"{n('o')}.shape == {n('s')} and {n('o')}.dtype == {n('dt')}"


def _test_function(d: Dep, n: Callable[[str], str], ns: dict[str, Any]) -> str:
    code, defaults, kw = d.expected.value
    _bind(ns, n, o=d.obj, c=code, df=defaults, kw=kw)
    kw_test = "_f.__kwdefaults__ is None" if kw is None else f"_same_kwdefaults(_f.__kwdefaults__, {n('kw')})"
    # inline (a helper call costs more than the test): a function that is gone has not changed
    return f"((_f := {n('o')}()) is None or _f.__code__ is {n('c')} and _f.__defaults__ is {n('df')} and {kw_test})"


def _test_dispatch(d: Dep, n: Callable[[str], str], ns: dict[str, Any]) -> str:
    _bind(ns, n, o=d.obj, k=d.key, v=d.expected)
    return f"{n('o')}.dispatch({n('k')}) is {n('v')}"


def _test_plum(d: Dep, n: Callable[[str], str], ns: dict[str, Any]) -> str:
    _bind(ns, n, o=d.obj, k=d.key, v=d.expected)
    ns["_implementation"] = registry.implementation
    return f"_implementation({n('o')}, {n('k')}) is {n('v')}"


def _module_name(ns: Any) -> str:
    return ns.get("__name__", "?") if isinstance(ns, dict) else "?"


#: every kind of dependency: how the generated check tests it and how a message names it
KINDS: dict[str, _Kind] = {
    "global": _Kind(_test_global, lambda d: f"global {d.key!r} of module {_module_name(d.obj.value)}"),
    "cell": _Kind(_test_cell, lambda d: f"closure variable {d.key!r}" if d.key else "a closure variable"),
    "attr": _Kind(_test_attr, lambda d: f"{getattr(d.obj, '__qualname__', d.obj)}.{d.key}"),
    "inst": _Kind(_test_inst, lambda d: f"attribute {d.key!r} of a {type(d.obj.value).__name__} object"),
    "contents": _Kind(_test_contents, lambda d: f"the items of a {type(d.obj.value).__name__} the function read"),
    "layout": _Kind(_test_layout, lambda d: "the shape or dtype of an array the function read "
                                            f"({d.expected.value[0]} {d.expected.value[1]})"),
    "effect": _Kind(lambda d, n, ns: "False", lambda d: f"{d.key}, which the function assigns,"),
    "function": _Kind(_test_function,
                      lambda d: f"the code or defaults of {getattr(d.obj(), '__qualname__', 'a function')}"),
    "dispatch": _Kind(_test_dispatch, lambda d: f"the overloads of {getattr(d.obj, '__qualname__', d.obj)}"),
    "plum": _Kind(_test_plum, lambda d: "the methods of a plum function"),
}


def describe(dep: tuple[Any, ...]) -> str:
    """What a dependency is, for a message."""
    d = Dep(*dep)
    return KINDS[d.kind].describe(d)


class Assumptions:
    """What one program read from the world, and ``stale()``: None while all of it holds, else
    which dependency changed.  The check is generated Python: one identity test per dependency."""

    __slots__ = ("deps", "check")

    def __init__(self, deps: Sequence[tuple[Any, ...]]) -> None:
        self.deps = tuple(deps)
        ns: dict[str, Any] = {}
        lines = ["def check():", "    try:", "        pass"]
        lines += [f"        if not ({test}): return {i}" for i, test in enumerate(self.tests(ns))]
        lines += ["    except Exception:", "        return -1", "    return None"]
        exec(compile("\n".join(lines), "<irad assumptions>", "exec"), ns)  # noqa: S102 - irad's own names only
        self.check: Callable[[], int | None] = ns.pop("check")  # no cycle through its own globals

    def tests(self, ns: dict[str, Any]) -> list[str]:
        """One Python condition per dependency, true while it holds; the objects they name are put
        in ``ns`` (a condition may raise: the dependency cannot be checked)."""
        ns.update({"_M": MISSING, "_same_seq": _same_seq, "_same_items": _same_items,
                   "_same_kwdefaults": _same_kwdefaults, "_class_attr": class_attr})
        # (names `_d12_1` and `_d1_21` differ)
        return [KINDS[Dep(*dep).kind].test(Dep(*dep), lambda x, i=i: f"_{x}_{i}", ns)  # type: ignore[misc]  # mypy: i=i
                for i, dep in enumerate(self.deps)]

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
        #: how many keys it holds (a bound C method: with one key there is no order to keep)
        self.size: Callable[[], int] = self._entries.__len__
        self._lock = threading.Lock()
        #: why -> how many calls in a row found it changed (cleared when a cached program runs)
        self.stale_counts: dict[str, int] = {}
        self._warned: set[str] = set()
        self.flips: dict[Any, int] = {}
        #: the fast entry of the program that ran last (``irad.entry``), cleared when a program is
        #: added or dropped; only the owner's ``__call__`` reads it
        self.fast: Callable[[tuple[Any, ...], ProgramCache[P]], Any] | None = None

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
            self.fast = None
            progs = self._entries.get(key)
            if progs is not None:
                for j, p in enumerate(progs):
                    if p is prog:
                        del progs[j]
                        break
            n = self.stale_counts[why] = self.stale_counts.get(why, 0) + 1
        if log.CONFIG.enabled:  # (logging is off by default: one attribute test)
            log.stale(self.name, prog, why)
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
            self.fast = None
            progs = self._entries.get(key)
            had = -1 if progs is None else len(progs)
            if progs is None:
                progs = self._entries[key] = []
                if len(self._entries) > self.max_keys:
                    evicted = self._entries.popitem(last=False)[0]
                    self.flips.pop(evicted, None)
            else:
                self._entries.move_to_end(key)
            progs.insert(0, prog)
            del progs[MAX_PATHS:]  # (each is tried in turn on a call: the list stays short)
            n = 0
            if flipped:
                n = self.flips[key] = self.flips.get(key, 0) + 1
        if log.CONFIG.enabled:
            log.published(self, key, prog, flipped, had)
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
