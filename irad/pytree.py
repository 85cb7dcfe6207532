"""Pytrees: nested tuples, lists, dicts (and namedtuples) of leaves, flattened at graph boundaries.

A ``TreeDef`` is hashable so that it can be part of a cache key.  Dict keys keep insertion
order (the order the user wrote), so a gradient has exactly the structure of its argument.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class TreeDef:
    """Structure of a pytree: ``kind`` is 'leaf', 'tuple', 'list', 'dict', 'odict' (an OrderedDict),
    'none' or a namedtuple class."""

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


def _is_namedtuple(x: object) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeDef]:
    """Flatten ``tree`` into its leaves (depth first) and a ``TreeDef``."""
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves, is_leaf)


def _flatten(x: Any, leaves: list[Any], is_leaf: Callable[[Any], bool] | None) -> TreeDef:
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return LEAF
    tx = type(x)
    if tx is tuple or tx is list:
        kids = tuple(_flatten(c, leaves, is_leaf) for c in x)
        return TreeDef(tx.__name__, tuple(range(len(x))), kids)
    if tx is dict or tx is OrderedDict:
        keys = tuple(x)
        return TreeDef("dict" if tx is dict else "odict", keys, tuple(_flatten(x[k], leaves, is_leaf) for k in keys))
    if x is None:
        return NONE
    if _is_namedtuple(x):
        return TreeDef(tx, tuple(tx._fields), tuple(_flatten(c, leaves, is_leaf) for c in x))
    leaves.append(x)
    return LEAF


def unflatten(tree: TreeDef, leaves: Any) -> Any:
    """Inverse of ``flatten``: rebuild the structure from an iterable of leaves."""
    it = iter(leaves)
    out = _build(tree, it)
    return out


def _build(t: TreeDef, it: Iterator[Any]) -> Any:
    kind = t.kind
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    kids = [_build(c, it) for c in t.children]
    if kind == "tuple":
        return tuple(kids)
    if kind == "list":
        return kids
    if kind == "dict":
        return dict(zip(t.keys, kids))
    if kind == "odict":
        return OrderedDict(zip(t.keys, kids))
    return kind(*kids)  # namedtuple class


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    leaves, td = flatten(tree)
    return unflatten(td, [fn(x) for x in leaves])
