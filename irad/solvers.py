"""SciPy's root finders and ``minimize`` inside a traced function, differentiated by the implicit
function theorem (``quadrature.py`` and ``odes.py`` build on the helpers here).

``scipy.optimize.brentq(lambda t: t**3 - a, 0, 5)`` runs C code that calls the user's residual
``g``.  Its root ``t*(θ)`` depends on the traced values ``θ`` that ``g`` reads, through
``g(t*(θ), θ) = 0``: ``dt*/dθ = -(∂g/∂θ) / (∂g/∂t)``; for a system ``θ̄ = -(∂g/∂θ)ᵀ λ`` with
``Jᵀ λ = x̄``; for a minimiser the same on ``∇ₓf = 0`` with the Hessian (the free block, with
bounds).  The handler solves natively, then traces ``g`` once at the solution with the unknown
as a fresh input (``_trace_at``): that subgraph becomes irad programs of ``(x, *θ)``, the residual
(what the solver calls at run time) and its derivative (what the pullback uses).  The graph gets
one op, ``implicit_root(problem, start, *θ)`` (``implicit_vector_root``, ``implicit_argmin``),
which solves again at each call, and refuses a solve that does not converge.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

from . import ad, hooks
from .errors import GuardError, NoRuleError, UnsupportedError
from .ir import GUARD_PRIMS, Const, Graph, Var, typeof
from .lower import lower
from .rules.registry import defrule

class RootProblem:
    """A scalar root of ``residual(t, *θ) = 0`` found by a SciPy solver from a ``start`` (a bracket
    ``(a, b)`` or ``(x0,)``), which is an input of the op: a bracket computed from traced values
    is the one the solver gets at each call (the root does not move with it, so no gradient)."""

    __slots__ = ("solver", "options", "residual", "gradient", "name")

    def __init__(self, solver: Callable[..., Any], options: dict[str, Any],
                 residual: Callable[..., Any], gradient: Callable[..., Any]) -> None:
        self.solver, self.options = solver, options
        self.residual, self.gradient = residual, gradient
        self.name = getattr(solver, "__name__", "solver")

    def solve(self, start: tuple[Any, ...], *theta: Any) -> float:
        options = {**self.options, "full_output": True}  # (to see whether it converged)
        if options.get("fprime") is True:  # newton's method: the derivative is irad's gradient program
            options["fprime"] = lambda t: float(self.gradient(t, *theta)[1])
        root, results = self.solver(lambda t: float(self.residual(t, *theta)[0]), *start, **options)
        if not results.converged:
            raise unconverged(self.name, str(results.flag))
        return float(root)

    def __repr__(self) -> str:
        return f"root of a residual by scipy.optimize.{self.name}"


def implicit_root(problem: RootProblem, start: tuple[Any, ...], *theta: Any) -> float:
    """The root of ``problem`` from ``start`` at these values of what its residual reads."""
    return problem.solve(start, *theta)


def _fwd(problem: RootProblem, start: tuple[Any, ...], *theta: Any) -> tuple[float, Any]:
    t = implicit_root(problem, start, *theta)
    return t, (problem, t, theta)


def _bwd(state: Any, tbar: Any) -> tuple[Any, ...]:
    problem, t, theta = state
    _, gt, *gtheta = problem.gradient(t, *theta)
    if gt == 0:
        raise NoRuleError(f"scipy.optimize.{problem.name}: the residual's derivative is zero at the root "
                          f"t = {t!r}, so the root does not depend smoothly on what the residual reads")
    return (None, None) + tuple(-tbar * g / gt for g in gtheta)


defrule(implicit_root, _fwd, _bwd)


class TracedResult(dict[str, Any]):
    """A SciPy result (``OptimizeResult``) inside a traced function: ``x`` and ``fun`` are traced;
    ``success``, ``status`` and ``message`` are the traced call's (a compiled program refuses a
    later solve that does not converge, so they say how it ended, not whether it is usable); the
    other fields (``jac``, ``hess_inv``, ``nit``, ...) would be the first call's numbers at every
    later call, so reading one is an UnsupportedError."""

    def __init__(self, found: Any, x: Any, fun: Any) -> None:
        super().__init__(x=x, fun=fun, success=bool(getattr(found, "success", True)),
                         status=getattr(found, "status", 0), message=getattr(found, "message", ""))
        self._stale = tuple(k for k in found if k not in self)

    def __getattr__(self, name: str) -> Any:
        if name in self:
            return self[name]
        if name in self.__dict__.get("_stale", ()):
            raise UnsupportedError(f"the {name!r} of a SciPy result inside a differentiated function (it would be "
                                   "the first call's at every later call)", "",
                                   "compute it outside the function, or from x with irad (irad.grad, irad.vjp)")
        raise AttributeError(name)

    def __getitem__(self, key: Any) -> Any:
        if key not in self and key in self.__dict__.get("_stale", ()):
            return self.__getattr__(key)
        return super().__getitem__(key)


def unconverged(name: str, why: str) -> NoRuleError:
    """A solve that did not converge: the implicit-function rule differentiates the solution, and
    this is not one (raised when tracing and by the compiled program alike)."""
    return NoRuleError(f"scipy.optimize.{name} did not converge ({why}); irad differentiates a solution by the "
                       "implicit function theorem, and this is not one: give the solver more iterations or a "
                       "better start")


def minimize_failed(found: Any) -> str | None:
    """Why ``minimize`` stopped short of a minimiser (out of iterations or evaluations, not finite),
    or None: "precision loss" and the like end at a minimiser to within rounding."""
    msg = str(getattr(found, "message", ""))
    if not np.all(np.isfinite(found.x)):
        return "the result is not finite"
    if not found.success and (getattr(found, "status", 0) == 1 or "maxim" in msg.lower() or "limit" in msg.lower()):
        return msg
    return None


def solver_args(args: Any) -> tuple[Any, ...]:
    """The extra arguments a SciPy solver hands its callback: ``args`` itself when a tuple, else
    ``(args,)`` (SciPy wraps a single value, an array or a list, as one argument)."""
    return args if isinstance(args, tuple) else (args,)


def _trace_at(tracer: Any, g: Callable[..., Any] | None, solution: Any, extra: tuple[Any, ...], name: str,
              more: tuple[Any, ...] = (), call: Callable[..., Any] | None = None, what: str = "") -> Graph | None:
    """``g(solution, *extra)`` traced with the solution as a fresh input: the graph of ``(x, *θ)``,
    θ being the values of the enclosing trace it reads, or None when it reads none.  Its ops are
    taken out of the enclosing trace: only the op the caller emits stands for them there.
    ``more``: further fresh inputs after ``x`` (an ODE's time: the graph is of ``(x, *more, *θ)``);
    ``call(x, *more)``: how to call ``g`` traced, when not with ``(x, *more, *extra)``; ``what``:
    the callback, for messages.  The callback runs once here and many times in the solver: an
    effect it has is refused (``callback_effect``), and so is a later use of a value it kept
    (``Tracer.confine``)."""
    what = what or f"the {name.replace('_', ' ')} handed to SciPy"
    fresh = (solution,) + tuple(more)
    x_vars = tuple(tracer.new_var(v, "x") for v in fresh)
    for v, var in zip(fresh, x_vars):
        tracer.track(v, var)
    before, n_attr = dict(tracer.vars), len(tracer.attr_writes)
    n0 = len(tracer.ops)
    r = tracer.call(g, fresh + extra, {}) if call is None else call(*fresh)
    sub = tracer.ops[n0:]
    del tracer.ops[n0:]
    if not tracer.is_tracked(r) or not sub:
        return None
    defined = {v.id for v in x_vars} | {o.id for op in sub for o in op.outs}
    refuse_effects(tracer, what, callback_effect(tracer, before, n_attr, defined))
    tracer.confine(sub, x_vars, what)
    theta: list[Var] = []
    for op in sub:
        for v in op.inputs:
            if v.id not in defined and all(v.id != w.id for w in theta):
                theta.append(v)
    return Graph(name, x_vars + tuple(theta), tuple(sub), (tracer.atom(r),), None, None, ())


def callback_effect(tracer: Any, before: dict[int, Any], n_attr: int, defined: set[int]) -> str | None:
    """What a callback's trace did besides computing its value (``before``: the tracer's ``vars``
    before it ran, ``n_attr``: its count of attribute writes, ``defined``: the Vars it made): it set
    an attribute or updated an array in place.  The program would do that once, at the trace
    point, where the solver calls the callback many times."""
    if len(tracer.attr_writes) != n_attr:
        return "sets an attribute"
    world = {id(c.value) for c in getattr(tracer, "_live", {}).values()}
    if any(tracer.vars.get(k) is not v for k, v in before.items()) or \
            any(k in world and v.id in defined for k, v in tracer.vars.items()):
        return "updates an array in place"
    return None


def refuse_effects(tracer: Any, what: str, effect: str | None) -> None:
    if effect is not None:
        loc = tracer.loc()
        raise UnsupportedError(f"{what} {effect}, but irad traces it once and SciPy calls it many times",
                               loc.long if loc else "", "make it a pure function of its arguments and what it "
                               "reads, and compute what else you need outside the call")


def _hoist_guards(tracer: Any, graph: Graph, what: str) -> None:
    """The decisions the function traced at the solution made: a guard on the unknown (``if t > 1``
    in a residual) would hold at the solution only, and the solver evaluates elsewhere, so it is a
    NoRuleError; a guard on what the function reads alone is put back into the enclosing trace
    (with the ops it needs), where it guards the whole program as any branch does."""
    on_x = {v.id for v in graph.inputs[:1]}
    for op in graph.ops:
        if any(v.id in on_x for v in op.inputs):
            on_x.update(o.id for o in op.outs)
    guards = [op for op in graph.ops if op.prim in GUARD_PRIMS]
    for op in guards:
        if any(v.id in on_x for v in op.inputs):
            raise NoRuleError(f"{what}: the function it solves branches on the unknown at "
                              f"{op.loc.long if op.loc else '?'}; irad traces it once at the solution and "
                              "the solver evaluates it elsewhere, where the other branch may run; write the "
                              "branch with np.where (both sides are then traced)")
    needed = {v.id for op in guards for v in op.inputs}
    keep = []
    for op in reversed(graph.ops):
        if op.prim in GUARD_PRIMS or any(o.id in needed for o in op.outs):
            needed.update(v.id for v in op.inputs)
            keep.append(op)
    tracer.ops.extend(reversed(keep))
    tracer.unconfine(keep)


def _derivative(tracer: Any, graph: Graph, seed: str) -> Callable[..., tuple[Any, ...]] | None:
    """The lowered reverse-mode program of ``graph`` (``seed="one"``: its gradient; ``"input"``:
    its vector-Jacobian product, the cotangent last), returning ``(value, d/dx, d/dθ...)`` with
    zeros for non-float θ; None when ``x`` itself is not a float."""
    from . import passes
    wrt = [i for i, v in enumerate(graph.inputs) if v.type.is_float]
    if wrt[:1] != [0]:
        return None
    low = lower(passes.run(ad.reverse(graph, tracer.values, wrt, seed=seed).graph, None), graph.name + "_d").fn
    pos = {i: k for k, i in enumerate(wrt)}
    n_theta = len(graph.inputs) - 1

    def derivative(x: Any, *rest: Any) -> tuple[Any, ...]:
        flat = low(x, *rest)
        th = rest[:n_theta]
        return (flat[0], flat[1]) + tuple(flat[1 + pos[i]] if i in pos else np.zeros_like(th[i - 1])
                                          for i in range(1, n_theta + 1))
    return derivative


def _emit(tracer: Any, fn: Callable[..., Any], problem: Any, graph: Graph, value: Any,
          start: Any = NotImplemented) -> Any:
    """Record ``value = fn(problem, *θ)`` (or ``fn(problem, start, *θ)``: where the solver starts,
    as the call computed it) in the enclosing trace; the value user code gets."""
    y = value.copy() if isinstance(value, np.ndarray) else value * 1.0
    yv = tracer.new_var(y, "solution")
    lead = (Const(problem, typeof(problem)),) + (() if start is NotImplemented else (tracer.atom(start),))
    tracer.emit(fn, lead + tuple(graph.inputs[1:]), {}, (yv,))
    tracer.track(y, yv)
    return y


def root_scalar_call(tracer: Any, solver: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    """``solver(g, a, b, args=..., **options)`` under a trace; NotImplemented when it does not apply:
    the call then goes the ordinary way.  With ``full_output`` (what ``root_scalar`` asks for) the
    results object's ``root`` is the traced root."""
    if len(args) < 3 or len(args) > 4 or not callable(args[0]):
        return NotImplemented
    g, a, b = args[:3]
    extra = solver_args(args[3] if len(args) == 4 else kwargs.pop("args", ()))
    if tracer.deep_tracked(tuple(kwargs.values())):  # a traced tolerance
        return NotImplemented
    full = bool(kwargs.pop("full_output", False))
    with hooks.paused():  # the root at the trace-time values, computed natively
        found = solver(g, a, b, args=extra, full_output=True, **kwargs)
    root, results = float(found[0]), found[1]
    if not results.converged:
        raise unconverged(solver.__name__, str(results.flag))
    if not full:
        results = None

    def answer(y: Any) -> Any:
        if results is None:
            return y
        results.root = y
        return y, results
    graph = _trace_at(tracer, g, np.float64(root), extra, "root_residual")
    if graph is None:
        return answer(root)  # the residual reads nothing traced: the root is a constant
    _hoist_guards(tracer, graph, f"scipy.optimize.{solver.__name__}")
    gradient = _derivative(tracer, graph, "one")
    if gradient is None:
        return NotImplemented
    problem = RootProblem(solver, dict(kwargs), lower(graph, "root_residual").fn, gradient)
    return answer(_emit(tracer, implicit_root, problem, graph, root, (a, b)))


