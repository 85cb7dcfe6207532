"""Ordinary differential equations inside a traced function, differentiated by the adjoint method.

``scipy.integrate.odeint(lambda y, t: -p[0] * y, y0, ts)`` runs Fortran code that calls the
user's vector field ``f``.  irad does not trace that code.  The tracer (``odeint_call``,
``solve_ivp_call``) traces ``f`` once at ``(y0, t0)`` with both the state and the time as fresh
inputs, into a graph of ``(y, t, *θ)`` (θ: the values of the enclosing trace ``f`` reads:
closures, ``args=``, arrays of the world).  That graph becomes two irad programs, the vector
field (what the solver calls at run time) and its vector-Jacobian product, and the enclosing
trace gets one op, ``odeint_solution(problem, y0, t, *θ)`` (``ivp_solution`` for solve_ivp).

Its pullback is the adjoint method (as HIPS autograd's ``odeint``, and the neural-ODE papers):
between consecutive output times, backwards, the augmented system

    y' = f(y, t),   λ' = -(∂f/∂y)ᵀ λ,   θ̄' = -(∂f/∂θ)ᵀ λ

is solved by the same integrator, with ``y`` restarted from the stored forward value at each
output time and ``ȳᵢ`` added to ``λ`` there.  The output times get ``t̄ᵢ = ȳᵢ · f(yᵢ, tᵢ)``, the
start ``t̄₀ = -λ(t₀) · f(y₀, t₀)``, the initial state ``ȳ₀ = λ(t₀)``.

A branch of ``f`` (``if t < 0.5``) is a guard of its program: traced at the start, it holds for
the branch taken there.  A guard that fails at the start of a later call (a branch on θ) makes the
enclosing program trace again; one that fails during the integration (the branch depends on the
state or the time) is an UnsupportedError, never a wrong answer.  A field that jumps as data
(``np.where(y > c, ...)``, or on the time at a point that moves with θ) is a NoRuleError: the
adjoint equation has no term for the crossing, so its gradient would be silently wrong.
"""
from __future__ import annotations

import inspect
import operator
from typing import Any, Callable

import numpy as np

from . import hooks
from .errors import GuardError, NoRuleError, UnsupportedError
from .ir import Const, Graph, Var, is_differentiable, typeof
from .lower import lower
from .quadrature import _bind, _from_inputs, _steps, first_reaching
from .rules import registry
from .rules.registry import defrule
from .solvers import _derivative, _trace_at

#: the loosest tolerance of the adjoint solve (odeint's default): the user's rtol/atol when tighter
_ADJOINT_TOL = 1.49012e-8
#: solve_ivp's methods irad traces through when the output grid is the solver's own (t_eval=None)
_TRACEABLE_METHODS = frozenset({"RK23", "RK45", "DOP853"})
#: odeint options that also suit the backward (augmented) system
_ODEINT_BACK = ("mxstep", "hmax", "mxordn", "mxords")


