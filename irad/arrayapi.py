"""Running a compiled program on another array-API namespace: ``irad.compile(f, *args, xp=ns)``.

The gradient program is traced and optimised with numpy as always; only lowering changes.  The
``_XpEmitter`` spells every numpy call of the joint graph in the array API standard's terms,
through one object bound as ``xp`` in the program's namespace (an ``ArrayApi``): a standard
function where numpy's call means the same (``np.tanh`` -> ``xp.tanh``, ``np.sum(x, 0)`` ->
``xp.sum(x, axis=0)``), a small adapter written with standard calls where it does not
(``np.swapaxes``, ``np.dot``, ``irad.primitives.setitem``).  A call with no such form (a numpy-only
function, a rule implemented in numpy, an integer-array index the standard does not allow) is a
``NamespaceError`` at compile time, naming the call and the user's line: never a program that
fails, or silently converts to numpy, at run time.

Why a second lowering rather than a namespace object that pretends to be numpy: numpy's methods
(``x.sum()``, ``x.clip()``), scalars (``np.float64(2) * a`` is a numpy array) and indexing
(``a[:, None]`` on 2-D ``a``) do not exist or mean something else in the standard, and the
types of the joint graph say, per value, which spelling is right.

What the standard's arrays cannot hold stays numpy's: the program's array constants are copied to
``xp`` once, when it is compiled; a *live* array of the user's world (a global the function reads,
which may be updated in place, DESIGN §7) is copied at each call, so updates are seen.
"""
from __future__ import annotations

import operator
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence, cast

import numpy as np

from .errors import GuardError, NamespaceError
from .ir import ArrayT, Const, Graph, Op, ScalarT, Var
from .lower import _ATOM, _INFIX, _PREC, _PREFIX, _UNARY, _Emitter, _hashable