def newton_call(tracer: Any, newton: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``newton(g, x0, fprime=None, args=(), ...)`` under a trace: Newton's method, the secant
    method (no ``fprime``) or Halley's (``fprime2``); the start is an input of the op (computed from
    traced values, it is where the solver starts at each call; the root does not move with it).  A scalar start is a root of one equation (``implicit_root``), an array start
    SciPy's elementwise vectorised solve (``implicit_vector_root``).  At run time the residual is
    irad's program of ``(t, θ)`` and so is the derivative Newton's method uses (the user's
    ``fprime`` reads the traced values as they were when traced); Halley's method becomes
    Newton's.  NotImplemented (traced through as Python) for a traced ``x1`` or tolerance."""
    try:
        bound = inspect.signature(newton).bind(*args, **kwargs)
    except TypeError:
        return NotImplemented
    opts = dict(bound.arguments)
    g, x0 = opts.pop("func"), opts.pop("x0")
    extra = tuple(opts.pop("args", ()))  # (newton, unlike the others, does not wrap a single value)
    if not callable(g) or tracer.deep_tracked((opts.get("x1"), opts.get("tol"), opts.get("rtol"))):
        return NotImplemented
    full = bool(opts.get("full_output", False))
    scalar = np.ndim(x0) == 0
    if full and not scalar:
        return NotImplemented
    with hooks.paused():
        found = newton(g, x0, args=extra, **{**opts, "full_output": True})
    if not np.all(found[1].converged if scalar else found[1]):
        raise unconverged("newton", "not every start converged" if not scalar else str(found[1].flag))
    root, results = found[0], (found[1] if full else None)
    if not full:
        found = root
    derivative = opts.pop("fprime", None) is not None
    opts.pop("fprime2", None)
    opts.pop("full_output", None)
    if scalar:
        root = float(root)
        graph = _trace_at(tracer, g, np.float64(root), extra, "root_residual")
        if graph is None:
            return found
        _hoist_guards(tracer, graph, "scipy.optimize.newton")
        gradient = _derivative(tracer, graph, "one")
        if gradient is None:
            return NotImplemented
        options = {**opts, "fprime": True} if derivative else opts
        problem: RootProblem | VectorRootProblem = RootProblem(newton, options, lower(graph, "root_residual").fn,
                                                               gradient)
        y = _emit(tracer, implicit_root, problem, graph, root, (x0,))
        if results is None:
            return y
        results.root = y
        return y, results
    root = np.asarray(root, dtype=np.float64)
    graph = _trace_at(tracer, g, root.copy(), extra, "system_residual")
    if graph is None:
        return found
    _hoist_guards(tracer, graph, "scipy.optimize.newton")
    vjp = _derivative(tracer, graph, "input")
    if vjp is None:
        return NotImplemented
    problem = VectorRootProblem(newton, opts, lower(graph, "system_residual").fn, vjp)
    return _emit(tracer, implicit_vector_root, problem, graph, root, x0)


