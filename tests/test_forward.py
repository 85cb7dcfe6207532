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
from functions import CASES as CORPUS
from test_rules import CASES as RULE_CASES


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


def _declared_types_hold(f, primals: tuple, tangents: tuple) -> None:
    """Run the optimised JVP graph op by op: every value has the type its var declares (later
    transforms, batching above all, trust the declared shapes)."""
    from irad.forward import _tangent_leaves, jvp_program
    from irad.ir import ArrayT, ScalarT, bind_outputs, map_atoms, typeof
    from irad.pytree import flatten_args
    prog = jvp_program(f, primals)
    leaves = flatten_args(primals, {}, frozenset(range(len(primals))))[0]
    env = dict(zip((v.id for v in prog.graph.inputs),
                   [leaves[i] for i in prog.dyn_pos] + _tangent_leaves(prog, f, leaves, tangents)))
    for op in prog.graph.ops:
        get = lambda a: env[a.id] if isinstance(a, irad.Var) else a.value  # noqa: E731
        r = op.fn(*[map_atoms(a, get) for a in op.args], **{k: map_atoms(a, get) for k, a in op.kwargs if k[0] != "_"})
        bind_outputs(op, r, env)
        for o in op.outs:
            if isinstance(o.type, (ArrayT, ScalarT)) and o.id in env:
                t = typeof(env[o.id])
                if isinstance(t, ArrayT) and isinstance(o.type, ArrayT) and t.shape == ():
                    t = ArrayT(t.dtype, (), o.type.scalar)  # (a 0-d array and a numpy scalar compute alike)
                assert t == o.type, f"{op.prim} declares {o.type}, computes {t}"


def _check_jvp(f, primals: tuple, tangents: tuple, rtol: float = 1e-5, atol: float = 1e-7, eps: float = 1e-6):
    _declared_types_hold(f, primals, tangents)
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



CORPUS_DIFF = [c for c in CORPUS if c.differentiable and not c.impure]


@pytest.mark.parametrize("case", CORPUS_DIFF, ids=[c.name for c in CORPUS_DIFF])
def test_corpus_in_forward_mode(case):
    """The shared corpus (plain numpy code as people write it): jvp along the argnums arguments."""
    rng = np.random.default_rng(1)
    args = case.make_args(rng)
    primals = tuple(args[a] for a in case.argnums)
    tangents = tuple(_tree_tangent(p, rng) for p in primals)

    def f(*xs):
        full = list(args)
        for a, x in zip(case.argnums, xs):
            full[a] = x
        return case.fn(*full)
    f.__name__ = case.name
    _check_jvp(f, primals, tangents, rtol=1e-4, atol=1e-6)

# ---- models, pytrees, nesting, caching ---------------------------------------------------------

jax = pytest.importorskip("jax", reason="jax is the peer forward mode is compared with")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


def mlp(params, x):
    h = np.tanh(x @ params["W1"] + params["b1"])
    return np.sum((h @ params["W2"]) ** 2) / x.shape[0]


def mlp_jax(params, x):
    h = jnp.tanh(x @ params["W1"] + params["b1"])
    return jnp.sum((h @ params["W2"]) ** 2) / x.shape[0]


def _params(rng):
    return {"W1": rng.standard_normal((3, 4)), "b1": rng.standard_normal(4), "W2": rng.standard_normal((4, 2))}


def test_jvp_of_a_model_matches_jax_and_finite_differences():
    rng = np.random.default_rng(1)
    p, x = _params(rng), rng.standard_normal((5, 3))
    tp, tx = _params(rng), rng.standard_normal((5, 3))
    y, ydot = _check_jvp(mlp, (p, x), (tp, tx))
    jy, jydot = jax.jvp(mlp_jax, (p, x), (tp, tx))
    np.testing.assert_allclose(ydot, jydot, rtol=1e-10)
    np.testing.assert_allclose(y, jy, rtol=1e-12)