# ---- the numpy calls the standard covers ---------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """How one numpy call is spelled: ``name`` on the bound ``ArrayApi``; its first ``arrays``
    positional arguments are arrays (a Python number there is made one, as numpy does); the
    positional arguments after them are passed by the keyword names ``params`` (the standard's
    functions take them keyword-only); ``refuse``: numpy keywords with no standard form, allowed
    only at their default ``None``/``False``."""

    name: str
    arrays: int = 1
    params: tuple[str, ...] = ()
    refuse: tuple[str, ...] = ("out", "where", "initial", "order", "casting", "subok")
    aliases: tuple[tuple[str, str], ...] = ()  # numpy's other keyword names: (numpy's, ours)
    positional: int = 0  # how many of ``params`` the standard takes positionally only


_UNARY_SAME = ("exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "sinh", "cosh", "tanh",
               "sqrt", "abs", "sign", "floor", "ceil", "trunc", "square", "isnan", "isinf", "isfinite",
               "logical_not", "real", "imag", "negative", "positive")
_UNARY_RENAMED = {"absolute": "abs", "arctan": "atan", "arcsin": "asin", "arccos": "acos", "arctanh": "atanh",
                  "arcsinh": "asinh", "arccosh": "acosh", "conjugate": "conj", "conj": "conj",
                  "fabs": "abs", "rint": "round"}
_BINARY_SAME = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "equal", "not_equal", "greater",
                "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor", "hypot",
                "copysign", "logaddexp", "floor_divide", "remainder")
_BINARY_RENAMED = {"true_divide": "divide", "power": "pow", "arctan2": "atan2", "mod": "remainder"}
_REDUCE = ("axis", "dtype", "out", "keepdims")
_CLIP = (("a_min", "min"), ("a_max", "max"))
#: adapters that build one array from several and take the dtype numpy's promotion gives it
_PROMOTING = frozenset({"array", "concat", "stack", "vstack", "hstack"})
#: what the adapters call, beyond the core functions every namespace has
_NEEDS = {"cumsum": ("cumulative_sum",), "cumprod": ("cumulative_prod",), "trace": ("linalg.trace",),
          "norm": ("linalg.vector_norm", "linalg.matrix_norm"), "to_dtype": ("isdtype",),
          "linalg_solve": ("linalg.solve",), "linalg_inv": ("linalg.inv",), "linalg_det": ("linalg.det",),
          "linalg_slogdet": ("linalg.slogdet",), "linalg_cholesky": ("linalg.cholesky",),
          "take_flat": ("take",), "moveaxis": ("moveaxis",), "tile": ("tile",), "repeat": ("repeat",),
          "sort": ("sort",), "argsort": ("argsort",), "std": ("std",), "var": ("var",),
          "mean": ("mean", "isdtype")}
#: parameters the standard takes as Python values (an integer array constant there becomes a tuple)
_STATIC_PARAMS = frozenset({"axis", "axes", "shape", "source", "destination", "repetitions", "n", "k", "offset",
                            "ddof", "n_rows", "n_cols"})
#: adapters that take numpy's positional arguments as they are (``x.reshape(2, 3)``)
_POSITIONAL = frozenset({"reshape", "transpose", "swapaxes"})


def _table() -> dict[str, Entry]:
    t: dict[str, Entry] = {}
    for n in _UNARY_SAME:
        t[f"numpy.{n}"] = Entry(n)
    for n, m in _UNARY_RENAMED.items():
        t[f"numpy.{n}"] = Entry(m)
    for n in _BINARY_SAME:
        t[f"numpy.{n}"] = Entry(n, 2)
    for n, m in _BINARY_RENAMED.items():
        t[f"numpy.{n}"] = Entry(m, 2)
    for prefix in ("numpy.", "numpy.ndarray."):
        t[prefix + "sum"] = Entry("sum", 1, _REDUCE)
        t[prefix + "prod"] = Entry("prod", 1, _REDUCE)
        t[prefix + "mean"] = Entry("mean", 1, _REDUCE)
        t[prefix + "max"] = Entry("max", 1, ("axis", "out", "keepdims"))
        t[prefix + "min"] = Entry("min", 1, ("axis", "out", "keepdims"))
        t[prefix + "any"] = Entry("any", 1, ("axis", "out", "keepdims"))
        t[prefix + "all"] = Entry("all", 1, ("axis", "out", "keepdims"))
        t[prefix + "argmax"] = Entry("argmax", 1, ("axis", "out", "keepdims"))
        t[prefix + "argmin"] = Entry("argmin", 1, ("axis", "out", "keepdims"))
        t[prefix + "std"] = Entry("std", 1, ("axis", "dtype", "out", "ddof", "keepdims"))
        t[prefix + "var"] = Entry("var", 1, ("axis", "dtype", "out", "ddof", "keepdims"))
        t[prefix + "cumsum"] = Entry("cumsum", 1, ("axis", "dtype", "out"))
        t[prefix + "cumprod"] = Entry("cumprod", 1, ("axis", "dtype", "out"))
        t[prefix + "clip"] = Entry("clip", 1, ("min", "max", "out"), aliases=_CLIP)
        t[prefix + "reshape"] = Entry("reshape", 1)  # (x, shape) or (x, *shape): the adapter takes both
        t[prefix + "ravel"] = Entry("ravel", 1, ())
        t[prefix + "squeeze"] = Entry("squeeze", 1, ("axis",))
        t[prefix + "transpose"] = Entry("transpose", 1)
        t[prefix + "swapaxes"] = Entry("swapaxes", 1)
        t[prefix + "copy"] = Entry("copy", 1, ())
        t[prefix + "dot"] = Entry("dot", 2)
        t[prefix + "trace"] = Entry("trace", 1, ("offset",))
        t[prefix + "sort"] = Entry("sort", 1, ("axis", "kind"), refuse=("order",))
        t[prefix + "argsort"] = Entry("argsort", 1, ("axis", "kind"), refuse=("order",))
    for n in ("amax", "amin"):
        t[f"numpy.{n}"] = Entry(n[1:], 1, ("axis", "out", "keepdims"))
    t["numpy.ndarray.flatten"] = Entry("ravel", 1, ())
    t["numpy.ndarray.astype"] = Entry("astype", 1, ("dtype",), refuse=("order", "casting", "subok"))
    t["numpy.ndarray.fill"] = Entry("full_like", 1, ("fill_value",))
    t.update({
        "numpy.matmul": Entry("matmul", 2),
        "numpy.fmax": Entry("fmax", 2),
        "numpy.fmin": Entry("fmin", 2),
        "numpy.where": Entry("where", 3),
        "numpy.clip": Entry("clip", 1, ("min", "max", "out"), aliases=_CLIP),
        "numpy.expand_dims": Entry("expand_dims", 1, ("axis",)),
        "numpy.broadcast_to": Entry("broadcast_to", 1, ("shape",)),
        "numpy.moveaxis": Entry("moveaxis", 1, ("source", "destination"), positional=2),
        "numpy.flip": Entry("flip", 1, ("axis",)),
        "numpy.concatenate": Entry("concat", 0, ("arrays", "axis")),
        "numpy.stack": Entry("stack", 0, ("arrays", "axis")),
        "numpy.vstack": Entry("vstack", 0, ("tup",)),
        "numpy.hstack": Entry("hstack", 0, ("tup",)),
        "numpy.inner": Entry("inner", 2),
        "numpy.vdot": Entry("vdot", 2),
        "numpy.outer": Entry("outer", 2),
        "numpy.multiply.outer": Entry("multiply_outer", 2),
        "numpy.tensordot": Entry("tensordot", 2, ("axes",)),
        "numpy.take_along_axis": Entry("take_along_axis", 1, ("indices", "axis"), positional=1),
        "numpy.take": Entry("take_flat", 1, ("indices", "axis")),
        "numpy.diff": Entry("diff", 1, ("n", "axis")),
        "numpy.tile": Entry("tile", 1, ("repetitions",)),
        "numpy.repeat": Entry("repeat", 1, ("repeats", "axis")),
        "numpy.array": Entry("array", 0, ("object", "dtype"), refuse=("order", "subok", "ndmin", "like")),
        "numpy.asarray": Entry("array", 0, ("object", "dtype"), refuse=("order", "like")),
        "numpy.asanyarray": Entry("array", 0, ("object", "dtype"), refuse=("order", "like")),
        "numpy.float64": Entry("as_float64", 0, ("x",)),
        "numpy.copy": Entry("copy", 1, ()),
        "numpy.zeros_like": Entry("zeros_like", 1, ("dtype",)),
        "numpy.ones_like": Entry("ones_like", 1, ("dtype",)),
        "numpy.full_like": Entry("full_like", 1, ("fill_value", "dtype")),
        "numpy.zeros": Entry("zeros", 0, ("shape", "dtype")),
        "numpy.ones": Entry("ones", 0, ("shape", "dtype")),
        "numpy.full": Entry("full", 0, ("shape", "fill_value", "dtype")),
        "numpy.eye": Entry("eye", 0, ("n_rows", "n_cols", "k", "dtype")),
        "numpy.linalg.norm": Entry("norm", 1, ("ord", "axis", "keepdims")),
        "numpy.linalg.solve": Entry("linalg_solve", 2),
        "numpy.linalg.inv": Entry("linalg_inv", 1),
        "numpy.linalg.det": Entry("linalg_det", 1),
        "numpy.linalg.slogdet": Entry("linalg_slogdet", 1),
        "numpy.linalg.cholesky": Entry("linalg_cholesky", 1),
        "irad.primitives.setitem": Entry("setitem", 1),
        "irad.primitives.sum_to": Entry("sum_to", 1, ("shape",)),
        "irad.primitives.to_dtype": Entry("to_dtype", 1, ("dtype", "scalar")),
        "irad.primitives.zeros_like": Entry("cotangent_zeros", 0, ("x",)),
        "irad.primitives.add_into": Entry("add", 2),
        "irad.primitives.copyto": Entry("copyto", 1, ("src", "where")),
        "irad.primitives.fill": Entry("full_like", 1, ("fill_value",)),
        "irad.primitives.stop_gradient": Entry("copy", 0, ("x",)),
    })
    return t


#: numpy prim -> its spelling on the bound namespace
TABLE: dict[str, Entry] = _table()
#: modules whose functions are called as they are: they take Python numbers (and 0-d arrays,
#: through ``__float__``), never arrays
_PASS_THROUGH = ("builtins.", "math.", "cmath.", "operator.")


# ---- the namespace object the program calls ------------------------------------------------

class _Index:
    """``xp.index[1:, ...]`` is the key ``(slice(1, None), Ellipsis)``: an index as its reader
    writes it, passed to ``xp.setitem`` (numpy's ``np.s_``)."""

    def __getitem__(self, key: Any) -> Any:
        return key


class ArrayApi:
    """``xp`` in an xp-lowered program: the standard functions of namespace ``ns`` as attributes,
    and the adapters below where numpy's call has no one-function equivalent.  One per
    namespace (``bind``); it holds no state of its own."""

    index = _Index()

    def __init__(self, ns: Any) -> None:
        self.ns = ns
        self.linalg: Any = getattr(ns, "linalg", None)
        for e in TABLE.values():
            if not hasattr(type(self), e.name) and hasattr(ns, e.name):
                setattr(self, e.name, getattr(ns, e.name))
        for n in ("asarray", "permute_dims", "matmul", "take"):
            if hasattr(ns, n) and not hasattr(type(self), n):
                setattr(self, n, getattr(ns, n))

    def __repr__(self) -> str:
        return f"ArrayApi({getattr(self.ns, '__name__', type(self.ns).__name__)})"

    # -- helpers --
    def _ndim(self, x: Any) -> int:
        return len(x.shape)

    def dtype(self, d: Any) -> Any:
        """numpy's dtype ``d`` in this namespace."""
        name = np.dtype(d).name
        return getattr(self.ns, "bool" if name == "bool" else name)

    def array(self, object: Any, dtype: Any = None, copy: Any = True) -> Any:  # noqa: A002 -- numpy's name
        """``np.array``: nested sequences of numbers and 0-d arrays are stacked (the standard's
        ``asarray`` refuses arrays inside lists)."""
        if type(object) in (list, tuple):
            if object and any(hasattr(e, "shape") or type(e) in (list, tuple) for e in object):
                # NOTE: the program passes the dtype numpy's promotion gives the whole (the op's type)
                return self.ns.stack([self.array(e, dtype) for e in object])
        if hasattr(object, "shape") and dtype is not None and object.dtype != dtype:
            return self.ns.astype(object, dtype)
        return self.ns.asarray(object, dtype=dtype, copy=True if copy else None)

    def as_float64(self, x: Any) -> Any:
        return self.ns.asarray(x, dtype=self.ns.float64)

    def astype(self, x: Any, dtype: Any, copy: bool = True) -> Any:
        return self.ns.astype(self._arr(x), dtype, copy=copy)

    def sort(self, x: Any, axis: int = -1, kind: Any = None) -> Any:
        """``np.sort``: the standard's sort is stable, which only orders equal elements (numpy's
        default may order them otherwise: the same values)."""
        return self.ns.sort(x, axis=axis, stable=True)

    def argsort(self, x: Any, axis: int = -1, kind: Any = None) -> Any:
        """``np.argsort`` by a stable sort: ``kind="stable"`` exactly; numpy's default kind may
        order the indices of equal elements otherwise."""
        return self.ns.argsort(x, axis=axis, stable=True)

    def fmax(self, a: Any, b: Any) -> Any:
        """``np.fmax``: the maximum, ignoring a NaN on either side."""
        a, b = self._arr(a), self._arr(b)
        return self.ns.where(self.ns.isnan(a), b, self.ns.where(self.ns.isnan(b), a, self.ns.maximum(a, b)))

    def fmin(self, a: Any, b: Any) -> Any:
        a, b = self._arr(a), self._arr(b)
        return self.ns.where(self.ns.isnan(a), b, self.ns.where(self.ns.isnan(b), a, self.ns.minimum(a, b)))

    def where(self, condition: Any, x: Any, y: Any) -> Any:
        c = self._arr(condition)
        if c.dtype != self.ns.bool:  # numpy takes any truthy values
            c = c != 0
        return self.ns.where(c, x, y)

    def copy(self, x: Any) -> Any:
        if type(x) in (float, int, complex, bool):
            return x
        return self.ns.asarray(x, copy=True)

    def reshape(self, x: Any, *shape: Any) -> Any:
        s = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return self.ns.reshape(x, tuple(s) if isinstance(s, (list, tuple)) else (s,))

    def ravel(self, x: Any) -> Any:
        return self.ns.reshape(x, (-1,))

    def squeeze(self, x: Any, axis: Any = None) -> Any:
        if axis is None:
            axis = tuple(i for i, n in enumerate(x.shape) if n == 1)
        return self.ns.squeeze(x, axis=axis)

    def transpose(self, x: Any, *axes: Any) -> Any:
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], int)):
            axes = axes[0] or ()
        n = self._ndim(x)
        return self.ns.permute_dims(x, tuple(axes) if axes else tuple(range(n - 1, -1, -1)))

    def swapaxes(self, x: Any, a: int, b: int) -> Any:
        perm = list(range(self._ndim(x)))
        perm[a], perm[b] = perm[b], perm[a]
        return self.ns.permute_dims(x, tuple(perm))

    def sum(self, x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        x = self._bools_counted(x)
        return self.ns.sum(x, axis=axis, dtype=dtype, keepdims=keepdims)

    def _bools_counted(self, x: Any) -> Any:
        """numpy sums booleans as integers; the standard refuses them."""
        x = self._arr(x)
        return self.ns.astype(x, self.ns.int64) if x.dtype == self.ns.bool else x

    def prod(self, x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        return self.ns.prod(x, axis=axis, dtype=dtype, keepdims=keepdims)

    def mean(self, x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        x = self._arr(x)
        if dtype is not None or not self.ns.isdtype(x.dtype, ("real floating", "complex floating")):
            x = self.ns.astype(x, dtype if dtype is not None else self.ns.float64)
        return self.ns.mean(x, axis=axis, keepdims=keepdims)

    def std(self, x: Any, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False) -> Any:
        return self.ns.std(x if dtype is None else self.ns.astype(x, dtype), axis=axis, correction=ddof,
                           keepdims=keepdims)

    def var(self, x: Any, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False) -> Any:
        return self.ns.var(x if dtype is None else self.ns.astype(x, dtype), axis=axis, correction=ddof,
                           keepdims=keepdims)

    def cumsum(self, x: Any, axis: Any = None, dtype: Any = None) -> Any:
        if axis is None:
            x, axis = self.ns.reshape(x, (-1,)), 0
        return self.ns.cumulative_sum(self._bools_counted(x), axis=axis, dtype=dtype)

    def cumprod(self, x: Any, axis: Any = None, dtype: Any = None) -> Any:
        if axis is None:
            x, axis = self.ns.reshape(x, (-1,)), 0
        return self.ns.cumulative_prod(x, axis=axis, dtype=dtype)

    def clip(self, x: Any, min: Any = None, max: Any = None) -> Any:  # noqa: A002 -- numpy's keyword names
        return self.ns.clip(x, min, max)

    def dot(self, a: Any, b: Any) -> Any:
        if self._ndim(a) == 0 or self._ndim(b) == 0:
            return a * b
        if self._ndim(b) <= 2:
            return self.ns.matmul(a, b)
        return self.ns.tensordot(a, b, axes=((-1,), (-2,)))

    def inner(self, a: Any, b: Any) -> Any:
        if self._ndim(a) == 0 or self._ndim(b) == 0:
            return a * b
        return self.ns.tensordot(a, b, axes=((-1,), (-1,)))

    def vdot(self, a: Any, b: Any) -> Any:
        return self.ns.sum(self.ns.conj(self.ravel(a)) * self.ravel(b))

    def outer(self, a: Any, b: Any) -> Any:
        return self.ns.reshape(a, (-1, 1)) * self.ns.reshape(b, (1, -1))

    def multiply_outer(self, a: Any, b: Any) -> Any:
        return self.ns.reshape(a, tuple(a.shape) + (1,) * self._ndim(b)) * b

    def tensordot(self, a: Any, b: Any, axes: Any = 2) -> Any:
        return self.ns.tensordot(a, b, axes=axes)

    def trace(self, x: Any, offset: int = 0) -> Any:
        return self.linalg.trace(x, offset=offset)

    def take_flat(self, a: Any, indices: Any, axis: Any = None) -> Any:
        if axis is None:
            a, axis = self.ravel(a), 0
        return self.ns.take(a, indices, axis=axis)

    def tile(self, x: Any, repetitions: Any) -> Any:
        reps = (repetitions,) if isinstance(repetitions, int) else tuple(repetitions)
        return self.ns.tile(x, reps)

    def diff(self, x: Any, n: int = 1, axis: int = -1) -> Any:
        for _ in range(n):
            lead = (slice(None),) * (axis % self._ndim(x))
            x = x[lead + (slice(1, None), ...)] - x[lead + (slice(None, -1), ...)]
        return x

    def repeat(self, x: Any, repeats: Any, axis: Any = None) -> Any:
        if axis is None:
            x, axis = self.ravel(x), 0
        return self.ns.repeat(x, repeats, axis=axis)

    def concat(self, arrays: Sequence[Any], axis: Any = 0, dtype: Any = None) -> Any:
        return self.ns.concat(self._parts(arrays, dtype), axis=axis)

    def stack(self, arrays: Sequence[Any], axis: int = 0, dtype: Any = None) -> Any:
        return self.ns.stack(self._parts(arrays, dtype), axis=axis)

    def vstack(self, tup: Sequence[Any], dtype: Any = None) -> Any:
        arrs = [self.ns.reshape(a, (1, -1)) if self._ndim(a) < 2 else a for a in self._parts(tup, dtype)]
        return self.ns.concat(arrs, axis=0)

    def hstack(self, tup: Sequence[Any], dtype: Any = None) -> Any:
        arrs = [self.ns.reshape(a, (1,)) if self._ndim(a) == 0 else a for a in self._parts(tup, dtype)]
        return self.ns.concat(arrs, axis=0 if self._ndim(arrs[0]) == 1 else 1)

    def _parts(self, arrays: Sequence[Any], dtype: Any) -> list[Any]:
        """The pieces of a concatenation, in the result's dtype (numpy promotes across kinds)."""
        parts = [self._arr(a) for a in arrays]
        return parts if dtype is None else [p if p.dtype == dtype else self.ns.astype(p, dtype) for p in parts]

    def _arr(self, a: Any) -> Any:
        return a if hasattr(a, "shape") and not isinstance(a, np.ndarray) else self.array(a)

    def zeros_like(self, x: Any, dtype: Any = None) -> Any:
        return self.ns.zeros_like(self._arr(x), dtype=dtype)

    def ones_like(self, x: Any, dtype: Any = None) -> Any:
        return self.ns.ones_like(self._arr(x), dtype=dtype)

    def full_like(self, x: Any, fill_value: Any, dtype: Any = None) -> Any:
        x = self._arr(x)
        if hasattr(fill_value, "shape"):  # a computed fill value: the standard's full takes Python numbers
            return self.full(tuple(x.shape), fill_value, dtype=dtype if dtype is not None else x.dtype)
        return self.ns.full_like(x, fill_value, dtype=dtype)

    def zeros(self, shape: Any, dtype: Any = None) -> Any:
        return self.ns.zeros(shape, dtype=dtype)

    def ones(self, shape: Any, dtype: Any = None) -> Any:
        return self.ns.ones(shape, dtype=dtype)

    def full(self, shape: Any, fill_value: Any, dtype: Any = None) -> Any:
        if hasattr(fill_value, "shape"):
            v = self.ns.astype(fill_value, dtype) if dtype is not None else fill_value
            return self.ns.asarray(self.ns.broadcast_to(v, tuple(shape) if not isinstance(shape, int) else (shape,)),
                                   copy=True)
        return self.ns.full(shape, fill_value, dtype=dtype)

    def eye(self, n_rows: int, n_cols: Any = None, k: int = 0, dtype: Any = None) -> Any:
        return self.ns.eye(n_rows, n_cols, k=k, dtype=dtype if dtype is not None else self.ns.float64)

    def norm(self, x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A002
        """``np.linalg.norm``: vector norms (any ``ord`` of a 1-D ``x`` or along one ``axis``) and
        the Frobenius norm; matrix ``ord``s of 2-D blocks go to ``matrix_norm``."""
        nd = self._ndim(x)
        if axis is None and (nd == 1 or ord is None or ord == "fro"):
            if ord == "fro":
                ord = None
            return self.linalg.vector_norm(x, axis=None, keepdims=keepdims, ord=2 if ord is None else ord)
        if isinstance(axis, int) or (isinstance(axis, tuple) and len(axis) == 1):
            return self.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=2 if ord is None else ord)
        if axis is None:
            axis = (nd - 2, nd - 1)
        if tuple(a % nd for a in axis) != (nd - 2, nd - 1):
            x = self.ns.moveaxis(x, tuple(axis), (-2, -1))
        return self.linalg.matrix_norm(x, keepdims=keepdims, ord="fro" if ord is None else ord)

    def linalg_solve(self, a: Any, b: Any) -> Any:
        return self.linalg.solve(a, b)

    def linalg_inv(self, a: Any) -> Any:
        return self.linalg.inv(a)

    def linalg_det(self, a: Any) -> Any:
        return self.linalg.det(a)

    def linalg_slogdet(self, a: Any) -> Any:
        r = self.linalg.slogdet(a)
        return r.sign, r.logabsdet

    def linalg_cholesky(self, a: Any) -> Any:
        return self.linalg.cholesky(a)

    # -- irad's own helpers (irad.primitives) --
    def setitem(self, a: Any, index: Any, v: Any) -> Any:
        """``irad.primitives.setitem``: ``a[index] = v`` as a new array; ``v`` is cast to ``a``'s dtype, as
        numpy casts it."""
        out = self.ns.asarray(a, copy=True)
        if hasattr(v, "shape"):
            if v.dtype != out.dtype:
                v = self.ns.astype(v, out.dtype)
        elif type(v) in (bool, int, float, complex):
            v = self.ns.asarray(v, dtype=out.dtype)
        out[index] = v
        return out

    def copyto(self, dst: Any, src: Any, where: Any = True) -> Any:
        src = self.ns.astype(self._arr(src), dst.dtype) if hasattr(src, "shape") else src
        if where is True:
            return self.ns.broadcast_to(self.ns.asarray(src, dtype=dst.dtype), dst.shape)
        return self.ns.where(where, src, dst)

    def sum_to(self, g: Any, shape: tuple[int, ...]) -> Any:
        """``irad.primitives.sum_to``: the adjoint of broadcasting ``g`` to ``shape``."""
        gshape = tuple(g.shape) if hasattr(g, "shape") else ()
        if gshape == shape:
            return g
        lead = len(gshape) - len(shape)
        if lead > 0:
            g = self.ns.sum(g, axis=tuple(range(lead)))
            gshape = gshape[lead:]
        axes = tuple(i for i, (gn, n) in enumerate(zip(gshape, shape)) if n == 1 and gn != 1) \
            if len(gshape) == len(shape) else ()
        if axes:
            g = self.ns.sum(g, axis=axes, keepdims=True)
        if tuple(g.shape if hasattr(g, "shape") else ()) != shape:
            g = self.ns.asarray(self.ns.broadcast_to(self._arr(g), shape), copy=True)
        return g

    def to_dtype(self, g: Any, dtype: Any, scalar: bool) -> Any:
        """``irad.primitives.to_dtype``: a cotangent in its primal's dtype (``dtype``: this namespace's)."""
        if g is None:
            from .errors import GradError
            raise GradError("irad: a pullback returned no cotangent (None) for an argument that had one when "
                            "the program was traced")
        g = self._arr(g)
        if self.ns.isdtype(g.dtype, "complex floating") and not self.ns.isdtype(dtype, "complex floating"):
            g = self.ns.real(g)
        return g if g.dtype == dtype else self.ns.astype(g, dtype)

    def cotangent_zeros(self, x: Any) -> Any:
        if type(x) in (float, complex):
            return type(x)(0)
        return self.ns.zeros_like(x)


_BOUND: dict[int, tuple[Any, ArrayApi]] = {}  # id(namespace) -> (namespace, its ArrayApi)


def bind(ns: Any) -> ArrayApi:
    """The one ``ArrayApi`` of namespace ``ns`` (a module: lives as long as the process)."""
    hit = _BOUND.get(id(ns))
    if hit is None or hit[0] is not ns:
        hit = _BOUND[id(ns)] = (ns, ArrayApi(ns))
    return hit[1]


# ---- lowering ------------------------------------------------------------------------------

def _where(op: Op) -> str:
    return str(op.loc) if op.loc is not None else "?"


def _refuse(op: Op, why: str, hint: str = "") -> NamespaceError:
    fn = op.loc.func if op.loc is not None else "?"
    return NamespaceError(f"xp=: {op.prim} ({why}) has no form in the array API standard, in {fn} at {_where(op)}"
                          + (f"; {hint}" if hint else "; compile without xp= to run this program on numpy"))


class XpEmitter(_Emitter):
    """Lowering for a namespace: every array operation through ``xp`` (see the module docstring)."""

    def __init__(self, g: Graph, guard_names: list[str], xp: ArrayApi) -> None:
        super().__init__(g, guard_names)
        self.xp = xp
        del self.ns["np"]  # NOTE: a numpy call that slipped through fails to compile, never converts
        self.ns["xp"] = xp
        self.used.add("xp")
        self.converted: dict[int, str] = {}  # id(numpy constant) -> its name as an xp constant
        self.keep: list[Any] = []
        self.current: Op | None = None
        self.storing = False  # lowering the key of an assignment (``_setitem``)

    def _const(self, x: Any, base: str) -> str:
        n = self.converted.get(id(x))
        if n is None:
            n = self.converted[id(x)] = self.fresh(base)
            self.ns[n] = self.xp.ns.asarray(x)
            self.keep.append(x)  # NOTE: keeps id(x) unique while lowering runs
        return n

    def lit(self, x: Any) -> str:
        if isinstance(x, np.ndarray):
            return self._const(x, "c")
        if isinstance(x, np.generic):
            return self._const(x, "k")
        if isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic)):
            try:
                return self.obj(self.xp.dtype(x), f"dtype_{np.dtype(x).name}")
            except (AttributeError, TypeError):
                raise self._refuse_here(f"the dtype {np.dtype(x).name}") from None
        return super().lit(x)

    def _refuse_here(self, why: str) -> NamespaceError:
        assert self.current is not None
        return _refuse(self.current, why)

    def arg(self, a: Any) -> str:
        if isinstance(a, Const) and a.live and isinstance(a.value, np.ndarray):
            # NOTE: read at each call, as the numpy program reads it: an update in place is seen
            return f"xp.asarray({self.obj(a.value, 'c')})"
        return super().arg(a)

    def copied(self, text: str) -> str:
        return f"xp.copy({text})"

    def mutable(self, value: Any) -> bool:
        return isinstance(value, (np.ndarray, np.generic))  # (a numpy scalar becomes a 0-d array)

    def index(self, a: Any) -> str:
        if isinstance(a, Const) and a.live and isinstance(a.value, np.ndarray):
            return self.arg(a)  # NOTE: a mask of the user's world is read at each call, as numpy reads it
        if self.storing and isinstance(a, Var) and isinstance(a.type, ArrayT) and a.type.shape == () and \
                a.type.dtype.startswith(("int", "uint")):
            return f"int({self.arg(a)})"  # the standard's __setitem__ takes no 0-d array in its key
        return super().index(a)

    def _array_form(self, prim: str, args: tuple[Any, ...], kws: list[tuple[str, Any]]) -> str | None:
        return None

    def _as_array(self, a: Any) -> str:
        """An argument the standard needs as an array: a Python number becomes a 0-d array."""
        t = a.type if isinstance(a, (Var, Const)) else None
        text = self.arg(a)
        if isinstance(t, ScalarT) or (isinstance(a, Const) and type(a.value) in (int, float, bool, complex)):
            return f"xp.asarray({text})"
        return text

    def op(self, op: Op) -> list[str]:
        self.current = op
        if op.prim in ("rule_fwd", "pullback", "call_pullback"):
            rule = op.kw("_rule")
            raise _refuse(op, f"the rule {getattr(rule, 'name', '?')}, implemented with numpy",
                          "its body stays one numpy call (the default passes inline the rules they can); "
                          "compile without xp= to run this program on numpy")
        if op.prim == "irad.primitives.guard_shape":
            k = len(self.guard_names)
            self.guard_names.append(f"{op.loc.long if op.loc else '?'}")
            return [f"if tuple({self.operand(op.args[0], _ATOM)}.shape) != {self.lit(tuple(op.kw('expected')))}: "
                    f"raise _GuardError({k})  # guard: data-dependent shape"]
        return super().op(op)

    def call(self, op: Op, args: tuple[Any, ...] | None = None) -> str:
        self.current = op
        args = op.args if args is None else args
        f = op.fn
        kws = [(k, v) for k, v in op.kwargs if not k.startswith("_")]
        self.prec = _ATOM
        if op.prim in ("operator.matmul", "numpy.matmul") and not kws and len(args) == 2 and \
                self._ndim(args[0]) >= 1 and self._ndim(args[1]) >= 1:
            return self._infix("@", args[0], args[1])
        entry = TABLE.get(op.prim)
        if entry is not None:
            return self._entry(op, entry, args, kws)
        if not kws and _hashable(f):
            if f in _INFIX and len(args) == 2:
                return self._infix(_INFIX[f], args[0], args[1])
            if f in _PREFIX and len(args) == 1:
                self.prec = _UNARY
                return f"{_PREFIX[f]}{self.operand(args[0], _UNARY)}"
            if f is operator.getitem and len(args) == 2:
                return self._getitem(op, args[0], args[1])
        if op.prim.startswith(_PASS_THROUGH):
            if op.prim.startswith(("math.", "cmath.")) and any(self._is_array(a) for a in args):
                raise _refuse(op, "a math function of an array")
            return super().call(op, args)
        raise _refuse(op, "a numpy-only call" if op.prim.startswith("numpy") else "a call irad cannot spell")

    def _is_array(self, a: Any) -> bool:
        return isinstance(a, Var) and isinstance(a.type, ArrayT) and not a.type.scalar

    def _entry(self, op: Op, e: Entry, args: tuple[Any, ...], kws: list[tuple[str, Any]]) -> str:
        if op.prim == "irad.primitives.setitem":
            return self._setitem(op, *args)
        if op.prim in ("numpy.swapaxes", "numpy.ndarray.swapaxes", "numpy.transpose", "numpy.ndarray.transpose") \
                and not kws and self._last_two(args):
            return f"{self.operand(args[0], _ATOM)}.mT"
        aliases = dict(e.aliases)
        kw = {aliases.get(k, k): v for k, v in kws}
        for name in e.refuse:
            v = kw.pop(name, None)
            v = v.value if isinstance(v, Const) else v
            # NOTE: order= of a reshape reorders the elements; of a copy, it only lays them out
            layout_only = ("C", "K", "A") if e.name not in ("reshape", "ravel") else ("C",)
            if v is not None and v is not False and not (name == "where" and v is True) and \
                    not (name == "order" and v in layout_only) and not (name == "casting" and v == "unsafe"):
                raise _refuse(op, f"its keyword {name}=")
        self._check_namespace(op, e)
        out_t = op.outs[0].type if len(op.outs) == 1 else None
        if e.name == "where":
            if len(args) != 3:
                raise _refuse(op, "np.where with one argument (np.nonzero)")
            pos = [self._as_array(args[0])] + self._cast(op, args[1:3])
        elif e.arrays >= 2:
            pos = self._cast(op, args[:e.arrays])
        else:
            pos = [self._to_out(a, out_t) for a in args[:e.arrays]]
        rest = list(args[e.arrays:])
        if e.name in _PROMOTING and "dtype" not in kw and isinstance(out_t, ArrayT):
            kw["dtype"] = Const(np.dtype(out_t.dtype), None)  # type: ignore[arg-type]
        if "dtype" in kw:
            kw["dtype"] = self._dtype_arg(op, kw["dtype"])
        if e.name == "astype" and rest:
            rest[0] = self._dtype_arg(op, rest[0])
        if e.positional:
            pos += [self.arg(a) for a in rest[:e.positional]]
            rest = rest[e.positional:]
            params = e.params[e.positional:]
        else:
            params = e.params
        if e.name not in _POSITIONAL:
            if len(rest) > len(params):
                raise _refuse(op, "more positional arguments than irad spells")
            for name, a in zip(params, rest):
                kw[name] = a
            rest = []
            out = kw.pop("out", None)
            if out is not None and not (isinstance(out, Const) and out.value is None):
                raise _refuse(op, "its keyword out=")
        parts = pos + [self._static(a) for a in rest] + \
            self.kwargs([(k, self._static_const(v) if k in _STATIC_PARAMS else v) for k, v in kw.items()])
        return f"xp.{e.name}({', '.join(parts)})"

    def _static_const(self, a: Any) -> Any:
        """An integer array constant in an axis, shape or count argument as a tuple of ints: those
        arguments are Python values in the standard, not arrays."""
        if isinstance(a, Const) and isinstance(a.value, np.ndarray) and a.value.dtype.kind in "iub" and \
                a.value.ndim <= 1 and a.value.size <= 64:
            return Const(tuple(int(i) for i in a.value.reshape(-1)) if a.value.ndim else int(a.value), None)  # type: ignore[arg-type]
        if isinstance(a, Const) and isinstance(a.value, np.integer):
            return Const(int(a.value), None)  # type: ignore[arg-type]
        return a

    def _static(self, a: Any) -> str:
        return self.arg(self._static_const(a))

    def _setitem(self, op: Op, a: Any, idx: Any, v: Any) -> str:
        """``irad.primitives.setitem(a, idx, v)``: the standard's ``__setitem__`` takes no ``None`` (new
        axis) in its key, so those leave the key and their size-1 axes leave ``v``."""
        items = self._index_items(idx)
        news = [k for k, b in enumerate(items) if isinstance(b, Const) and b.value is None]
        vt = v.type if isinstance(v, Var) else None
        if news and isinstance(vt, ArrayT) and not vt.scalar:
            drop = self._result_axes(items, self._ndim(a), news)
            if drop is None:
                raise _refuse(op, "an assignment through an index with new axes")
            offset = self._result_ndim(items, self._ndim(a)) - len(vt.shape)  # v aligns to the right
            vdrop = {p - offset for p in drop if p >= offset}
            if offset < 0 or any(vt.shape[k] != 1 for k in vdrop):
                raise _refuse(op, "an assignment through an index with new axes")
            shape = tuple(n for k, n in enumerate(vt.shape) if k not in vdrop)
            kept = tuple(b for b in items if not (isinstance(b, Const) and b.value is None))
            key = self._index_text(op, a, Const(tuple(b.value if isinstance(b, Const) else b for b in kept), None),  # type: ignore[arg-type]
                                   store=True)
            val = f"xp.reshape({self.arg(v)}, {self.lit(shape)})" if vdrop else self.arg(v)
            return f"xp.setitem({self.arg(a)}, xp.index[{key}], {val})"
        if news:
            items = [b for b in items if not (isinstance(b, Const) and b.value is None)]
            idx = Const(tuple(b.value if isinstance(b, Const) else b for b in items), None)  # type: ignore[arg-type]
        return f"xp.setitem({self.arg(a)}, xp.index[{self._index_text(op, a, idx, store=True)}], {self.arg(v)})"

    def _result_axes(self, items: list[Any], nd: int, news: list[int]) -> set[int] | None:
        """The axes of ``x[items]`` that the ``None`` items at positions ``news`` make (basic
        indexing: ints drop an axis, slices keep one, ``...`` keeps the rest); None if not basic."""
        axis, out = 0, set()
        consumed = self._consumed(items) - (1 if self._has_ellipsis(items) else 0)
        for k, b in enumerate(items):
            if not isinstance(b, Const) and not (isinstance(b, Var) and isinstance(b.type, ScalarT)):
                return None
            val = b.value if isinstance(b, Const) else 0
            if k in news:
                out.add(axis)
                axis += 1
            elif val is Ellipsis:
                axis += nd - consumed
            elif type(val) is slice:
                axis += 1
            elif not isinstance(val, (int, np.integer)):
                return None
        return out

    def _result_ndim(self, items: list[Any], nd: int) -> int:
        consumed = self._consumed(items) - (1 if self._has_ellipsis(items) else 0)
        n = 0
        for b in items:
            val = b.value if isinstance(b, Const) else 0
            n += 1 if val is None or type(val) is slice else (nd - consumed if val is Ellipsis else 0)
        return n + (0 if self._has_ellipsis(items) else nd - consumed)

    def _to_out(self, a: Any, out_t: Any) -> str:
        """An array operand cast to the result's dtype where numpy computes in it: ``np.sqrt`` of
        integers is a float64 array (the standard refuses integers there)."""
        d = self._dtype(a)
        if isinstance(d, np.dtype) and d.kind in "biu" and isinstance(out_t, ArrayT) and out_t.dtype[:1] in "fc":
            return f"xp.astype({self.arg(a)}, {self.lit(np.dtype(out_t.dtype))})"
        return self._as_array(a)

    def _check_namespace(self, op: Op, e: Entry) -> None:
        """The namespace has what ``e``'s spelling calls (a standard function an older library
        may lack): checked now, not when the program runs."""
        ns = self.xp.ns
        names = _NEEDS.get(e.name, ()) if hasattr(ArrayApi, e.name) else (e.name,)
        for n in names:
            target: Any = ns
            for part in n.split("."):
                target = getattr(target, part, None)
            if target is None:
                raise _refuse(op, f"the namespace {getattr(ns, '__name__', ns)!s} has no {n}",
                              "compile without xp= to run this program on numpy")

    def _dtype_arg(self, op: Op, d: Any) -> Any:
        """A dtype argument (``float``, ``"float32"``, ``np.int64``) as this namespace's dtype."""
        v = d.value if isinstance(d, Const) else d
        if v is None or isinstance(d, Var):
            return d
        try:
            return Const(np.dtype(v), None)  # type: ignore[arg-type]  # (spelled by lit)
        except TypeError:
            raise _refuse(op, f"the dtype {v!r}") from None

    def _last_two(self, args: tuple[Any, ...]) -> bool:
        """A transpose of the last two axes of an array of ndim >= 2 (the standard's ``x.mT``)."""
        x = args[0]
        if not (isinstance(x, Var) and isinstance(x.type, ArrayT)) or len(x.type.shape) < 2:
            return False
        n = len(x.type.shape)
        rest = [a.value if isinstance(a, Const) else a for a in args[1:]]
        if not rest or (len(rest) == 1 and rest[0] is None):
            return n == 2
        if len(rest) == 2 and all(type(i) is int for i in rest):
            return {rest[0] % n, rest[1] % n} == {n - 2, n - 1}
        return False

    # -- numpy's promotion where the standard has none --
    def _dtype(self, a: Any) -> Any:
        """The dtype of an operand (a numpy dtype), a Python scalar's type, or None."""
        t = a.type if isinstance(a, Var) else None
        if isinstance(t, ArrayT):
            return np.dtype(t.dtype)
        if isinstance(t, ScalarT):
            return {"float": float, "int": int, "bool": bool, "complex": complex}[t.kind]
        if isinstance(a, Const):
            v = a.value
            if isinstance(v, (np.ndarray, np.generic)):
                return v.dtype
            if type(v) in (float, int, bool, complex):
                return type(v)
        return None

    def _cast(self, op: Op, operands: Sequence[Any]) -> list[str]:
        """The operands of a binary operation, each array cast to the dtype numpy's promotion
        gives them all where its kind (bool, integer, float, complex) differs: the standard
        does not promote across kinds (``int64 + float64``, ``True * 2.0``)."""
        ds = [self._dtype(a) for a in operands]
        arrays = [d for d in ds if isinstance(d, np.dtype)]
        if not arrays and ds and all(isinstance(d, type) for d in ds):  # Python numbers: one dtype for all
            target = np.result_type(*[{float: 1.0, int: 1, bool: True, complex: 1j}[d] for d in ds])
            return [f"xp.asarray({self.arg(a)}, dtype={self.lit(target)})" for a in operands]
        texts = [self._as_array(a) if isinstance(d, type) and not arrays else self.arg(a)
                 for a, d in zip(operands, ds)]
        if not arrays or any(d is None for d in ds):
            return texts
        weak = [{float: 1.0, int: 1, bool: True, complex: 1j}[d] for d in ds if isinstance(d, type)]
        target = np.result_type(*arrays, *weak)
        out_t = op.outs[0].type if op.outs else None
        if isinstance(out_t, ArrayT) and out_t.dtype != "bool":  # arithmetic: numpy's result (1 / 2 is 0.5)
            target = np.dtype(out_t.dtype)
        out = []
        for a, d, text in zip(operands, ds, texts):
            if isinstance(d, np.dtype) and d.kind != target.kind and not (d.kind in "iu" and target.kind in "iu"):
                text = f"xp.astype({self.arg(a)}, {self.lit(target)})"
            elif d is bool and target.kind != "b":  # True * x: the standard takes no bool with numbers
                text = f"int({self.arg(a)})"
            out.append(text)
        return out

    def _infix(self, sym: str, a: Any, b: Any) -> str:
        """``a sym b``, each operand cast where numpy promotes across kinds (``_cast``), with the
        parentheses of lowering's own ``_infix`` (a cast is a call: it binds as an atom)."""
        op = self.current
        if op is None or not (isinstance(self._dtype(a), np.dtype) or isinstance(self._dtype(b), np.dtype)):
            return super()._infix(sym, a, b)  # Python numbers stay Python numbers (no int64 overflow)
        self._no_bool_arithmetic(op, sym, a, b)
        ta, tb = self._cast(op, (a, b))
        cast_a, cast_b = ta != self.arg(a), tb != self.arg(b)  # (a cast is a call: it binds as an atom)
        if not (cast_a or cast_b):
            return super()._infix(sym, a, b)
        p = self.prec = _PREC[sym]
        need_l, need_r = (p + 1, _UNARY) if sym == "**" else (p + 1, p + 1) if p == 6 else (p, p + 1)
        left = ta if cast_a else self.operand(a, need_l)
        right = tb if cast_b else self.operand(b, need_r)
        return f"{left} {sym} {right}"

    def _no_bool_arithmetic(self, op: Op, sym: str, a: Any, b: Any) -> None:
        """numpy's ``+``/``*`` of two boolean arrays are logical or/and; the standard has no
        arithmetic on booleans: refused rather than spelled differently."""
        da, db = self._dtype(a), self._dtype(b)
        if sym in ("+", "-", "*", "/", "//", "%", "**") and all(
                (isinstance(d, np.dtype) and d.kind == "b") or d is bool for d in (da, db)):
            raise _refuse(op, "arithmetic on booleans", "write it with | and & (logical or and and)")

    # -- indexing --
    def _getitem(self, op: Op, x: Any, idx: Any) -> str:
        """``x[idx]`` as the standard indexes (``_index_text``), or ``xp.take`` for one 1-D
        integer-array index along one axis."""
        items = self._index_items(idx)
        arrays = [k for k, a in enumerate(items) if self._int_array(a)]
        if arrays:
            k = arrays[0]
            full = all(k2 == k or (isinstance(b, Const) and type(b.value) is slice and b.value == slice(None))
                       for k2, b in enumerate(items))
            a = items[k]
            if len(arrays) == 1 and full and self._ndim(a) == 1:
                return f"xp.take({self.operand(x, _ATOM)}, {self.arg(a)}, axis={k})"
            raise _refuse(op, "an integer-array index the standard does not allow",
                          "index with one 1-D integer array (it becomes xp.take) or with slices")
        return f"{self.operand(x, _ATOM)}[{self._index_text(op, x, idx)}]"

    def _index_text(self, op: Op, x: Any, idx: Any, store: bool = False) -> str:
        """``idx`` with a trailing ``...`` where it names fewer axes than ``x`` has: numpy fills
        them in, the standard asks for it."""
        items = self._index_items(idx)
        if store and any(self._int_array(a) for a in items):
            raise _refuse(op, "an assignment through an integer-array index", "assign through slices or a mask")
        self.storing = store
        try:
            text = self.index(idx)
        finally:
            self.storing = False
        nd = self._ndim(x)
        if nd > 0 and not self._has_ellipsis(items) and not self._bool_mask(items) and \
                (self._consumed(items) < nd or any(isinstance(a, Const) and a.value is None for a in items)):
            text = "..." if not text or text == "()" else text + (" ..." if text.endswith(",") else ", ...")
        return text

    def _ndim(self, a: Any) -> int:
        if isinstance(a, Var) and isinstance(a.type, ArrayT):
            return len(a.type.shape)
        if isinstance(a, Const) and isinstance(a.value, np.ndarray):
            return a.value.ndim
        return -1

    def _index_items(self, idx: Any) -> list[Any]:
        if isinstance(idx, Const) and type(idx.value) is tuple:
            return [v if isinstance(v, (Var, Const)) else Const(v, None) for v in idx.value]  # type: ignore[arg-type]
        if type(idx) is tuple:
            return list(idx)
        return [idx]

    def _int_array(self, a: Any) -> bool:
        if isinstance(a, Const) and isinstance(a.value, np.ndarray):
            return a.value.ndim >= 1 and a.value.dtype.kind in "iu"
        t = a.type if isinstance(a, Var) else None
        return isinstance(t, ArrayT) and not t.scalar and len(t.shape) >= 1 and t.dtype.startswith(("int", "uint"))

    def _bool_mask(self, items: list[Any]) -> bool:
        def is_mask(a: Any) -> bool:
            if isinstance(a, Const) and isinstance(a.value, np.ndarray):
                return cast(bool, a.value.dtype == bool)
            return isinstance(a, Var) and isinstance(a.type, ArrayT) and a.type.dtype == "bool"
        return any(is_mask(a) for a in items)

    def _has_ellipsis(self, items: list[Any]) -> bool:
        return any(isinstance(a, Const) and a.value is Ellipsis for a in items)

    def _consumed(self, items: list[Any]) -> int:
        return sum(0 if isinstance(a, Const) and a.value is None else 1 for a in items)


def lower_xp(g: Graph, ns: Any, name: str, docstring: str = "") -> Any:
    """``irad.lower.lower`` for namespace ``ns`` (loops written out: their lists and stacks are numpy's)."""
    from .loops import unroll
    from .lower import lower
    return lower(unroll(g), name, docstring=docstring, emitter=lambda g, guards: XpEmitter(g, guards, bind(ns)))


# ---- the program -----------------------------------------------------------------------------

def _is_xp_array(x: Any) -> bool:
    return not isinstance(x, (np.ndarray, np.generic)) and hasattr(x, "__array_namespace__") and hasattr(x, "shape")


def to_numpy(x: Any) -> np.ndarray:
    """A host copy of an array of another namespace (for the trace): DLPack where the array lives
    on the CPU, ``.get()`` for CuPy's device arrays."""
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x)
    get = getattr(x, "get", None)
    if callable(get) and type(x).__module__.startswith("cupy"):
        return np.asarray(get())
    try:
        return np.from_dlpack(x)
    except (TypeError, BufferError, RuntimeError, ValueError):
        return np.asarray(x)


