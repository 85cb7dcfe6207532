"""Python ints as data: an int argument is an input of the program unless it shapes the program.

CPython shares the small ints (-5..256), so identity cannot tell the argument ``3`` from a literal
``3``.  While tracing, an ``int`` argument is therefore a :class:`TracedInt`: an int object of its
own, which the tracer follows by identity like a float.  How each use of one is traced:

- arithmetic with numbers (``+ - * / // % ** << >> & | ^ ~``, ``abs``, ``int``, ``float``,
  ``round``, ``math`` functions, numpy ufuncs): recorded, so the program recomputes it; an int
  result is a ``TracedInt`` again;
- a decision (``if i % 10 == 0``, ``i > 5``, ``bool(i)``, a dict key): a guard on the predicate,
  as for a float;
- an index into an array (``x[i]``): recorded, the program indexes at run time;
- any other use (a shape, a slice bound, ``range(i)``, a list index, ``axis=``, a string, a C
  function irad does not know): a guard on the exact value, and the callee gets a plain int.

Result types that depend on the value are guarded too: ``int ** int`` is a float for a negative
exponent, ``int ** float`` is complex for a negative base, and numpy reads a Python int outside
int64 as uint64 or an object.  The program computes with Python ints, so ``2**70`` stays exact.

What user code can tell (``docs/trust.md``): nothing through ``type(i)``, ``i.__class__``, error
messages or ``i is 3`` (the tracer answers them as for an int; equal small ints are one object);
C code that irad does not trace and that gets the int inside a list, dict or object it is handed
sees the subclass, its value guarded.  Identity of two equal large ints is not guarded (as before,
when the value was the key).
"""
from __future__ import annotations

import builtins
import functools
import itertools
import math
import operator
import types
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import hooks
from .ir import ScalarT, Var

if TYPE_CHECKING:
    from .trace import Tracer

INT = ScalarT("int")


class TracedInt(int):
    """An int argument (or an int computed from one) while it is traced: never a cached object."""

    __slots__ = ()


# NOTE: C code names a type by __name__ in its messages ("'int' object is not iterable"), as it
# would name the int itself; repr(type) still says irad.intdata.TracedInt
TracedInt.__name__ = "int"


class IntData:
    """What a trace did with its ints: the ones guarded on their exact value (by id), and the
    predicates guarded (id, which), so that each is guarded once; where one was stored that
    outlives the trace (objects, namespaces, cells), to put a plain int back afterwards."""

    __slots__ = ("guarded", "checked", "homes")

    def __init__(self) -> None:
        self.guarded: set[int] = set()
        self.checked: set[tuple[int, str]] = set()
        self.homes: list[tuple[str, Any, Any]] = []


def is_int_leaf(x: Any) -> bool:
    """An argument leaf that is an int input of the program (``bool`` and ``IntEnum`` stay static)."""
    tx = type(x)
    return tx is int or tx is TracedInt


def fits_int64(i: int) -> bool:
    """Whether numpy reads the Python int ``i`` as an int64 (outside: uint64, an object, or an error)."""
    return -(1 << 63) <= i < (1 << 63)


def nonnegative(i: Any) -> bool:
    """Whether ``b ** i`` of ints is an int (else a float), ``i ** y`` of a float ``y`` real."""
    return bool(i >= 0)


def _is_num(x: Any) -> bool:
    tx = type(x)
    if tx is int or tx is TracedInt or tx is float or tx is bool or tx is complex:
        return True
    if isinstance(x, (np.number, np.bool_)):
        return True
    return tx is np.ndarray and x.dtype.kind in "biufc"


def holds_int(x: Any, depth: int = 0) -> bool:
    """Is a TracedInt in ``x`` (containers, slices, the attributes of plain objects)?"""
    tx = type(x)
    if tx is TracedInt:
        return True
    if tx is tuple or tx is list:
        return any(holds_int(e, depth) for e in x)
    if tx is dict:
        return any(holds_int(k, depth) or holds_int(v, depth) for k, v in x.items())
    if tx is slice:
        return holds_int((x.start, x.stop, x.step), depth)
    if depth < 3 and isinstance(x, (tuple, list)):
        return any(holds_int(e, depth + 1) for e in x)
    if depth < 3 and tx.__module__ not in ("builtins", "numpy"):
        d = getattr(x, "__dict__", None)
        if type(d) is dict:
            return any(holds_int(e, depth + 1) for e in d.values())
    return False


