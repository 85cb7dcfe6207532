"""Peepholes (passes/simplify.py) and expression forming in lowering (irad/lower.py inline_plan).

Each rewrite fires on its pattern and not on its near-misses, and a program with it gives the
same bits as the program without it (the default pipeline minus ``simplify``; lowering with the
temporaries kept as statements), on the second and later calls with new values; gradients also
match central finite differences.
"""
from __future__ import annotations

import math
import operator
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irad
import irad.passes as P
from irad import loops
from irad.testing import check_grads
from irad.ir import ArrayT, Const, Graph, Op, ScalarT, Var
from irad.lower import MAX_INLINE_DEPTH, inline_plan, lower
from irad.pytree import flatten

NO_SIMPLIFY = [p for p in P.PIPELINE if p is not P.simplify]


def _prims(f, *args):
    return [op.prim for op in irad.compile(f, *args).graph.ops]


def _simplified_prims(f, *args):
    """The prims of ``f``'s traced (forward) graph after ``simplify`` and ``dce``."""
    return [op.prim for op in P.dce(P.simplify(irad.trace(f, *args))).ops]


def _bits(x):
    leaves = flatten(x)[0]
    return [np.asarray(v).tobytes() + str(type(v)).encode() for v in leaves]


def _same_programs(f, *arg_sets):
    """``value_and_grad(f)`` with and without ``simplify``: the same bits on every call (the first
    traces; the later ones run the cached programs on new values)."""
    a, b = irad.value_and_grad(f), irad.value_and_grad(f, passes=NO_SIMPLIFY)
    for args in arg_sets:
        assert _bits(a(*args)) == _bits(b(*args))
    return a


# ---- simplify: each rewrite and its near-misses -----------------------------------------------

def test_square_becomes_a_product():
    assert _simplified_prims(lambda x: x ** 2, 3.0) == ["operator.mul"]
    assert _simplified_prims(lambda x: x ** 2.0, 3.0) == ["operator.mul"]
    assert _simplified_prims(lambda x: x ** 2, np.ones(3)) == ["operator.mul"]
    assert _simplified_prims(lambda x: x ** 2, np.float32(2.0)) == ["operator.mul"]


def test_square_near_misses_keep_pow():
    assert _simplified_prims(lambda x: x ** 3, 3.0) == ["operator.pow"]
    assert _simplified_prims(lambda x: x ** 2.5, 3.0) == ["operator.pow"]
    assert _simplified_prims(lambda x: x ** 2.0, np.arange(3)) == ["operator.pow"]  # int ** 2.0 is float
    assert _simplified_prims(lambda z: z ** 2, 1.0 + 2.0j) == ["operator.pow"]


@pytest.mark.parametrize("f", [lambda x: np.sum(2.0 ** -x), lambda x: np.sum(np.e ** -(x * x)),
                               lambda x: np.sum(2 ** -x), lambda x: np.sum(2.0 ** (-x * x)),
                               lambda x: np.sum(x ** -x), lambda x: np.sum(3.0 ** (x * -x))])
def test_a_power_of_a_negation_stays_a_power(f):
    """A power whose exponent is a negation is no sum: the add/sub folds must not touch it (they
    once turned ``2.0 ** -x`` into ``2.0 + x``, in compiled programs only)."""
    x = np.array([0.5, 1.2, 2.0])  # (positive: x ** -x is real)
    prog = irad.value_and_grad(f)
    for t in (x, x * 0.7, x + 0.1):
        v, g = prog(t)
        assert v == pytest.approx(f(t), rel=1e-12)
        check_grads(f, t)
    assert "operator.add" not in _simplified_prims(f, x) and "operator.sub" not in _simplified_prims(f, x)
    _same_programs(f, (x,), (x * 0.7,))


def test_times_one_is_dropped_for_numbers_not_for_arrays():
    assert _simplified_prims(lambda x: 1.0 * x + x, 3.0) == ["operator.add"]
    assert _simplified_prims(lambda x: x / 1.0 + x, 3.0) == ["operator.add"]
    # 1.0 * an array is a new array: dropping it would alias the argument
    assert _simplified_prims(lambda x: 1.0 * x, np.ones(3)) == ["operator.mul"]
    # 1.0 * an int is a float: dropping it would change the type
    n, y = Var(0, ScalarT("int")), Var(1, ScalarT("float"))
    g = Graph("g", (n,), (Op("operator.mul", (Const(1.0, ScalarT("float")), n), (), (y,), operator.mul),), (y,))
    assert P.simplify(g) is g


