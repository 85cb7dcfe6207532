"""Pytrees: nested containers of leaves, flattened at graph boundaries.

A ``TreeDef`` is hashable so that it can be part of a cache key.  Dict keys keep insertion
order (the order the user wrote), so a gradient has exactly the structure of its argument.

The containers are tuples, lists, dicts, OrderedDicts, namedtuples and the classes registered
with :func:`register_pytree` (JAX's layout), everywhere.  How much further ``flatten`` goes is
its ``depth``: dataclasses are containers where values are differentiated or returned (outputs,
cotangents), and instances of the user's own plain classes (a model object) where they are
differentiated (``argnums``, ``vjp``'s arguments).  Elsewhere such objects are leaves: static
values whose attributes a compiled program reads live, as before.

A user node is rebuilt without calling ``__init__`` (``object.__new__`` and its attributes set),
so that a gradient object is made of gradients only and a constructor never copies a traced array
away from the trace.  Leaves with no gradient (ints, strings, integer arrays) are ``None`` in a
gradient; a node's static part (a registered class's aux, a dataclass field marked static) is its
structure, kept.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Callable, Hashable, Iterable, Iterator

from .errors import GradError


class Depth(IntEnum):
    """How far ``flatten`` descends; each depth includes the ones before it."""

    REGISTERED = 0  #: tuples, lists, dicts, OrderedDicts, namedtuples, None, registered classes
    DATACLASSES = 1  #: and dataclass instances (outputs, cotangents)
    OBJECTS = 2  #: and instances of the user's own plain classes (differentiated arguments)


@dataclass(frozen=True, eq=False)
class Registration:
    """One ``register_pytree`` call.  Compared by identity: registering a class again (other
    functions, another child order) makes other cache keys, so no program of the old layout runs."""

    cls: type
    flatten: Callable[[Any], tuple[Iterable[Any], Hashable]]
    unflatten: Callable[[Any, list[Any]], Any]


@dataclass(frozen=True)
class Node:
    """The ``kind`` of a user class's ``TreeDef``: how it is taken apart and rebuilt (``how``:
    'registered', 'dataclass' or 'object') and its static part ``aux`` (a registered class's aux,
    a dataclass's static fields as ``((name, value), ...)``), which is structure."""

    cls: type
    how: str
    aux: Any = ()
    reg: Registration | None = None


@dataclass(frozen=True)
class TreeDef:
    """Structure of a pytree: ``kind`` is 'leaf', 'tuple', 'list', 'dict', 'odict' (an OrderedDict),
    'none', a namedtuple class or a ``Node``."""

    kind: Any
    keys: tuple[Any, ...] = ()
    children: tuple["TreeDef", ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def paths(self, prefix: str = "") -> Iterator[str]:
        """Readable paths of the leaves, e.g. ``params.W1`` or ``xs[2]``."""
        if self.kind == "leaf":
            yield prefix
            return
        for key, child in zip(self.keys, self.children):
            if isinstance(key, int):
                sub = f"{prefix}[{key}]"
            else:
                sub = f"{prefix}.{key}" if prefix else str(key)
            yield from child.paths(sub)


LEAF = TreeDef("leaf")
NONE = TreeDef("none")

#: types irad flattens by itself, which ``register_pytree`` refuses
_BUILTIN_NODES = (tuple, list, dict, OrderedDict, type(None))
_NUMBERS = (bool, int, float, complex, str, bytes)
_INSTALLED_DIRS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


class PytreeRegistry:
    """The classes registered with ``register_pytree``, and what ``flatten`` learnt about other
    classes (whether one is a plain class of the user's own, a dataclass's child and static fields),
    held weakly so that a class defined in a function goes with it."""

    def __init__(self) -> None:
        self.registered: dict[type, Registration] = {}
        self._why_not: "weakref.WeakKeyDictionary[type, str]" = weakref.WeakKeyDictionary()
        self._fields: "weakref.WeakKeyDictionary[type, tuple[tuple[str, ...], tuple[str, ...]]]" = \
            weakref.WeakKeyDictionary()

    def why_not(self, tp: type) -> str:
        """'' when instances of ``tp`` can be flattened over their ``__dict__`` and rebuilt
        without ``__init__``; else why not (for an error message)."""
        r = self._why_not.get(tp)
        if r is None:
            r = self._why_not[tp] = _why_not_plain(tp)
        return r

    def fields(self, tp: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """A dataclass's fields: (children, static), in declaration order.  A field is static with
        ``field(metadata={"static": True})``."""
        r = self._fields.get(tp)
        if r is None:
            fs = dataclasses.fields(tp)
            r = self._fields[tp] = (tuple(f.name for f in fs if not f.metadata.get("static")),
                                    tuple(f.name for f in fs if f.metadata.get("static")))
        return r


REGISTRY = PytreeRegistry()
_REGISTERED = REGISTRY.registered  # (the same dict: one lookup on the per-leaf path)


def _why_not_plain(tp: type) -> str:
    mod = getattr(tp, "__module__", None) or "builtins"
    root = mod.partition(".")[0]
    if root in sys.stdlib_module_names or root == "irad":
        return f"a class of {'the standard library' if root != 'irad' else 'irad'} ({mod})"
    file = getattr(sys.modules.get(mod), "__file__", None) or ""
    if any(d in file for d in _INSTALLED_DIRS):
        return f"a class of an installed package ({mod})"
    if getattr(tp, "__new__", None) is not object.__new__:
        return "its class has its own __new__ (or derives from a builtin type)"
    if any("__slots__" in vars(k) for k in tp.__mro__[:-1]):
        return "its class has __slots__"
    return ""


def register_pytree(cls: type, flatten: Callable[[Any], tuple[Iterable[Any], Hashable]],
                    unflatten: Callable[[Any, list[Any]], Any]) -> None:
    """Make ``cls`` a pytree node, with JAX's layout: ``flatten(obj) -> (children, aux)`` where
    ``children`` is an iterable of subtrees and ``aux`` hashable static data (part of the cache
    key), and ``unflatten(aux, children) -> obj``.  Instances of ``cls`` (exactly, not subclasses)
    are then arguments and outputs of every transform, and a gradient is ``unflatten(aux, grads)``
    (``None`` for children with no gradient).  Registering a class again replaces its layout."""
    if not isinstance(cls, type):
        raise TypeError(f"irad.register_pytree: the first argument must be a class, got {type(cls).__name__}")
    if issubclass(cls, _BUILTIN_NODES) or cls in _NUMBERS or getattr(cls, "__module__", "") == "numpy" or \
            issubclass(cls, tuple) and hasattr(cls, "_fields"):
        raise TypeError(f"irad.register_pytree: {cls.__qualname__} is a type irad already handles "
                        "(a container it flattens, or a number or array type)")
    if not callable(flatten) or not callable(unflatten):
        raise TypeError(f"irad.register_pytree({cls.__qualname__}, flatten, unflatten): flatten and unflatten "
                        "must be functions")
    REGISTRY.registered[cls] = Registration(cls, flatten, unflatten)


def _hashable_aux(x: Any, aux: Any, what: str) -> None:
    try:
        hash(aux)
    except TypeError:
        raise GradError(f"{type(x).__qualname__}: {what} is static data, part of the cache key, but it is not "
                        f"hashable ({type(aux).__name__}): make it hashable (a tuple instead of a list, say)") from None


def node_of(x: Any, depth: Depth = Depth.REGISTERED) -> tuple[Node, tuple[Any, ...], list[Any]] | None:
    """``(node, keys, children)`` when ``x`` is a user pytree node at this depth, else None.  The
    one place that takes a user node apart: ``flatten`` and the cache key (``irad.signature``)
    both go through it, so their orders agree."""
    tx = type(x)
    reg = REGISTRY.registered.get(tx)
    if reg is not None:
        kids, aux = reg.flatten(x)
        kids = list(kids)
        _hashable_aux(x, aux, f"the aux data that {getattr(reg.flatten, '__qualname__', 'flatten')} returned")
        return Node(tx, "registered", aux, reg), tuple(range(len(kids))), kids
    if depth < Depth.DATACLASSES:
        return None
    if hasattr(tx, "__dataclass_fields__") and getattr(tx, "__new__", None) is object.__new__:
        names, statics = REGISTRY.fields(tx)
        d = getattr(x, "__dict__", None)
        present = d if d is not None else {n: getattr(x, n) for n in names + statics if hasattr(x, n)}
        keys = tuple(n for n in names if n in present)
        if d is not None and len(d) != len(keys) + len(statics):  # attributes set outside the fields
            known = set(names) | set(statics)
            keys += tuple(n for n in d if n not in known)
        aux = tuple((n, present[n]) for n in statics if n in present)
        if aux:
            _hashable_aux(x, aux, f"a field marked static ({', '.join(n for n, _ in aux)})")
        return Node(tx, "dataclass", aux), keys, [present[n] for n in keys]
    if depth >= Depth.OBJECTS and type(getattr(x, "__dict__", None)) is dict and not REGISTRY.why_not(tx):
        d = x.__dict__
        return Node(tx, "object"), tuple(d), list(d.values())
    return None


def rebuild(node: Node, keys: tuple[Any, ...], kids: list[Any]) -> Any:
    """The object of ``node`` with these children: a registered class's ``unflatten(aux, kids)``;
    a dataclass or an object made without ``__init__``, its attributes set (frozen ones too)."""
    if node.reg is not None:
        return node.reg.unflatten(node.aux, kids)
    obj: Any = object.__new__(node.cls)
    if node.how == "dataclass":
        for k, v in node.aux:
            object.__setattr__(obj, k, v)
        for k, v in zip(keys, kids):
            object.__setattr__(obj, k, v)
    else:
        obj.__dict__.update(zip(keys, kids))
    return obj


def _is_namedtuple(x: object) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None, depth: Depth = Depth.REGISTERED,
            nodes: list[Any] | None = None) -> tuple[list[Any], TreeDef]:
    """Flatten ``tree`` into its leaves (depth first) and a ``TreeDef``.  ``nodes``, when given,
    collects the user node objects met (the originals a trace must not read behind the copies)."""
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves, is_leaf, depth, nodes, set())


def flatten_args(args: tuple[Any, ...], kwargs: dict[str, Any], deep: frozenset[int] = frozenset(),
                 nodes: list[Any] | None = None) -> tuple[list[Any], TreeDef]:
    """``flatten((args, kwargs))``, with the positional arguments at ``deep`` (the differentiated
    ones) flattened to ``Depth.OBJECTS``.  The order of ``irad.signature.call_key``."""
    if not deep:
        return flatten((args, kwargs), nodes=nodes)
    leaves: list[Any] = []
    active: set[int] = set()
    kids = tuple(_flatten(a, leaves, None, Depth.OBJECTS if i in deep else Depth.REGISTERED,
                          nodes if i in deep else None, active) for i, a in enumerate(args))
    kw = _flatten(kwargs, leaves, None, Depth.REGISTERED, None, active)
    return leaves, TreeDef("tuple", (0, 1), (TreeDef("tuple", tuple(range(len(args))), kids), kw))


def _flatten(x: Any, leaves: list[Any], is_leaf: Callable[[Any], bool] | None, depth: Depth,
             nodes: list[Any] | None, active: set[int]) -> TreeDef:
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return LEAF
    tx = type(x)
    if tx is tuple or tx is list:
        kids = tuple(_flatten(c, leaves, is_leaf, depth, nodes, active) for c in x)
        return TreeDef(tx.__name__, tuple(range(len(x))), kids)
    if tx is dict or tx is OrderedDict:
        keys = tuple(x)
        return TreeDef("dict" if tx is dict else "odict", keys,
                       tuple(_flatten(x[k], leaves, is_leaf, depth, nodes, active) for k in keys))
    if x is None:
        return NONE
    if _is_namedtuple(x):
        return TreeDef(tx, tuple(tx._fields), tuple(_flatten(c, leaves, is_leaf, depth, nodes, active) for c in x))
    node = node_of(x, depth) if depth or tx in _REGISTERED else None
    if node is None:
        leaves.append(x)
        return LEAF
    kind, keys, parts = node
    if id(x) in active:
        name = tx.__qualname__
        raise GradError(f"irad cannot flatten an object that contains itself: {name}{_cycle_path(x, depth)} is the "
                        f"{name} object again; register {name} with irad.register_pytree to say which attributes are "
                        "its children, or pass its arrays")
    if nodes is not None:
        nodes.append(x)
    active.add(id(x))
    children = tuple(_flatten(c, leaves, is_leaf, depth, nodes, active) for c in parts)
    active.discard(id(x))
    return TreeDef(kind, keys, children)


def _children(x: Any, depth: Depth) -> list[tuple[Any, Any]]:
    tx = type(x)
    if tx is tuple or tx is list or _is_namedtuple(x):
        return list(enumerate(x))
    if tx is dict or tx is OrderedDict:
        return [(repr(k), v) for k, v in x.items()]
    node = node_of(x, depth)
    return [] if node is None else list(zip(node[1], node[2]))


def _cycle_path(x: Any, depth: Depth) -> str:
    """The attribute path from ``x`` back to itself (``.layers[0].owner``), for the error."""
    seen: set[int] = set()

    def walk(y: Any, path: list[Any]) -> list[Any] | None:
        if y is x and path:
            return path
        if id(y) in seen:
            return None
        seen.add(id(y))
        for k, c in _children(y, depth):
            found = walk(c, path + [k])
            if found is not None:
                return found
        return None

    return "".join(f".{k}" if isinstance(k, str) and k.isidentifier() else f"[{k}]" for k in walk(x, []) or [])


def unflatten(tree: TreeDef, leaves: Any, made: list[Any] | None = None) -> Any:
    """Inverse of ``flatten``: rebuild the structure from an iterable of leaves.  ``made``, when
    given, collects the user node objects built."""
    it = iter(leaves)
    return _build(tree, it, made)


def _build(t: TreeDef, it: Iterator[Any], made: list[Any] | None = None) -> Any:
    kind = t.kind
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    kids = [_build(c, it, made) for c in t.children]
    if kind == "tuple":
        return tuple(kids)
    if kind == "list":
        return kids
    if kind == "dict":
        return dict(zip(t.keys, kids))
    if kind == "odict":
        return OrderedDict(zip(t.keys, kids))
    if isinstance(kind, Node):
        obj = rebuild(kind, t.keys, kids)
        if made is not None:
            made.append(obj)
        return obj
    return kind(*kids)  # namedtuple class


def tree_map(fn: Callable[[Any], Any], tree: Any, depth: Depth = Depth.REGISTERED) -> Any:
    leaves, td = flatten(tree, depth=depth)
    return unflatten(td, [fn(x) for x in leaves])
