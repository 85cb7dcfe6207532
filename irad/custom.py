"""User-defined derivatives and rematerialisation: ``custom_vjp``, ``custom_jvp``, ``checkpoint``.

Each one is an explicit rule of the registry (``irad.rules.registry``).  Inside irad's transforms
a call of ``f`` is recorded as one op, ``mymodule.f(%x, ...)``, which reverse mode turns into
``rule_fwd[mymodule.f]`` and ``pullback[mymodule.f]``: named functions of explicit state, like
every built-in rule (seed thread 000), so the passes can inline them, ONNX export writes them (the
op of the call itself has no ONNX form yet: ``__irad_primal__`` names its body) and an outer
transform differentiates them again.  Outside any trace the function just runs.

- ``custom_vjp(fun, nondiff_argnums)`` and ``f.defvjp(fwd, bwd)``: JAX's layout, ``fwd(*args) ->
  (out, residuals)`` and ``bwd(*nondiff_args, residuals, g) -> one cotangent per other argument``.
- ``custom_jvp(fun, nondiff_argnums)`` and ``f.defjvp(jvp)``: JAX's layout, ``jvp(*nondiff_args,
  primals, tangents) -> (out, tangent_out)``.  Forward mode uses it as ``Rule.jvp``; reverse mode
  its transpose: the tangent map ``t -> jvp(primals, t)[1]`` is linear in ``t``, so ``irad.vjp``
  of it with respect to the tangents, applied to ``ybar``, is the pullback.
- ``checkpoint(f)`` (``remat``): the state is the arguments; the pullback recomputes ``f`` in a
  compiled ``irad.vjp`` program instead of keeping its intermediate values.

The functions the rules call are the user's, read when the compiled program runs; what a rule
body may read from the world (its globals, its closure) is a dependency of the program that uses
it, so rebinding it retraces (see ``_body_deps``).
"""
from __future__ import annotations

import functools
import inspect
import types
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from .api import vjp
from .effects import is_impure_prim
from .errors import GradError, MutationError, TraceError, UnsupportedError
from .hooks import paused
from .ir import typeof
from .pytree import TreeDef, flatten, unflatten
from .rules.registry import defrule
from .signature import Assumptions, DictRef, Identity, call_key, function_dep, is_library_module
from .trace import trace_values

__all__ = ["checkpoint", "custom_jvp", "custom_vjp", "remat"]


# ---- small helpers --------------------------------------------------------------------------


def _site(fn: Any) -> str:
    """``qualname (file:line)`` of a user function, for messages."""
    f = getattr(fn, "__func__", fn)
    code = getattr(f, "__code__", None)
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or type(f).__name__
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code is not None else str(name)


def _where(tracer: Any) -> str:
    loc = tracer.loc()
    return loc.long if loc is not None else ""


def _named(fn: Callable[..., Any], like: Any, suffix: str) -> Callable[..., Any]:
    """``fn`` named after the user's function ``like`` (``log1pexp_vjp_fwd``), in its module: the
    lowered program and the IR read ``rule_fwd[mymodule.log1pexp]`` and ``log1pexp_vjp_fwd(...)``."""
    base = getattr(like, "__name__", None) or "f"
    fn.__name__ = base + suffix
    fn.__qualname__ = (getattr(like, "__qualname__", None) or base) + suffix
    fn.__module__ = getattr(like, "__module__", None) or __name__
    return fn


def _encode(t: TreeDef) -> Any:
    """A ``TreeDef`` as plain nested tuples (``None`` for a leaf): rule state must be plain data
    for the inline pass and ONNX export, which bake static state into the rule's body."""
    if t.kind == "leaf":
        return None
    return (t.kind, t.keys, tuple(_encode(c) for c in t.children))


def _decode(e: Any) -> TreeDef:
    if e is None:
        return TreeDef("leaf")
    kind, keys, kids = e
    return TreeDef(kind, keys, tuple(_decode(c) for c in kids))