def test_constant_chains_fold_only_through_a_power_of_two():
    g = P.dce(P.simplify(irad.trace(lambda x: 100.0 * (2.0 * x), 3.0)))
    assert [op.prim for op in g.ops] == ["operator.mul"] and Const(200.0, ScalarT("float")) in g.ops[0].args
    assert _simplified_prims(lambda x: 0.5 * (3.0 * x), 3.0) == ["operator.mul"]
    # neither constant is a power of two: 3 * (0.1 * x) and 0.3 * x round differently
    assert _simplified_prims(lambda x: 3.0 * (0.1 * x), 3.0) == ["operator.mul", "operator.mul"]
    # the inner product is read twice: folding would not remove it
    def reads_twice(x):
        t = 2.0 * x
        return 4.0 * t + t

    assert _simplified_prims(reads_twice, 3.0) == ["operator.mul", "operator.mul", "operator.add"]


def test_negations_fold_into_sums_and_constants():
    assert _simplified_prims(lambda a, b: a + -b, 1.0, 2.0) == ["operator.sub"]
    assert _simplified_prims(lambda a, b: -a + b, 1.0, 2.0) == ["operator.sub"]
    assert _simplified_prims(lambda a, b: a - -b, 1.0, 2.0) == ["operator.add"]
    assert _simplified_prims(lambda a, b, c: a + (-b) * c, 1.0, 2.0, 3.0) == ["operator.mul", "operator.sub"]
    assert _simplified_prims(lambda a: 3.0 * -a, 1.0) == ["operator.mul"]
    assert _simplified_prims(lambda a: -(3.0 * a), 1.0) == ["operator.mul"]
    x = np.ones(3)
    assert _simplified_prims(lambda a, b: a + -b, x, x) == ["operator.sub"]
    # the negation is read twice: it stays
    assert _simplified_prims(lambda a, b: (a + -b) * -b, 1.0, 2.0).count("operator.neg") == 1


def test_objects_with_their_own_arithmetic_are_not_rewritten():
    class Num:
        def __init__(self, v):
            self.v = v

        def __mul__(self, o):
            return Num(self.v * (o.v if isinstance(o, Num) else o))

        __rmul__ = __mul__

        def __pow__(self, e):
            return Num(self.v ** e + 1.0)  # not a square: x ** 2 must stay x ** 2

    def f(x):
        return (Num(x) ** 2).v * 1.0

    assert irad.grad(f)(3.0) == pytest.approx(6.0)
    assert irad.grad(f)(4.0) == pytest.approx(8.0)


# ---- simplify: same bits, right gradients ------------------------------------------------------

def rosen(xs):
    total = 0.0
    for i in range(len(xs) - 1):
        total = total + 100.0 * (xs[i + 1] - xs[i] ** 2) ** 2 + (1.0 - xs[i]) ** 2
    return total


def poly(x, y):
    return (x - y) ** 2 + 3.0 * (-x) * y + 2.0 * (0.5 * x) - (-y) * x / 1.0


@pytest.mark.parametrize("n", [2, 3, 9])
def test_rosenbrock_gradient_is_exact_and_the_same_bits(n):
    rng = np.random.default_rng(n)
    sets = [([float(v) for v in rng.normal(size=n)],) for _ in range(3)]
    vg = irad.value_and_grad(rosen)
    for (xs,) in sets:
        v, g = vg(xs)
        want = [0.0] * n
        for i in range(n - 1):
            a = xs[i + 1] - xs[i] * xs[i]
            want[i] += -400.0 * a * xs[i] - 2.0 * (1.0 - xs[i])
            want[i + 1] += 200.0 * a
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)
    check_grads(rosen, *sets[-1])
    # pow vs x*x may differ in the last bit (libm); everything else is the same bits: compare the
    # programs on arguments whose squares are exact
    exact = [([float(k) for k in rng.integers(-8, 8, size=n)],) for _ in range(3)]
    _same_programs(rosen, *exact)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_arrays_through_simplify_same_bits(shape):
    rng = np.random.default_rng(1)
    sets = [(rng.normal(size=shape), rng.normal(size=shape)) for _ in range(3)]
    f = lambda x, y: np.sum(poly(x, y))  # noqa: E731
    vg = _same_programs(f, *sets)
    assert vg.traces == 1
    check_grads(f, *sets[-1], argnums=(0, 1))