class OdeProblem:
    """``y' = field(y, t, *θ)`` from ``y(t₀) = y₀``, solved at fixed output times by ``odeint``
    (``kind="odeint"``: the first output time is ``t₀``) or ``solve_ivp`` (``kind="solve_ivp"``:
    ``t₀ = t_span[0]``, outputs at ``t_eval``).  ``vjp(y, t, *θ, c)`` is the field's
    vector-Jacobian product ``(f, cᵀ∂f/∂y, cᵀ∂f/∂t, cᵀ∂f/∂θ...)``; the problem holds programs and
    plain options only, never a traced value."""

    __slots__ = ("kind", "options", "back_options", "field", "vjp", "float_theta", "with_jac", "guards")

    def __init__(self, kind: str, options: dict[str, Any], back_options: dict[str, Any],
                 field: Callable[..., Any], vjp: Callable[..., Any], float_theta: tuple[bool, ...],
                 with_jac: bool) -> None:
        self.kind, self.options, self.back_options = kind, options, back_options
        self.field, self.vjp, self.float_theta, self.with_jac = field, vjp, float_theta, with_jac
        self.guards: tuple[str, ...] = getattr(field, "__irad_guards__", ())

    @property
    def name(self) -> str:
        return f"scipy.integrate.{self.kind}"

    def __repr__(self) -> str:
        return f"<{self.kind} problem>"

    # ---- guards ----------------------------------------------------------------------------

    def _branch_error(self, e: GuardError, y: Any, t: Any, theta: tuple[Any, ...]) -> UnsupportedError:
        """A guard of the vector field failed during the integration: the branch it took at the
        start depends on the state or the time.  Named by the field's guard, whichever program raised."""
        k = e.args[0] if e.args and isinstance(e.args[0], int) else None
        try:
            self.field(y, np.float64(t), *theta)
        except GuardError as g:
            k = g.args[0] if g.args and isinstance(g.args[0], int) else k
        where = self.guards[k] if k is not None and k < len(self.guards) else ""
        return UnsupportedError(
            f"{self.name}: the vector field takes a branch that depends on the state or the time (traced at "
            f"the start, another branch is taken at t = {float(t)!r})", where,
            "irad traces the vector field once; write the branch as data (np.where(t < 0.5, a, b)), so both "
            "sides are part of it, or split the integration at the switching time")

    def _checked(self, fn: Callable[..., Any], theta: tuple[Any, ...]) -> Callable[..., Any]:
        """``fn(y, t)`` for the solver, a failed guard turned into ``_branch_error``."""
        def checked(y: Any, t: Any) -> Any:
            try:
                return fn(y, np.float64(t))
            except GuardError as e:
                raise self._branch_error(e, y, t, theta) from None
        return checked

    # ---- forward -----------------------------------------------------------------------------

    def jacobian(self, y: np.ndarray, t: float, theta: tuple[Any, ...]) -> np.ndarray:
        """``∂f/∂y`` row by row from the vjp program: irad's exact Jacobian for the implicit methods
        when the user gave one (``Dfun=``, ``jac=``), which may read traced values."""
        eye = np.eye(y.size)
        return np.stack([np.ravel(self.vjp(y, t, *theta, eye[i])[1]) for i in range(y.size)])

    def solve(self, y0: np.ndarray, t_span: Any, times: np.ndarray, theta: tuple[Any, ...],
              full: bool = False) -> tuple[np.ndarray, Any]:
        """The solution at ``times`` as a ``(len(times), n)`` array, and what the solver returned
        besides (odeint's infodict with ``full``, solve_ivp's OdeResult)."""
        from scipy.integrate import odeint, solve_ivp
        y0 = np.asarray(y0, dtype=np.float64)
        t0 = float(times[0] if self.kind == "odeint" else t_span[0])
        try:  # a branch on θ (or on y₀, t₀) that changed since the trace: the enclosing program traces again
            self.field(y0, np.float64(t0), *theta)
        except GuardError:
            raise GuardError(f"{self.name}: the vector field takes another branch at the start") from None
        field = self.field
        rhs = self._checked(lambda y, t: field(y, t, *theta)[0], theta)
        jac = self._checked(lambda y, t: self.jacobian(y, t, theta), theta) if self.with_jac else None
        opts = dict(self.options)
        if self.kind == "odeint":
            out = odeint(rhs, y0, times, Dfun=jac, full_output=full, **opts)
            return (out[0], out[1]) if full else (out, None)
        if jac is not None:
            opts["jac"] = lambda t, y: jac(y, t)
        res = solve_ivp(lambda t, y: rhs(y, t), (float(t_span[0]), float(t_span[1])), y0, t_eval=times, **opts)
        if res.status < 0 or res.y.shape[1] != len(times):
            raise NoRuleError(f"{self.name} stopped before the last t_eval point ({res.message}); irad's adjoint "
                              "rule needs the solution at every t_eval point: loosen the tolerances, raise the "
                              "step limits or shorten t_eval")
        return res.y.T, res

    # ---- backward ----------------------------------------------------------------------------

    def _integrate(self, aug: Callable[..., Any], s0: np.ndarray, t_from: float, t_to: float) -> np.ndarray:
        """The augmented state at ``t_to`` from ``s0`` at ``t_from``, by the forward's integrator."""
        from scipy.integrate import odeint, solve_ivp
        rtol, atol = self.back_options["rtol"], self.back_options["atol"]
        if self.kind == "odeint":
            extra = {k: self.back_options[k] for k in _ODEINT_BACK if k in self.back_options}
            at_to: np.ndarray = odeint(aug, s0, np.array([t_from, t_to]), rtol=rtol, atol=atol, **extra)[1]
            return at_to
        extra = {"max_step": self.back_options["max_step"]} if "max_step" in self.back_options else {}
        # (t_eval: under a trace of this pullback, grad of grad, the adjoint rule applies to it too)
        res = solve_ivp(lambda t, s: aug(s, t), (t_from, t_to), s0, method=self.back_options["method"],
                        t_eval=np.array([t_to]), rtol=rtol, atol=atol, **extra)
        if res.status < 0:
            raise NoRuleError(f"{self.name}: the adjoint solve from t = {t_from!r} to {t_to!r} failed "
                              f"({res.message}); tighten or loosen the tolerances, or shorten the interval")
        last: np.ndarray = res.y[:, -1]
        return last

    def adjoint(self, y0: np.ndarray, t0: float, times: np.ndarray, ys: np.ndarray, theta: tuple[Any, ...],
                ybar: np.ndarray) -> tuple[np.ndarray, float, np.ndarray, list[Any]]:
        """``(ȳ₀, t̄₀, t̄ (per output time), θ̄ (per θ, None where not a float))`` for the cotangent
        ``ybar`` of the ``(len(times), n)`` solution ``ys``."""
        n = ys.shape[1]
        sizes = [int(np.size(th)) if f else 0 for th, f in zip(theta, self.float_theta)]
        vjp, field = self.vjp, self.field

        def aug(s: np.ndarray, t: float) -> np.ndarray:
            y, lam = s[:n], s[n:2 * n]
            try:
                out = vjp(y, np.float64(t), *theta, -lam)  # (f, -λᵀ∂f/∂y, -λᵀ∂f/∂t, -λᵀ∂f/∂θ...)
            except GuardError as e:
                raise self._branch_error(e, y, t, theta) from None
            parts = [np.ravel(out[0]), np.ravel(out[1])]
            parts += [np.ravel(g) for g, f in zip(out[3:], self.float_theta) if f]
            return np.concatenate(parts).astype(np.float64)

        lam = np.zeros(n)
        thbar = np.zeros(sum(sizes))
        tbars = []
        for i in range(len(times) - 1, -1, -1):
            ti = float(times[i])
            lam = lam + ybar[i]
            tbars.append(float(np.dot(ybar[i], field(ys[i], np.float64(ti), *theta)[0])))
            t_prev = float(times[i - 1]) if i else t0
            if t_prev != ti:
                s = self._integrate(aug, np.concatenate([ys[i], lam, thbar]), ti, t_prev)
                lam, thbar = s[n:2 * n], s[2 * n:]
        t0bar = -float(np.dot(lam, field(y0, np.float64(t0), *theta)[0]))
        gtheta: list[Any] = []
        k = 0
        for th, size in zip(theta, sizes):
            if not size:
                gtheta.append(None)
                continue
            g = thbar[k:k + size]
            k += size
            gtheta.append(g[0] if np.ndim(th) == 0 and not isinstance(th, np.ndarray) else g.reshape(np.shape(th)))
        return lam, t0bar, np.array(tbars[::-1]), gtheta


