"""Root finding inside a traced function, differentiated by the implicit function theorem.

``scipy.optimize.brentq(lambda t: t**3 - a, 0, 5)`` runs C code that calls the user's residual
``g``.  Its root ``t*(θ)`` depends on the traced values ``θ`` that ``g`` reads, through
``g(t*(θ), θ) = 0``: ``dt*/dθ = -(∂g/∂θ) / (∂g/∂t)``.  The tracer (``root_scalar_call``) solves
natively, then traces ``g`` once at the root with ``t`` as a fresh input: that subgraph becomes
two irad programs of ``(t, *θ)``, the residual (what the solver calls at run time) and its
gradient (what the pullback uses).  The graph gets one op, ``implicit_root(problem, *θ)``.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import ad, hooks
from .errors import NoRuleError
from .ir import Const, Graph, Var, typeof
from .lower import lower
from .rules.registry import defrule

#: SciPy's scalar bracketing solvers: ``solver(g, a, b, args=(), **options) -> float``
BRACKETING = frozenset({"brentq", "brenth", "ridder", "bisect", "toms748"})


class RootProblem:
    """A scalar root of ``residual(t, *θ) = 0`` in a fixed bracket, found by a SciPy solver."""

    __slots__ = ("solver", "bracket", "options", "residual", "gradient", "name")

    def __init__(self, solver: Callable[..., Any], bracket: tuple[float, float], options: dict[str, Any],
                 residual: Callable[..., Any], gradient: Callable[..., Any]) -> None:
        self.solver, self.bracket, self.options = solver, bracket, options
        self.residual, self.gradient = residual, gradient
        self.name = getattr(solver, "__name__", "solver")

    def solve(self, *theta: Any) -> float:
        return float(self.solver(lambda t: float(self.residual(t, *theta)[0]), *self.bracket, **self.options))

    def __repr__(self) -> str:
        return f"root of a residual by scipy.optimize.{self.name}"


def implicit_root(problem: RootProblem, *theta: Any) -> float:
    """The root of ``problem`` at these values of what its residual reads."""
    return problem.solve(*theta)


def _fwd(problem: RootProblem, *theta: Any) -> tuple[float, Any]:
    t = implicit_root(problem, *theta)
    return t, (problem, t, theta)


def _bwd(state: Any, tbar: Any) -> tuple[Any, ...]:
    problem, t, theta = state
    _, gt, *gtheta = problem.gradient(t, *theta)
    if gt == 0:
        raise NoRuleError(f"scipy.optimize.{problem.name}: the residual's derivative is zero at the root "
                          f"t = {t!r}, so the root does not depend smoothly on what the residual reads")
    return (None,) + tuple(-tbar * g / gt for g in gtheta)


defrule(implicit_root, _fwd, _bwd)


def root_scalar_call(tracer: Any, solver: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    """``solver(g, a, b, args=..., **options)`` under a trace; NotImplemented when it does not apply
    (a traced bracket): the call then goes the ordinary way.  With ``full_output`` (what
    ``root_scalar`` asks for) the results object's ``root`` is the traced root."""
    if len(args) < 3 or len(args) > 4 or not callable(args[0]):
        return NotImplemented
    g, a, b = args[:3]
    extra = tuple(args[3]) if len(args) == 4 else tuple(kwargs.pop("args", ()))
    if tracer.deep_tracked((a, b)):
        return NotImplemented
    full = bool(kwargs.pop("full_output", False))
    with hooks.paused():  # the root at the trace-time values, computed natively
        found = solver(g, a, b, args=extra, full_output=full, **kwargs)
    root, results = (float(found[0]), found[1]) if full else (float(found), None)

    def answer(y: Any) -> Any:
        if results is None:
            return y
        results.root = y
        return y, results
    t_obj = root * 1.0
    t_var = tracer.new_var(t_obj, "t")
    tracer.track(t_obj, t_var)
    n0 = len(tracer.ops)
    r = tracer.call(g, (t_obj,) + extra, {})
    sub = tracer.ops[n0:]
    del tracer.ops[n0:]
    if not tracer.is_tracked(r) or not sub:
        return answer(root)  # the residual reads nothing traced: the root is a constant
    defined = {t_var.id} | {o.id for op in sub for o in op.outs}
    theta: list[Var] = []
    for op in sub:
        for v in op.inputs:
            if v.id not in defined and all(v.id != w.id for w in theta):
                theta.append(v)
    out = tracer.atom(r)
    graph = Graph("root_residual", (t_var,) + tuple(theta), tuple(sub), (out,), None, None, ())
    residual = lower(graph, "root_residual").fn
    wrt = [i for i, v in enumerate(graph.inputs) if v.type.is_float]
    if wrt[:1] != [0]:
        return NotImplemented
    joint = ad.reverse(graph, tracer.values, wrt, seed="one")
    from . import passes
    grad_low = lower(passes.run(joint.graph, None), "root_residual_grad").fn
    pos = {i: k for k, i in enumerate(wrt)}

    def gradient(t: Any, *th: Any) -> tuple[Any, ...]:
        flat = grad_low(t, *th)
        value, grads = flat[0], flat[1:]
        return (value, grads[0]) + tuple(grads[pos[i]] if i in pos else np.zeros_like(th[i - 1])
                                         for i in range(1, len(graph.inputs)))

    problem = RootProblem(solver, (a, b), dict(kwargs), residual, gradient)
    y = root * 1.0
    yv = tracer.new_var(y, "root")
    tracer.emit(implicit_root, (Const(problem, typeof(problem)),) + tuple(theta), {}, (yv,))
    tracer.track(y, yv)
    return answer(y)