def test_broadcasting_and_repeated_arguments():
    x, y = np.arange(3.0), np.array(2.0)
    f = lambda a, b: np.sum(a + -b * a) + np.sum((-a) * 4.0 * (0.5 * b))  # noqa: E731
    _same_programs(f, (x, y), (x + 1.0, y - 1.0), (x * 3.0, y + 0.5))
    check_grads(f, x, y, argnums=(0, 1))
    g = lambda a: poly(a, a)  # noqa: E731
    _same_programs(g, (1.5,), (-2.0,), (0.25,))
    check_grads(g, 1.5)


# ---- lowering: expression forming ----------------------------------------------------------------

def test_single_use_temporaries_become_expressions():
    src = irad.compile(rosen, [1.0, 2.0, 3.0]).source
    body = [ln for ln in src.splitlines()[1:] if not ln.strip().startswith(("del ", "return"))]
    assert len(body) < 12, src
    assert "**" not in src


def _kept(g):
    """``g`` lowered with every temporary a statement of its own (nothing inlined)."""
    import irad.lower as L
    saved = L.MAX_INLINE_DEPTH
    L.MAX_INLINE_DEPTH = 0
    try:
        return lower(g).fn
    finally:
        L.MAX_INLINE_DEPTH = saved


_BINOPS = ["+", "-", "*", "/", "**", "<", "==", ">=", "&", "|", "^", "%", "//"]


@st.composite
def _programs(draw):
    """A random straight-line function of two float arguments, its statements reading earlier ones."""
    n = draw(st.integers(1, 14))
    names, lines = ["a", "b"], []
    for k in range(n):
        form = draw(st.sampled_from(["bin", "bin", "bin", "neg", "const"]))
        x, y = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        if form == "neg":
            rhs = f"-{x}"
        elif form == "const":
            c = draw(st.sampled_from(["2", "-2.0", "0.5", "-1", "3"]))
            rhs = f"{c} {draw(st.sampled_from(['+', '-', '*', '**']))} {x}" if draw(st.booleans()) \
                else f"{x} {draw(st.sampled_from(['+', '-', '*', '/']))} {c}"
        else:
            op = draw(st.sampled_from(_BINOPS))
            rhs = f"{x} {op} {y}"
            if op in ("&", "|", "^", "%", "//", "<", "==", ">="):
                rhs = f"float(int({x}) {op} int({y}))" if op in ("&", "|", "^") else f"float({x} {op} {y})" \
                    if op in ("<", "==", ">=") else rhs
        lines.append(f"    v{k} = {rhs}")
        names.append(f"v{k}")
    outs = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2))
    src = "def f(a, b):\n" + "\n".join(lines) + f"\n    return ({', '.join(outs)},)\n"
    return src


@settings(max_examples=150, deadline=None)
@given(_programs(), st.floats(-3, 3), st.floats(-3, 3))
def test_expressions_keep_python_semantics(src, a, b):
    ns: dict = {}
    exec(src, ns)
    f = ns["f"]
    try:
        with np.errstate(all="ignore"):
            want = f(a, b)
    except (ArithmeticError, ValueError, TypeError):
        return
    if any(type(w) is complex for w in want):
        return
    g = irad.trace(f, a, b)
    got = lower(g).fn(a, b)
    kept = _kept(g)(a, b)
    assert [repr(x) for x in got] == [repr(x) for x in want] == [repr(x) for x in kept], src


def test_precedence_of_the_forms_lowering_writes():
    cases = [lambda a, b: -(a * b), lambda a, b: (-a) ** b, lambda a, b: a ** -b, lambda a, b: a - (b - a),
             lambda a, b: (a - b) - a, lambda a, b: a / (b * a), lambda a, b: (a ** b) ** a,
             lambda a, b: a ** (b ** a), lambda a, b: -(a ** b), lambda a, b: ((a < b) == (b < a)) * 1.0,
             lambda a, b: (a + b) @ (a - b), lambda a, b: (a * b).T.sum(), lambda a, b: (a + b)[0]]
    for f in cases:
        for a, b in ((np.full((2, 2), 1.5), np.full((2, 2), 0.5)),):
            with np.errstate(all="ignore"):
                want = f(a, b)
                got = lower(irad.trace(f, a, b)).fn(a, b)[0]
            np.testing.assert_array_equal(got, want)