def test_jvp_pytree_outputs_and_python_floats():
    def f(x, s):
        return {"a": np.sin(x) * s, "b": (s * s, np.cumsum(x))}
    x, s = np.linspace(0.1, 1.0, 4), 0.7
    y, ydot = _check_jvp(f, (x, s), (np.ones(4), 0.5))
    assert type(ydot["b"][0]) is float
    assert set(ydot) == {"a", "b"}


def test_jvp_against_vjp_by_the_pairing():
    """<ybar, J xdot> == <J^T ybar, xdot>: forward and reverse mode agree exactly, not only to FD."""
    rng = np.random.default_rng(2)

    def f(A, b):
        return np.linalg.solve(A @ A.T + 3 * np.eye(4), np.exp(b)) * np.linalg.norm(A, axis=0)
    A, b = rng.standard_normal((4, 4)), rng.standard_normal(4)
    tA, tb, ybar = rng.standard_normal((4, 4)), rng.standard_normal(4), rng.standard_normal(4)
    for _ in range(2):
        _, ydot = irad.jvp(f, (A, b), (tA, tb))
        _, pb = irad.vjp(f, A, b)
    gA, gb = pb(ybar)
    np.testing.assert_allclose(np.sum(ybar * ydot), np.sum(gA * tA) + np.sum(gb * tb), rtol=1e-10)


def test_integer_primals_take_no_tangent():
    def f(x, n):
        return np.sum(x ** n)
    x = np.array([0.5, 1.5])
    for _ in range(2):
        y, ydot = irad.jvp(f, (x, 3), (np.array([1.0, 0.0]), 0))
    np.testing.assert_allclose(ydot, 3 * 0.5 ** 2)


def test_jvp_program_is_cached_and_guards_retrace(monkeypatch):
    import irad.forward as fw
    calls = []
    compile_jvp = fw._compile_jvp
    monkeypatch.setattr(fw, "_compile_jvp", lambda *a: calls.append(1) or compile_jvp(*a))

    def f(x):
        if x.sum() > 0:
            return np.sum(np.exp(x))
        return np.sum(x ** 3)
    x = np.array([0.2, 0.3])
    for _ in range(3):
        y, ydot = irad.jvp(f, (x,), (np.ones(2),))
    assert len(calls) == 1  # traced once, then the compiled program
    np.testing.assert_allclose(ydot, np.sum(np.exp(x)))
    for _ in range(2):
        y, ydot = irad.jvp(f, (-x,), (np.ones(2),))
    np.testing.assert_allclose(ydot, np.sum(3 * x ** 2))  # the other branch: a new trace, never the old program
    y, ydot = irad.jvp(f, (x,), (np.ones(2),))
    np.testing.assert_allclose(ydot, np.sum(np.exp(x)))
    assert len(calls) == 2  # one program per branch, both kept


def test_linearize_reuses_the_primal():
    rng = np.random.default_rng(3)
    p, x = _params(rng), rng.standard_normal((5, 3))
    y, f_jvp = irad.linearize(mlp, p, x)
    assert "tanh" not in f_jvp.source  # the primal ran once; the linear program only reads residuals
    for _ in range(3):
        tp, tx = _params(rng), rng.standard_normal((5, 3))
        np.testing.assert_allclose(f_jvp(tp, tx), jax.jvp(mlp_jax, (p, x), (tp, tx))[1], rtol=1e-10)
    np.testing.assert_allclose(y, mlp(p, x))


def test_hvp_forward_over_reverse_matches_jax():
    rng = np.random.default_rng(4)
    p, x = _params(rng), rng.standard_normal((5, 3))
    v = _params(rng)
    g = irad.grad(mlp)
    for _ in range(2):
        _, hv = irad.jvp(lambda q: g(q, x), (p,), (v,))
    want = jax.jvp(lambda q: jax.grad(mlp_jax)(q, x), (p,), (v,))[1]
    for k in p:
        np.testing.assert_allclose(hv[k], want[k], rtol=1e-9, atol=1e-12)


