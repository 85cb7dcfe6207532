"""Integrals inside a traced function, differentiated by the Leibniz rule.

``scipy.integrate.quad(g, a, b)`` runs C code that calls the user's integrand ``g``.  Its value
``I(θ, a, b) = ∫_a^b g(x, θ) dx`` depends on the traced values ``θ`` that ``g`` reads and on the
limits: ``dI/dθ = ∫_a^b ∂g/∂θ dx``, ``dI/db = g(b, θ)``, ``dI/da = -g(a, θ)``.  The tracer
(``quad_call``, ``quad_vec_call``) traces ``g`` once, at a point inside the interval, with ``x``
as a fresh input: that subgraph becomes two irad programs of ``(x, *θ)``, the integrand (what
the integrator calls at run time) and its vector-Jacobian product (what the pullback integrates).
The graph gets one op, ``integral(problem, a, b, points, *θ) -> (value, abserr)``: the error
estimate is an output too, so later calls return their own (its cotangent is ignored).

The pullback integrates ``∂g/∂θ`` at the call's tolerances (one ``quad`` per component of θ,
sharing their nodes, or one ``quad_vec`` for many) and evaluates the integrand program at the
traced limits.  It is plain Python on irad programs, so a transform of it (``grad(grad(f))``)
traces its integrals through the same rule.  ``nquad`` (and ``dblquad``, ``tplquad``) become
nested ``quad`` ops (``nquad_call``).

A Python branch in ``g`` is a guard of the traced program.  When the integrator calls it where
the guard fails, the program is run again at the trace point: if that fails too, the branch
depends on θ and the ``GuardError`` goes up, so the enclosing program is traced again; if not,
``g`` branches on ``x`` itself and the call raises ``UnsupportedError`` (never a wrong number).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, cast

import numpy as np

from . import hooks
from .errors import GuardError, IradError, NoRuleError, UnsupportedError
from .ir import GUARD_PRIMS, Const, Graph, OpaqueT, Var, typeof
from .lower import lower
from .rules.registry import defrule
from .solvers import _derivative, callback_effect, refuse_effects

#: quad's weights whose weight function is known in closed form at the limits (``wvar`` = ω)
_TRIG_WEIGHTS = {"cos": np.cos, "sin": np.sin}
#: quad's keyword options kept by the problem (the integrand, limits and ``args`` are inputs)
_QUAD_OPTIONS = ("epsabs", "epsrel", "limit", "weight", "wvar", "wopts", "maxp1", "limlst")
#: up to this many θ components the pullback of quad integrates each with quad, beyond with one quad_vec
_PER_COMPONENT = 16
_QUAD_VEC_OPTIONS = ("epsabs", "epsrel", "norm", "cache_size", "limit", "quadrature")


class IntegralProblem:
    """``∫_a^b g(x, *θ) dx`` by ``scipy.integrate.quad`` (a float integrand) or ``quad_vec`` (an
    array one), with the options of the traced call.  ``integrand(x, *θ)`` and ``vjp(x, *θ, c)``
    are irad programs; ``x0`` is where ``g`` was traced; ``float_theta[i]``: whether θ_i gets a
    cotangent; ``limit_terms``: whether ``a`` / ``b`` do (traced float limits)."""

    __slots__ = ("name", "options", "integrand", "vjp", "x0", "float_theta", "limit_terms", "guards")

    def __init__(self, name: str, options: dict[str, Any], integrand: Callable[..., Any],
                 vjp: Callable[..., Any], x0: float, float_theta: tuple[bool, ...],
                 limit_terms: tuple[bool, bool]) -> None:
        self.name, self.options, self.integrand, self.vjp = name, options, integrand, vjp
        self.x0, self.float_theta, self.limit_terms = x0, float_theta, limit_terms
        self.guards: tuple[str, ...] = getattr(integrand, "__irad_guards__", ())

    def __repr__(self) -> str:
        return f"<{self.name} problem>"

    # ---- running the traced programs ---------------------------------------------------------

    def run(self, program: Callable[..., Any], x: Any, *rest: Any) -> Any:
        """``program(x, *rest)``; a failed guard becomes the error that says which branch failed."""
        try:
            return program(x, *rest)
        except GuardError:
            raise self._branch_error(x, rest[:len(self.float_theta)]) from None

    def _branch_error(self, x: Any, theta: tuple[Any, ...]) -> IradError:
        where = "?"
        try:
            self.integrand(x, *theta)
        except GuardError as e:
            k = e.args[0] if e.args else None
            where = self.guards[k] if isinstance(k, int) and k < len(self.guards) else str(e)
        try:
            self.integrand(np.float64(self.x0), *theta)
        except GuardError:  # the branch depends on θ: the enclosing program is traced again
            return GuardError(f"scipy.integrate.{self.name}: the integrand takes another branch than when it was "
                              f"traced, at {where}")
        return UnsupportedError(
            f"scipy.integrate.{self.name}: the integrand branches on the integration variable (a Python `if` "
            f"on it): it takes another branch at x = {float(x)!r} than at x = "
            f"{self.x0!r}, where irad traced it", where,
            "write the branch as data (np.where(x < c, g1, g2)), or split the integral at the branch "
            "point into one quad call per piece")

    def value_at(self, x: Any, theta: tuple[Any, ...]) -> Any:
        """The integrand at ``x`` (as its program returns it)."""
        return self.run(self.integrand, x, *theta)[0]

    # ---- the integrals -----------------------------------------------------------------------

    def integrate(self, a: Any, b: Any, points: Any, theta: tuple[Any, ...]) -> tuple[Any, float]:
        """The integral and SciPy's estimate of its absolute error."""
        import scipy.integrate as si
        if self.name == "quad":
            found = si.quad(lambda x: float(self.value_at(_f64(x), theta)), a, b, points=points, **self.options)
            return float(found[0]), float(found[1])
        found = si.quad_vec(lambda x: self.value_at(_f64(x), theta), a, b, points=points, **self.options)
        return found[0], float(found[1])

    def theta_cotangents(self, a: Any, b: Any, points: Any, theta: tuple[Any, ...], vbar: Any) -> list[Any]:
        """``∫_a^b ∂g/∂θ_i · v̄ dx`` for each float θ_i (None for the others), over the flattened
        cotangents: for quad, one quad per component with the forward call's options (each with its
        own error control, in SciPy's C loop) when they are few or weighted, else one ``quad_vec``."""
        import scipy.integrate as si
        wanted = [i for i, f in enumerate(self.float_theta) if f]
        if not wanted:
            return [None] * len(theta)
        scalar = self.name == "quad"
        c = 1.0 if scalar else vbar  # a float integral: integrate ∂g/∂θ, then scale by v̄

        def flat(x: Any) -> Any:
            d = self.run(self.vjp, _f64(x), *theta, c)
            return np.concatenate([np.ravel(d[2 + i]) for i in wanted])

        opts = self.options
        n = sum(int(np.size(theta[i])) for i in wanted)
        if scalar and (n <= _PER_COMPONENT or "weight" in opts):
            # NOTE: the quads of a smooth integrand share their nodes: each x runs the program once
            # (a trace of this pullback, at order 2, traces through the cache)
            at = functools.lru_cache(maxsize=None)(flat)
            total = np.array([si.quad(lambda x, k=k: at(x)[k], a, b, points=points, **opts)[0] for k in range(n)])
        else:
            tol = {"epsabs": opts.get("epsabs", 1.49e-8), "epsrel": opts.get("epsrel", 1.49e-8)}
            if not scalar:
                tol.update({k: opts[k] for k in ("norm", "quadrature") if opts.get(k) is not None})
            total = si.quad_vec(flat, a, b, points=points, **tol)[0]
        if scalar:
            total = total * vbar
        out: list[Any] = [None] * len(theta)
        start = 0
        for i in wanted:
            size = int(np.size(theta[i]))
            out[i] = np.reshape(total[start:start + size], np.shape(theta[i]))
            start += size
        return out

    def limit_cotangent(self, x: Any, theta: tuple[Any, ...], vbar: Any) -> Any:
        """``v̄ · g(x) w(x)``: the integral's derivative in its upper limit ``x`` (zero at an infinite
        one, where a convergent integral's integrand vanishes)."""
        if not np.isfinite(x):
            return 0.0
        gx = self.value_at(x, theta)
        weight = self.options.get("weight") if self.name == "quad" else None
        if weight is not None:
            gx = gx * _TRIG_WEIGHTS[weight](self.options["wvar"] * x)
        return np.sum(vbar * gx)


