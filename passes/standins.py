"""Small stand-in shapes for tracing rule bodies on big arrays.

``inline_pullbacks`` (``passes/inline.py``) traces each rule's fwd and pullback on sample values
of the types the call had, and splices the recorded ops into the graph.  The ops depend on the
shapes, not on the values, yet at the real shapes the samples and their evaluation cost about one
more gradient call and several times the data's memory (a 10^6 x 32 design matrix: ~0.4 s and
256 MB per rule, more than the rest of a first call).

So the body of one of irad's own rules whose arguments are big is traced twice on stand-ins
instead: every big size ``D`` of the graph becomes ``s1(D)`` in the first trace and ``s2(D)`` in
the second (``Sizes``), and ``merge`` joins the two graphs.  They must be the same op for op; an
int may differ only as ``s1(D)`` against ``s2(D)`` at the same place, and becomes ``D``.  Anything
else that differs -- a float or an array constant computed from a size, another op sequence, an
int made from two sizes -- means the body is not the same function of ``D`` as of its stand-ins,
and ``merge`` raises ``Mismatch``: the caller then traces that rule at the real shapes, as before.

The stand-ins keep what a body most plausibly branches on: every size that stays (below
``MIN_DIM``) is smaller than every stand-in, stand-ins are ordered as the sizes they stand for,
and no size is ever 0 or 1.  Their gaps differ between the two traces (``s2(D_i) - s1(D_i) =
2**i``), so a difference or sum of two sizes, computed in a body, changes between them and is
refused rather than kept.  A threshold on a size between a stand-in and ``D`` cannot be seen
this way: that is why only the rules of irad's tables (``irad.rules``) are traced on stand-ins
(plain functions of shapes; a user's rule, and a built-in one that calls user code such as
``custom_vjp``'s or a solver's, is traced at its real shapes), and the tests run the gradient
corpus and a case of every rule with stand-ins for every size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from irad.ir import ArrayT, Const, Graph, Op, OpaqueT, ScalarT, Type, Var

#: a size is replaced when it is at least this ...
MIN_DIM = 512
#: ... and it is a dimension of an array of at least this many elements
MIN_ELEMENTS = 1 << 16
#: at most this many distinct sizes are replaced (the gaps between stand-ins double each time)
MAX_SIZES = 6
#: a stand-in must be smaller than its size (False: tests trace bodies on stand-ins at any size)
SMALLER = True


class Mismatch(Exception):
    """The two stand-in traces differ other than in the sizes: trace at the real shapes."""


@dataclass(frozen=True)
class Sizes:
    """The stand-ins of a graph's big sizes: ``small[w][D]`` in trace ``w`` (0 or 1), ``real[w]``
    the inverse."""

    small: tuple[dict[int, int], dict[int, int]]
    real: tuple[dict[int, int], dict[int, int]]

    def shape(self, shape: tuple[int, ...], w: int) -> tuple[int, ...]:
        small = self.small[w]
        return tuple([small.get(d, d) for d in shape])

    def type(self, t: Type, w: int) -> Type:
        if isinstance(t, ArrayT) and any(d in self.small[w] for d in t.shape):
            return ArrayT(t.dtype, self.shape(t.shape, w), t.scalar)
        return t

    def shrinks(self, t: Any) -> bool:
        """Whether a value of type ``t`` has a replaced size."""
        return isinstance(t, ArrayT) and any(d in self.small[0] for d in t.shape)

    def value(self, x: Any, w: int) -> Any:
        """A host constant as trace ``w`` sees it: ints that equal a replaced size (a shape, a
        count) become its stand-in (``merge`` turns them back, or refuses the body when the
        int was used as a plain number); an array of a replaced size cannot be, and raises
        ``Mismatch``."""
        tx = type(x)
        if tx is int:
            return self.small[w].get(x, x)
        if tx is tuple or tx is list:
            return tx([self.value(e, w) for e in x])
        if tx is dict:
            return {k: self.value(e, w) for k, e in x.items()}
        if tx is slice:
            return slice(self.value(x.start, w), self.value(x.stop, w), self.value(x.step, w))
        if isinstance(x, np.ndarray) and any(d in self.small[w] for d in x.shape):
            raise Mismatch(f"a constant array of shape {x.shape}")
        return x


def plan(g: Graph, min_dim: int | None = None, min_elements: int | None = None) -> Sizes | None:
    """The stand-ins for ``g``'s big sizes, or None when it has none (or so many that a stand-in
    would not be smaller than its size)."""
    min_dim = MIN_DIM if min_dim is None else min_dim
    min_elements = MIN_ELEMENTS if min_elements is None else min_elements
    dims: set[int] = set()
    big: set[int] = set()

    def see(t: Any) -> None:
        if isinstance(t, ArrayT):
            dims.update(t.shape)
            if math.prod(t.shape) >= min_elements:
                big.update(d for d in t.shape if d >= min_dim)

    for v in g.inputs:
        see(v.type)
    for op in g.ops:
        for o in op.outs:
            see(o.type)
        for a in op.args:
            if isinstance(a, Const):
                see(a.type)
    if not big or len(big) > MAX_SIZES:
        return None
    kept = [d for d in dims if d not in big]
    # NOTE: every stand-in above every size that stays (so comparisons between sizes keep their
    # outcome); s1 < s2 < next s1 (both traces keep the order of the sizes)
    s = max(kept + [min_dim // 4, 3]) + 1
    small: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for i, d in enumerate(sorted(big)):
        small[0][d], small[1][d] = s, s + (1 << i)
        s += (1 << i) + 1
        if SMALLER and small[1][d] >= d:
            return None
    return Sizes(small, ({v: k for k, v in small[0].items()}, {v: k for k, v in small[1].items()}))


def merge(g1: Graph, g2: Graph, sizes: Sizes, made: dict[Any, np.ndarray] | None = None) -> Graph:
    """The body at the real sizes, from its traces on the two sets of stand-ins (raises ``Mismatch``).

    ``made``: the uniform array constants made at the real sizes so far (shared by the bodies
    of one graph: one ``np.zeros(shape)`` however many pullbacks start from it)."""
    m = _Merge(sizes, {} if made is None else made)
    if len(g1.ops) != len(g2.ops) or len(g1.inputs) != len(g2.inputs) or g1.in_tree != g2.in_tree or \
            g1.out_tree != g2.out_tree or len(g1.statics) != len(g2.statics):
        raise Mismatch("the traces differ in structure")
    return g1.replace(inputs=tuple([m.var(a, b) for a, b in zip(g1.inputs, g2.inputs)]),
                      ops=tuple([m.op(a, b) for a, b in zip(g1.ops, g2.ops)]),
                      outputs=m.value(g1.outputs, g2.outputs),
                      statics=tuple([(i, m.value(a, b)) for (i, a), (_, b) in zip(g1.statics, g2.statics)]))


class _Merge:
    def __init__(self, sizes: Sizes, made: dict[Any, np.ndarray]) -> None:
        self.real = sizes.real
        self.made = made

    def int(self, a: int, b: int) -> int:
        if a == b:
            return a
        d = self.real[0].get(a)
        if d is not None and self.real[1].get(b) == d:
            return d
        raise Mismatch(f"an int is {a} in one trace and {b} in the other")

    def type(self, t1: Type, t2: Type) -> Type:
        if isinstance(t1, ArrayT) and isinstance(t2, ArrayT):
            if t1.dtype != t2.dtype or t1.scalar != t2.scalar or len(t1.shape) != len(t2.shape):
                raise Mismatch(f"{t1} against {t2}")
            if t1.shape == t2.shape:
                return t1
            return ArrayT(t1.dtype, tuple([self.int(a, b) for a, b in zip(t1.shape, t2.shape)]), t1.scalar)
        if isinstance(t1, (ScalarT, OpaqueT)) and t1 == t2:
            return t1
        raise Mismatch(f"{t1} against {t2}")

    def var(self, a: Var, b: Var) -> Var:
        if a.id != b.id:
            raise Mismatch("the traces number their values differently")
        t = self.type(a.type, b.type)
        return a if t is a.type else Var(a.id, t, a.hint)

    def op(self, a: Op, b: Op) -> Op:
        if a.prim != b.prim or not (a.fn is b.fn or a.fn == b.fn) or len(a.outs) != len(b.outs):
            raise Mismatch(f"{a.prim} against {b.prim}")
        return Op(a.prim, self.value(a.args, b.args), self.value(a.kwargs, b.kwargs),
                  tuple([self.var(x, y) for x, y in zip(a.outs, b.outs)]), a.fn, a.loc, self.value(a.unpack, b.unpack))

    def value(self, a: Any, b: Any) -> Any:
        ta = type(a)
        if ta is not type(b):
            raise Mismatch(f"a {ta.__name__} against a {type(b).__name__}")
        if ta is Var:
            return self.var(a, b)
        if ta is Const:
            if a.origin != b.origin or a.live != b.live:
                raise Mismatch("constants of different origins")
            v, t = self.value(a.value, b.value), self.type(a.type, b.type)
            return a if v is a.value and t is a.type else Const(v, t, a.origin, a.live)
        if ta is int:
            return self.int(a, b)
        if ta is tuple or ta is list:
            if len(a) != len(b):
                raise Mismatch("sequences of different lengths")
            return ta([self.value(x, y) for x, y in zip(a, b)])
        if ta is dict:
            if list(a) != list(b):
                raise Mismatch("dicts with different keys")
            return {k: self.value(a[k], b[k]) for k in a}
        if ta is slice:
            return slice(self.value(a.start, b.start), self.value(a.stop, b.stop), self.value(a.step, b.step))
        if isinstance(a, np.integer):
            return ta(self.int(int(a), int(b)))
        if ta is float or ta is complex or isinstance(a, np.inexact):
            if repr(a) != repr(b):  # (a float made from a size: 1/n, sqrt(n))
                raise Mismatch(f"a number is {a!r} in one trace and {b!r} in the other")
            return a
        if ta is np.ndarray:
            if a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes():
                return a
            if a.dtype == b.dtype and a.ndim == b.ndim and a.size and b.size and any(a.strides) == any(b.strides) \
                    and a.flags.writeable == b.flags.writeable and _uniform(a) and _uniform(b) and \
                    a.reshape(-1)[:1].tobytes() == b.reshape(-1)[:1].tobytes():
                # np.zeros(shape), np.ones(shape), np.full(shape, c) made in a body
                shape = tuple([self.int(x, y) for x, y in zip(a.shape, b.shape)])
                spread = not any(a.strides)  # a broadcast scalar (np.broadcast_to(1.0, shape)): keep it one
                key = (shape, a.dtype.str, a.reshape(-1)[:1].tobytes(), spread, a.flags.writeable)
                full = self.made.get(key)
                if full is None:
                    c = a.reshape(-1)[:1].reshape(()).copy()
                    full = self.made[key] = np.broadcast_to(c, shape) if spread else np.full(shape, c, a.dtype)
                    if not spread:
                        full.flags.writeable = a.flags.writeable
                return full
            raise Mismatch(f"an array constant differs ({a.shape} against {b.shape})")
        if a is b:
            return a
        try:
            same = bool(a == b)
        except Exception:  # noqa: BLE001 (an object whose == fails is not known to be equal)
            same = False
        if not same:
            raise Mismatch(f"{ta.__name__} values differ")
        return a


def _uniform(a: np.ndarray) -> bool:
    """Every element of ``a`` has the bits of the first (a zero of either sign is not another)."""
    flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, a.itemsize)
    return bool((flat == flat[:1]).all())