def exact(t: Tracer, x: TracedInt) -> int:
    """Guard ``x`` on its value (once): the program is specialised on it.  Returns the plain int."""
    assert t.ints is not None
    if id(x) not in t.ints.guarded:
        t.ints.guarded.add(id(x))
        t.guard_value(x)
    return int(x)


def plain(t: Tracer, x: Any, depth: int = 0) -> Any:
    """``x`` with every TracedInt in it guarded on its value; at the top, in tuples and in slices
    they are replaced by plain ints (lists, dicts and objects are guarded in place: a callee may
    change them, so they must stay the same objects)."""
    tx = type(x)
    if tx is TracedInt:
        return exact(t, x)
    if tx is tuple:
        items = tuple(plain(t, e, depth) for e in x)
        return items if any(a is not b for a, b in zip(items, x)) else x
    if tx is slice:
        if holds_int(x):
            return slice(plain(t, x.start), plain(t, x.stop), plain(t, x.step))
        return x
    if tx is list or (depth < 3 and isinstance(x, (tuple, list))):
        for e in x:
            plain(t, e, depth + 1)
    elif tx is dict:
        for k, v in x.items():
            plain(t, k, depth + 1)
            plain(t, v, depth + 1)
    elif depth < 3 and tx.__module__ not in ("builtins", "numpy"):
        d = getattr(x, "__dict__", None)
        if type(d) is dict:
            for e in d.values():
                plain(t, e, depth + 1)
    return x


def _predicate(t: Tracer, x: Any, fn: Callable[[Any], bool]) -> None:
    """Guard ``fn(x)`` (recorded, so that the program computes it at each call)."""
    assert t.ints is not None
    k = (id(x), fn.__name__)
    if type(x) is TracedInt and id(x) not in t.ints.guarded and k not in t.ints.checked:
        t.ints.checked.add(k)
        t.record(fn, (x,), {}, fn(x))  # a bool: the tracer guards it


def pow_guard(t: Tracer, a: Any, b: Any) -> None:
    """``a ** b``: its type follows the signs (``2 ** -1`` is a float, ``(-8) ** 0.5`` complex)."""
    if type(b) is TracedInt and type(a) in (int, bool, TracedInt):
        _predicate(t, b, nonnegative)
    if type(a) is TracedInt and type(b) is float:
        _predicate(t, a, nonnegative)


def operands(t: Tracer, a: Any, b: Any, op: int) -> tuple[Any, Any]:
    """The operands of ``a <op> b`` (BINARY_OP) when one is a TracedInt: kept as data with numbers
    (the value-dependent result types guarded), plain ints (guarded) with anything else
    (``[0] * i``, ``"%d" % i``, ``"ab" * i``)."""
    if not (_is_num(a) and _is_num(b)):
        return plain(t, a), plain(t, b)
    if op % hooks.N_BINOPS == _POW:
        pow_guard(t, a, b)
    return a, b


def _value(x: Any) -> Any:
    return int(x) if type(x) is TracedInt else x


def numpy_partner(a: Any, b: Any) -> bool:
    return isinstance(a, (np.ndarray, np.generic)) or isinstance(b, (np.ndarray, np.generic))


def numpy_binop(t: Tracer, a: Any, b: Any, op: int) -> Any:
    """``x * i``, ``x *= i`` with a numpy operand: numpy computes with the plain int, the op is
    recorded with the int's Var.  NOTE: numpy reads an int *subclass* as a strong int64 (NEP 50's
    weak Python scalars are exact ints only): ``float32_array * TracedInt(3)`` would be float64."""
    if op >= hooks.N_BINOPS and isinstance(a, np.ndarray):
        if id(a) in t._boxed:  # a boxed np.bool_ (see Tracer.record): not in place
            op -= hooks.N_BINOPS
        else:
            return t._binop_inplace(a, _value(b), op, t.atom(b))
    fn = hooks.OUT_OF_PLACE[op]
    va, vb = _value(a), _value(b)
    return t.record(fn, (va, vb), {}, fn(va, vb), atoms=((t.atom(a), t.atom(b)), {}))


def compare(t: Tracer, fn: Any, a: Any, b: Any) -> Any:
    """``i < 5``, ``i == x``: computed on plain ints (numpy's promotion, see numpy_binop), recorded
    with the Vars; a bool result is guarded by the tracer, a bool array stays data."""
    va, vb = _value(a), _value(b)
    return t.record(fn, (va, vb), {}, fn(va, vb), atoms=((t.atom(a), t.atom(b)), {}))