def _f64(x: Any) -> Any:
    """The integration variable as the integrand was traced with it (SciPy passes Python floats)."""
    return x if type(x) is np.float64 else np.float64(x)


def integral(problem: IntegralProblem, a: Any, b: Any, points: Any, *theta: Any) -> tuple[Any, float]:
    """``(∫_a^b g(x, *θ) dx, abserr)`` for ``problem``'s integrand at these values of what it reads."""
    return problem.integrate(a, b, points, theta)


def _fwd(problem: IntegralProblem, a: Any, b: Any, points: Any, *theta: Any) -> tuple[Any, Any]:
    y = integral(problem, a, b, points, *theta)
    return y, (problem, a, b, points, theta)


def _bwd(state: Any, ybar: Any) -> tuple[Any, ...]:
    problem, a, b, points, theta = state
    vbar = ybar[0]  # the error estimate is not differentiable: its cotangent is dropped
    abar = -problem.limit_cotangent(a, theta, vbar) if problem.limit_terms[0] else None
    bbar = problem.limit_cotangent(b, theta, vbar) if problem.limit_terms[1] else None
    return (None, abar, bbar, None) + tuple(problem.theta_cotangents(a, b, points, theta, vbar))


defrule(integral, _fwd, _bwd)


# ---- tracing a call ---------------------------------------------------------------------------

