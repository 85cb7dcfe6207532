"""irad's own primitives: functional forms of in-place numpy updates, guards, and AD helpers.

Each is an ordinary importable function (``irad.primitives.setitem``) so graphs stay printable,
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


def key_classes(table: dict[Any, int], keys: tuple[Any, ...]) -> tuple[int, ...]:
    """Which of ``keys`` (traced values used as dict keys or set members) are equal to one another
    or to one of the constant keys of ``table`` (key -> label): a label per key.  Equal labels,
    equal keys; guarded, this is what decides the structure of the dicts and sets they key."""
    out = []
    first: dict[Any, int] = {}
    for i, k in enumerate(keys):
        label = table.get(k)
        if label is None:
            label = first.setdefault(k, -1 - i)
        out.append(label)
    return tuple(out)


def guard_dtype(value: Any, expected: Any) -> None:
    """Fail unless a value whose dtype depends on data (``sqrtm`` of a real matrix is complex when
    it has a negative eigenvalue) has the traced dtype."""
    if np.asarray(value).dtype != expected:
        raise GuardError(f"guard failed: dtype is {np.asarray(value).dtype}, traced with {expected}")


def guard_shape(value: Any, expected: tuple[int, ...]) -> None:
    """Fail unless a value whose shape depends on data has the traced shape."""
    if np.shape(value) != expected:
        raise GuardError(f"guard failed: shape is {np.shape(value)}, traced with {expected}")


class Captured:
    """Holds a value that an enclosing trace follows, read by a nested transform's function
    (``x`` in ``grad(lambda y: x * y)`` inside a traced function): see ``capture``."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "captured"


def capture(holder: Captured) -> Any:
    """The captured value itself.  Under the enclosing trace the tracer hands back the very object
    it follows, so the nested program's result keeps depending on it (irad.trace.Tracer.call)."""
    return holder.value


def read_live(a: np.ndarray) -> np.ndarray:
    """An array of the user's world that the function updates in place, read at the start of the
    call: its contents before the update (the update itself is written back after the program)."""
    return a


def setitem(a: Any, index: Any, v: Any) -> np.ndarray:
    """``a[index] = v`` as a new array."""
    out = np.array(a, copy=True)
    out[index] = v
    return out


def iop(a: np.ndarray, b: Any, op: Any) -> np.ndarray:
    """``a op= b`` as a new array of ``a``'s dtype (in-place ops keep the dtype)."""
    r: np.ndarray = op(a, b)
    return r if r.dtype == a.dtype else r.astype(a.dtype)


def fill(a: np.ndarray, v: Any) -> np.ndarray:
    """``a.fill(v)`` as a new array."""
    return np.full_like(a, v)


def copyto(dst: np.ndarray, src: Any, where: Any = True) -> np.ndarray:
    """``np.copyto(dst, src, casting="unsafe", where=where)`` as a new array."""
    out = np.array(dst, copy=True)
    np.copyto(out, src, casting="unsafe", where=where)
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


def draw_order(rng: Any, n: int, sequence: bool = False) -> np.ndarray:
    """The order ``rng.shuffle`` puts ``n`` items in, drawn from ``rng`` (a numpy ``Generator`` or
    ``RandomState``, or a ``random.Random``) exactly as the user's shuffle draws: the same call on
    ``np.arange(n)`` (an array) or ``list(range(n))`` (``sequence``: a list), since numpy and
    ``random`` draw the same whatever the items are.  An impure op: a program draws anew at each
    call, as the function does."""
    order: Any = list(range(n)) if sequence else np.arange(n)
    rng.shuffle(order)
    return np.asarray(order, dtype=np.intp)


def stop_gradient(x: Any) -> Any:
    """``x``'s value as a new value that carries no gradient (``irad.stop_gradient`` maps it over a
    pytree's leaves).  A new object, never ``x`` itself: the tracer follows values by identity."""
    if isinstance(x, np.ndarray):
        return np.array(x, copy=True)
    if isinstance(x, (float, complex, np.inexact)):
        return x * 1.0  # (keeps -0.0 and NaN, unlike x + 0.0)
    return x


def sum_to(g: Any, shape: tuple[int, ...]) -> Any:
    """Make a cotangent ``g`` have ``shape``: sum over the axes broadcasting added or stretched
    (the adjoint of ``np.broadcast_to``), and broadcast up a cotangent a rule kept smaller."""
    gshape = np.shape(g)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    if lead > 0:
        g = np.sum(g, axis=tuple(range(lead)))
        gshape = gshape[lead:]
    axes = tuple(i for i, (gn, n) in enumerate(zip(gshape[-len(shape):] if shape else (), shape))
                 if n == 1 and gn != 1 and len(gshape) == len(shape))
    if axes:
        g = np.sum(g, axis=axes, keepdims=True)
    if np.shape(g) != shape:
        g = np.broadcast_to(g, shape).copy()
    return g


def to_dtype(g: Any, dtype: Any, scalar: bool) -> Any:
    """A cotangent cast to its primal's dtype (a numpy scalar when the primal is one)."""
    if g is None:  # np.asarray(None, float) is nan: never let a missing cotangent pass as one
        from .errors import GradError
        raise GradError("irad: a pullback returned no cotangent (None) for an argument that had one when "
                        "the program was traced; the rule's output structure depends on values. Make the "
                        "pullback return a zero instead of None.")
    if np.iscomplexobj(g) and not np.issubdtype(dtype, np.complexfloating):
        g = np.real(g)  # a real primal's cotangent is the real part
    r = np.asarray(g, dtype=dtype)
    return r[()] if scalar else r


def zeros_like(x: Any) -> Any:
    """A zero cotangent for ``x`` (Python floats stay floats)."""
    if type(x) is float:
        return 0.0
    if type(x) is complex:
        return 0j
    return np.zeros_like(x)


def add_into(a: np.ndarray, b: Any) -> np.ndarray:
    """``a + b`` written into ``a``'s buffer.  Only for an ``a`` nothing reads afterwards
    (see ``irad.passes.accumulate_in_place``)."""
    out: np.ndarray = np.add(a, b, out=a)
    return out


def rebuild(cls: type[object], attrs: dict[str, Any]) -> Any:
    """An instance of ``cls`` with the given attributes (a user object a rule receives)."""
    obj = cls.__new__(cls)
    obj.__dict__.update(attrs)
    return obj
