"""irad's own primitives: functional forms of in-place numpy updates, guards, and AD helpers.

Each is an ordinary importable function (``irad.ops.setitem``) so graphs stay printable,
evaluable and serialisable.  None of them mutates its inputs.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import GuardError


def guard(value: Any, expected: Any) -> None:
    """Fail unless ``value`` still equals what it was when the graph was traced."""
    v = value.item() if isinstance(value, (np.ndarray, np.generic)) else value
    if type(expected) is bool:
        v = bool(v)
    if v != expected:
        raise GuardError(f"guard failed: value is {v!r}, traced with {expected!r}")


def guard_shape(value: Any, expected: tuple[int, ...]) -> None:
    """Fail unless a value whose shape depends on data has the traced shape."""
    if np.shape(value) != expected:
        raise GuardError(f"guard failed: shape is {np.shape(value)}, traced with {expected}")


def setitem(a: Any, index: Any, v: Any) -> np.ndarray:
    """``a[index] = v`` as a new array."""
    out = np.array(a, copy=True)
    out[index] = v
    return out


def iop(a: np.ndarray, b: Any, op: Any) -> np.ndarray:
    """``a op= b`` as a new array of ``a``'s dtype (in-place ops keep the dtype)."""
    r = op(a, b)
    return r if r.dtype == a.dtype else r.astype(a.dtype)


def fill(a: np.ndarray, v: Any) -> np.ndarray:
    """``a.fill(v)`` as a new array."""
    return np.full_like(a, v)


def copyto(dst: np.ndarray, src: Any) -> np.ndarray:
    """``np.copyto(dst, src)`` as a new array."""
    out = np.array(dst, copy=True)
    np.copyto(out, src)
    return out


def add_at(a: np.ndarray, index: Any, v: Any) -> np.ndarray:
    """``np.add.at(a, index, v)`` as a new array."""
    out = np.array(a, copy=True)
    np.add.at(out, index, v)
    return out


def fill_diagonal(a: np.ndarray, v: Any, wrap: bool = False) -> np.ndarray:
    """``np.fill_diagonal(a, v)`` as a new array."""
    out = np.array(a, copy=True)
    np.fill_diagonal(out, v, wrap=wrap)
    return out


def sort_inplace(a: np.ndarray, axis: int = -1, kind: Any = None, order: Any = None) -> np.ndarray:
    """``a.sort(axis)`` as a new array."""
    return np.sort(a, axis=axis, kind=kind, order=order)


def sum_to(g: Any, shape: tuple[int, ...]) -> Any:
    """Undo broadcasting: sum ``g`` down to ``shape`` (the adjoint of ``np.broadcast_to``)."""
    gshape = np.shape(g)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    if lead < 0:  # the cotangent lost leading unit axes: restore them
        return np.broadcast_to(g, shape).copy()
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and gshape[i + lead] != 1)
    r = np.sum(g, axis=axes, keepdims=True) if axes else g
    return np.reshape(r, shape) if lead or np.shape(r) != shape else r


def zeros_like(x: Any) -> Any:
    """A zero cotangent for ``x`` (Python floats stay floats)."""
    if type(x) is float:
        return 0.0
    if type(x) is complex:
        return 0j
    return np.zeros_like(x)