def _trace_integrand(tracer: Any, g: Callable[..., Any], x0: float, extra: tuple[Any, ...],
                     name: str) -> Graph:
    """``g(x0, *extra)`` traced with ``x0`` as a fresh input: the graph of ``(x, *θ)``, θ being the
    values of the enclosing trace it reads.  Unlike ``solvers._trace_at`` it always gives a graph:
    an integrand constant in ``x`` (or returning a θ itself) still has an integral that depends
    on the limits.  Its ops are taken out of the enclosing trace."""
    x = np.float64(x0)  # NOTE: a numpy scalar, so that `x < c` is data (np.where), not a guard
    x_var = tracer.new_var(x, "x")
    tracer.track(x, x_var)
    before, n_attr = dict(tracer.vars), len(tracer.attr_writes)
    n0 = len(tracer.ops)
    r = tracer.call(g, (x,) + extra, {})
    out = tracer.atom(r)
    sub = tuple(tracer.ops[n0:])
    del tracer.ops[n0:]
    if not isinstance(out, (Var, Const)):
        raise UnsupportedError(f"scipy.integrate.{name}: the integrand returned a {type(r).__name__}", "",
                               "return a float (quad) or an array (quad_vec)")
    defined = {x_var.id} | {o.id for op in sub for o in op.outs}
    # NOTE: the integrand runs once here and many times in the integrator: an effect cannot follow,
    # and a value it leaves behind (its Var defined in the subgraph only) would be the trace point's
    # (a later use of one is refused when the graph is built: Tracer.confine)
    tracer.confine(sub, (x_var,), f"scipy.integrate.{name}: the integrand")
    refuse_effects(tracer, f"scipy.integrate.{name}: the integrand", callback_effect(tracer, before, n_attr, defined))
    theta: list[Var] = []
    for v in [v for op in sub for v in op.inputs] + ([out] if isinstance(out, Var) else []):
        if v.id not in defined and all(v.id != w.id for w in theta):
            theta.append(v)
    return Graph("integrand", (x_var,) + tuple(theta), sub, (out,), None, None, ())


def _reads_traced(tracer: Any, g: Callable[..., Any], x0: float, extra: tuple[Any, ...]) -> bool:
    """Whether ``g(x0, *extra)``, with ``x0`` a constant, computes on traced values: it returns one,
    or records ops before a construct irad cannot trace (as ``trace._CallbackProbe`` decides for
    other C code's callbacks); its ops are dropped."""
    n0 = len(tracer.ops)
    try:
        return cast(bool, tracer.deep_tracked(tracer.call(g, (np.float64(x0),) + extra, {})))
    except IradError:
        return len(tracer.ops) > n0
    finally:
        del tracer.ops[n0:]