# ---- the ops and their rules ------------------------------------------------------------------

def odeint_solution(problem: OdeProblem, y0: Any, t: Any, *theta: Any) -> np.ndarray:
    """odeint's solution, ``(len(t), n)``, at these values of the initial state, the times and
    what the vector field reads."""
    return problem.solve(y0, None, np.asarray(t, dtype=np.float64), theta)[0]


def _odeint_fwd(problem: OdeProblem, y0: Any, t: Any, *theta: Any) -> tuple[np.ndarray, Any]:
    times = np.asarray(t, dtype=np.float64)
    ys = problem.solve(y0, None, times, theta)[0]
    return ys, (problem, np.asarray(y0, dtype=np.float64), times, ys, theta)


def _odeint_bwd(state: Any, ybar: Any) -> tuple[Any, ...]:
    problem, y0, times, ys, theta = state
    y0bar, t0bar, tbar, gtheta = problem.adjoint(y0, float(times[0]), times, ys, theta, np.asarray(ybar))
    tbar = np.concatenate([tbar[:1] + t0bar, tbar[1:]])  # t[0] is the output time and the start
    return (None, y0bar, tbar) + tuple(gtheta)


defrule(odeint_solution, _odeint_fwd, _odeint_bwd)


def ivp_solution(problem: OdeProblem, y0: Any, t_span: Any, t_eval: Any, *theta: Any) -> np.ndarray:
    """solve_ivp's ``y``, ``(n, len(t_eval))``, at these values of the initial state, the span,
    the output times and what the vector field reads."""
    return problem.solve(y0, t_span, np.asarray(t_eval, dtype=np.float64), theta)[0].T.copy()