def _box(out: Any) -> Any:
    """What the recorded op returns: ``out`` itself when it is one value, else ``(out,)`` (the
    tracer records a tuple result as one output per leaf, whatever containers are inside)."""
    return out if flatten(out)[1].kind == "leaf" else (out,)


def _unbox(r: Any) -> Any:
    return r[0] if type(r) is tuple else r


def _rule_output(out: Any) -> tuple[Any, Any]:
    """A rule forward's ``y`` (the leaf itself when the output has one leaf, as the recorded op
    binds it) and the encoded output structure its pullback rebuilds ``g`` with."""
    leaves, tree = flatten(out)
    if tree.kind == "leaf":
        return out, None
    return (leaves[0] if len(leaves) == 1 else out), _encode(tree)


def _cotangent_in(ybar: Any, enc: Any) -> Any:
    """The output cotangent in the output's structure (the transform hands one per leaf)."""
    return ybar if enc is None else unflatten(_decode(enc), list(ybar))


def _zero_tangent(x: Any) -> Any:
    if type(x) in (float, complex, int, bool):
        return type(x)(0)
    if isinstance(x, (np.ndarray, np.generic)):
        return np.zeros_like(x)
    return None


def _tree_zero(p: Any) -> Any:
    """A zero tangent of ``p``'s structure (JAX's symbolic zeros, materialised)."""
    leaves, t = flatten(p)
    return unflatten(t, [_zero_tangent(v) for v in leaves])


def _check_nondiff(nums: tuple[int, ...], n: int, what: str, fun: Any) -> None:
    if nums and nums[-1] >= n:
        raise TypeError(f"{what} {_site(fun)}: nondiff_argnums {nums} name argument {nums[-1]}, but it is called "
                        f"with {n} positional arguments")


def _positional(fun: Any, sig: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any],
                what: str) -> tuple[Any, ...]:
    """All arguments by position (defaults filled in), as JAX resolves them: the rule gives one
    cotangent per positional argument."""
    if sig is None:
        if kwargs:
            raise TypeError(f"{what} {_site(fun)}: keyword arguments need a function with a signature")
        return args
    try:
        ba = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{what} {_site(fun)}: {e}") from None
    ba.apply_defaults()
    if ba.kwargs:
        raise TypeError(f"{what} {_site(fun)}: keyword-only arguments ({', '.join(ba.kwargs)}) cannot be "
                        "resolved to positions; make them positional parameters")
    return tuple(ba.args)