# ---- vector root finding: fsolve, root ------------------------------------------------------

class VectorRootProblem:
    """A root of ``residual(x, *θ) = 0`` (as many equations as unknowns) found by ``fsolve`` or
    ``root`` from a start (an input of the op); ``vjp(x, *θ, c)`` is the residual's vector-Jacobian product."""

    __slots__ = ("solver", "options", "residual", "vjp", "name")

    def __init__(self, solver: Callable[..., Any], options: dict[str, Any],
                 residual: Callable[..., Any], vjp: Callable[..., Any]) -> None:
        self.solver, self.options = solver, options
        self.residual, self.vjp = residual, vjp
        self.name = getattr(solver, "__name__", "solver")

    def solve(self, x0: Any, *theta: Any) -> np.ndarray:
        options = dict(self.options)
        if options.get("fprime") is True or options.get("jac") is True:  # irad's Jacobian for the user's
            options["fprime" if self.name == "fsolve" else "jac"] = lambda x: self.jacobian_t(x, *theta).T
        if self.name != "root":
            options["full_output"] = True  # (to see whether it converged)
        found = self.solver(lambda x: self.residual(x, *theta)[0], x0, **options)
        if self.name == "root":
            if not found.success:
                raise unconverged("root", str(found.message))
            return np.asarray(found.x, dtype=np.float64)
        if self.name == "fsolve" and found[2] != 1:
            raise unconverged("fsolve", str(found[3]))
        if self.name == "newton" and not np.all(found[1]):
            raise unconverged("newton", "not every start converged")
        return np.asarray(found[0], dtype=np.float64)

    def jacobian_t(self, x: np.ndarray, *theta: Any) -> np.ndarray:
        """``Jᵀ`` of the residual at ``x`` (``x.size`` square), column by column from its vjp."""
        x = np.asarray(x, dtype=np.float64)
        return _columns(lambda c: self.vjp(x, *theta, c)[1:], x)

    def __repr__(self) -> str:
        return f"root of a system by scipy.optimize.{self.name}"