def test_reverse_over_forward_and_forward_over_forward():
    def f(x):
        return np.sum(np.sin(x) * np.exp(0.3 * x))
    x, v = np.linspace(-1, 1, 5), np.linspace(0.5, 1.5, 5)

    def directional(x):
        return irad.jvp(f, (x,), (v,))[1]
    g = irad.grad(directional)
    for _ in range(2):
        got = g(x)
    want = jax.grad(lambda x: jax.jvp(lambda y: jnp.sum(jnp.sin(y) * jnp.exp(0.3 * y)), (x,), (v,))[1])(x)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    for _ in range(2):
        _, second = irad.jvp(directional, (x,), (v,))
    want2 = jax.jvp(lambda x: jax.jvp(lambda y: jnp.sum(jnp.sin(y) * jnp.exp(0.3 * y)), (x,), (v,))[1], (x,), (v,))[1]
    np.testing.assert_allclose(second, want2, rtol=1e-10)


def test_tangent_errors_name_the_function():
    def f(x):
        return np.sum(x * x)
    with pytest.raises(GradError, match="tangents must be a tuple"):
        irad.jvp(f, (np.ones(2),), np.ones(2))
    with pytest.raises(GradError, match=r"shape \(3,\).*\(2,\)"):
        irad.jvp(f, (np.ones(2),), (np.ones(3),))
    with pytest.raises(GradError, match="test_forward.py"):
        irad.jvp(f, (np.ones(2),), (np.ones(2), 1.0))


def test_complex_jvp_matches_jax():
    z = np.array([0.3 + 0.4j, -1.0 + 0.2j])
    t = np.array([1.0 - 0.5j, 0.25 + 1j])
    for f, fj in [(lambda z: np.sum(np.abs(z) ** 2), lambda z: jnp.sum(jnp.abs(z) ** 2)),
                  (lambda z: np.exp(z) * np.conj(z), lambda z: jnp.exp(z) * jnp.conj(z))]:
        _, got = _check_jvp(f, (z,), (t,))
        np.testing.assert_allclose(got, jax.jvp(fj, (z,), (t,))[1], rtol=1e-12)


def test_has_aux_follows_jax():
    def f(x):
        y = np.sum(np.sin(x))
        return y, {"norm": np.linalg.norm(x), "n": x.shape[0]}
    x, t = np.linspace(0, 1, 3), np.ones(3)
    for _ in range(2):
        y, ydot, aux = irad.jvp(f, (x,), (t,), has_aux=True)
    np.testing.assert_allclose(ydot, np.sum(np.cos(x)))
    assert aux["n"] == 3 and np.isclose(aux["norm"], np.linalg.norm(x))
    y2, f_jvp, aux2 = irad.linearize(f, x, has_aux=True)
    np.testing.assert_allclose(f_jvp(2 * t), 2 * np.sum(np.cos(x)))
    assert aux2["n"] == 3 and y2 == y


@pytest.mark.parametrize("fn,shape", [(fn, s) for fn in (np.column_stack, np.vstack, np.hstack, np.stack, np.array)
                                      for s in ((3,), (2, 3))] + [(np.concatenate, (2, 3))])
def test_an_array_where_a_rule_reads_a_sequence(fn, shape):
    """``np.column_stack(a)`` of one array: the rule reads ``a`` as a sequence of its rows, so its
    pullback gives a tuple of row cotangents for one array tangent (the transposition splits it)."""
    rng = np.random.default_rng(5)
    x, t = rng.standard_normal(shape), rng.standard_normal(shape)
    _check_jvp(lambda a: fn(a) * 1.5, (x,), (t,))


# ---- found in review: each a class of inputs forward mode must treat as reverse mode does --------

def _via_json(x):
    import json
    return np.sum(np.array(json.loads(json.dumps(x.tolist()))))


