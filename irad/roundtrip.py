"""Values that leave the float world and come back (Trust II).

A traced float can be turned into something that is not a float: its bytes (``x.tobytes()``,
``x.data``, ``memoryview(x)``, ``struct.pack``), the same bytes read as another dtype
(``x.view(np.int64)``), the exact integers of its ratio (``float.as_integer_ratio``, which
``Fraction``, ``Decimal`` and ``statistics.mean`` use), a ``Decimal``.  Computed back into a float,
such a value carries no gradient: irad either traces the round trip exactly or refuses it.

- reinterpretations and opaque objects made from differentiated values are refused when a float
  read back out of them reaches the result, and so is a branch on raw bytes (a cache keyed by
  ``x.tobytes()``): ``irad.ad._check_no_opaque_path``; ``a.view()`` without a dtype change and
  ``np.frombuffer`` of an array as its own dtype have rules (``irad.rules.array_rules``);
- ``as_integer_ratio`` of a traced float is refused while tracing (``exact_ratio_error``): its
  integers would become guarded constants, pinning the program to that one value;
- ``statistics.mean``/``variance``/``pvariance``/``stdev``/``pstdev`` of traced floats are traced
  as float arithmetic (``STATISTICS``) instead of the module's exact Fraction arithmetic.

Hashing ``x.tobytes()`` (or returning it) inside a traced function is traced: the bytes are an
opaque value recomputed at each call.  Under a gradient, a branch on them is an error.
"""
from __future__ import annotations

import array
import functools
import math
import statistics
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

from .errors import UnsupportedError
from .ir import Var, is_differentiable

if TYPE_CHECKING:
    import types

    from .trace import Tracer

#: C constructors that copy the items of an iterable into a buffer (``array.array('d', gen)``): the
#: tracer hands them the items it sees, so the buffer is an opaque value made from traced ones
BUFFER_BUILDERS = (array.array, bytes, bytearray)
#: C methods whose result is the exact value of a float as integers (guarded, so baked in)
EXACT_INT_ENCODINGS = frozenset({"as_integer_ratio"})


def exact_ratio_error(t: Tracer, fn: Any, a_args: tuple[Any, ...]) -> UnsupportedError | None:
    """``x.as_integer_ratio()`` of a differentiated traced float: the error to raise, else None."""
    name = getattr(fn, "__name__", None)
    if name not in EXACT_INT_ENCODINGS or not any(isinstance(a, Var) and is_differentiable(a.type) for a in a_args):
        return None
    return UnsupportedError(
        f"{name}() of a traced float cannot be traced", t._user_site(),
        "its integers are the float's exact value: the trace would bake them in (pinning the program to this "
        "one value), and a float rebuilt from them (fractions.Fraction, decimal.Decimal, "
        "statistics.harmonic_mean/median_grouped...) would carry no gradient. Compute in floats instead: "
        "statistics.mean/fmean/variance/stdev and numpy reductions are traced; convert outside the "
        "differentiated function if you need exact arithmetic")


# ---- statistics of traced floats, as float arithmetic ----------------------------------------
# The module computes exactly, with Fractions built from as_integer_ratio; these bodies run
# instrumented (the tracer sees every op) and give the same values up to rounding.


def _points(data: Any) -> tuple[Any, int]:
    if isinstance(data, np.ndarray):
        return data, data.size
    items = list(data)
    return items, len(items)


def _total(items: Any) -> Any:
    if isinstance(items, np.ndarray):
        return np.sum(items)
    return sum(items)


def _ss(data: Any, c: Any) -> tuple[Any, int]:
    items, n = _points(data)
    if c is None and n:
        c = _total(items) / n
    if isinstance(items, np.ndarray):
        return np.sum((items - c) * (items - c)), n
    return sum([(x - c) * (x - c) for x in items]), n


def stat_mean(data: Any) -> Any:
    items, n = _points(data)
    if n < 1:
        raise statistics.StatisticsError("mean requires at least one data point")
    if isinstance(items, np.ndarray):
        return np.mean(items)
    return _total(items) / n


def stat_variance(data: Any, xbar: Any = None) -> Any:
    ss, n = _ss(data, xbar)
    if n < 2:
        raise statistics.StatisticsError("variance requires at least two data points")
    return ss / (n - 1)


def stat_pvariance(data: Any, mu: Any = None) -> Any:
    ss, n = _ss(data, mu)
    if n < 1:
        raise statistics.StatisticsError("pvariance requires at least one data point")
    return ss / n


def stat_stdev(data: Any, xbar: Any = None) -> Any:
    ss, n = _ss(data, xbar)
    if n < 2:
        raise statistics.StatisticsError("stdev requires at least two data points")
    return math.sqrt(ss / (n - 1))


def stat_pstdev(data: Any, mu: Any = None) -> Any:
    ss, n = _ss(data, mu)
    if n < 1:
        raise statistics.StatisticsError("pstdev requires at least one data point")
    return math.sqrt(ss / n)


def _is_iterator(a: Any) -> bool:
    return hasattr(type(a), "__next__") and not isinstance(a, (np.ndarray, np.generic))


def _scalar_points(t: Tracer, data: Any) -> bool:
    """Data the float bodies compute as statistics would: a 1-d float array, or numbers."""
    if isinstance(data, np.ndarray):
        return data.ndim == 1 and data.dtype.kind == "f"
    return isinstance(data, (list, tuple)) and all(
        isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in data)


def _coerce(t: type, s: type) -> type:
    return s if t is int or issubclass(s, t) else t if s is int or issubclass(t, s) else \
        _raise_coerce(t, s)


def _raise_coerce(t: type, s: type) -> type:
    raise TypeError(f"don't know how to coerce {t.__name__} and {s.__name__}")


_COERCE: Callable[[type, type], type] = getattr(statistics, "_coerce", _coerce)


def _statistics(fn: Any, body: Callable[..., Any]) -> Callable[..., Any]:
    def handler(t: Tracer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not args:
            return NotImplemented
        if _is_iterator(args[0]):  # a generator of traced values: its items, as the tracer sees them
            args = (list(t.iterable(args[0])),) + args[1:]
            if not t._floats_flow_in(args, kwargs):
                return t.call_python(fn, args, kwargs)
        elif not t._floats_flow_in(args, kwargs):
            return NotImplemented  # constants (ints, Fractions, Decimals): the module's own exact code
        if not _scalar_points(t, args[0]):
            return NotImplemented
        data = args[0]
        kinds = {data.dtype.type} if isinstance(data, np.ndarray) else {type(x) for x in data}
        functools.reduce(_COERCE, kinds, cast(type, int))  # statistics' TypeError for mixed types (np.float32 and float)
        return t.call_python(cast("types.FunctionType", body), args, kwargs)
    return handler


#: id(statistics function) -> (function, handler(tracer, args, kwargs) -> result or NotImplemented)
STATISTICS: dict[int, tuple[Any, Callable[..., Any]]] = {
    id(fn): (fn, _statistics(fn, body)) for fn, body in (
        (statistics.mean, stat_mean), (statistics.variance, stat_variance), (statistics.pvariance, stat_pvariance),
        (statistics.stdev, stat_stdev), (statistics.pstdev, stat_pstdev))}