def test_a_long_running_sum_compiles_and_nests_boundedly():
    xs = [float(i) * 0.1 for i in range(600)]

    def total(v):
        s = 0.0
        for x in v:
            s = s + x * x
        return s

    vg = irad.value_and_grad(total)
    vg(xs)
    v, g = vg([x + 1.0 for x in xs])
    assert v == total([x + 1.0 for x in xs])
    np.testing.assert_allclose(g, [2.0 * (x + 1.0) for x in xs])
    src = vg.program(xs).source
    assert max(ln.count("(") for ln in src.splitlines()[1:]) < 4 * MAX_INLINE_DEPTH


def _arr(i, shape=(3,)):
    return Var(i, ArrayT("float64", shape))


def test_an_array_temporary_never_moves_past_an_in_place_write():
    from irad import primitives as irad_ops
    a, b, t, s, u = _arr(0), _arr(1), _arr(2), _arr(3), _arr(4)
    g = Graph("g", (a, b), (
        Op("operator.mul", (a, Const(2.0, ScalarT("float"))), (), (t,), operator.mul),
        Op("irad.primitives.add_into", (a, b), (), (s,), irad_ops.add_into),  # writes into a's buffer
        Op("operator.add", (t, s), (), (u,), operator.add),
    ), (u,))
    assert inline_plan(g, {0, 1, 4}) == {}
    x, y = np.ones(3), np.full(3, 5.0)
    (out,) = lower(g).fn(x.copy(), y)
    np.testing.assert_array_equal(out, 2.0 + 6.0)
    # without the write between, the temporary is written into its reader
    g2 = g.replace(ops=(g.ops[0], Op("operator.add", (t, b), (), (u,), operator.add)))
    assert inline_plan(g2, {0, 1, 4}) == {0: 1}
    np.testing.assert_array_equal(lower(g2).fn(x.copy(), y)[0], 7.0)


def test_a_number_temporary_moves_past_pure_ops_not_past_effects():
    f_ = ScalarT("float")
    a, t, m, u = Var(0, f_), Var(1, f_), Var(2, ArrayT("float64", (3,))), Var(3, f_)
    arr = Var(4, ArrayT("float64", (3,)))
    ops = (Op("operator.mul", (a, a), (), (t,), operator.mul),
           Op("numpy.sin", (arr,), (), (m,), np.sin),
           Op("operator.add", (t, Const(1.0, f_)), (), (u,), operator.add))
    g = Graph("g", (a, arr), ops, (u, m))
    assert inline_plan(g, {0, 4, 3, 2}) == {0: 2}
    guard = Op("irad.primitives.guard", (a,), (("expected", Const(True, ScalarT("bool"))),), (), None)
    g2 = g.replace(ops=(ops[0], guard, ops[2]), outputs=(u,))
    assert inline_plan(g2, {0, 4, 3}) == {}


def test_inlined_temporaries_are_never_deleted_and_arrays_still_are():
    def f(x, w):
        h = np.tanh(x @ w + 1.0)
        return np.sum(h * h - 0.5 * h)

    x, w = np.ones((4, 3)), np.full((3, 2), 0.1)
    vg = irad.value_and_grad(f, argnums=(0, 1))
    vg(x, w)
    src = vg.program(x, w).source
    assert "del " in src
    v, (gx, gw) = vg(x * 2.0, w - 0.3)
    check_grads(f, x * 2.0, w - 0.3, argnums=(0, 1))
    assert math.isfinite(v) and gx.shape == x.shape and gw.shape == w.shape


def test_random_scalar_chains_match_python_bit_for_bit():
    rng = random.Random(5)
    for _ in range(20):
        k = rng.randint(2, 40)
        coeffs = [rng.choice([2.0, 0.5, -1.0, 3.0, 0.1]) for _ in range(k)]

        def f(x, y, coeffs=coeffs):
            s = x
            for c in coeffs:
                s = c * s - y * (-s) + 1.0 * s
            return s

        vg = irad.value_and_grad(f, argnums=(0, 1))
        ref = irad.value_and_grad(f, argnums=(0, 1), passes=NO_SIMPLIFY)
        for x, y in ((0.3, -0.2), (1.1, 0.4), (-0.7, 0.05)):
            a, b = vg(x, y), ref(x, y)
            assert a[0] == f(x, y) and a[0] == b[0]
            assert a[1] == b[1]