def _signature(fun: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None


def _arg_name(sig: inspect.Signature | None, i: int) -> str:
    if sig is not None:
        params = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if i < len(params):
            return params[i].name
    return f"argument {i}"


def _nondiff(argnums: Sequence[int], what: str, fun: Any) -> tuple[int, ...]:
    nums = tuple(sorted(set(argnums)))
    if any(type(a) is not int or a < 0 for a in nums):
        raise TypeError(f"{what} {_site(fun)}: nondiff_argnums must be non-negative ints, got {tuple(argnums)}")
    return nums


def _captured(tracer: Any, fn: Any, depth: int = 0) -> str | None:
    """The name of a value the trace follows that ``fn`` holds (a closure cell, a partial's
    argument, a bound method's object): the compiled program would call ``fn`` with the value of
    the call that traced, not the current one."""
    if depth > 3:
        return None
    if isinstance(fn, functools.partial):
        if tracer.deep_tracked((fn.args, fn.keywords)):
            return "an argument of the functools.partial"
        return _captured(tracer, fn.func, depth + 1)
    if isinstance(fn, types.MethodType):
        if tracer.deep_tracked(fn.__self__):
            return f"the object its method {fn.__func__.__name__} is bound to"
        return _captured(tracer, fn.__func__, depth + 1)
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    if code is None:
        return None
    for name, cell in zip(code.co_freevars, cells):
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if tracer.deep_tracked(v):
            return str(name)
        if isinstance(v, (types.FunctionType, functools.partial, types.MethodType)):
            inner = _captured(tracer, v, depth + 1)
            if inner is not None:
                return f"{name} -> {inner}"
    return None


def _refuse_captured(tracer: Any, what: str, owner: Any, fns: Sequence[Any]) -> None:
    for fn in fns:
        name = _captured(tracer, fn)
        if name is not None:
            who = "it" if fn is owner else _site(fn)
            raise TraceError(f"{what} {_site(owner)}: {who} holds a value being traced ({name}, through a "
                             "closure); the compiled program would keep the value of the call that traced",
                             _where(tracer), "pass it as an argument instead (and define the function at module "
                             "level)")


def _body_deps(fns: Sequence[Any]) -> set[tuple[Any, ...]]:
    """What a rule's functions may read from the world: their code, the globals their code names
    and their closure cells, and the same for the user functions those hold (not libraries').

    NOTE: the inline pass traces a rule's body on sample values and bakes what it reads into the
    program (a global float becomes a constant); these dependencies make rebinding any of them
    retrace, as it does for code irad traces directly."""
    deps: set[tuple[Any, ...]] = set()
    seen: set[int] = set()
    todo = list(fns)
    while todo:
        fn = todo.pop()
        while isinstance(fn, functools.partial):
            fn = fn.func
        fn = getattr(fn, "__func__", fn)
        if type(fn) is not types.FunctionType or id(fn) in seen or is_library_module(fn.__module__ or ""):
            continue
        seen.add(id(fn))
        deps.add(function_dep(fn))
        g = fn.__globals__
        names: set[str] = set()
        stack = [fn.__code__]
        while stack:
            c = stack.pop()
            names.update(c.co_names)
            stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        for name in names:
            if name in g:
                v = g[name]
                deps.add(("global", DictRef(g), name, Identity(v)))
                if isinstance(v, (types.FunctionType, functools.partial)):
                    todo.append(v)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            deps.add(("cell", Identity(cell), name, Identity(v)))
            if isinstance(v, (types.FunctionType, functools.partial)):
                todo.append(v)
    return deps


def _record(tracer: Any, prim: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Record ``prim(*args)`` as one op of the trace (its rule applies to it) and return what user
    code sees.  ``prim`` runs untraced (paused), so that a function among the arguments is called
    as itself, not as an instrumented callback that would record its own ops."""
    for a in (*args, *kwargs.values()):
        if id(a) in tracer.world:  # a container of the world handed in: its items are a dependency
            tracer.read_world(a)
    with paused():
        r = prim(*args, **kwargs)
    return _unbox(tracer.record(prim, args, kwargs, r))


def _check_cotangent(c: Any, t: TreeDef, shapes: tuple[Any, ...], pos: int, path: str,
                     fail: Callable[[str, str, str], None]) -> int:
    """Walk the cotangent ``c`` against its argument's structure ``t`` (leaf shapes ``shapes``
    from position ``pos``); ``fail(path, got, wanted)`` on a mismatch.  ``None`` is a zero
    anywhere.  Returns the position after ``t``'s leaves."""
    if c is None:
        return pos + t.num_leaves
    if t.kind == "leaf":
        if not isinstance(c, (np.ndarray, np.generic, float, int, complex)) or isinstance(c, bool):
            fail(path, f"a {type(c).__name__}", f"shape {shapes[pos]}")
        elif np.shape(c) != shapes[pos]:
            fail(path, f"shape {np.shape(c)}", f"shape {shapes[pos]}")
        return pos + 1
    if t.kind == "none":
        return pos
    if isinstance(c, dict):
        kids = [c[k] for k in t.keys] if set(c) == set(t.keys) and t.kind in ("dict", "odict") else None
    elif isinstance(c, (tuple, list)) and t.kind not in ("dict", "odict"):
        kids = list(c) if len(c) == len(t.children) else None
    else:
        kids = None
    if kids is None:
        want = f"{len(t.children)} entries ({', '.join(map(repr, t.keys))})" if t.kind in ("dict", "odict") \
            else f"{len(t.children)} entries"
        fail(path, f"a {type(c).__name__} of {len(c) if hasattr(c, '__len__') else '?'} entries", want)
        return pos + t.num_leaves
    for k, kc, kt in zip(t.keys, kids, t.children):
        pos = _check_cotangent(kc, kt, shapes, pos, f"{path}[{k!r}]", fail)
    return pos


def _arg_meta(x: Any) -> tuple[Any, tuple[Any, ...]]:
    """An argument's structure and leaf shapes, to check its cotangent against (plain data)."""
    leaves, tree = flatten(x)
    return _encode(tree), tuple(np.shape(v) for v in leaves)


def _layout(x: Any, exact: bool = True) -> tuple[TreeDef, list[Any]]:
    """Structure and leaf types (``f64[3]``, ``float``): what the recorded op's outputs are; with
    ``exact=False`` leaf shapes only (a tangent may be a numpy scalar where the value is a float)."""
    leaves, tree = flatten(x)
    return tree, [typeof(v) if exact else np.shape(v) for v in leaves]


def _describe(layout: tuple[TreeDef, list[Any]]) -> str:
    tree, types_ = layout
    ts = ", ".join(map(str, types_))
    return ts if tree.kind == "leaf" else f"a {tree.kind if isinstance(tree.kind, str) else 'container'} of ({ts})"


def _same_output(tracer: Any, what: str, fun: Any, rule: Any, part: str, got: Any, want: Any,
                 exact: bool = True) -> None:
    """The primal output a rule returns must be laid out as the function's own (the program
    binds the op's outputs from the rule); a tangent output has its shapes."""
    a, b = _layout(got, exact), _layout(want, exact)
    if a != b:
        name = getattr(fun, "__name__", "f")
        fix = f"return {name}'s value there" if exact else \
            f"return a tangent with the structure and shapes of {name}'s output"
        raise GradError(f"{what} {_site(fun)}: the {part} its rule {_site(rule)} returns is {_describe(a)}, but "
                        f"{name} returns {_describe(b)} (at {_where(tracer)}); {fix}")


# ---- custom_vjp -----------------------------------------------------------------------------


class custom_vjp:
    """A function with a user-defined reverse rule, in JAX's layout::

        @irad.custom_vjp            # or functools.partial(irad.custom_vjp, nondiff_argnums=(0,))
        def f(x, y): ...
        def f_fwd(x, y): return f(x, y), residuals
        def f_bwd(residuals, g): return (x_bar, y_bar)      # None: a zero cotangent
        f.defvjp(f_fwd, f_bwd)

    Arguments at ``nondiff_argnums`` get no cotangent and come first in ``bwd``'s arguments
    (``bwd(*nondiff_args, residuals, g)``); they are static values (ints, strings, functions) or
    arrays that are not differentiated (differentiating one is a ``GradError``).  ``args``,
    ``out`` and the residuals may be tuples, lists and dicts; each cotangent has its argument's
    structure and leaf shapes (checked).  Keyword arguments are resolved to positions.
    """

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: Sequence[int] = ()) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff(nondiff_argnums, "custom_vjp", fun)
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        self._sig = _signature(fun)
        self._prim = _named(_primitive(fun), fun, "")
        self._deps: frozenset[tuple[Any, ...]] = frozenset()

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Define the rule: ``fwd(*args) -> (out, residuals)``, ``bwd(*nondiff_args, residuals,
        g) -> tuple`` with one cotangent per positional argument not in ``nondiff_argnums``."""
        self.fwd, self.bwd = fwd, bwd
        self._deps = frozenset(_body_deps((fwd, bwd)))
        fwd_rule, bwd_rule = self._rule_functions(fwd, bwd)
        defrule(self._prim, fwd_rule, bwd_rule)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fun(*args, **kwargs)

    def __irad_trace_call__(self, tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call inside an irad transform: one op whose rule is ``defvjp``'s."""
        if self.fwd is None or self.bwd is None:
            raise TraceError(f"custom_vjp function {_site(self.fun)} is called inside an irad transform, but its "
                             "rule was never defined", _where(tracer),
                             f"call {getattr(self.fun, '__name__', 'f')}.defvjp(fwd, bwd) after defining it")
        pos = _positional(self.fun, self._sig, args, kwargs, "custom_vjp function")
        _check_nondiff(self.nondiff_argnums, len(pos), "custom_vjp function", self.fun)
        _refuse_captured(tracer, "custom_vjp function", self.fun, (self.fun, self.fwd, self.bwd))
        if not tracer.deep_tracked(pos):
            return tracer.call(self.fun, pos, {})  # nothing traced flows in: its value is what fun computes
        tracer.deps.update(self._deps)
        out = _record(tracer, self._prim, pos, {})
        with paused():
            r = self.fwd(*pos)
        if type(r) is tuple and len(r) == 2:  # (else the rule's own check says so, with its line)
            _same_output(tracer, "custom_vjp function", self.fun, self.fwd, "output", r[0], out)
        return out

    def _rule_functions(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) \
            -> tuple[Callable[..., Any], Callable[..., Any]]:
        """The registry's explicit pair: ``state = (nondiff args, residuals, output structure,
        argument structures, number of arguments)``, all plain data or arrays."""
        fun, nondiff, sig = self.fun, self.nondiff_argnums, self._sig

        def fwd_rule(*args: Any) -> tuple[Any, Any]:
            r = fwd(*args)
            if type(r) is not tuple or len(r) != 2:
                raise GradError(f"custom_vjp function {_site(fun)}: its fwd {_site(fwd)} returned "
                                f"{type(r).__name__}, not a pair (out, residuals)")
            out, res = r
            y, enc = _rule_output(out)
            meta = tuple(_arg_meta(a) for i, a in enumerate(args) if i not in nondiff)
            return y, (tuple(args[i] for i in nondiff if i < len(args)), res, enc, meta, len(args))

        def bwd_rule(state: Any, ybar: Any) -> tuple[Any, ...]:
            nd_args, res, enc, meta, n = state
            cots = bwd(*nd_args, res, _cotangent_in(ybar, enc))
            diff = [i for i in range(n) if i not in nondiff]
            if not isinstance(cots, (tuple, list)) or len(cots) != len(diff):
                got = f"{len(cots)} cotangent{'s' * (len(cots) != 1)}" if isinstance(cots, (tuple, list)) \
                    else f"a {type(cots).__name__}"
                names = ", ".join(_arg_name(sig, i) for i in diff)
                raise GradError(f"custom_vjp function {_site(fun)}: its bwd {_site(bwd)} returned {got}, expected a "
                                f"tuple of {len(diff)}: one per positional argument not in nondiff_argnums "
                                f"({names}); use None for a zero cotangent")
            out: list[Any] = [NotImplemented] * n  # (a differentiated nondiff argument: a GradError)
            for i, c, (tenc, shapes) in zip(diff, cots, meta):
                def fail(path: str, got: str, want: str, i: int = i) -> None:
                    raise GradError(f"custom_vjp function {_site(fun)}: its bwd {_site(bwd)} returned a cotangent "
                                    f"of {got} for {_arg_name(sig, i)}{path}, which has {want}; return one of "
                                    "that structure and shape (None for a zero)")
                _check_cotangent(c, _decode(tenc), shapes, 0, "", fail)
                out[i] = c
            return tuple(out)

        return _named(fwd_rule, fun, "_vjp_fwd"), _named(bwd_rule, fun, "_vjp_pullback")


