"""The functions instrumented bytecode calls.  Each checks for an active tracer and otherwise
performs the plain Python operation, so instrumented code behaves natively outside a trace.

These are the tracer's hot path: keep them tiny.
"""
from __future__ import annotations

import operator
import os
import sys
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .trace import Tracer


# NOTE: the active tracer is per thread and per asyncio task: instrumented code running in one
# thread (a first call of a transform, or plain untraced use of an instrumented function) must
# never see another thread's trace.  Measured per access on CPython 3.11: a module global 9 ns,
# ``ContextVar.get`` bound once 14 ns, a ``threading.local`` subclass attribute 40-46 ns.  A
# context variable is both the cheaper per-thread mechanism and the correct one for asyncio
# (a task copies the context it was created in), so it is what the hooks read.

#: the tracer recording in this thread/task (None: instrumented code runs natively)
TRACER: ContextVar[Any] = ContextVar("irad_tracer", default=None)
#: the tracers paused by ``paused()`` (outermost first): a nested transform compiles while they
#: wait, and the values they trace are values of the nested function's closures
OUTER: ContextVar[tuple[Any, ...]] = ContextVar("irad_outer_tracers", default=())
#: ``active_tracer()``: this context's tracer (bound once: the hooks' hot path is one C call)
active_tracer = TRACER.get

# BINARY_OP argument -> operator; 13.. are the in-place forms, in the same order.
_NAMES = ["add", "and_", "floordiv", "lshift", "matmul", "mul", "mod", "or_", "pow", "rshift", "sub",
          "truediv", "xor"]
BINOPS: list[Any] = [getattr(operator, n) for n in _NAMES] + \
    [getattr(operator, "i" + n.rstrip("_")) if n.endswith("_") else getattr(operator, "i" + n) for n in _NAMES]
OUT_OF_PLACE: list[Any] = [getattr(operator, n) for n in _NAMES] * 2
N_BINOPS = len(_NAMES)
COMPARES: list[Any] = [operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge]
UNARY: dict[str, Callable[[Any], Any]] = {"UNARY_NEGATIVE": operator.neg, "UNARY_INVERT": operator.invert,
                                          "UNARY_POSITIVE": operator.pos}


def h_binop(a: Any, b: Any, op: int) -> Any:
    t = active_tracer()
    if t is None:
        return BINOPS[op](a, b)
    return t.binop(a, b, op)


def h_compare(a: Any, b: Any, op: int) -> Any:
    t = active_tracer()
    if t is None:
        r = COMPARES[op & 15](a, b)
        return bool(r) if op & 16 else r
    return t.compare(a, b, op)


def h_contains(a: Any, b: Any, invert: int) -> bool:
    t: Tracer | None = active_tracer()
    if t is None:
        return (a not in b) if invert else (a in b)
    return t.contains(a, b, invert)


def h_getitem(a: Any, i: Any) -> Any:
    t = active_tracer()
    if t is None:
        return a[i]
    return t.getitem(a, i)


def h_binary_slice(a: Any, start: Any, stop: Any) -> Any:
    t = active_tracer()
    if t is None:
        return a[start:stop]
    return t.getitem(a, slice(start, stop))


def h_setitem(v: Any, a: Any, i: Any) -> None:
    t = active_tracer()
    if t is None:
        a[i] = v
    else:
        t.setitem(a, i, v)


def h_store_slice(v: Any, a: Any, start: Any, stop: Any) -> None:
    t = active_tracer()
    if t is None:
        a[start:stop] = v
    else:
        t.setitem(a, slice(start, stop), v)


def h_unary(a: Any, name: str) -> Any:
    t = active_tracer()
    if t is None:
        return UNARY[name](a)
    return t.unary(a, name)


def h_truth(v: Any, keep: int) -> Any:
    """Before a truth test; ``keep``: the instruction needs ``v`` itself (3.11 JUMP_IF_*_OR_POP)."""
    t = active_tracer()
    if t is None or type(v) is bool:
        return v
    return t.truth_test(v, keep)


def h_iter(v: Any) -> Any:
    t = active_tracer()
    if t is None:
        return v
    return t.iterable(v)


def h_unpack(v: Any) -> Any:
    t = active_tracer()
    if t is None:
        return v
    return t.iterable(v)


def h_setattr(v: Any, o: Any, name: str) -> None:
    t = active_tracer()
    if t is None:
        setattr(o, name, v)
    else:
        t.setattr(o, name, v)


def h_with(mgr: Any) -> Any:
    t = active_tracer()
    return mgr if t is None else t.context(mgr)


_CONVERSIONS: list[Any] = [None, str, repr, ascii]


def h_format(v: Any, spec: Any, conv: int) -> Any:
    """``f"{v!conv:spec}"`` (FORMAT_VALUE; 3.13: CONVERT_VALUE, FORMAT_SIMPLE, FORMAT_WITH_SPEC)."""
    t = active_tracer()
    if t is None:
        if conv:
            v = _CONVERSIONS[conv](v)
        return format(v, spec)
    return t.format_value(v, spec, conv)


def h_format_simple(v: Any, conv: int) -> Any:
    return h_format(v, "", conv)


def h_convert(v: Any, conv: int) -> Any:
    t = active_tracer()
    if t is None:
        return _CONVERSIONS[conv](v)
    return t.call(_CONVERSIONS[conv], (v,), {})


def h_build_map(items: tuple[Any, ...]) -> dict[Any, Any]:
    """``{k0: v0, k1: v1, ...}`` (BUILD_MAP, its operands packed in a tuple)."""
    t = active_tracer()
    if t is None:
        return dict(zip(items[0::2], items[1::2]))
    return t.build_map(items)  # type: ignore[no-any-return]