def is_numpy_data(f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``np.sqrt(i + 1)``, ``np.float64(i)``: a ufunc or numpy number type on numbers, no keywords."""
    return not kwargs and (isinstance(f, np.ufunc) or (isinstance(f, type) and issubclass(f, np.number))) and \
        any(type(a) is TracedInt for a in args) and all(_is_num(a) for a in args)


def numpy_call(t: Tracer, f: Any, args: tuple[Any, ...]) -> Any:
    """A ufunc or numpy number type of TracedInts (see ``is_numpy_data``): computed on plain ints,
    recorded with the Vars.  Alone (no array operand) numpy reads a Python int by its value (int64,
    uint64 past 2**63, an object past 2**64): guarded to stay in int64, or on the exact value."""
    if not any(isinstance(a, (np.ndarray, np.generic)) for a in args):
        for a in args:
            _predicate(t, a, fits_int64)
            if type(a) is TracedInt and not fits_int64(a):
                exact(t, a)
    values = tuple(_value(a) for a in args)
    atoms: tuple[tuple[Any, ...], dict[str, Any]] = (tuple(t.atom(a) for a in args), {})
    return t.record(f, values, {}, t._call_read_only(f, values, {}), atoms=atoms)


def result(t: Tracer, fn: Any, a_args: tuple[Any, ...], a_kwargs: dict[str, Any], r: int) -> TracedInt:
    """The int ``r`` that a recorded arithmetic op computed from traced ints: data again."""
    y = TracedInt(r)
    v = Var(t.next_id, INT)
    t.next_id += 1
    t.emit(fn, a_args, a_kwargs, (v,))
    t.track(y, v)
    t.values[v.id] = r
    return y


def is_data_call(t: Tracer, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Is the int that ``fn(*args)`` returned arithmetic on traced ints (data), not a decision
    on other traced values (``round(x)`` of a float stays a guard)?"""
    if kwargs or not _member(fn, _DATA):
        return False
    vars_ = t.vars
    return all(_is_num(a) and (id(a) not in vars_ or type(a) is TracedInt) for a in args)


def attribute(t: Tracer, o: TracedInt, name: str) -> Any:
    """``i.name``: what an int answers (``type`` is int), the int itself for ``real``."""
    if name == "real" or name == "numerator":
        return o  # (an int's .real is the int itself)
    if name == "__class__":
        return int
    if name == "imag":
        return 0
    if name == "denominator":
        return 1
    return getattr(exact(t, o), name)


# ---- calls ----------------------------------------------------------------------------------

_KEEP, _ITEMS, _DATA_CALL, _GUARD, _INSERT = "keep", "items", "data", "guard", "insert"
_POW = hooks._NAMES.index("pow")

#: C functions that compute a number from numbers, whatever their values (the int stays data)
_DATA_FUNCS: list[Any] = [
    *(getattr(operator, n) for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift",
                                     "and_", "or_", "xor", "neg", "pos", "abs", "invert", "index")),
    builtins.abs, builtins.int, builtins.float, builtins.complex, builtins.round, builtins.pow, builtins.bool,
    *(getattr(math, n) for n in dir(math) if not n.startswith("_") and callable(getattr(math, n))
      and n not in ("fsum", "prod", "dist", "sumprod")),  # (those take iterables)
]
_DATA = {id(f): f for f in _DATA_FUNCS}


def _member(f: Any, table: dict[int, Any]) -> bool:
    return table.get(id(f)) is f


#: how a call treats the TracedInts it is handed (others: the exact value is guarded)
_POLICY: dict[int, tuple[Any, str]] = {
    **{id(f): (f, _DATA_CALL) for f in _DATA_FUNCS},
    # the tracer runs them on the items (comparisons, sums, callbacks, attribute reads): the ints stay data
    **{id(f): (f, _KEEP) for f in (
        builtins.len, builtins.getattr, builtins.hasattr, builtins.setattr, builtins.min, builtins.max, builtins.sum,
        builtins.id, builtins.isinstance, builtins.issubclass, builtins.callable, builtins.map, builtins.filter,
        functools.reduce, itertools.starmap, itertools.filterfalse, itertools.takewhile, itertools.dropwhile,
        itertools.accumulate, itertools.groupby, builtins.dict, object.__setattr__, object.__delattr__,
        builtins.delattr, np.shape, np.ndim, np.size, np.isscalar, np.iterable, np.iscomplexobj, np.isrealobj)},
    # they read the value natively: numpy's type of a Python int depends on it, np.sort keys on it
    **{id(f): (f, _GUARD) for f in (np.result_type, np.can_cast, np.min_scalar_type, np.promote_types,
                                    builtins.sorted)},
}
#: methods of the trace's own lists that only store references (an index argument is guarded)
_LIST_KEEP = frozenset({"append", "appendleft", "extend", "extendleft"})