def _primitive(fun: Callable[..., Any]) -> Callable[..., Any]:
    """The op a custom function's call is recorded as (the rule is registered for it): ``fun``'s
    value, boxed as ``_box`` says.  ``__irad_primal__`` names the function it computes, for a
    backend that lowers the op to ``fun``'s body (as JAX lowers ``custom_vjp_call``)."""
    def primitive(*args: Any) -> Any:
        return _box(fun(*args))
    primitive.__irad_primal__ = fun  # type: ignore[attr-defined]
    return primitive


# ---- custom_jvp -----------------------------------------------------------------------------


class custom_jvp:
    """A function with a user-defined forward rule, in JAX's layout::

        @irad.custom_jvp
        def f(x): ...
        @f.defjvp
        def f_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return f(x), t * fprime(x)          # linear in the tangents

    With ``nondiff_argnums``, ``jvp(*nondiff_args, primals, tangents)`` gets only the other
    arguments in ``primals``/``tangents``.  Forward mode uses the rule itself; reverse mode (grad,
    vjp) transposes it: the tangent map is linear, so its ``irad.vjp`` with respect to the
    tangents (compiled once per signature and cached) is the pullback.  The tangent is computed
    at zero tangents, so a rule that is not linear in them gives the wrong pullback, as in JAX.
    """

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: Sequence[int] = ()) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff(nondiff_argnums, "custom_jvp", fun)
        self.jvp: Callable[..., Any] | None = None
        self._sig = _signature(fun)
        self._prim = _named(_primitive(fun), fun, "")
        self._deps: frozenset[tuple[Any, ...]] = frozenset()

    def defjvp(self, jvp: Callable[..., Any]) -> Callable[..., Any]:
        """Define the rule ``jvp(*nondiff_args, primals, tangents) -> (out, tangent_out)``; returns
        ``jvp`` (so it works as a decorator)."""
        self.jvp = jvp
        self._deps = frozenset(_body_deps((self.fun, jvp)))
        fwd_rule, bwd_rule, jvp_rule = self._rule_functions(jvp)
        defrule(self._prim, fwd_rule, bwd_rule, jvp=jvp_rule)
        return jvp

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fun(*args, **kwargs)

    def __irad_trace_call__(self, tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call inside an irad transform: one op whose rules come from ``defjvp``'s."""
        if self.jvp is None:
            raise TraceError(f"custom_jvp function {_site(self.fun)} is called inside an irad transform, but its "
                             "rule was never defined", _where(tracer),
                             f"call {getattr(self.fun, '__name__', 'f')}.defjvp(jvp) after defining it")
        pos = _positional(self.fun, self._sig, args, kwargs, "custom_jvp function")
        _check_nondiff(self.nondiff_argnums, len(pos), "custom_jvp function", self.fun)
        _refuse_captured(tracer, "custom_jvp function", self.fun, (self.fun, self.jvp))
        if not tracer.deep_tracked(pos):
            return tracer.call(self.fun, pos, {})
        tracer.deps.update(self._deps)
        out = _record(tracer, self._prim, pos, {})
        with paused():
            nondiff, primals, diff = self._split(pos)
            y, ydot = self._pair(self.jvp(*nondiff, primals, tuple(_tree_zero(p) for p in primals)))
        _same_output(tracer, "custom_jvp function", self.fun, self.jvp, "primal output", y, out)
        _same_output(tracer, "custom_jvp function", self.fun, self.jvp, "tangent output", ydot, out, exact=False)
        return out

    def _pair(self, r: Any) -> tuple[Any, Any]:
        if type(r) is not tuple or len(r) != 2:
            raise GradError(f"custom_jvp function {_site(self.fun)}: its jvp {_site(self.jvp)} returned "
                            f"{type(r).__name__}, not a pair (primal_out, tangent_out)")
        return r

    def _split(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...], list[int]]:
        """(nondiff args, primals, positions of the primals)."""
        nd = self.nondiff_argnums
        diff = [i for i in range(len(args)) if i not in nd]
        return tuple(args[i] for i in nd if i < len(args)), tuple(args[i] for i in diff), diff

    def _rule_functions(self, jvp: Callable[..., Any]) \
            -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
        fun, split, call, pair = self.fun, self._split, self, self._pair  # (the object: its calls are hooked)

        def tangent_map(tangents: tuple[Any, ...], primals: tuple[Any, ...], nondiff: tuple[Any, ...]) -> Any:
            return pair(jvp(*nondiff, primals, tangents))[1]

        tangent_map = _named(tangent_map, fun, "_tangent_map")

        def fwd_rule(*args: Any) -> tuple[Any, Any]:
            # NOTE: through the custom function, not ``fun``: traced (inlined, or under an outer
            # transform), the value is this rule's op again, so higher orders use the rule too
            y, enc = _rule_output(call(*args))
            return y, (args, enc)

        def bwd_rule(state: Any, ybar: Any) -> tuple[Any, ...]:
            args, enc = state
            nondiff, primals, diff = split(args)
            zeros = tuple(_tree_zero(p) for p in primals)
            # NOTE: the primals are keyword arguments: inputs of the program, not differentiated
            _, pb = vjp(tangent_map, zeros, primals=primals, nondiff=nondiff)
            try:
                tbar = pb(_cotangent_in(ybar, enc))[0]
            except GradError as e:
                raise GradError(f"custom_jvp function {_site(fun)}: the tangent its jvp {_site(jvp)} returns does "
                                f"not have the structure of its output ({e})") from None
            out: list[Any] = [NotImplemented] * len(args)
            for i, c in zip(diff, tbar if tbar is not None else (None,) * len(diff)):
                out[i] = c
            return tuple(out)

        def jvp_rule(tangents: Sequence[Any], *args: Any) -> tuple[Any, Any]:
            nondiff, primals, diff = split(args)
            for i in self.nondiff_argnums:
                if i < len(tangents) and tangents[i] is not None:
                    raise GradError(f"custom_jvp function {_site(fun)}: argument {_arg_name(self._sig, i)} is in "
                                    "nondiff_argnums, but it is being differentiated; take it out of "
                                    "nondiff_argnums (and give jvp its tangent)")
            ts = tuple(_tree_zero(p) if tangents[i] is None else tangents[i] for i, p in zip(diff, primals))
            return pair(jvp(*nondiff, primals, ts))

        return (_named(fwd_rule, fun, "_jvp_fwd"), _named(bwd_rule, fun, "_jvp_pullback"),
                _named(jvp_rule, fun, "_jvp"))


