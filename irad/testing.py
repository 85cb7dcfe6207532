"""Testing helpers: check a reverse rule (``check_rule``, like ChainRulesTestUtils) or a whole
function (``check_grads``, like HIPS autograd's) against central finite differences.

``check_rule(np.tanh, x)`` looks up the rule, checks that its forward computes ``fn``, draws a
random output cotangent ``ybar`` and, for every differentiable positional argument, compares
``<xbar, v>`` with a central difference of ``<ybar, fn(x + t v)>`` in a random direction ``v``.
Inner products are real and bilinear: ``<a, b> = Re(sum(a * b))``, so complex arguments are
checked in JAX's and autograd's convention (the cotangent of ``x`` is ``ybar * dy/dx``, no conjugate;
docs/rules.md, "Complex values").
"""
from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Sequence

import numpy as np

from . import pytree
from .api import compile as irad_compile
from .api import vjp
from .pytree import flatten, unflatten
from .primitives import sum_to
from .rules import lookup, qualname
from .rules.registry import Rule

__all__ = ["check_grads", "check_rule", "numerical_vjp", "inner", "random_like", "perturb"]


# ---- values ----------------------------------------------------------------------------------


def _is_leaf_float(x: Any) -> bool:
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (float, complex, np.inexact)):
        return True
    return isinstance(x, np.ndarray) and x.dtype.kind in "fc"


def _none_leaf(x: Any) -> bool:
    return x is None or x is NotImplemented


def _flatten(x: Any) -> tuple[list[Any], Any]:
    """Flatten keeping ``None`` as a leaf (a zero cotangent)."""
    return pytree.flatten(x, is_leaf=_none_leaf)


def _leaves(x: Any) -> list[Any]:
    return _flatten(x)[0]


def _has_float(x: Any) -> bool:
    return any(_is_leaf_float(v) for v in _leaves(x))


def _rand_leaf(x: Any, rng: np.random.Generator) -> Any:
    """A random value of ``x``'s type and shape (zero for non-float leaves)."""
    if x is None:
        return None
    if not _is_leaf_float(x):
        if isinstance(x, np.ndarray):
            return np.zeros_like(x)
        return type(x)(0) if isinstance(x, (int, float, complex, np.number)) else x
    shape = np.shape(x)
    cplx = np.iscomplexobj(x)
    v = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if cplx else 0)
    if isinstance(x, np.ndarray):
        return np.asarray(v, dtype=x.dtype)
    if isinstance(x, np.generic):
        return type(x)(v)
    return complex(v) if cplx else float(v)


def random_like(x: Any, rng: np.random.Generator) -> Any:
    """A random value with the structure, types and shapes of ``x`` (zeros for integers)."""
    leaves, tree = _flatten(x)
    return pytree.unflatten(tree, [_rand_leaf(v, rng) for v in leaves])


def _axpy(x: Any, t: float, v: Any) -> Any:
    """``x + t * v`` keeping ``x``'s type (Python float, numpy scalar, 0-d or nd array)."""
    if not _is_leaf_float(x):
        return x
    if isinstance(x, np.ndarray):
        out = np.empty_like(x)  # keeps the memory layout: order='A'/'K' results depend on it
        out[...] = x + t * v
        return out
    return type(x)(x + t * v)


def perturb(x: Any, t: float, v: Any) -> Any:
    """``x + t * v`` leaf by leaf (``v`` has ``x``'s structure)."""
    xs, tree = _flatten(x)
    vs = _leaves(v)
    return pytree.unflatten(tree, [_axpy(a, t, b) for a, b in zip(xs, vs)])


def inner(a: Any, b: Any) -> float:
    """``Re(sum(a * b))`` over matching pytrees (``None`` leaves count as zero)."""
    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb):
        raise AssertionError(f"structures differ: {len(la)} vs {len(lb)} leaves")
    total = 0.0
    for x, y in zip(la, lb):
        if x is None or y is None or not (_is_leaf_float(x) or _is_leaf_float(y)):
            continue
        total += float(np.real(np.sum(np.asarray(x) * np.asarray(y))))
    return total


