"""Whole-function gradient checks against central finite differences (like HIPS autograd's
``check_grads``): a random-direction VJP test in float64, of order 1 or 2.

Order 2 differentiates irad's own generated gradient program: it is plain numpy code calling
named rules, so irad traces it like any user function.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from .pytree import flatten, unflatten

#: parameter names of irad.vjp / irad.compile that a keyword argument of f must not shadow
_API_NAMES = frozenset({"f", "argnums", "passes"})


def _is_float_leaf(x: Any) -> bool:
    """A differentiable leaf: a real or complex floating-point number or array."""
    if type(x) in (float, complex):
        return True
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x).dtype.kind in "fc"
    return False


def _is_complex(x: Any) -> bool:
    return type(x) is complex or (isinstance(x, (np.ndarray, np.generic)) and np.asarray(x).dtype.kind == "c")


def _rand_like(x: Any, rng: np.random.Generator) -> Any:
    """A random direction of ``x``'s type and shape (complex for complex ``x``)."""
    shape = np.shape(x)
    a = rng.standard_normal(shape)
    if _is_complex(x):
        a = a + 1j * rng.standard_normal(shape)
    if type(x) in (float, complex):
        return type(x)(a)
    if isinstance(x, np.ndarray):
        return a
    return np.complex128(a) if _is_complex(x) else np.float64(a)


def _inner(a: Any, b: Any) -> float:
    """``Re(sum(a * b))`` leaf by leaf: the pairing of JAX's and autograd's complex convention."""
    la, lb = flatten(a)[0], flatten(b)[0]
    total = 0.0
    for x, y in zip(la, lb):
        if x is None or y is None:
            continue
        total += float(np.real(np.sum(np.asarray(x) * np.asarray(y))))
    return total


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
    from .api import compile as irad_compile
    from .api import vjp

    if set(kwargs) & _API_NAMES:  # `f=`, `argnums=`, ...: keywords of f that irad's API would take as its own
        name = getattr(f, "__name__", "f")
        f = functools.partial(f, **kwargs)
        f.__name__ = name  # type: ignore[attr-defined]
        kwargs = {}
    if argnums is not None:
        sel = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        fixed = [i for i in range(len(args)) if i not in sel and any(_is_float_leaf(x) for x in flatten(args[i])[0])]
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
        nums = tuple(i for i, a in enumerate(args) if any(_is_float_leaf(x) for x in flatten(a)[0]))
    else:
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise ValueError("check_grads: no floating-point argument to differentiate")
    dirs = {a: unflatten(flatten(args[a])[1], [_rand_like(x, rng) if _is_float_leaf(x) else None
                                                for x in flatten(args[a])[0]]) for a in nums}

    y, pb = vjp(f, *args, **kwargs)
    y_ref = f(*args, **kwargs)
    for got, ref in zip(flatten(y)[0], flatten(y_ref)[0]):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12, err_msg="check_grads: traced value differs from f")
    u = unflatten(flatten(y)[1], [_rand_like(x, rng) if _is_float_leaf(x) else np.zeros(np.shape(x))
                                  for x in flatten(y)[0]])
    cots = pb(u)
    lhs = sum(_inner(cots[a], dirs[a]) for a in nums)
    plus = f(*_shift(args, nums, dirs, eps), **kwargs)
    minus = f(*_shift(args, nums, dirs, -eps), **kwargs)
    fd = [(_numeric(p) - _numeric(m)) / (2 * eps) for p, m in zip(flatten(plus)[0], flatten(minus)[0])]
    rhs = _inner(u, unflatten(flatten(y)[1], fd))
    _close(lhs, rhs, rtol, atol, f"check_grads: VJP of {getattr(f, '__name__', f)} disagrees with finite differences")

    scalar = len(flatten(y)[0]) == 1 and np.ndim(flatten(y)[0][0]) == 0 and not _is_complex(flatten(y)[0][0])
    if scalar:
        prog = irad_compile(f, *args, argnums=nums, **kwargs)
        value, grads = prog(*args, **kwargs)
        np.testing.assert_allclose(flatten(value)[0][0], flatten(y_ref)[0][0], rtol=1e-10, atol=1e-12)
        g_dir = sum(_inner(grads[k], dirs[a]) for k, a in enumerate(nums))
        _close(g_dir * float(flatten(u)[0][0]), lhs, rtol, atol,
               f"check_grads: compiled gradient of {getattr(f, '__name__', f)} disagrees with its VJP")
    if order >= 2:
        _check_second_order(f, args, kwargs, nums, scalar, u, rng, eps, rtol, atol)


def _check_second_order(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], nums: tuple[int, ...],
                        scalar: bool, u: Any, rng: np.random.Generator, eps: float, rtol: float, atol: float) -> None:
    from .api import compile as irad_compile

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
    weights = [_rand_like(gl, rng) for gl in grad_leaves]
    fn = prog.fn

    def second(*d: Any) -> Any:
        outs = fn(*d)
        total = 0.0
        for gl, w in zip(outs[n_out:], weights):
            total = total + _dot(w, gl)
        return total

    float_pos = [i for i, x in enumerate(dyn) if _is_float_leaf(x)]
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