def _moving_jump(graph: Graph, float_theta: tuple[bool, ...]) -> str | None:
    """Where the integrand is discontinuous at a point that moves with θ: an op that makes a bool or
    an int (a comparison, a truth test, argmax) or a step (floor, sign, mod) from values that depend
    on both ``x`` and a float θ that the function's inputs reach (a world array is no parameter),
    and whose result reaches the integrand's value or a guard.  None when there is none."""
    x_id = graph.inputs[0].id
    moving = {v.id for v, f in zip(graph.inputs[1:], float_theta) if f}
    on_x, on_theta = {x_id}, set(moving)
    candidates = []
    for op in graph.ops:
        ins = op.inputs
        dx, dt = any(v.id in on_x for v in ins), any(v.id in on_theta for v in ins)
        if dx:
            on_x.update(o.id for o in op.outs)
        if dt:
            on_theta.update(o.id for o in op.outs)
        if dx and dt and op.outs and _steps(op):
            candidates.append(op)
    return first_reaching(graph, candidates, {v.id for op in graph.ops if op.prim in GUARD_PRIMS for v in op.inputs})


def first_reaching(graph: Graph, candidates: list[Any], sinks: frozenset[int] | set[int] = frozenset()) -> str | None:
    """Where the first of ``candidates`` (ops of ``graph``) is whose result reaches the graph's
    outputs (or ``sinks``, var ids), for an error message; None when none does."""
    if not candidates:
        return None
    useful = {o.id for o in graph.outputs if isinstance(o, Var)} | set(sinks)
    for op in reversed(graph.ops):
        if any(o.id in useful for o in op.outs):
            useful.update(v.id for v in op.inputs)
    for op in candidates:
        if any(o.id in useful for o in op.outs):
            return f"{op.prim} at {op.loc.long if op.loc else '?'}"
    return None


def _steps(op: Any) -> bool:
    """Whether ``op``'s result is piecewise constant in its inputs: a bool or an int made from them,
    or a float step function; not a test that flips only at infinities and NaN."""
    from .rules import registry
    try:
        key = registry.impl_key(op.fn) if op.fn is not None else None
        if key in _non_finite_tests():
            return False
        if key in _float_jumps():
            return True
    except TypeError:  # an unhashable implementation: judged by its result
        pass
    return all(not o.type.is_float and not isinstance(o.type, OpaqueT) for o in op.outs)


def _float_jumps() -> frozenset[Any]:
    """Functions with float results that jump (their rules give zero or a one-sided derivative)."""
    import math
    import operator
    return frozenset({np.floor, np.ceil, np.round, np.around, np.rint, np.fix, np.trunc, np.sign, np.heaviside,
                      np.mod, np.remainder, np.fmod, np.floor_divide, operator.mod, operator.floordiv,
                      math.floor, math.ceil, math.fmod, math.trunc, round})


def _non_finite_tests() -> frozenset[Any]:
    """Bool-valued tests that flip only at infinities and NaN, never at a point inside a finite
    interval (the pullback's own ``np.isfinite(b)`` of a limit is one)."""
    import math
    return frozenset({np.isfinite, np.isinf, np.isnan, np.isposinf, np.isneginf, math.isfinite, math.isinf,
                      math.isnan})


def _from_inputs(tracer: Any, v: Var) -> bool:
    """Whether ``v`` depends on an input of the trace (an argument, or the variable of an enclosing
    integrand), as opposed to arrays of the world only."""
    producers = {o.id: op for op in tracer.ops for o in op.outs}
    live = getattr(tracer, "_live", {})
    stack, seen = [v], set()
    while stack:
        u = stack.pop()
        if u.id in seen:
            continue
        seen.add(u.id)
        op = producers.get(u.id)
        if op is None:
            if u.id not in live:
                return True
        else:
            stack.extend(op.inputs)
    return False


def _trace_point(a: float, b: float, points: Any) -> float:
    """Where the integrand is traced: the interval's middle (away from the given break points,
    which mark singularities), or one unit inside a half-infinite interval."""
    fa, fb = bool(np.isfinite(a)), bool(np.isfinite(b))
    if fa and fb:
        x = a + 0.5 * (b - a)
        if points is not None and any(float(p) == x for p in np.ravel(points)):
            x = a + 0.3819660112501051 * (b - a)
        return float(x)
    step = 1.0 if b > a else -1.0
    return float(a + step) if fa else float(b - step) if fb else 0.0


