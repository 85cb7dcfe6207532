"""``irad.compile(f, *args, xp=namespace)``: the gradient program run on another array-API namespace.

``array_api_strict`` (a strict CPU implementation of the standard, which refuses every numpy-only
spelling) stands in for a device library such as CuPy.  Every corpus function whose ops the
standard covers runs with it and agrees with the numpy program on the second and later calls
(fresh arguments each); the numpy program is itself checked against finite differences in
test_grad, and a sample of xp programs is checked against finite differences directly here.
Functions that need numpy-only calls give a ``NamespaceError`` naming the call and the line.
"""
from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

import irad
from irad.arrayapi import to_numpy
from irad.errors import NamespaceError
from irad.pytree import flatten, tree_map
from irad.testing import numerical_vjp

from functions import CASES, by_name

xp = pytest.importorskip("array_api_strict")

DIFF_CASES = [c for c in CASES if c.differentiable and not c.impure]

#: corpus functions the standard has no form for, and the call that says so (the test fails when
#: one starts to run, so that this list stays the truth)
REFUSED = {
    "softmax_cross_entropy": "operator.getitem",  # logp[np.arange(n), y]: a gather the standard lacks
    "advanced_int_indexing": "operator.getitem",
    "traced_int_index": "operator.getitem",
    "ufunc_keywords": "numpy.multiply",  # casting="unsafe"-like keywords
    "einsum_contract": "numpy.einsum",
    "concat_stack": "numpy.split",  # hstack's pullback
    "tile_repeat_pad": "numpy.pad",
    "sort_top3": "numpy.bincount",  # sort's pullback scatters with bincount
    "constant_mask_indexing": "rule_fwd",  # the masked-gather rule runs numpy
    "data_mask_indexing": "rule_fwd",
    "add_at_scatter": "irad.primitives.add_at",  # a scatter-add: no standard form
    "augmented_subscript": "numpy.bincount",
    "conv1d_valid": "numpy.convolve",
    "transpose_view_written_back": "irad.primitives.setitem",  # a write through a view: an integer-array key
    "reshape_view_update": "irad.primitives.setitem",
    "untracked_reshaped_buffer": "irad.primitives.setitem",
    "views_of_an_untracked_buffer": "irad.primitives.setitem",
    "fortran_ordered_buffer_views": "irad.primitives.setitem",
}


def to_xp(tree, ns=None):
    ns = xp if ns is None else ns
    return tree_map(lambda x: ns.asarray(x) if isinstance(x, np.ndarray) else x, tree)


def to_np(tree):
    return tree_map(lambda x: to_numpy(x) if hasattr(x, "__array_namespace__") and not isinstance(x, np.ndarray)
                    else x, tree)


def assert_same(got, want, rtol=1e-12):
    """The same structure, values and dtypes (a float32 program stays float32)."""
    lg, tg = flatten(got)
    lw, tw = flatten(want)
    assert tg == tw
    for a, b in zip(lg, lw):
        assert np.asarray(a).dtype == np.asarray(b).dtype, (np.asarray(a).dtype, np.asarray(b).dtype)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=1e-14)


def _copying_namespace():
    """array_api_strict whose ``asarray`` always copies, as a device library's copy from host
    memory does: a program that converted a live array once would then go stale."""
    ns = types.SimpleNamespace(**{n: getattr(xp, n) for n in dir(xp) if not n.startswith("__")})
    ns.__name__ = "copying_array_api_strict"
    ns.asarray = lambda obj, dtype=None, device=None, copy=None: xp.asarray(obj, dtype=dtype, device=device,
                                                                           copy=True)
    return ns


COPYING = _copying_namespace()


def _compat_numpy():
    try:
        import array_api_compat.numpy as compat
    except ImportError:  # pragma: no cover -- in the test extra
        return []
    return [pytest.param(compat, id="compat_numpy")]


#: array_api_strict, and array-api-compat's numpy wrapper: the same wrapper code as its CuPy one,
#: which is how a CuPy user gets a namespace that follows the standard
NAMESPACES = [pytest.param(xp, id="strict")] + _compat_numpy()


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize("case", DIFF_CASES, ids=[c.name for c in DIFF_CASES])
def test_corpus_on_namespaces(case, ns):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        args = case.make_args(np.random.default_rng(0))
        ref = irad.compile(case.fn, *args, argnums=case.argnums)
        if case.name in REFUSED:
            with pytest.raises(NamespaceError) as e:
                irad.compile(case.fn, *to_xp(args, ns), argnums=case.argnums, xp=ns)
            msg = str(e.value)
            assert REFUSED[case.name] in msg and "functions.py:" in msg and "xp=" in msg, msg
            return
        prog = irad.compile(case.fn, *to_xp(args, ns), argnums=case.argnums, xp=ns)
        assert "np." not in prog.source
        for seed in (1, 2):  # the second and third calls of the same object
            fresh = case.make_args(np.random.default_rng(seed))
            try:
                want = ref(*fresh)
            except Exception as err:  # noqa: BLE001 -- the xp program must raise what numpy raises
                with pytest.raises(type(err)):
                    prog(*to_xp(fresh, ns))
                continue
            got = to_np(prog(*to_xp(fresh, ns)))
            assert_same(got, want, rtol=1e-10)