def _ivp_fwd(problem: OdeProblem, y0: Any, t_span: Any, t_eval: Any, *theta: Any) -> tuple[np.ndarray, Any]:
    times = np.asarray(t_eval, dtype=np.float64)
    ys = problem.solve(y0, t_span, times, theta)[0]
    return ys.T.copy(), (problem, np.asarray(y0, dtype=np.float64), float(t_span[0]), times, ys, theta)


def _ivp_bwd(state: Any, ybar: Any) -> tuple[Any, ...]:
    problem, y0, t0, times, ys, theta = state
    y0bar, t0bar, tbar, gtheta = problem.adjoint(y0, t0, times, ys, theta, np.asarray(ybar).T)
    # the end of the span does not move the solution at t_eval: its cotangent is zero
    return (None, y0bar, np.array([t0bar, 0.0]), tbar) + tuple(gtheta)


defrule(ivp_solution, _ivp_fwd, _ivp_bwd)


# ---- the tracer's handlers ----------------------------------------------------------------------

def _float_vector(tracer: Any, x: Any) -> Any:
    """``x`` as a 1-d float64 array: traced when it carries traced values, else a constant of irad's."""
    if tracer.deep_tracked(x):
        a = tracer.call(np.asarray, (x,), {"dtype": np.float64})
        return a if np.ndim(a) == 1 else tracer.call(np.ravel, (a,), {})
    a = np.array(x, dtype=np.float64).ravel()
    tracer.born.add(id(a))
    return a


def _traced_options(tracer: Any, name: str, options: dict[str, Any], skip: tuple[str, ...]) -> dict[str, Any]:
    """Options as plain values: a traced number is guarded (a new value traces again), an array of
    the world (a global ``ATOL``) taken as it is now; an array computed from traced values cannot
    be either (refused).  Options change how accurately the solution is computed, not what it is."""
    out = {}
    for k, v in options.items():
        if k not in skip and tracer.deep_tracked(v):
            var = tracer.vars.get(id(v))
            if np.ndim(v) == 0:
                tracer.guard_value(v)
                v = float(v)
            elif var is None or var.id >= 0:
                raise NoRuleError(f"{name}: the option {k}= is an array computed from traced values; irad's adjoint "
                                  "rule takes solver options as constants: pass a constant array")
            else:
                v = np.array(v)
        out[k] = v
    return out


def _rate(tracer: Any, r: Any, y: np.ndarray) -> Any:
    """The traced vector field's value as an ``(n,)`` float64 array, as the solver makes it."""
    r = tracer.call(np.asarray, (r,), {"dtype": np.float64}) if tracer.deep_tracked(r) else \
        np.asarray(r, dtype=np.float64)
    if np.shape(r) != y.shape:
        r = tracer.call(np.reshape, (r, y.shape), {}) if tracer.is_tracked(r) else np.reshape(r, y.shape)
    return r