def h_build_set(items: tuple[Any, ...]) -> set[Any]:
    """``{a, b, ...}`` (BUILD_SET)."""
    t = active_tracer()
    if t is None:
        return set(items)
    return t.build_set(items)  # type: ignore[no-any-return]


def h_hash_add(c: Any, item: Any, kind: int) -> Any:
    """Before MAP_ADD/SET_ADD (``kind`` 1: ``item`` is a key) or DICT_UPDATE/SET_UPDATE (2: a mapping
    or iterable) adds to the dict or set ``c``; returns what the instruction consumes."""
    t = active_tracer()
    if t is None:
        return item
    return t.hash_add(c, item, kind)


def h_delitem(a: Any, i: Any) -> None:
    t = active_tracer()
    if t is None:
        del a[i]
    else:
        t.delitem(a, i)


def h_build_string(*pieces: Any) -> str:
    t = active_tracer()
    if t is None:
        return "".join(pieces)
    return t.build_string(pieces)  # type: ignore[no-any-return]


def h_getattr(o: Any, name: str) -> Any:
    t = active_tracer()
    if t is None:
        return getattr(o, name)
    return t.getattr(o, name)


def h_call(f: Any, args: tuple[Any, ...], kwnames: tuple[str, ...] | None) -> Any:
    special = FRAME_SENSITIVE.get(id(f))
    if special is not None and special[0] is f:
        return special[1](sys._getframe(1), args, kwnames)
    if kwnames:
        k = len(kwnames)
        kwargs = dict(zip(kwnames, args[-k:]))
        args = args[:-k]
    else:
        kwargs = {}
    t = active_tracer()
    if t is None:
        return f(*args, **kwargs)
    return t.call(f, args, kwargs)


def h_call_ex(f: Any, args: Any, kwargs: Any) -> Any:
    t = active_tracer()
    if t is None:
        return f(*args, **(kwargs or {}))
    if type(args) is not tuple:
        args = tuple(t.iterable(args))
    return t.call(f, args, dict(kwargs) if kwargs else {})


# ---- frame-sensitive builtins ---------------------------------------------------------------
# Called from a hook they would see the hook's frame; give them the user's frame instead.

_IRAD_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_frame(frame: Any) -> Any:
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _IRAD_DIR:
        frame = frame.f_back
    return frame


def _kw(args: tuple[Any, ...], kwnames: tuple[str, ...] | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if not kwnames:
        return args, {}
    k = len(kwnames)
    return args[:-k], dict(zip(kwnames, args[-k:]))


def _super(frame: Any, args: tuple[Any, ...], kwnames: Any) -> Any:
    if args:
        return super(*args)
    code = frame.f_code
    loc = frame.f_locals
    if "__class__" not in loc or not code.co_argcount:
        raise RuntimeError("super(): no arguments")
    return super(loc["__class__"], loc[code.co_varnames[0]])


def _locals(frame: Any, args: tuple[Any, ...], kwnames: Any) -> Any:
    return dict(frame.f_locals)


def _globals(frame: Any, args: tuple[Any, ...], kwnames: Any) -> Any:
    t = active_tracer()
    if t is not None:  # `globals()["S"]`: what the trace reads of the namespace is a dependency
        t.reach(frame.f_globals, "globals()")
    return frame.f_globals


def _vars(frame: Any, args: tuple[Any, ...], kwnames: Any) -> Any:
    t = active_tracer()
    if t is not None and len(args) == 1 and type(getattr(args[0], "__dict__", None)) is dict:
        return t.getattr(args[0], "__dict__")  # what the trace reads of it is a dependency
    return vars(*args) if args else dict(frame.f_locals)


def _dir(frame: Any, args: tuple[Any, ...], kwnames: Any) -> Any:
    return dir(*args) if args else sorted(frame.f_locals)


def _dynamic_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(frame: Any, args: tuple[Any, ...], kwnames: Any) -> Any:
        pos, kw = _kw(args, kwnames)
        if active_tracer() is not None:
            from .errors import UnsupportedError
            raise UnsupportedError(
                f"{fn.__name__}() inside a traced function: irad cannot see the operations of code "
                "compiled at run time",
                f"{frame.f_code.co_qualname} ({frame.f_code.co_filename}:{frame.f_lineno})",
                f"write the expression as ordinary code, or call {fn.__name__} outside the traced function")
        if len(pos) < 2 and "globals" not in kw:
            pos = (pos[0], frame.f_globals, frame.f_locals) if pos else pos
        return fn(*pos, **kw)
    return run


def _getframe(frame: Any, args: tuple[Any, ...], kwnames: Any) -> Any:
    depth = args[0] if args else 0
    f = frame
    for _ in range(depth):
        f = _user_frame(f.f_back)
        if f is None:
            raise ValueError("call stack is not deep enough")
    return f


FRAME_SENSITIVE: dict[int, tuple[Any, Callable[..., Any]]] = {
    id(f): (f, h) for f, h in [
        (super, _super), (locals, _locals), (globals, _globals), (vars, _vars), (dir, _dir),
        (eval, _dynamic_code(eval)), (exec, _dynamic_code(exec)), (sys._getframe, _getframe),
    ]
}


class paused:
    """``with paused():`` runs irad's own machinery (compiling a nested transform) untraced; the
    paused tracer is pushed on ``OUTER`` (of this thread/task only)."""

    def __enter__(self) -> None:
        self.prev, self.prev_outer = TRACER.get(), OUTER.get()
        if self.prev is not None:
            OUTER.set(self.prev_outer + (self.prev,))
        TRACER.set(None)

    def __exit__(self, *exc: Any) -> None:
        TRACER.set(self.prev)
        OUTER.set(self.prev_outer)