def test_most_of_the_corpus_runs():
    assert len(DIFF_CASES) - len(REFUSED) >= 140


@pytest.mark.parametrize("name", ["mlp_two_layer", "rnn_unrolled", "mlp_regression", "logsumexp", "pairwise_distances", "mean_var_std", "linalg_norm",
                                  "cumsum_diff", "attention_scores", "basic_indexing"])
def test_gradient_against_finite_differences(name):
    """The xp program's gradient against central differences of the numpy function itself."""
    case = by_name(name)
    args = case.make_args(np.random.default_rng(3))
    prog = irad.compile(case.fn, *to_xp(args), argnums=case.argnums, xp=xp)
    fresh = case.make_args(np.random.default_rng(4))
    prog(*to_xp(args))
    value, grad = to_np(prog(*to_xp(fresh)))
    assert_same(value, case.fn(*fresh), rtol=1e-12)
    fd = numerical_vjp(case.fn, fresh, 1.0)
    for k, a in enumerate(case.argnums):
        assert_same(grad[k], fd[a], rtol=1e-5)


def loss(w, X, y):
    z = X @ w
    p = 1 / (1 + np.exp(-z))
    return -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)) + 0.01 * np.sum(w ** 2)


def data(n=20, d=3, seed=0):
    r = np.random.default_rng(seed)
    return r.standard_normal(d) * 0.1, r.standard_normal((n, d)), (r.random(n) > 0.5).astype(float)


def test_program_source_calls_the_namespace():
    w, X, y = data()
    prog = irad.compile(loss, *to_xp((w, X, y)), xp=xp)
    assert "xp.exp(" in prog.source and "xp.log(" in prog.source
    assert "np." not in prog.source
    v, g = prog(*to_xp((w, X, y)))
    assert type(v).__module__.startswith("array_api_strict") and type(g).__module__.startswith("array_api_strict")


def test_new_shape_traces_again_and_numpy_arguments_are_moved():
    prog = irad.compile(loss, *to_xp(data(20)), xp=xp)
    for n in (20, 7, 20):
        w, X, y = data(n, seed=n)
        want = irad.value_and_grad(loss)(w, X, y)
        assert_same(to_np(prog(*to_xp((w, X, y)))), want)
        assert_same(to_np(prog(w, to_xp(X), y)), want)  # numpy arrays among the arguments


SCALE = 2.0


def scaled(w):
    return SCALE * np.sum(np.sin(w) ** 2)


def test_rebound_global_is_seen():
    global SCALE
    w = np.linspace(0.1, 1.0, 5)
    prog = irad.compile(scaled, xp.asarray(w), xp=xp)
    assert_same(to_np(prog(xp.asarray(w))), irad.value_and_grad(scaled)(w))
    try:
        SCALE = 3.0
        assert_same(to_np(prog(xp.asarray(w))), (3.0 * np.sum(np.sin(w) ** 2), 3.0 * np.sin(2 * w)))
    finally:
        SCALE = 2.0


WEIGHTS = np.array([1.0, 2.0, 3.0])


def weighted(x):
    return np.sum(WEIGHTS * x ** 2)


@pytest.mark.parametrize("ns", [xp, COPYING], ids=["strict", "copying"])
def test_live_array_updated_in_place_is_read_at_each_call(ns):
    x = np.array([0.5, -1.0, 2.0])
    prog = irad.compile(weighted, xp.asarray(x), xp=ns)
    prog(xp.asarray(x))
    WEIGHTS[1] = 10.0
    try:
        v, g = to_np(prog(xp.asarray(x)))
        np.testing.assert_allclose(v, np.sum(WEIGHTS * x ** 2))
        np.testing.assert_allclose(g, 2 * WEIGHTS * x)
    finally:
        WEIGHTS[1] = 2.0


MASK = np.array([True, False, True, False, False])


def masked(x):
    y = x.copy()
    y[MASK] = 0.0
    return np.sum(y ** 2) + np.sum(np.sin(x))