@pytest.fixture
def unrolled():
    """These peepholes are of straight-line programs: the loops stay written out."""
    with loops.rerolling(False):
        yield


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_numpy_scalar_elements_and_their_constants(dtype, unrolled):
    """``x[i]`` of an array is a numpy scalar, and so are the cotangent constants: ``np.float64(1.0)
    * v`` drops only where the result keeps ``v``'s type (a float32 ``v`` becomes float64)."""
    rng = np.random.default_rng(3)
    exact = [(rng.integers(-4, 4, size=5).astype(dtype),) for _ in range(3)]
    vg = _same_programs(rosen, *exact)
    for (x,) in exact:
        v, g = vg(x)
        assert type(v) is type(rosen(x)) and v == rosen(x)
        assert g.dtype == dtype
    x = rng.normal(size=5)
    check_grads(rosen, x)
    if dtype is np.float64:
        assert "f64_1_0" not in vg.program(x).source


def test_an_outer_product_with_a_scalar_is_a_product():
    y, c = np.arange(1.0, 4.0), np.array(0.5)
    f = lambda a, s: np.tensordot(a, s, axes=([], []))  # noqa: E731
    assert _simplified_prims(f, y, c) == ["operator.mul"]
    assert _simplified_prims(f, np.ones((2, 3)), np.float64(2.0)) == ["operator.mul"]
    # near-misses: an outer product of two vectors; a float32 vector times a float64 scalar (upcasts)
    assert _simplified_prims(f, y, y) == ["numpy.tensordot"]
    assert _simplified_prims(f, y.astype(np.float32), c) == ["numpy.tensordot"]
    loss = lambda a, b: 0.5 * np.dot(a, b) + np.sum(np.tensordot(a, b[0], axes=([], [])))  # noqa: E731
    rng = np.random.default_rng(0)
    _same_programs(loss, *[(rng.normal(size=4), rng.normal(size=4)) for _ in range(3)])
    check_grads(loss, rng.normal(size=4), rng.normal(size=4), argnums=(0, 1))


IDENTITY = np.eye(3)  # the user's array: read at each call, so never taken for its contents


def _noise_nll(s, K, y):
    """The noise term of a GP: d/ds of ``K + s * I`` is ``sum(K_bar * I)``."""
    L = np.linalg.cholesky(K + s * np.eye(K.shape[0]))
    return np.sum(np.log(np.diag(L))) + 0.5 * np.sum(np.linalg.solve(L, y) ** 2)


def test_a_sum_masked_by_the_identity_is_a_trace():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 4))
    f = lambda a: np.sum(a * np.eye(4))  # noqa: E731
    assert _simplified_prims(f, A) == ["numpy.trace"]
    assert _simplified_prims(lambda a: np.sum(np.eye(4) * a, axis=(1, 0)), A) == ["numpy.trace"]
    assert "numpy.trace" in _prims(_noise_nll, 0.3, _spd(rng, 5), rng.normal(size=5))
    vg = irad.value_and_grad(_noise_nll)
    for _ in range(4):  # the 2nd and later calls run the cached program on new values
        s, K, y = float(rng.uniform(0.1, 1.0)), _spd(rng, 5), rng.normal(size=5)
        val, g = vg(s, K, y)
        eps = 1e-6
        fd = (_noise_nll(s + eps, K, y) - _noise_nll(s - eps, K, y)) / (2 * eps)
        assert g == pytest.approx(fd, rel=1e-6, abs=1e-8)
        assert val == pytest.approx(_noise_nll(s, K, y), rel=1e-13)
    check_grads(_noise_nll, 0.3, _spd(rng, 4), rng.normal(size=4), argnums=(0, 1, 2))
    # not bit-exact, but the same numbers added in another order
    assert irad.value_and_grad(f)(A)[0] == pytest.approx(np.trace(A), rel=1e-15)


@pytest.mark.parametrize("f", [
    lambda a: np.sum(a * (2.0 * np.eye(4))),  # not the identity
    lambda a: np.sum(a * (np.eye(4) + np.eye(4, k=1))),  # an off-diagonal one
    lambda a: np.sum(a * np.eye(4), axis=0),  # a sum over one axis
    lambda a: (lambda p: np.sum(p) + np.sum(p * a))(a * np.eye(4)),  # the product is read again
    lambda a: np.sum(a[:3] * np.eye(4)[:3]),  # rectangular
    lambda a: np.sum(a[:3, :3] * IDENTITY),  # the user's array (may change between calls)
])
def test_masked_sum_near_misses_keep_their_product(f):
    A = np.random.default_rng(4).normal(size=(4, 4))
    assert "numpy.trace" not in _simplified_prims(f, A)
    check_grads(f, A)


