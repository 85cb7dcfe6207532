"""Forward mode (``irad.jvp``, ``irad.linearize``): every built-in rule, models, pytrees, nesting.

Each check runs the compiled program at least twice and tests the second result: the first call
of a compiled object may come from trace time.  The oracle is a central finite difference in
float64 along the tangent, computed with plain numpy; ``jax.jvp`` where installed.
"""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.errors import GradError
from irad.pytree import flatten
from test_rules import CASES as RULE_CASES
from test_rules import _first_case_per_rule


def _is_float_leaf(x: object) -> bool:
    if type(x) in (float, complex):
        return True
    return isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind in "fc"


def _float_positions(args: tuple, wrt: object) -> list[int]:
    out = []
    for k, a in enumerate(args):
        if wrt is not None and k not in wrt:
            continue
        leaves = flatten(a)[0]
        if leaves and all(_is_float_leaf(x) for x in leaves):
            out.append(k)
    return out


def _tangent(x: object, rng: np.random.Generator) -> object:
    if type(x) is float:
        return float(rng.standard_normal())
    if type(x) is complex:
        return complex(rng.standard_normal(), rng.standard_normal())
    a = np.asarray(x)
    t = rng.standard_normal(a.shape)
    if a.dtype.kind == "c":
        t = t + 1j * rng.standard_normal(a.shape)
    t = t.astype(a.dtype)
    return t[()] if isinstance(x, np.generic) else t


def _axpy(x: object, t: object, eps: float) -> object:
    leaves, tree = flatten(x)
    tl = flatten(t)[0]
    out = []
    for a, b in zip(leaves, tl):
        v = a + eps * b
        out.append(type(a)(v) if type(a) in (float, complex) else np.asarray(v) if isinstance(a, np.ndarray) else v)
    from irad.pytree import unflatten
    return unflatten(tree, out)


def _fd(f, primals: tuple, tangents: tuple, eps: float) -> list:
    """Central difference of every float output leaf of ``f`` along ``tangents``."""
    up = f(*[_axpy(p, t, eps) for p, t in zip(primals, tangents)])
    dn = f(*[_axpy(p, t, -eps) for p, t in zip(primals, tangents)])
    return [None if not _is_float_leaf(a) else (np.asarray(a) - np.asarray(b)) / (2 * eps)
            for a, b in zip(flatten(up)[0], flatten(dn)[0])]


def _check_jvp(f, primals: tuple, tangents: tuple, rtol: float = 1e-5, atol: float = 1e-7, eps: float = 1e-6):
    for _ in range(2):  # the second call runs the cached program
        y, ydot = irad.jvp(f, primals, tangents)
    want_y = f(*primals)
    for a, b in zip(flatten(y)[0], flatten(want_y)[0]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
    fd = _fd(f, primals, tangents, eps)
    got = flatten(ydot, is_leaf=lambda x: x is None)[0]
    assert len(got) == len(fd)
    for g, d, p in zip(got, fd, flatten(want_y)[0]):
        if d is None:
            continue
        if not np.iscomplexobj(p):
            d = np.real(d)  # (a real output's tangent is real: real_if_close moves off the real line)
        assert np.shape(g) == np.shape(d)
        np.testing.assert_allclose(np.asarray(g), d, rtol=rtol, atol=atol * max(1.0, float(np.max(np.abs(d))) if np.size(d) else 1.0))
    return y, ydot


def _rule_case_fn(fn, args, kwargs, pos):
    def f(*xs):
        a = list(args)
        for p, x in zip(pos, xs):
            a[p] = x
        return fn(*a, **kwargs)
    f.__name__ = f"case_{getattr(fn, '__name__', 'fn')}"
    return f


@pytest.mark.parametrize("fn,args,kwargs,opts", RULE_CASES)
def test_every_builtin_rule_in_forward_mode(fn, args, kwargs, opts):
    """Forward mode on every case of tests/test_rules.py: a rule's forward form is its own, or is
    derived from its reverse form; either way it must match finite differences."""
    kwargs = {**kwargs, **opts.get("fn_kwargs", {})}
    pos = _float_positions(args, opts.get("wrt"))
    if not pos:
        pytest.skip("no float argument to differentiate")  # (integer-only calls: bincount's weights are ints)
    rng = np.random.default_rng(0)
    primals = tuple(args[p] for p in pos)
    tangents = tuple(flatten(p)[1] and _tree_tangent(p, rng) for p in primals)
    f = _rule_case_fn(fn, args, kwargs, pos)
    _check_jvp(f, primals, tangents, rtol=max(opts.get("rtol", 1e-5), 1e-5), atol=max(opts.get("atol", 1e-7), 1e-7),
               eps=opts.get("eps", 1e-6))


def _tree_tangent(p, rng):
    from irad.pytree import unflatten
    leaves, tree = flatten(p)
    return unflatten(tree, [_tangent(x, rng) for x in leaves])