def _columns(vjp: Callable[..., Any], x: np.ndarray, rows: Any = None) -> np.ndarray:
    """The matrix whose column ``i`` is ``vjp(eᵢ)[0]`` (a Jacobian's transpose, a Hessian), for the
    unit cotangents ``eᵢ`` of ``x``'s coordinates, restricted to ``rows`` (both ways) if given."""
    idx = np.arange(x.size) if rows is None else rows
    eye = np.eye(x.size)
    return np.stack([np.ravel(vjp(eye[i].reshape(x.shape))[0])[idx] for i in idx], axis=1)


def implicit_vector_root(problem: VectorRootProblem, x0: Any, *theta: Any) -> np.ndarray:
    """The root of ``problem`` from ``x0`` at these values of what its residual reads."""
    return problem.solve(x0, *theta)


def _vfwd(problem: VectorRootProblem, x0: Any, *theta: Any) -> tuple[np.ndarray, Any]:
    x = implicit_vector_root(problem, x0, *theta)
    return x, (problem, x, theta)


def _vbwd(state: Any, xbar: Any) -> tuple[Any, ...]:
    problem, x, theta = state
    jt = problem.jacobian_t(x, *theta)  # λ = J⁻ᵀ x̄, θ̄ = -(∂g/∂θ)ᵀ λ
    try:
        lam = np.linalg.solve(jt, np.ravel(xbar)).reshape(x.shape)
    except np.linalg.LinAlgError as e:
        raise NoRuleError(f"scipy.optimize.{problem.name}: the residual's Jacobian is singular at the root, so "
                          "the root does not depend smoothly on what the residual reads") from e
    return (None, None) + tuple(-g for g in problem.vjp(x, *theta, lam)[2:])