def _active(tracer: Any, ops: list[Any], r: Any) -> bool:
    """Whether ``r`` depends differentiably on what ``ops`` read (ad.reverse's forward activity):
    else the vjp program would take no cotangent."""
    v = tracer.vars.get(id(r))
    if v is None:
        return False
    defined = {o.id for op in ops for o in op.outs}
    active = {a.id for op in ops for a in op.inputs if a.id not in defined and is_differentiable(a.type)}
    for op in ops:
        if op.outs and not registry.is_nondiff(op.fn) and any(a.id in active for a in op.inputs):
            active.update(o.id for o in op.outs if is_differentiable(o.type))
    return v.id in active


def _emit(tracer: Any, fn: Callable[..., Any], problem: OdeProblem, args: tuple[Any, ...], graph: Graph,
          value: np.ndarray) -> np.ndarray:
    """Record ``value = fn(problem, *args, *θ)`` in the enclosing trace; the array user code gets."""
    yv = tracer.new_var(value, "solution")
    tracer.emit(fn, (Const(problem, typeof(problem)),) + tuple(tracer.atom(a) for a in args) +
                tuple(graph.inputs[2:]), {}, (yv,))
    tracer.track(value, yv)
    return value


def _field_graph(tracer: Any, name: str, call: Callable[..., Any], y0: Any, t0: float) -> Graph:
    """The vector field traced at ``(y₀, t₀)``, both fresh inputs, into a graph of ``(y, t, *θ)``.
    ``t`` is a float64 scalar, so that ``t < 0.5`` is data (``np.where`` of it stays a branch-free
    field) and only ``if t < 0.5`` guards."""
    def traced(y: np.ndarray, t: Any) -> Any:
        n0 = len(tracer.ops)
        r = _rate(tracer, call(y, t), y)
        if not _active(tracer, tracer.ops[n0:], r):  # a field of constants: y' = c still flows y₀ and t
            r = tracer.call(operator.add, (r, tracer.call(operator.mul, (y, 0.0), {})), {})
        return r
    graph = _trace_at(tracer, None, np.array(y0, dtype=np.float64), (), "vector_field", more=(np.float64(t0),),
                      call=traced, what=f"{name}: the vector field")
    assert graph is not None  # the field's value depends on y
    return graph


def _jump(graph: Graph, moving: tuple[bool, ...]) -> str | None:
    """Where the vector field jumps (a bool or an int made from floats, a step function: ``np.where(y
    > c, ...)``, ``np.floor``) on the state, or on the time at a point that moves with a parameter,
    the jump reaching its value; None when there is none.  The adjoint equation has no term for the
    crossing of such a jump (the saltation of the sensitivities), so the gradient would be wrong.
    A jump in the time alone, at a fixed time, is harmless: the sensitivities do not jump there."""
    y_id, t_id = graph.inputs[0].id, graph.inputs[1].id
    on_y, on_t = {y_id}, {t_id}
    on_theta = {v.id for v, m in zip(graph.inputs[2:], moving) if m}
    candidates = []
    for op in graph.ops:
        ins = op.inputs
        dy, dt, dth = (any(v.id in s for v in ins) for s in (on_y, on_t, on_theta))
        for flag, s in ((dy, on_y), (dt, on_t), (dth, on_theta)):
            if flag:
                s.update(o.id for o in op.outs)
        if op.outs and (dy or (dt and dth)) and _steps(op):
            candidates.append(op)
    return first_reaching(graph, candidates)


def _checked_field(tracer: Any, name: str, graph: Graph) -> tuple[bool, ...]:
    """Which θ get a cotangent (floats that the function's inputs reach: an array of the world is
    no parameter, and would only grow the adjoint system); a field that jumps is refused."""
    float_theta = tuple(bool(v.type.is_float) and _from_inputs(tracer, v) for v in graph.inputs[2:])
    jump = _jump(graph, float_theta)
    if jump is not None:
        raise NoRuleError(f"{name}: the vector field jumps where the state (or the time, at a point that moves with a "
                          f"traced value) crosses a threshold ({jump}); the adjoint equation has no term for such a "
                          "crossing, so the gradient would be wrong. Write a continuous field (np.maximum, np.abs, "
                          "np.clip, a smooth step such as np.tanh), or integrate each piece with its own solver call "
                          "from the crossing found by scipy.optimize.brentq")
    return float_theta