# ---- checkpoint -----------------------------------------------------------------------------


def checkpoint_call(fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The op a checkpointed call is recorded as: ``fun(*args)`` (boxed as ``_box`` says).  One
    rule serves every checkpointed function (``checkpoint(block)`` made afresh at each step of a
    loop registers nothing)."""
    return _box(fun(*args, **kwargs))


def _checkpoint_fwd(fun: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """Run ``fun``; keep only its arguments.

    NOTE: the state holds ``fun`` itself, an object no pass can bake into a body: the rule stays a
    call, so the recomputation in its pullback is never inlined next to the forward ops, where
    CSE would merge it away (JAX's ``prevent_cse``)."""
    y, enc = _rule_output(fun(*args, **kwargs))
    return y, (fun, args, kwargs, enc)


def _checkpoint_pullback(state: Any, ybar: Any) -> tuple[Any, ...]:
    """Recompute ``fun`` and pull ``ybar`` back through it, with ``irad.vjp``'s compiled programs
    (cached per function and signature; their own assumptions checked at each call)."""
    fun, args, kwargs, enc = state
    _, pb = vjp(fun, *args, **kwargs)
    return (None,) + tuple(pb(_cotangent_in(ybar, enc)))


class _Checked:
    """What one trace of a checkpointed function read from the world (checked at each use)."""

    __slots__ = ("assumptions",)

    def __init__(self, assumptions: Assumptions) -> None:
        self.assumptions = assumptions


class Checkpointed:
    """``checkpoint(fun)``: calls ``fun``; inside irad's transforms its intermediate values are
    recomputed in the backward pass instead of kept (see ``checkpoint``)."""

    #: per function, per call key: its trace's dependencies, so the call site of a 1,000-step loop
    #: traces the body once (weakly keyed: released with the function)
    checked: "weakref.WeakKeyDictionary[Any, dict[Any, _Checked]]" = weakref.WeakKeyDictionary()

    def __init__(self, fun: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fun(*args, **kwargs)

    def __irad_trace_call__(self, tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call inside an irad transform: one ``checkpoint_call(fun, ...)`` op; the program
        that uses it also depends on what ``fun`` reads from the world."""
        fun = self.fun
        _refuse_captured(tracer, "checkpoint of", fun, (fun,))
        if not tracer.deep_tracked((args, kwargs)):
            return tracer.call(fun, args, kwargs)
        tracer.deps.update(self._inner_deps(tracer, args, kwargs))
        return _record(tracer, checkpoint_call, (fun,) + args, kwargs)

    def _inner_deps(self, tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """Trace ``fun`` (once per call key while its world is unchanged): refuse what a
        recomputation cannot repeat, and return what it read from the world."""
        fun = self.fun
        key = call_key(args, kwargs)[0]
        try:
            per_key = self.checked.setdefault(fun, {})
        except TypeError:  # not weak-referenceable: checked at every call site
            per_key = {}
        hit = per_key.get(key)
        if hit is not None and hit.assumptions.check() is None:
            return hit.assumptions.deps
        with paused():
            g, inner, _ = trace_values(fun, args, kwargs)
        for op in g.ops:
            if is_impure_prim(op.prim):
                raise UnsupportedError(f"checkpoint of {_site(fun)}: it calls {op.prim} (at "
                                       f"{op.loc.long if op.loc else '?'}), which the recomputation in the backward "
                                       "pass would call again (drawing other random numbers)", _where(tracer),
                                       "draw the random values outside the checkpointed function and pass them in")
        if inner.mutated_inputs or inner.mutated_world:
            raise MutationError(f"checkpoint of {_site(fun)}: it updates an argument, or an array it reads from "
                                "globals, closures or attributes, in place; the recomputation would see the "
                                "updated values", _where(tracer), "work on a copy")
        checked = _Checked(Assumptions(tuple(inner.deps)))
        if len(per_key) >= 64:
            per_key.clear()
        per_key[key] = checked
        return checked.assumptions.deps


defrule(checkpoint_call, _checkpoint_fwd, _checkpoint_pullback)


def checkpoint(fun: Callable[..., Any]) -> Checkpointed:
    """Rematerialisation (JAX's ``jax.checkpoint``): inside ``grad``, ``vjp`` and the other reverse
    transforms, ``checkpoint(f)(*args)`` keeps only ``args`` for the backward pass and recomputes
    ``f``'s intermediate values there, with a compiled ``irad.vjp`` program of ``f``: less memory,
    one more forward run of ``f``.  Outside a transform it is ``f``.

    ``f`` must not draw random numbers or update its arguments in place (the recomputation would
    differ), nor read traced values through its closure (pass them as arguments).  Checkpoint the
    same function object each time (a module-level ``block``, not a new lambda per call), so that
    its program is compiled once."""
    if isinstance(fun, Checkpointed):
        return fun
    return Checkpointed(fun)


def _checkpoint_traced(tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Checkpointed:
    """``checkpoint(block)`` written inside a traced function (at every step of a loop): made
    untraced, it only wraps the function."""
    return checkpoint(*args, **kwargs)


checkpoint.__irad_trace_call__ = _checkpoint_traced  # type: ignore[attr-defined]
remat = checkpoint