def _np_dtype(d: Any) -> np.dtype:
    try:
        return cast(np.dtype, np.dtype(d))
    except TypeError:
        return np.dtype(str(d).rsplit(".", 1)[-1])


class XpProgram:
    """``irad.compile(f, *args, xp=ns)``: ``prog(*args) -> (value, gradient)`` with arrays of
    ``ns``.  It answers every call like ``irad.compile``'s ``Program`` does: a new shape, a
    failed guard or a changed world (a rebound global) traces again, on host copies of the
    arguments, and lowers the new program for ``ns``.  numpy arrays among the arguments are
    moved to ``ns`` (``ns.asarray``) at each call."""

    def __init__(self, f: Callable[..., Any], argnums: Any, passes: Any, holomorphic: bool, ns: Any) -> None:
        self.f, self.argnums, self.passes, self.holomorphic, self.ns = f, argnums, passes, holomorphic, ns
        self._programs: dict[Any, tuple[Any, Callable[..., Any], str]] = {}
        self._lock = threading.Lock()  # NOTE: threads may call one program; the cache is changed under it
        self.program: Any = None  # the numpy Program of the latest trace
        self.source = ""

    @property
    def graph(self) -> Graph:
        return cast(Graph, self.program.graph)

    @property
    def forward(self) -> Graph:
        return cast(Graph, self.program.forward)

    def _stand_ins(self, args: tuple[Any, ...], kwargs: dict[str, Any], host: bool) -> tuple[Any, Any]:
        from .pytree import tree_map

        def one(x: Any) -> Any:
            if _is_xp_array(x):
                if host:
                    return to_numpy(x)
                return np.broadcast_to(np.zeros((), _np_dtype(x.dtype)), tuple(x.shape))
            return x
        return tree_map(one, args), tree_map(one, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .signature import call_key
        nums = (self.argnums,) if isinstance(self.argnums, int) else tuple(self.argnums)
        sargs, skw = self._stand_ins(args, kwargs, host=False)
        key, _ = call_key(sargs, skw, frozenset(nums))
        _, leaves = call_key(args, kwargs, frozenset(nums))
        hit = self._programs.get(key)
        if hit is not None and hit[0].assumptions.check() is None:
            try:
                return self._run(hit, leaves)
            except GuardError:
                pass
        hit = self._compile(args, kwargs, key)
        try:
            return self._run(hit, leaves)
        except GuardError as e:  # NOTE: the new program fails a guard on the very call it was traced for
            raise NamespaceError(f"xp=: the program of {getattr(self.f, '__name__', 'f')} branches otherwise on "
                                 f"{getattr(self.ns, '__name__', self.ns)} than on numpy (at "
                                 f"{hit[0].guard_failure(e)}); compile without xp= to run it on numpy") from None

    def _run(self, hit: tuple[Any, Callable[..., Any], str], leaves: list[Any]) -> Any:
        prog, fn, _ = hit
        asarray = self.ns.asarray
        ins = leaves if prog.dyn_pos is None else [leaves[i] for i in prog.dyn_pos]
        ins = [asarray(x) if isinstance(x, (np.ndarray, np.generic)) else x for x in ins]
        return prog.unpack(fn(*ins))

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Any) -> tuple[Any, Callable[..., Any], str]:
        from . import passes as irad_passes
        from .api import compile as irad_compile
        hargs, hkw = self._stand_ins(args, kwargs, host=True)
        pipeline = self.passes
        if pipeline is None:
            # NOTE: the structure passes call LAPACK through SciPy (cho_solve, lu_solve): no standard form
            skip = {irad_passes.cholesky_consumers, irad_passes.triangular_solves, irad_passes.shared_lu}
            pipeline = tuple(p for p in irad_passes.PIPELINE if p not in skip)
        prog = irad_compile(self.f, *hargs, argnums=self.argnums, passes=pipeline, holomorphic=self.holomorphic,
                            **hkw)
        fname = getattr(self.f, "__name__", "f")
        if prog.writeback or prog.setattrs or prog.rngs:
            what = "updates its arguments or objects in place" if (prog.writeback or prog.setattrs) \
                else "draws random numbers with numpy"
            raise NamespaceError(f"xp=: {fname} {what}; irad runs such a program on numpy only "
                                 "(compile it without xp=)")
        low = lower_xp(prog.graph, self.ns, f"{fname}_grad", docstring=prog.fn.__doc__ or "")
        hit = (prog, low.fn, low.source)
        with self._lock:
            if len(self._programs) >= 8:  # NOTE: bounded like irad's own program caches
                self._programs.pop(next(iter(self._programs)))
            self._programs[key] = hit
        self.program, self.source = prog, low.source
        return hit


def compile_xp(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], argnums: Any, passes: Any,
               holomorphic: bool, ns: Any) -> XpProgram:
    """``irad.compile(f, *args, xp=ns)``: trace now (so errors surface at compile time)."""
    prog = XpProgram(f, argnums, passes, holomorphic, ns)
    from .signature import call_key
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    sargs, skw = prog._stand_ins(args, kwargs, host=False)
    key, _ = call_key(sargs, skw, frozenset(nums))
    prog._compile(args, kwargs, key)
    return prog


__all__ = ["ArrayApi", "TABLE", "XpProgram", "bind", "compile_xp", "lower_xp", "to_numpy"]