def _via_bits(x):
    return np.sum(x.view(np.int64).view(np.float64) * x)


def _via_struct(x):
    import struct
    return struct.unpack("d", struct.pack("d", x[0]))[0] * x[1]


@pytest.mark.parametrize("f", [_via_json, _via_bits, _via_struct])
def test_a_derivative_through_opaque_values_is_refused_in_forward_mode(f):
    """A trip through a string, raw bits or bytes would drop the derivative: the same NoRuleError
    as grad's, from jvp, linearize and jacfwd alike (never a silent zero)."""
    x, v = np.array([0.3, 1.2]), np.ones(2)
    with pytest.raises(irad.NoRuleError):
        irad.jvp(f, (x,), (v,))
    with pytest.raises(irad.NoRuleError):
        irad.linearize(f, x)
    with pytest.raises(irad.NoRuleError):
        irad.jacfwd(f)(x)


def test_custom_vjp_with_a_function_argument_in_forward_mode():
    """nondiff_argnums holding a function: its pullback slot is NotImplemented, which the run-time
    transposition treats as 'no tangent'."""
    from functools import partial

    @partial(irad.custom_vjp, nondiff_argnums=(0,))
    def app(fn, p):
        return fn(p) * 3

    app.defvjp(lambda fn, p: (app(fn, p), p), lambda fn, p, g: (g * np.cos(p) * 3,))
    x = np.array([0.3, 1.2])
    for _ in range(2):
        _, t = irad.jvp(lambda p: np.sum(app(np.sin, p)), (x,), (np.array([1.0, 2.0]),))
    np.testing.assert_allclose(t, 3 * np.cos(0.3) + 6 * np.cos(1.2))
    np.testing.assert_allclose(irad.jacfwd(lambda p: app(np.sin, p))(x), np.diag(3 * np.cos(x)))


def test_linearize_keeps_the_point_it_was_called_at():
    """f_jvp is the derivative at the point of the call, even when the caller then updates the
    primal or the returned output in place (a residual may be either)."""
    x, v = np.array([0.3, 1.2]), np.ones(2)
    y, f_jvp = irad.linearize(lambda x: np.sin(x) * x, x)
    want = np.cos(np.array([0.3, 1.2])) * np.array([0.3, 1.2]) + np.sin(np.array([0.3, 1.2]))
    x[0] = 100.0
    np.testing.assert_allclose(f_jvp(v), want)
    y, f_jvp = irad.linearize(np.exp, np.array([0.3, 1.2]))
    y[0] = -50.0
    np.testing.assert_allclose(f_jvp(v), np.exp([0.3, 1.2]))


def test_primals_must_be_a_tuple():
    with pytest.raises(GradError, match=r"primals must be a tuple.*jvp\(f, \(x,\), \(v,\)\)"):
        irad.jvp(lambda x: np.sum(x), np.ones(2), (np.ones(2),))


def test_logging_a_jvp_trace(caplog):
    import logging
    irad.config(log="trace,retrace")
    try:
        with caplog.at_level(logging.INFO, logger="irad"):
            def f(x):
                return np.sum(np.sin(x))
            irad.jvp(f, (np.ones(2),), (np.ones(2),))
            irad.jvp(f, (np.ones(3),), (np.ones(3),))
    finally:
        irad.config(log=None)
    text = caplog.text
    assert "jvp(f): traced" in text and "new argument signature" in text


def test_jacfwd_with_a_traced_int_in_an_index_list():
    F = lambda x, n: x[[n, 0]] ** 3  # noqa: E731
    x = np.array([0.3, -0.7, 1.1])
    want = np.zeros((2, 3))
    want[0, 2], want[1, 0] = 3 * 1.1 ** 2, 3 * 0.3 ** 2
    for n in (2, 2):
        np.testing.assert_allclose(irad.jacfwd(F)(x, n), want)