@pytest.mark.parametrize("ns", [xp, COPYING], ids=["strict", "copying"])
def test_live_mask_in_an_index_is_read_at_each_call(ns):
    x = np.arange(1.0, 6.0)
    prog = irad.compile(masked, xp.asarray(x), xp=ns)
    prog(xp.asarray(x))
    MASK[:] = [False, True, False, True, True]
    try:
        assert_same(to_np(prog(xp.asarray(x))), irad.value_and_grad(masked)(x))
    finally:
        MASK[:] = [True, False, True, False, False]


def test_a_constant_result_is_a_fresh_array_each_call():
    prog = irad.compile(lambda x: np.sum(np.ones(2)), xp.asarray(np.ones(3)), xp=COPYING)
    assert "return xp.copy(" in prog.source  # the value is a constant of the program
    v, _ = prog(xp.asarray(np.ones(3)))
    v += 100.0
    v2, _ = prog(xp.asarray(np.ones(3)))
    assert float(v2) == 2.0


def branchy(x):
    if np.sum(x) > 0:
        return np.sum(x ** 3)
    return np.sum(np.cos(x))


def test_guard_failure_traces_the_other_branch():
    prog = irad.compile(branchy, xp.asarray(np.ones(4)), xp=xp)
    for x in (np.ones(4), -np.ones(4), np.full(4, 0.5), -np.full(4, 2.0)):
        assert_same(to_np(prog(xp.asarray(x))), irad.value_and_grad(branchy)(x))


def dict_loss(p, x):
    return np.sum(np.tanh(x @ p["W"] + p["b"]) ** 2)


def test_dict_parameters_and_float32():
    r = np.random.default_rng(0)
    p = {"W": r.standard_normal((3, 2)), "b": r.standard_normal(2)}
    x = r.standard_normal((5, 3))
    prog = irad.compile(dict_loss, to_xp(p), xp.asarray(x), xp=xp)
    p2 = {"W": r.standard_normal((3, 2)), "b": r.standard_normal(2)}
    prog(to_xp(p), xp.asarray(x))
    got = to_np(prog(to_xp(p2), xp.asarray(x)))
    assert set(got[1]) == {"W", "b"}
    assert_same(got, irad.value_and_grad(dict_loss)(p2, x))
    p32 = tree_map(lambda a: a.astype(np.float32), p2)
    v, g = prog(to_xp(p32), xp.asarray(x.astype(np.float32)))
    assert g["W"].dtype == xp.float32
    assert_same(to_np((v, g)), irad.value_and_grad(dict_loss)(p32, x.astype(np.float32)), rtol=1e-5)


def test_numpy_only_call_is_refused_at_compile_time():
    def f(x):
        return np.sum(np.einsum("ij,ij->i", x, x))

    with pytest.raises(NamespaceError, match=r"numpy\.einsum.*in \S*f at test_xp\.py:\d+"):
        irad.compile(f, xp.asarray(np.ones((2, 3))), xp=xp)


def test_mutating_or_random_functions_are_refused():
    buf = np.zeros(3)

    def mutates(x):
        buf[:] = x
        return np.sum(x ** 2)

    def draws(x):
        return np.sum(x * np.random.standard_normal(3))

    for f in (mutates, draws):
        with pytest.raises(NamespaceError, match="compile it without xp="):
            irad.compile(f, xp.asarray(np.ones(3)), xp=xp)


def test_numpy_itself_as_the_namespace():
    """numpy 2 implements the standard in its main namespace: ``xp=np`` runs the standard's
    spelling of the program and agrees with the numpy program."""
    if not hasattr(np, "permute_dims"):
        pytest.skip("numpy < 2 has no array-API main namespace")
    w, X, y = data()
    prog = irad.compile(loss, w, X, y, xp=np)
    prog(w, X, y)
    w2, X2, y2 = data(seed=5)
    assert_same(prog(w2, X2, y2), irad.value_and_grad(loss)(w2, X2, y2))


def int_weights(x, k):
    return np.sum((k * x) ** 2) + np.sum(x / (k + 1)) - np.sum(x * (x > 0)) + np.sum(k / 2 * x)


def mixed_kinds(x, k):
    n = np.sum(x > 0.1)  # a count: numpy sums booleans as integers
    return np.sum(np.where(k > 1, x, -x) * n) + np.mean(k) * np.sum(x ** 3)


@pytest.mark.parametrize("f", [int_weights, mixed_kinds])
def test_promotion_across_kinds_as_numpy(f):
    """numpy promotes int, bool and float arrays together; the standard does not, so the program
    casts (and the casts' parentheses keep each expression's meaning)."""
    r = np.random.default_rng(0)
    x, k = r.standard_normal(6), r.integers(0, 4, 6)
    prog = irad.compile(f, xp.asarray(x), xp.asarray(k), xp=xp)
    assert "xp.astype(" in prog.source
    prog(xp.asarray(x), xp.asarray(k))
    x2 = r.standard_normal(6)
    v, g = to_np(prog(xp.asarray(x2), xp.asarray(k)))
    np.testing.assert_allclose(v, f(x2, k), rtol=1e-12)
    np.testing.assert_allclose(g, numerical_vjp(f, (x2, k), 1.0)[0], rtol=1e-6, atol=1e-8)