def _cot_leaves(arg: Any, cot: Any, where: str) -> list[Any]:
    """The cotangent of each leaf of ``arg``: summed to the leaf's shape, real for real leaves."""
    if isinstance(arg, (list, tuple)) and not _is_leaf_float(arg):
        if cot is None:
            return [None] * len(_leaves(arg))
        if isinstance(cot, np.ndarray) and cot.ndim >= 1 and len(cot) == len(arg):
            cot = list(cot)  # an array cotangent for a list argument: split it like the transform
        if not isinstance(cot, (list, tuple)) or len(cot) != len(arg):
            raise AssertionError(f"{where}: the argument is a {type(arg).__name__} of {len(arg)} "
                                 f"items, its cotangent is {type(cot).__name__} {cot!r:.80}")
        out: list[Any] = []
        for i, (a, c) in enumerate(zip(arg, cot)):
            out += _cot_leaves(a, c, f"{where}[{i}]")
        return out
    if isinstance(arg, dict) or not _is_leaf_float(arg) or cot is None or cot is NotImplemented:
        return [None] * len(_leaves(arg))
    shape = np.shape(arg)
    try:
        c = sum_to(np.asarray(cot), shape)
    except ValueError as e:
        raise AssertionError(f"{where}: cotangent of shape {np.shape(cot)} cannot be summed to "
                             f"the argument's shape {shape}: {e}") from None
    if np.shape(c) != shape:
        raise AssertionError(f"{where}: cotangent has shape {np.shape(c)} after summing to "
                             f"{shape}")
    if not np.iscomplexobj(arg):
        c = np.real(c)
    return [c]


# ---- comparisons -----------------------------------------------------------------------------


def _same_value(y: Any, expected: Any, name: str) -> None:
    ly, ty = pytree.flatten(y)
    le, te = pytree.flatten(expected)
    if ty != te:
        raise AssertionError(f"{name}: the rule's forward returns structure {ty}, "
                             f"the function {te}")
    for i, (a, b) in enumerate(zip(ly, le)):
        if type(a) is not type(b):
            raise AssertionError(f"{name}: output leaf {i} is {type(a).__name__} from the rule, "
                                 f"{type(b).__name__} from the function")
        if isinstance(b, (np.ndarray, np.generic, float, complex, int)):
            if np.shape(a) != np.shape(b) or np.result_type(a) != np.result_type(b):
                raise AssertionError(f"{name}: output leaf {i} is {np.result_type(a)}"
                                     f"{list(np.shape(a))} from the rule, {np.result_type(b)}"
                                     f"{list(np.shape(b))} from the function")
            if not np.array_equal(a, b, equal_nan=np.result_type(b).kind in "fc"):
                raise AssertionError(f"{name}: the rule's forward value differs from the function")


def _snapshot(args: Any) -> Any:
    return copy.deepcopy(args)


def _unchanged(before: Any, after: Any) -> bool:
    lb, la = _leaves(before), _leaves(after)
    for a, b in zip(lb, la):
        if isinstance(a, np.ndarray):
            if not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
                return False
    return True