def _policy(t: Tracer, f: Any, special: bool) -> str:
    hit = _POLICY.get(id(f))
    if hit is not None and hit[0] is f:
        return hit[1]
    owner = getattr(f, "__self__", None)
    if type(f) is types.BuiltinMethodType and isinstance(owner, (list, deque, dict, set)):
        keep = isinstance(owner, (dict, set)) or f.__name__ in _LIST_KEEP  # (dict keys: noted by the tracer)
        if keep or f.__name__ == "insert":
            if id(owner) in t.world and t.ints is not None:  # a container of the world: plain ints after the trace
                t.ints.homes.append(("items", owner, None))
            return _KEEP if keep else _INSERT
    return _ITEMS if special else _GUARD


def at_call(t: Tracer, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any], special: bool = False) \
        -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments a call of ``f`` (code irad does not trace through; ``special``: one the
    tracer runs itself, on the items) gets when TracedInts are among them: data for arithmetic,
    guarded plain ints wherever the value could shape the program."""
    if not holds_int(args) and not (kwargs and holds_int(kwargs)):
        return args, kwargs
    pol = _policy(t, f, special)
    if pol is _KEEP:
        return args, kwargs
    if pol is _INSERT and args:
        return (plain(t, args[0]),) + args[1:], kwargs
    if pol is _ITEMS:  # a top-level int is a parameter (enumerate's start, islice's stop): its value counts
        return (tuple(exact(t, a) if type(a) is TracedInt else a for a in args),
                {k: exact(t, v) if type(v) is TracedInt else v for k, v in kwargs.items()})
    if pol is _DATA_CALL and all(_is_num(a) for a in args):
        if len(args) == 2 and (f is builtins.pow or f is operator.pow):
            pow_guard(t, args[0], args[1])
        return args, {k: plain(t, v) for k, v in kwargs.items()}
    return plain(t, args), {k: plain(t, v) for k, v in kwargs.items()}


def h_is(a: Any, b: Any, invert: int) -> bool:
    """``a is b`` (IS_OP, instrumented): a TracedInt is a new object, where CPython would share a
    small int: the identity the function would see, on the values, which are guarded."""
    if type(a) is TracedInt or type(b) is TracedInt:
        t = hooks.active_tracer()
        if t is not None and t.ints is not None and a is not b and is_int_leaf(a) and is_int_leaf(b):
            a, b = plain(t, a), plain(t, b)  # (small equal ints are one object in CPython)
    return (a is not b) if invert else (a is b)


# ---- after the trace ------------------------------------------------------------------------

def release(t: Tracer) -> None:
    """Put plain ints back where the function stored one of this trace's TracedInts that outlives
    the trace (attributes of objects of the world, globals it assigns, closure cells, containers of
    the world): the user's world never holds a tracer type.  (What a compiled program sets there at
    each call is a plain int.)"""
    if t.ints is None:
        return
    mine = t.vars  # (an enclosing trace's TracedInts stay: that trace may still read them)
    for kind, home, name in t.ints.homes:
        if kind == "attr":
            d = getattr(home, "__dict__", None)
            if type(d) is dict and name in d:
                d[name] = _released(d[name], mine)
        elif kind == "globals":
            for n in name:
                if n in home:
                    home[n] = _released(home[n], mine)
        else:
            _release_items(home, mine)
    for d in t.deps:
        if d[0] == "cell":
            cell = d[1].value
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            r = _released(v, mine)
            if r is not v:
                cell.cell_contents = r


def _released(v: Any, mine: dict[int, Any]) -> Any:
    """``v`` with plain ints for the trace's TracedInts (itself, in a tuple, in a list, dict or set)."""
    if type(v) is TracedInt:
        return int(v) if id(v) in mine else v
    if type(v) is tuple and holds_int(v):
        items = tuple(_released(e, mine) for e in v)
        return items if any(a is not b for a, b in zip(items, v)) else v
    if isinstance(v, (list, dict, set, deque)):
        _release_items(v, mine)
    return v


def _release_items(c: Any, mine: dict[int, Any]) -> None:
    if isinstance(c, (list, deque)):
        for k, e in enumerate(c):
            if holds_int(e):
                c[k] = _released(e, mine)
    elif isinstance(c, dict):
        for k, e in c.items():
            if holds_int(e):
                c[k] = _released(e, mine)
    elif isinstance(c, set):
        for e in [e for e in c if type(e) is TracedInt and id(e) in mine]:
            c.discard(e)
            c.add(int(e))