K_INT = np.array([[1, 2, 0], [0, 1, 3]])


def _set_bools(x):
    y = np.zeros(3)
    y[1:] = x[:2] > 0
    return np.sum(y * x)


def _set_new_axis(x):
    y = np.zeros((3, 4))
    y[None, 1] = x[None, 0] * np.ones(4)
    return np.sum(y * y)


#: numpy semantics the standard spells otherwise (each once a wrong value or a run-time error)
SEMANTICS = {
    "argmax_index": (lambda x, k: x[np.argmax(x)] * 2.0, "f"),
    "int_matmul": (lambda x, k: np.sum(K_INT @ x), "f"),
    "take_const": (lambda x, k: np.sum(np.take(k, np.array([0, 2])) * x[:2]), "f"),  # (a gather's pullback
    "take_along": (lambda x, k: np.sum(np.take_along_axis(k[None], np.array([[0, 1]]), axis=1) * x[:2]), "f"),  # scatters)
    "tile_int_reps": (lambda x, k: np.sum(np.tile(x, 2) ** 2), "f"),
    "full_like_traced": (lambda x, k: np.sum(np.full_like(x, x[0]) * x), "f"),
    "sqrt_of_ints": (lambda x, k: np.sum(x * np.sqrt(k)), "f"),
    "std_of_ints": (lambda x, k: np.sum(x) * np.std(k), "f"),
    "stack_kinds": (lambda x, k: np.sum(np.stack([x, k]) ** 2), "f"),
    "true_times_x": (lambda x, k: np.sum(True * x), "f"),
    "set_bools": (lambda x, k: _set_bools(x), "f"),
    "set_new_axis": (lambda x, k: _set_new_axis(x), "f"),
    "array_int_bool": (lambda x, k: np.sum(x) * (np.array([k[0], True])[0] * 10 ** 17 + 1 - k[0] * 10 ** 17), "f"),
    "python_int_power": (lambda x, n: np.sum(x) * (n * n * n * n) * 1e-20, "n"),
    "python_floordiv": (lambda x, n: np.sum(x) * (n // 2) + np.sum(x) * (n / 3), "n"),
    "float32_with_python_float": (lambda x, s: np.sum(x * (s * 2)), "s"),
}


@pytest.mark.parametrize("name", sorted(SEMANTICS))
def test_numpy_semantics(name):
    f, second = SEMANTICS[name]
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32 if second == "s" else np.float64)
    other = {"f": np.array([1, 2, 3]), "n": 100000, "s": 1.5}[second]
    conv = (lambda a: xp.asarray(a)) if second == "f" else (lambda a: a)
    prog = irad.compile(f, xp.asarray(x), conv(other), xp=xp)
    for t in (x, x * 1.5 + 0.25):  # the second and third calls
        t = t.astype(x.dtype)
        want = irad.value_and_grad(f)(t, other)
        assert_same(to_np(prog(xp.asarray(t), conv(other))), want, rtol=1e-6 if second == "s" else 1e-12)


def test_numpy_scalar_argument():
    prog = irad.compile(lambda x, s: np.sum(x * s), xp.asarray(np.ones(3)), np.float64(2.0), xp=xp)
    assert_same(to_np(prog(xp.asarray(np.arange(3.0)), np.float64(3.0))), (9.0, np.full(3, 3.0)))


@pytest.mark.parametrize("f", [lambda x: np.sum(x * ((x > 0) + (x > 1))), lambda x: np.sum(x) * len(np.where(x > 0)[0])])
def test_numpy_spellings_without_a_standard_form_are_refused(f):
    with pytest.raises(NamespaceError, match="xp=.*test_xp.py:"):
        irad.compile(f, xp.asarray(np.array([0.5, -1.0, 2.0])), xp=xp)


def test_threads_share_one_program():
    """Threads call one compiled object with arguments of two shapes: every answer is its own."""
    from concurrent.futures import ThreadPoolExecutor

    prog = irad.compile(loss, *to_xp(data(20)), xp=xp)
    sets = [data(n, seed=s) for s in range(6) for n in (20, 9)]

    def run(args):
        return to_np(prog(*to_xp(args))), irad.value_and_grad(loss)(*args)

    with ThreadPoolExecutor(4) as pool:
        for got, want in pool.map(run, sets * 3):
            assert_same(got, want)