def _fmt(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"{x.dtype}{list(x.shape)}"
    return type(x).__name__


# ---- the checks ------------------------------------------------------------------------------


def numerical_vjp(f: Callable[..., Any], args: tuple[Any, ...], ybar: Any, eps: float = 1e-6,
                  **kwargs: Any) -> tuple[Any, ...]:
    """Central-difference cotangents of ``<ybar, f(*args)>``, element by element (slow; for
    debugging a rule).  Non-float arguments get ``None``; a complex element gets
    ``d/dRe + 1j d/dIm``."""
    out: list[Any] = []
    for i, a in enumerate(args):
        leaves, tree = _flatten(a)
        cots: list[Any] = []
        for j, leaf in enumerate(leaves):
            if not _is_leaf_float(leaf):
                cots.append(None)
                continue
            flat = np.zeros(np.size(leaf), dtype=complex if np.iscomplexobj(leaf) else float)
            units = (1.0, 1j) if np.iscomplexobj(leaf) else (1.0,)
            for k in range(flat.size):
                for unit in units:
                    e = np.zeros(flat.size, dtype=flat.dtype)
                    e[k] = unit
                    d = np.reshape(e, np.shape(leaf))
                    vals = []
                    for t in (eps, -eps):
                        new = list(leaves)
                        new[j] = _axpy(leaf, t, d if isinstance(leaf, np.ndarray) else d.item())
                        aa = list(args)
                        aa[i] = pytree.unflatten(tree, new)
                        vals.append(inner(ybar, f(*aa, **kwargs)))
                    flat[k] += unit * (vals[0] - vals[1]) / (2 * eps)
            c = flat.reshape(np.shape(leaf))
            cots.append(c if np.iscomplexobj(leaf) else c.real)
        out.append(pytree.unflatten(tree, cots))
    return tuple(out)


def check_rule(fn: Any, *args: Any, rule: Rule | None = None, order: int = 1, rtol: float = 1e-5,
               atol: float = 1e-7, eps: float = 1e-6, seed: int = 0, ybar: Any = None,
               fn_kwargs: dict[str, Any] | None = None, wrt: Any = None, **kwargs: Any) -> None:
    """Check the reverse rule of ``fn`` at ``fn(*args, **kwargs)``; raise AssertionError if wrong.

    Checks: the forward equals ``fn``; neither pass mutates its inputs; the backward returns one
    cotangent per positional argument (trailing ones it leaves out are ``None``), no more,
    deterministically; each cotangent, summed to its
    argument's shape, satisfies ``<xbar, v> == d/dt <ybar, fn(.., x + t v, ..)>`` for a random
    ``v``.  ``ybar`` overrides the random output cotangent (a tuple for container outputs).
    ``order=2`` also differentiates the backward with ``irad.vjp`` (needs the transform).
    Keyword arguments of ``fn`` named like ours (``order=``, ``rtol=``...) go in ``fn_kwargs``.
    ``wrt`` (positions) restricts the finite-difference checks to those arguments: for an
    argument that cannot be perturbed freely (a point on a simplex the function checks).
    """
    kwargs = {**kwargs, **(fn_kwargs or {})}
    name = qualname(fn)
    rule = rule if rule is not None else lookup(fn, args)
    if rule is None:
        raise AssertionError(f"no reverse rule for {name}")
    rng = np.random.default_rng(seed)
    before = _snapshot(args)
    # NOTE: both runs start from the same state of numpy's global generator: some functions draw
    # from it (scipy.linalg.logm estimates norms with onenormest, which differ in the last bit)
    drawn = np.random.get_state()
    y, state = rule.fwd(*args, **kwargs)
    if not _unchanged(before, args):
        raise AssertionError(f"{name}: the rule's forward mutated its arguments")
    after = np.random.get_state()
    np.random.set_state(drawn)
    _same_value(y, fn(*before, **kwargs), name)
    np.random.set_state(after)

    yleaves, ytree = pytree.flatten(y)
    container = ytree.kind != "leaf"
    if ybar is None:
        bar = [_rand_leaf(v, rng) for v in yleaves]
        ybar = tuple(bar) if container else bar[0]
    ybar_copy = _snapshot(ybar)
    cots = rule.bwd(state, ybar)
    if not isinstance(cots, tuple):
        raise AssertionError(f"{name}: the pullback must return a tuple, got {type(cots).__name__}")
    if len(cots) > len(args):
        raise AssertionError(f"{name}: the pullback returned {len(cots)} cotangents for "
                             f"{len(args)} positional arguments")
    given, cots = len(cots), _padded(cots, len(args))
    if not _unchanged(ybar_copy, ybar) or not _unchanged(before, args):
        raise AssertionError(f"{name}: the pullback mutated ybar or the arguments")
    again = _padded(rule.bwd(state, ybar), len(args))
    for i, (c1, c2) in enumerate(zip(cots, again)):
        for a, b in zip(_leaves(c1), _leaves(c2)):
            if _none_leaf(a) or _none_leaf(b):
                if a is not b:
                    raise AssertionError(f"{name}: a second pullback call gives another cotangent "
                                         f"for argument {i} (state mutated?)")
            elif not np.array_equal(a, b, equal_nan=True):
                raise AssertionError(f"{name}: a second pullback call gives another cotangent "
                                     f"for argument {i} (state mutated?)")
    ybar_tree = pytree.unflatten(ytree, list(ybar)) if container else ybar

    def phi(i: int, t: float, v: Any) -> float:
        aa = list(before)
        aa[i] = perturb(before[i], t, v)
        return inner(ybar_tree, fn(*aa, **kwargs))

    for i, a in enumerate(before):
        if not _has_float(a) or (wrt is not None and i not in wrt):
            continue
        where = f"{name}: cotangent of argument {i} ({_fmt(a)})"
        cl = _cot_leaves(a, cots[i], where)
        v = random_like(a, rng)
        lhs = inner(cl, _leaves(v))
        rhs = (phi(i, eps, v) - phi(i, -eps, v)) / (2 * eps)
        if not np.isfinite(lhs) or abs(lhs - rhs) > atol + rtol * max(abs(lhs), abs(rhs)):
            left_out = " (the pullback left it out: None, a zero)" if i >= given else ""
            raise AssertionError(f"{where}{left_out} disagrees with finite differences: <xbar, v> = "
                                 f"{lhs!r}, numerical {rhs!r} (rtol={rtol}, atol={atol}, "
                                 f"eps={eps})")
    if order >= 2:
        _check_second_order(fn, rule, before, kwargs, ybar, rng, name, rtol, atol, eps, wrt)


def _check_second_order(fn: Any, rule: Rule, args: tuple[Any, ...], kwargs: dict[str, Any],
                        ybar: Any, rng: np.random.Generator, name: str, rtol: float,
                        atol: float, eps: float, wrt: Any = None) -> None:
    """Differentiate ``args -> <bwd(fwd(args), ybar), w>`` with irad and with differences."""
    diff = [i for i, a in enumerate(args) if _has_float(a) and (wrt is None or i in wrt)]
    probe = _padded(rule.bwd(rule.fwd(*args, **kwargs)[1], ybar), len(args))
    ws = [random_like(_materialise(probe[i], args[i]), rng) for i in diff]

    def h(*xs: Any) -> Any:
        full = list(args)
        for i, x in zip(diff, xs):
            full[i] = x
        cs = _padded(rule.bwd(rule.fwd(*full, **kwargs)[1], ybar), len(args))
        total = 0.0
        for i, w in zip(diff, ws):
            if cs[i] is not None:
                total = total + _pair(cs[i], w)
        return total

    xs = [args[i] for i in diff]
    _, pb = vjp(h, *xs)
    grads = pb(1.0)
    for k, i in enumerate(diff):
        v = random_like(xs[k], rng)
        xp, xm = list(xs), list(xs)
        xp[k], xm[k] = perturb(xs[k], eps, v), perturb(xs[k], -eps, v)
        rhs = (float(np.real(h(*xp))) - float(np.real(h(*xm)))) / (2 * eps)
        lhs = inner(_cot_leaves(xs[k], grads[k], name), _leaves(v))
        if abs(lhs - rhs) > atol + rtol * max(abs(lhs), abs(rhs)):
            raise AssertionError(f"{name}: second order, argument {i}: irad gives {lhs!r}, "
                                 f"finite differences {rhs!r}")


def _padded(cots: Any, n: int) -> Any:
    """A pullback's cotangents, one per positional argument: the trailing ones it left out are
    ``None`` (as the transform reads them)."""
    return tuple(cots) + (None,) * (n - len(cots))


def _materialise(c: Any, a: Any) -> Any:
    return c if c is not None else a


def _pair(c: Any, w: Any) -> Any:
    """``Re(sum(w * c))`` written with plain numpy, so that irad can trace it."""
    if isinstance(c, (list, tuple)):
        total = 0.0
        for ci, wi in zip(c, w):
            if ci is not None and wi is not None:
                total = total + _pair(ci, wi)
        return total
    return np.real(np.sum(w * c))


__all__ = ["check_grads", "check_rule"]


# ---- whole functions: check_grads -------------------------------------------------------------

#: parameter names of irad.vjp / irad.compile that a keyword argument of f must not shadow
_API_NAMES = frozenset({"f", "argnums", "passes"})


def _is_complex(x: Any) -> bool:
    return type(x) is complex or (isinstance(x, (np.ndarray, np.generic)) and np.asarray(x).dtype.kind == "c")


def _direction(x: Any, rng: np.random.Generator) -> Any:
    """A random direction of ``x``'s shape, in float64 (complex128 for complex ``x``) whatever
    ``x``'s precision: ``check_grads`` takes its differences in float64."""
    shape = np.shape(x)
    a = rng.standard_normal(shape)
    if _is_complex(x):
        a = a + 1j * rng.standard_normal(shape)
    if type(x) in (float, complex):
        return type(x)(a)
    if isinstance(x, np.ndarray):
        return a
    return np.complex128(a) if _is_complex(x) else np.float64(a)


def _shift(args: tuple[Any, ...], nums: Sequence[int], dirs: dict[int, Any], eps: float) -> tuple[Any, ...]:
    out = list(args)
    for a in nums:
        leaves, tree = flatten(args[a])
        dl = flatten(dirs[a])[0]
        new = [x + eps * d if d is not None else x for x, d in zip(leaves, dl)]
        new = [type(x)(n) if type(x) in (float, complex) else n for n, x in zip(new, leaves)]
        out[a] = unflatten(tree, new)
    return tuple(out)


def check_grads(f: Callable[..., Any], /, *args: Any, order: int = 1, argnums: Sequence[int] | int | None = None,
                eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-6, seed: int = 0, **kwargs: Any) -> None:
    """Check irad's reverse mode on ``f`` at ``args`` against central finite differences.

    For random directions ``v`` (inputs) and ``u`` (outputs): ``<vjp(u), v>`` must equal
    ``<u, (f(x + eps v) - f(x - eps v)) / 2 eps>``, with ``<a, b> = Re(sum(a b))`` so complex
    arguments and outputs are checked in JAX's and autograd's convention (no conjugate).  ``argnums`` (default: every
    argument with float or complex leaves) selects the arguments checked; the others are constants.
    For scalar ``f`` the compiled ``value_and_grad`` program is checked too.  ``order=2`` also
    checks the gradient of the gradient (the generated program, traced and differentiated by irad).
    """

    if set(kwargs) & _API_NAMES:  # `f=`, `argnums=`, ...: keywords of f that irad's API would take as its own
        name = getattr(f, "__name__", "f")
        f = functools.partial(f, **kwargs)
        f.__name__ = name  # type: ignore[attr-defined]
        kwargs = {}
    if argnums is not None:
        sel = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        fixed = [i for i in range(len(args)) if i not in sel and any(_is_leaf_float(x) for x in flatten(args[i])[0])]
        if fixed:  # float arguments not checked (a Bessel order): constants, so irad never differentiates them
            def restricted(*chosen: Any) -> Any:
                full = list(args)
                for i, v in zip(sel, chosen):
                    full[i] = v
                return f(*full, **kwargs)
            restricted.__name__ = getattr(f, "__name__", "f")
            check_grads(restricted, *[args[i] for i in sel], order=order, eps=eps, rtol=rtol, atol=atol, seed=seed)
            return
    rng = np.random.default_rng(seed)
    if argnums is None:
        nums = tuple(i for i, a in enumerate(args) if any(_is_leaf_float(x) for x in flatten(a)[0]))
    else:
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise ValueError("check_grads: no floating-point argument to differentiate")
    dirs = {a: unflatten(flatten(args[a])[1], [_direction(x, rng) if _is_leaf_float(x) else None
                                                for x in flatten(args[a])[0]]) for a in nums}

    y, pb = vjp(f, *args, **kwargs)
    y_ref = f(*args, **kwargs)
    for got, ref in zip(flatten(y)[0], flatten(y_ref)[0]):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12, err_msg="check_grads: traced value differs from f")
    u = unflatten(flatten(y)[1], [_direction(x, rng) if _is_leaf_float(x) else np.zeros(np.shape(x))
                                  for x in flatten(y)[0]])
    cots = pb(u)
    lhs = sum(inner(cots[a], dirs[a]) for a in nums)
    plus = f(*_shift(args, nums, dirs, eps), **kwargs)
    minus = f(*_shift(args, nums, dirs, -eps), **kwargs)
    fd = [(_numeric(p) - _numeric(m)) / (2 * eps) for p, m in zip(flatten(plus)[0], flatten(minus)[0])]
    rhs = inner(u, unflatten(flatten(y)[1], fd))
    _close(lhs, rhs, rtol, atol, f"check_grads: VJP of {getattr(f, '__name__', f)} disagrees with finite differences")

    scalar = len(flatten(y)[0]) == 1 and np.ndim(flatten(y)[0][0]) == 0 and not _is_complex(flatten(y)[0][0])
    if scalar:
        prog = irad_compile(f, *args, argnums=nums, **kwargs)
        value, grads = prog(*args, **kwargs)
        np.testing.assert_allclose(flatten(value)[0][0], flatten(y_ref)[0][0], rtol=1e-10, atol=1e-12)
        g_dir = sum(inner(grads[k], dirs[a]) for k, a in enumerate(nums))
        _close(g_dir * float(flatten(u)[0][0]), lhs, rtol, atol,
               f"check_grads: compiled gradient of {getattr(f, '__name__', f)} disagrees with its VJP")
    if order >= 2:
        _check_grads_second_order(f, args, kwargs, nums, scalar, u, rng, eps, rtol, atol)


