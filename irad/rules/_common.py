"""Shared pieces of the built-in rule tables: registration bookkeeping and small numpy helpers.

Every table module makes one ``Table`` and registers through it, so that the docs generator and
the coverage test know exactly which rules irad ships (the registry also holds user rules).
The helpers are plain numpy functions: rule bodies call them and they trace like any other code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .registry import Rule, defrule, non_differentiable, scalar_rule


@dataclass(frozen=True)
class Entry:
    """One built-in rule: the function it is for, the rule, a note for the docs."""

    fn: Any
    rule: Rule
    note: str
    table: str
    label: str = ""  # the name the docs show, when the rule's own name is shared (types=)


@dataclass
class Table:
    """The rules one module registers (``T = Table(__name__)``; ``T.rule(np.sum, fwd, bwd)``)."""

    module: str
    entries: list[Entry] = field(default_factory=list)
    nondiff: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        TABLES.append(self)

    def rule(self, fn: Any, fwd: Callable[..., Any], bwd: Callable[..., Any], note: str = "", *,
             types: tuple[type, ...] = (), label: str = "", params: tuple[Any, ...] = ()) -> None:
        """Register an explicit ``fwd``/``bwd`` pair (skipped when ``fn`` is absent: old numpy).
        ``types``: only for calls whose leading positional arguments (``self`` first for a
        method) are instances of them; ``label``: the name the docs show; ``params``: see
        ``defrule``."""
        if fn is not None:
            rule = defrule(fn, fwd, bwd, types=types, params=params)
            self.entries.append(Entry(fn, rule, note, self.module, label))

    def scalar(self, fn: Any, *partials: Any, note: str = "") -> None:
        """Register elementwise partials through ``scalar_rule``."""
        if fn is not None:
            self.entries.append(Entry(fn, scalar_rule(fn, *partials), note, self.module))

    def nograd(self, *fns: Any) -> None:
        """Mark functions whose outputs carry no gradient."""
        fns = tuple(f for f in fns if f is not None)
        non_differentiable(*fns)
        self.nondiff.extend(fns)


TABLES: list[Table] = []


def builtin_entries() -> list[Entry]:
    """Every rule the built-in tables registered, in registration order."""
    return [e for t in TABLES for e in t.entries]


def builtin_nondiff() -> list[Any]:
    return [f for t in TABLES for f in t.nondiff]


# ---- helpers used by rule bodies ------------------------------------------------------------


def cj(x: Any) -> Any:
    """``conj(x)`` for complex values, ``x`` itself otherwise (no copy of real arrays).

    Cotangents carry no conjugate for holomorphic functions (``ybar * f'(z)``); ``cj`` appears
    where the function itself conjugates (``vdot``, ``|z|``, ``var`` of complex values)."""
    return np.conj(x) if np.iscomplexobj(x) else x


def is_float(x: Any) -> bool:
    """Whether ``x`` can carry a cotangent (a float or complex scalar or array)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, (float, complex)):
        return True
    dt = getattr(x, "dtype", None)
    return dt is not None and dt.kind in "fc"


def options(args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...],
            **defaults: Any) -> dict[str, Any]:
    """Bind the trailing positional ``args`` and ``kwargs`` of a call to option ``names``."""
    out = dict(defaults)
    out.update(zip(names, args))
    out.update(kwargs)
    return out


def norm_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        return tuple(sorted(int(a) % max(ndim, 1) for a in axis))
    return (int(axis) % max(ndim, 1),)


def unreduce(g: Any, shape: tuple[int, ...], axis: Any, keepdims: bool) -> Any:
    """Broadcast the cotangent of a reduction over ``axis`` back to the input ``shape``."""
    if not keepdims:
        g = np.expand_dims(g, norm_axes(axis, len(shape)))
    return np.broadcast_to(g, shape)


def expand_reduced(y: Any, shape: tuple[int, ...], axis: Any, keepdims: bool) -> Any:
    """The reduced value ``y`` with the reduced axes kept (size 1), for comparisons with ``x``."""
    return y if keepdims else np.expand_dims(y, norm_axes(axis, len(shape)))


def count(shape: tuple[int, ...], axis: Any) -> int:
    """The number of elements one reduction over ``axis`` combines."""
    n = 1
    for a in norm_axes(axis, len(shape)):
        n *= shape[a]
    return n


def bincount(idx: Any, w: Any, n: int) -> Any:
    """``sum of w`` per label in ``0..n-1`` (complex weights too): the scatter-add of a gather."""
    idx = np.ravel(idx)
    w = np.ravel(w)
    if np.iscomplexobj(w):
        return (np.bincount(idx, weights=w.real, minlength=n)
                + 1j * np.bincount(idx, weights=w.imag, minlength=n))
    return np.bincount(idx, weights=w, minlength=n)


def labels(shape: tuple[int, ...]) -> Any:
    """1-based flat positions of an array of ``shape``; 0 then means 'no source element'."""
    n = int(np.prod(shape, dtype=np.int64))
    return np.arange(1, n + 1, dtype=np.intp).reshape(shape)


def scatter_labels(lab: Any, g: Any, shape: tuple[int, ...]) -> Any:
    """Adjoint of a gather described by ``lab`` (an op applied to ``labels(shape)``)."""
    n = int(np.prod(shape, dtype=np.int64))
    return bincount(lab, np.broadcast_to(g, np.shape(lab)), n + 1)[1:].reshape(shape)


def struct_cot(obj: Any, g: Any) -> Any:
    """Split the cotangent ``g`` of ``np.array(obj)`` along ``obj``'s nested list structure."""
    if isinstance(obj, (list, tuple)):
        parts = [struct_cot(o, g[i]) for i, o in enumerate(obj)]
        return tuple(parts) if isinstance(obj, tuple) else parts
    if not is_float(obj):
        return None
    return np.reshape(g, np.shape(obj))