def _refuse(name: str, option: str, why: str, instead: str) -> NoRuleError:
    return NoRuleError(f"scipy.integrate.{name} with {option}: the integral depends on traced values (what the "
                       f"integrand reads, or the limits), and irad's Leibniz rule {why}; {instead}")


def _is_native(func: Any) -> bool:
    """A compiled integrand (LowLevelCallable, ctypes): irad cannot trace it."""
    import ctypes

    from scipy import LowLevelCallable
    return isinstance(func, (LowLevelCallable, ctypes._CFuncPtr))  # type: ignore[attr-defined]  # private in typeshed


def _bind(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None  # let the call raise SciPy's own error
    bound.apply_defaults()
    return dict(bound.arguments)


def _integral_call(tracer: Any, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                   name: str, func: Any, p: dict[str, Any], options: dict[str, Any]) -> Any:
    """The common part of ``quad_call`` / ``quad_vec_call``: trace, decide, emit."""
    a, b, points = p["a"], p["b"], p["points"]
    extra = p["args"] if isinstance(p["args"], tuple) else (p["args"],)
    try:
        x0 = _trace_point(float(a), float(b), points)
    except (TypeError, ValueError):
        return NotImplemented  # limits SciPy refuses: its own error
    try:
        graph = _trace_integrand(tracer, func, x0, extra, name)
    except IradError:  # what irad refuses of a traced x (eval, an unruled C function, a write of x)
        if not tracer.deep_tracked((a, b, extra, options)) and not _reads_traced(tracer, func, x0, extra):
            with hooks.paused():  # an integrand irad cannot trace, of constants only: as without irad
                return fn(*args, **kwargs)
        raise
    theta = graph.inputs[1:]
    a_atom, b_atom = tracer.atom(a), tracer.atom(b)
    traced_limits = (isinstance(a_atom, Var), isinstance(b_atom, Var))
    traced_option = next((k for k, v in options.items() if tracer.deep_tracked(v)), None)
    if not theta and not any(traced_limits) and traced_option is None:
        with hooks.paused():  # nothing traced reaches the integral: a constant, computed natively
            return fn(*args, **kwargs)
    if p.get("full_output"):
        raise _refuse(name, "full_output", "gives the value and abserr only",
                      "drop full_output (inspect the subdivision with a call outside the differentiated function)")
    if p.get("complex_func"):
        raise _refuse(name, "complex_func=True", "covers real integrands",
                      "integrate the real and imaginary parts with two quad calls (np.real / np.imag of the integrand)")
    if traced_option is not None:
        raise _refuse(name, f"a traced {traced_option}", "keeps the options of the traced call",
                      "write the weight into the integrand (np.cos(w * x) * g(x)) to differentiate with respect "
                      "to it" if traced_option == "wvar" else f"pass {traced_option} as a constant")
    weight = options.get("weight")
    if weight is not None and weight not in _TRIG_WEIGHTS and any(traced_limits):
        raise _refuse(name, f"weight={weight!r} and a traced limit",
                      "knows the weight function at the limits for weight='cos' and 'sin' only",
                      "keep the limits constant, or write the weight into the integrand")
    # NOTE: θ no input reaches (the world's arrays) gets no cotangent: the pullback does not integrate
    # its derivative, which may not even converge (a constant array of an irad program, at order 2)
    float_theta = tuple(bool(v.type.is_float) and _from_inputs(tracer, v) for v in theta)
    jump = _moving_jump(graph, float_theta)
    if jump is not None:
        raise NoRuleError(f"scipy.integrate.{name}: the integrand jumps where the integration variable meets a traced "
                          f"value ({jump}), so the jump moves with that value, which adds a term to the derivative "
                          "that the Leibniz rule (the integral of the integrand's derivative) does not see; integrate "
                          "each piece with its own quad call and its own formula, the traced break point as their "
                          "common limit (the limits' terms then carry the jump)")
    low_vjp = _derivative(tracer, graph, "input")
    if low_vjp is None:
        return NotImplemented
    limit_terms = (traced_limits[0] and bool(a_atom.type.is_float), traced_limits[1] and bool(b_atom.type.is_float))
    problem = IntegralProblem(name, options, lower(graph, "integrand").fn, low_vjp, x0,
                              float_theta, limit_terms)
    with hooks.paused():
        value, err = problem.integrate(a, b, points, tuple(tracer.values[v.id] for v in theta))
    value = value.copy() if isinstance(value, np.ndarray) else value * 1.0
    err = err * 1.0
    yv, ev = tracer.new_var(value, "integral"), tracer.new_var(err, "abserr")
    tracer.emit(integral, (Const(problem, typeof(problem)), a_atom, b_atom, tracer.atom(points)) + tuple(theta), {},
                (yv, ev), unpack=True)
    tracer.track(value, yv)
    tracer.track(err, ev)
    return value, err


def quad_call(tracer: Any, quad: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``quad(g, a, b, args=..., ...)`` under a trace: ``(value, abserr)``, both traced outputs of
    one ``integral`` op (NotImplemented for a compiled integrand: the call goes the ordinary way)."""
    p = _bind(quad, args, kwargs)
    if p is None or not callable(p["func"]) or _is_native(p["func"]):
        return NotImplemented
    options = {k: p[k] for k in _QUAD_OPTIONS if p[k] is not None}
    return _integral_call(tracer, quad, args, kwargs, "quad", p["func"], p, options)


def quad_vec_call(tracer: Any, quad_vec: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``quad_vec(f, a, b, ...)`` under a trace (an array-valued integrand), as ``quad_call``.
    ``workers`` is dropped: the traced integrand runs in this process (the result is the same)."""
    p = _bind(quad_vec, args, kwargs)
    if p is None or not callable(p["f"]) or _is_native(p["f"]):
        return NotImplemented
    options = {k: p[k] for k in _QUAD_VEC_OPTIONS if p[k] is not None}
    return _integral_call(tracer, quad_vec, args, kwargs, "quad_vec", p["f"], p, options)


# ---- nquad (and dblquad, tplquad, which call it) ----------------------------------------------

class _NestedQuad:
    """SciPy's ``nquad`` recursion (``scipy.integrate._quadpack_py._NQuad``) as nested ``quad``
    calls, so that each becomes an ``integral`` op.  SciPy keeps a running maximum of every inner
    call's error estimate on the object, a state across the integrator's calls that a traced
    program cannot hold (nor leak out of the integrand's subgraph): the error returned here is
    the outermost quad's."""

    def __init__(self, func: Callable[..., Any], ranges: list[Any], opts: list[Any]) -> None:
        self.func, self.ranges, self.opts = func, ranges, opts

    def integrate(self, *args: Any, depth: int = 0) -> Any:
        import scipy.integrate as si
        ind = -(depth + 1)
        low, high = self.ranges[ind](*args)
        opt = dict(self.opts[ind](*args))
        if "points" in opt:
            opt["points"] = [x for x in opt["points"] if low <= x <= high]
        f = self.func if depth + 1 == len(self.ranges) else functools.partial(self.integrate, depth=depth + 1)
        found = si.quad(f, low, high, args=args, **opt)
        return (found[0], found[1]) if depth == 0 else found[0]


def _constant(value: Any) -> Callable[..., Any]:
    return lambda *_: value


def nquad_call(tracer: Any, nquad: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``nquad(func, ranges, args=..., opts=...)`` under a trace: nested quad ops (NotImplemented
    with full_output: SciPy's own recursion runs, and quad refuses it if traced values are read)."""
    p = _bind(nquad, args, kwargs)
    if p is None or p["full_output"] or not callable(p["func"]):
        return NotImplemented
    ranges = [r if callable(r) else _constant(r) for r in p["ranges"]]
    opts = p["opts"] if p["opts"] is not None else {}
    opts = [_constant(opts)] * len(ranges) if isinstance(opts, dict) else \
        [o if callable(o) else _constant(o) for o in opts]
    extra = tuple(p["args"]) if p["args"] is not None else ()
    found = tracer.call(_NestedQuad(p["func"], ranges, opts).integrate, extra, {})
    if not tracer.deep_tracked(found):
        with hooks.paused():  # nothing traced reaches it: SciPy's own result, its error estimate too
            return nquad(*args, **kwargs)
    return found