def _native(tracer: Any, f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call of constants: SciPy's own result, a constant of the trace."""
    with hooks.paused():
        r = f(*args, **kwargs)
    tracer.born.add(id(r))
    return r


def _back_options(rtol: Any, atol: Any, default_rtol: float, default_atol: float, n: int,
                  theta: tuple[Any, ...], float_theta: tuple[bool, ...]) -> dict[str, Any]:
    """The adjoint solve's tolerances: the user's, or ``_ADJOINT_TOL`` where looser; ``atol`` for
    the augmented state ``(y, λ, θ̄)``, the user's per-component values for ``y``."""
    atol = np.asarray(default_atol if atol is None else atol, dtype=np.float64)
    p = sum(int(np.size(th)) for th, f in zip(theta, float_theta) if f)
    return {"rtol": min(float(np.min(default_rtol if rtol is None else rtol)), _ADJOINT_TOL),
            "atol": np.concatenate([np.minimum(np.broadcast_to(atol, (n,)), _ADJOINT_TOL),
                                    np.full(n + p, min(float(np.min(atol)), _ADJOINT_TOL))])}


def odeint_call(tracer: Any, f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``odeint(func, y0, t, args=..., ...)`` under a trace: the adjoint rule of ``odeint_solution``;
    with ``full_output`` the infodict is the plain data of the traced call.  A call of constants is
    SciPy's own result; NotImplemented when the call does not bind (SciPy then says why)."""
    a = _bind(f, args, kwargs)
    if a is None or not callable(a["func"]):
        return NotImplemented
    func, extra, tfirst = a["func"], a["args"], bool(a["tfirst"])
    if type(extra) is not tuple:
        return NotImplemented  # SciPy's "Extra arguments must be in a tuple"
    y0, t = _float_vector(tracer, a["y0"]), _float_vector(tracer, a["t"])
    if len(t) == 0:
        return NotImplemented

    def call(y: Any, tt: Any) -> Any:
        return tracer.call(func, ((tt, y) if tfirst else (y, tt)) + extra, {})
    graph = _field_graph(tracer, "scipy.integrate.odeint", call, y0, float(t[0]))
    if not graph.inputs[2:] and not tracer.is_tracked(y0) and not tracer.is_tracked(t):
        return _native(tracer, f, args, kwargs)  # a field of constants from a constant start
    skip = ("func", "y0", "t", "args", "Dfun", "col_deriv", "full_output", "tfirst")
    options = _traced_options(tracer, "scipy.integrate.odeint", {k: v for k, v in a.items() if k not in skip}, ())
    theta = tuple(tracer.values[v.id] for v in graph.inputs[2:])
    float_theta = _checked_field(tracer, "scipy.integrate.odeint", graph)
    back = {**_back_options(options.get("rtol"), options.get("atol"), _ADJOINT_TOL, _ADJOINT_TOL, y0.size, theta,
                            float_theta), **{k: options[k] for k in _ODEINT_BACK if options.get(k)}}
    vjp = _derivative(tracer, graph, "input")
    assert vjp is not None  # y is float64
    problem = OdeProblem("odeint", options, back, lower(graph, "vector_field").fn, vjp, float_theta,
                         a["Dfun"] is not None)
    full = bool(a["full_output"])
    with hooks.paused():
        ys, info = problem.solve(np.array(y0), None, np.array(t), theta, full=full)
    y = _emit(tracer, odeint_solution, problem, (y0, t), graph, ys)
    return (y, info) if full else y


def solve_ivp_call(tracer: Any, f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``solve_ivp(fun, t_span, y0, t_eval=..., ...)`` under a trace: with ``t_eval`` the adjoint rule
    of ``ivp_solution`` for every method, the result's ``y`` traced.  Without it the output grid is
    the solver's own adaptive choice: the explicit Runge-Kutta methods are traced through
    (NotImplemented), the others refused.  Events and dense output are refused when the solution
    depends on traced values; a call of constants is SciPy's own result."""
    a = _bind(f, args, kwargs)
    if a is None or not callable(a["fun"]):
        return NotImplemented
    fun, method, t_eval, options = a["fun"], a["method"], a["t_eval"], dict(a["options"])
    traceable = method in _TRACEABLE_METHODS if isinstance(method, str) else _is_runge_kutta(method)
    if t_eval is None and traceable and a["events"] is None and not a["dense_output"]:
        return NotImplemented  # SciPy's Python Runge-Kutta code, traced: the derivative of what it computes
    if np.iscomplexobj(a["y0"]) or np.ndim(a["y0"]) != 1 or tracer.deep_tracked(method):
        return NotImplemented
    if a["args"] is not None and type(a["args"]) not in (tuple, list):
        return NotImplemented  # solve_ivp unpacks it (traced, on the ordinary path), or says what is wrong
    extra = tuple(a["args"]) if a["args"] is not None else ()
    y0, t_span = _float_vector(tracer, a["y0"]), _float_vector(tracer, a["t_span"])
    vectorized = bool(a["vectorized"])

    def call(y: Any, tt: Any) -> Any:
        if vectorized:  # SciPy calls a vectorized fun with (n, 1) states: so does the trace
            r = tracer.call(fun, (tt, tracer.call(np.reshape, (y, (-1, 1)), {})) + extra, {})
            return tracer.call(np.ravel, (r,), {}) if tracer.is_tracked(r) else np.ravel(r)
        return tracer.call(fun, (tt, y) + extra, {})
    graph = _field_graph(tracer, "scipy.integrate.solve_ivp", call, y0, float(t_span[0]))
    if not graph.inputs[2:] and not tracer.deep_tracked((a["y0"], a["t_span"], t_eval)):
        return _native(tracer, f, args, kwargs)  # a field of constants from a constant start
    name = "scipy.integrate.solve_ivp"
    if a["events"] is not None:
        raise NoRuleError(f"{name} with events: the event times depend on traced values, and irad's adjoint rule "
                          "covers fixed output times only; find the event with scipy.optimize.brentq on the "
                          "solution (irad differentiates the root), or integrate to a fixed time")
    if a["dense_output"]:
        raise NoRuleError(f"{name} with dense_output=True: the interpolant SciPy returns is not traced, so "
                          "its values would carry no gradient; pass the times you need as t_eval instead")
    if t_eval is None:
        raise NoRuleError(f"{name}(method={_method_name(method)!r}) without t_eval: the output times are the "
                          "solver's own adaptive choice, and this method runs code irad cannot trace (LSODA's "
                          "Fortran, the LU factorisations of BDF and Radau); pass t_eval (the times you need), "
                          "so that irad's adjoint rule applies, or use RK45, RK23 or DOP853")
    t_ev = _float_vector(tracer, t_eval)
    options = _traced_options(tracer, name, options, ("jac",))
    with_jac = options.pop("jac", None) is not None
    theta = tuple(tracer.values[v.id] for v in graph.inputs[2:])
    float_theta = _checked_field(tracer, name, graph)
    back = {**_back_options(options.get("rtol"), options.get("atol"), 1e-3, 1e-6, y0.size, theta, float_theta),
            "method": method}
    if options.get("max_step") is not None:
        back["max_step"] = options["max_step"]
    vjp = _derivative(tracer, graph, "input")
    assert vjp is not None
    problem = OdeProblem("solve_ivp", {**options, "method": method}, back, lower(graph, "vector_field").fn, vjp,
                         float_theta, with_jac)
    with hooks.paused():
        ys, res = problem.solve(np.array(y0), np.array(t_span), np.array(t_ev), theta)
    res.y = _emit(tracer, ivp_solution, problem, (y0, t_span, t_ev), graph, ys.T.copy())
    res.t = t_ev
    return res


def _is_runge_kutta(method: Any) -> bool:
    from scipy.integrate import RK23, RK45, DOP853
    return inspect.isclass(method) and issubclass(method, (RK23, RK45, DOP853))


def _method_name(method: Any) -> str:
    return method if isinstance(method, str) else getattr(method, "__name__", "?")