defrule(implicit_vector_root, _vfwd, _vbwd)


def root_vector_call(tracer: Any, solver: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    """``fsolve(g, x0, args=...)`` / ``root(g, x0, args=...)`` under a trace.  A Jacobian the user
    gives (``fprime=``, ``jac=``, a callable: it reads the traced values as they were when traced)
    is irad's at run time.  NotImplemented for a traced tolerance; ``full_output`` (diagnostics that
    would be the first call's) and ``jac=True`` (the residual returns its Jacobian too) are refused."""
    if len(args) < 2 or len(args) > 3 or not callable(args[0]):
        return NotImplemented
    name = solver.__name__
    g, x0 = args[:2]
    extra = solver_args(args[2] if len(args) == 3 else kwargs.pop("args", ()))
    if tracer.deep_tracked(tuple(kwargs.values())):  # a traced tolerance
        return NotImplemented
    refused = "full_output=True" if kwargs.get("full_output") else "jac=True" if kwargs.get("jac") is True else None
    with hooks.paused():
        found = solver(g, x0, args=extra, **(dict(kwargs, full_output=True) if name == "fsolve" else kwargs))
    if name == "fsolve":
        ier, msg = found[2], found[3]
        if ier != 1:
            raise unconverged(name, str(msg))
        if refused is None:
            found = found[0]
    elif not found.success:
        raise unconverged(name, str(found.message))
    if refused is not None:
        n_probe = len(tracer.ops)
        x_probe = np.asarray(found[0] if name == "fsolve" else found.x, dtype=np.float64).copy()
        if name == "fsolve" and not kwargs.get("full_output"):
            found = found[0]
        depends = tracer.deep_tracked(tracer.call(g, (x_probe,) + extra, {}))
        del tracer.ops[n_probe:]
        if depends:
            raise NoRuleError(f"scipy.optimize.{name} with {refused}: its root depends on traced values the residual "
                              "reads, and irad's rule gives the root only (full_output's diagnostics would be the "
                              "first call's; jac=True makes the residual return its Jacobian): call it without")
        return found
    if name == "fsolve" and kwargs.get("fprime") is not None:
        kwargs["fprime"] = True  # (at run time, irad's Jacobian: the user's reads trace-time values)
    elif name == "root" and callable(kwargs.get("jac")):
        kwargs["jac"] = True
    is_root = name == "root"
    x_star = np.asarray(found.x if is_root else found, dtype=np.float64)
    graph = _trace_at(tracer, g, x_star.copy(), extra, "system_residual")
    if graph is None:
        return found
    _hoist_guards(tracer, graph, f"scipy.optimize.{solver.__name__}")
    vjp = _derivative(tracer, graph, "input")
    if vjp is None:
        return NotImplemented
    problem = VectorRootProblem(solver, dict(kwargs), lower(graph, "system_residual").fn, vjp)
    y = _emit(tracer, implicit_vector_root, problem, graph, x_star, x0)
    if is_root:  # the residual at the traced root, traced here
        return TracedResult(found, y, tracer.call(g, (y,) + extra, {}))
    return y


# ---- minimize: the argmin by the first-order conditions --------------------------------------

_DERIVATIVE_FREE = frozenset({"nelder-mead", "powell", "cobyla", "cobyqa"})
#: methods whose minimiser lies on a bound that holds it (not near it, as trust-constr's interior
#: point does), so that which bounds are active is a clear, guardable fact ("": the default, L-BFGS-B)
_ON_THE_BOUND = frozenset({"", "l-bfgs-b", "tnc", "slsqp", "powell", "nelder-mead", "cobyqa"})


class ArgminProblem:
    """A minimiser of ``objective(x, *θ)`` found by ``scipy.optimize.minimize`` from a start (an op input).
    At the minimiser ``∇ₓf = 0``, so ``dx*/dθ = -H⁻¹ ∂(∇ₓf)/∂θ`` with ``H`` the Hessian in ``x``;
    both come from irad transforms of ``objective`` (an irad program, itself plain numpy code).
    With bounds, the coordinates at a bound (``active``, found when traced) stay there and the
    rest satisfy ``∇f = 0``: the same rule on the free block.  A solve whose active set differs
    is a GuardError: the program is traced again for it, as for a branch taken the other way."""

    __slots__ = ("options", "objective", "grad_x", "active")

    def __init__(self, options: dict[str, Any], objective: Callable[..., Any],
                 active: np.ndarray | None = None) -> None:
        from .api import grad
        self.options, self.objective, self.active = options, objective, active
        self.grad_x = grad(lambda x, *th: objective(x, *th)[0], argnums=0)

    def solve(self, x0: Any, *theta: Any) -> np.ndarray:
        from scipy.optimize import minimize
        method = str(self.options.get("method") or "").lower()
        jac = {} if method in _DERIVATIVE_FREE else \
            {"jac": lambda x: self.grad_x(np.asarray(x, dtype=np.float64), *theta)}  # irad's exact gradient
        options = dict(self.options)
        for k in ("hess", "hessp"):  # the user's read the traced values as they were when traced
            if callable(options.get(k)):
                options[k] = (lambda x: self.hessian(x, *theta)) if k == "hess" else \
                    (lambda x, p: self.hessian(x, *theta) @ p)
        found = minimize(lambda x: float(self.objective(x, *theta)[0]), x0, **jac, **options)
        failed = minimize_failed(found)
        if failed is not None:
            raise unconverged("minimize", failed)
        x = np.asarray(found.x, dtype=np.float64)
        if self.active is not None and not np.array_equal(self.active_set(x, *theta), self.active):
            raise GuardError("scipy.optimize.minimize: another set of bounds is active at the minimiser")
        return x

    def hessian_vjp(self, x: Any, *theta: Any) -> Callable[..., Any]:
        """irad's vjp of the objective's gradient at ``x``: ``c -> ((∂∇f/∂x)ᵀ c, (∂∇f/∂θ)ᵀ c...)``."""
        from .api import vjp
        pullback: Callable[..., Any] = vjp(lambda x_, *th: self.grad_x(x_, *th), np.asarray(x, dtype=np.float64),
                                           *theta)[1]
        return pullback

    def hessian(self, x: Any, *theta: Any) -> np.ndarray:
        """The objective's Hessian in ``x`` (``x.size`` square)."""
        return _columns(self.hessian_vjp(x, *theta), np.asarray(x, dtype=np.float64))

    def active_set(self, x: np.ndarray, *theta: Any) -> np.ndarray:
        return active_bounds(x, np.asarray(self.grad_x(x, *theta)), self.options["bounds"])

    def __repr__(self) -> str:
        return "argmin by scipy.optimize.minimize"


def active_bounds(x: np.ndarray, gradient: np.ndarray, bounds: Any) -> np.ndarray:
    """Which coordinates of the minimiser ``x`` a bound holds (``bounds``: ``(lo, hi)`` pairs,
    ``None`` for none, or a ``scipy.optimize.Bounds``): near the bound, with the objective's
    ``gradient`` pushing outward, as the first-order conditions say of an active bound.  By the
    gradient, not by equality: interior-point methods (``trust-constr``) stop near a bound, not on it."""
    if hasattr(bounds, "lb") and hasattr(bounds, "ub"):
        lo, hi = (np.broadcast_to(np.asarray(b, dtype=np.float64), x.shape) for b in (bounds.lb, bounds.ub))
    else:
        pairs = [(-np.inf if a is None else a, np.inf if b is None else b) for a, b in bounds]
        lo, hi = (np.asarray(c, dtype=np.float64).reshape(x.shape) for c in zip(*pairs))
    near = 1e-6 * np.maximum(1.0, np.abs(x))
    push = 1e-6 * max(1.0, float(np.max(np.abs(gradient), initial=0.0)))
    active: np.ndarray = ((x - lo <= near) & (gradient > push)) | ((hi - x <= near) & (gradient < -push))
    return active


def implicit_argmin(problem: ArgminProblem, x0: Any, *theta: Any) -> np.ndarray:
    """The minimiser of ``problem`` from ``x0`` at these values of what its objective reads."""
    return problem.solve(x0, *theta)


def _afwd(problem: ArgminProblem, x0: Any, *theta: Any) -> tuple[np.ndarray, Any]:
    x = implicit_argmin(problem, x0, *theta)
    return x, (problem, x, theta)


def _abwd(state: Any, xbar: Any) -> tuple[Any, ...]:
    problem, x, theta = state
    pb = problem.hessian_vjp(x, *theta)
    n = x.size
    free = np.flatnonzero(~problem.active.ravel()) if problem.active is not None else np.arange(n)
    lam = np.zeros(n)
    if free.size:
        hess = _columns(pb, x, free)
        try:  # λ on the free block, zero on coordinates held at a bound
            lam[free] = np.linalg.solve(hess, np.ravel(xbar)[free])
        except np.linalg.LinAlgError as e:
            raise NoRuleError("scipy.optimize.minimize: the objective's Hessian is singular at the minimiser, so "
                              "the argmin does not depend smoothly on what the objective reads") from e
    lam = lam.reshape(x.shape)
    return (None, None) + tuple(None if g is None else -g for g in pb(lam)[1:])


defrule(implicit_argmin, _afwd, _abwd)


def minimize_call(tracer: Any, minimize: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``minimize(f, x0, args=..., method=..., ...)`` under a trace: the result's ``x`` is the traced
    argmin and its ``fun`` the objective traced there.  Constraints, a callback, ``jac=True``,
    traced bounds or an interior-point method with bounds are a NoRuleError where the objective
    reads traced values (the call is a constant otherwise)."""
    if len(args) < 2 or len(args) > 3 or not callable(args[0]):
        return NotImplemented
    f, x0 = args[:2]
    extra = solver_args(args[2] if len(args) == 3 else kwargs.pop("args", ()))
    bounds = kwargs.get("bounds")
    method = str(kwargs.get("method") or "").lower()
    unsupported = "traced bounds" if tracer.deep_tracked(bounds) or tracer.deep_tracked(getattr(bounds, "__dict__", None)) \
        else next((k for k in ("constraints", "callback") if kwargs.get(k) not in (None, ())), None) or \
        ("jac=True" if kwargs.get("jac") is True else None) or \
        (f"bounds and method={method!r}" if bounds is not None and method not in _ON_THE_BOUND else None)
    with hooks.paused():
        found = minimize(f, x0, args=extra, **kwargs)
    failed = minimize_failed(found)
    if failed is not None:
        raise unconverged("minimize", failed)
    if unsupported is not None:  # refused below if the objective reads traced values
        x_probe = np.asarray(found.x, dtype=np.float64).copy()
        n_probe = len(tracer.ops)
        depends = tracer.deep_tracked(tracer.call(f, (x_probe,) + extra, {}))
        del tracer.ops[n_probe:]
        if depends:
            raise NoRuleError(f"scipy.optimize.minimize with {unsupported}: its argmin depends on traced values "
                              "the objective reads, and irad's implicit rule covers problems with constant "
                              "bounds (or none) only; write the constraints as a "
                              "penalty or reparametrise, or differentiate the objective at a fixed point")
        return found
    x_star = np.asarray(found.x, dtype=np.float64)
    graph = _trace_at(tracer, f, x_star.copy(), extra, "objective")
    if graph is None:
        return found
    _hoist_guards(tracer, graph, "scipy.optimize.minimize")
    options = {k: v for k, v in kwargs.items() if k != "jac"}
    problem = ArgminProblem(options, lower(graph, "objective").fn)
    if bounds is not None:
        with hooks.paused():
            problem.active = problem.active_set(x_star, *(tracer.values[v.id] for v in graph.inputs[1:]))
    y = _emit(tracer, implicit_argmin, problem, graph, x_star, x0)
    return TracedResult(found, y, tracer.call(f, (y,) + extra, {}))  # fun: the objective at the traced argmin
    return found