def test_a_user_identity_changed_in_place_is_read():
    f = lambda a: np.sum(a * IDENTITY)  # noqa: E731
    vg = irad.value_and_grad(f)
    A = np.ones((3, 3))
    vg(A)
    IDENTITY[0, 1] = 1.0
    try:
        for _ in range(2):
            val, g = vg(A)
            assert val == 4.0
            np.testing.assert_array_equal(g, IDENTITY)
    finally:
        IDENTITY[0, 1] = 0.0
    val, g = vg(A)
    assert val == 3.0
    np.testing.assert_array_equal(g, np.eye(3))


def _spd(rng, n):
    m = rng.normal(size=(n, n))
    return m @ m.T + n * np.eye(n)


# ---- a gradient assembled element by element -------------------------------------------------------

def _grid(x):
    """Scalar code over a 2-D array: a discrete Laplacian energy, element by element."""
    n, m = x.shape
    e = 0.0
    for i in range(1, n):
        for j in range(m):
            d = x[i, j] - x[i - 1, j]
            e = e + d * d + 0.5 * x[i, j] * x[0, j]
    return e


def _prims_of(f, *args):
    return [op.prim for op in irad.compile(f, *args).graph.ops]


@pytest.mark.parametrize("n", [2, 3, 9])
def test_scatters_of_array_elements_become_one_array(n, unrolled):
    rng = np.random.default_rng(n)
    exact = [(rng.integers(-5, 5, size=n).astype(float),) for _ in range(3)]
    vg = _same_programs(rosen, *exact)
    prims = _prims_of(rosen, exact[0][0])
    assert "irad.primitives.setitem" not in prims and prims.count("numpy.array") == 1
    x = rng.normal(size=n)
    vg(x)
    check_grads(rosen, rng.normal(size=n))


def test_scatters_in_two_dimensions_and_repeated_elements():
    rng = np.random.default_rng(7)
    exact = [(rng.integers(-3, 3, size=(3, 4)).astype(float),) for _ in range(3)]
    _same_programs(_grid, *exact)
    assert "irad.primitives.setitem" not in _prims_of(_grid, exact[0][0])
    check_grads(_grid, rng.normal(size=(3, 4)))


def test_scatter_near_misses_keep_their_scatters():
    def sliced(x):
        return np.sum(x[1:3] * x[0]) + x[2] * x[1]

    def f32(x):
        return x[0] * x[1] + x[2]

    assert "irad.primitives.setitem" in _prims_of(sliced, np.arange(4.0)) or \
        "irad.primitives.add_at" in _prims_of(sliced, np.arange(4.0))
    assert "numpy.array" not in _prims_of(f32, np.arange(3, dtype=np.float32))
    big = np.arange(float(2 * 1024))
    assert "numpy.array" not in _prims_of(lambda x: x[0] * x[5] + x[7], big)
    rng = np.random.default_rng(0)
    for f, x in ((sliced, rng.normal(size=4)), (f32, rng.normal(size=3).astype(np.float32))):
        vg = irad.value_and_grad(f)
        vg(x)
        check_grads(f, rng.normal(size=x.shape).astype(x.dtype), rtol=1e-3 if x.dtype == np.float32 else 1e-6)


def test_assembled_gradients_under_jacobians_and_hessians():
    x = np.array([0.3, -1.2, 0.8, 2.0])
    n = len(x)
    want = np.zeros((n, n))
    for i in range(n - 1):  # the Rosenbrock Hessian, by hand
        want[i, i] += 1200.0 * x[i] ** 2 - 400.0 * x[i + 1] + 2.0
        want[i + 1, i + 1] += 200.0
        want[i, i + 1] -= 400.0 * x[i]
        want[i + 1, i] -= 400.0 * x[i]
    for make in (irad.hessian, lambda f: irad.jacrev(irad.grad(f)), lambda f: irad.jacfwd(irad.grad(f))):
        h = make(rosen)
        h(x + 1.0)
        np.testing.assert_allclose(h(x), want, rtol=1e-10, atol=1e-10)