def _check_grads_second_order(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], nums: tuple[int, ...],
                        scalar: bool, u: Any, rng: np.random.Generator, eps: float, rtol: float, atol: float) -> None:

    if not scalar:
        def fu(*a: Any) -> Any:
            return _weighted_sum(f(*a, **kwargs), u)
        target: Callable[..., Any] = fu
        kw: dict[str, Any] = {}
    else:
        target, kw = f, kwargs
    prog = irad_compile(target, *args, argnums=nums, **kw)
    statics = {i for i, _ in prog.forward.statics}
    leaves = flatten((args, kw))[0]
    dyn = [x for i, x in enumerate(leaves) if i not in statics]
    n_out = prog.n_out
    grad_leaves = [flat_g for flat_g in flatten(prog.first[1])[0] if flat_g is not None]
    weights = [_direction(gl, rng) for gl in grad_leaves]
    fn = prog.fn

    def second(*d: Any) -> Any:
        outs = fn(*d)
        total = 0.0
        for gl, w in zip(outs[n_out:], weights):
            total = total + _dot(w, gl)
        return total

    float_pos = [i for i, x in enumerate(dyn) if _is_leaf_float(x)]
    check_grads(second, *dyn, order=1, argnums=float_pos, eps=eps, rtol=max(rtol, 1e-4), atol=max(atol, 1e-5))


def _numeric(x: Any) -> np.ndarray:
    a = np.asarray(x)
    return a if a.dtype.kind == "c" else a.astype(float)


def _weighted_sum(y: Any, u: Any) -> Any:
    total = 0.0
    for a, b in zip(flatten(y)[0], flatten(u)[0]):
        total = total + _dot(b, a)
    return total


def _dot(w: Any, a: Any) -> Any:
    """``Re(sum(w * a))`` for a constant weight ``w``, written so that irad can trace it."""
    if _is_complex(w):
        return np.real(np.sum(w * a))
    return np.sum(a * w)


def _close(a: float, b: float, rtol: float, atol: float, msg: str) -> None:
    if not np.isfinite(a) or not np.isfinite(b) or abs(a - b) > atol + rtol * max(abs(a), abs(b)):
        raise AssertionError(f"{msg}: {a!r} vs {b!r}")
