"""HIPS autograd's own test suite, ported to irad.

The functions being differentiated are autograd's (plain numpy one-liners); the harness is irad's:
``irad.testing.check_grads(f, *args, argnums=...)`` checks reverse mode against central finite
differences (order 2 differentiates irad's own generated gradient program). autograd's
``combo_check`` becomes ``combo`` below. Dropped: forward-mode-only tests, autograd's own containers
(``autograd.dict``/``tuple``/``isinstance``), ``np.make_diagonal`` and other autograd-only API.
"""
from __future__ import annotations

import itertools
import operator as op

import numpy as np
import pytest

import irad
from irad.testing import check_grads


def rs(seed=0):
    return np.random.RandomState(seed)


R = rs(0).randn  # module-level draws for argument tables (fixed at import)


def combo(fun, argnums, *arg_lists, order=1, **kw_lists):
    """autograd's combo_check: every combination of positional and keyword values."""
    keys = list(kw_lists)
    n = 0
    for args in itertools.product(*arg_lists):
        for vals in itertools.product(*[kw_lists[k] for k in keys]):
            kw = dict(zip(keys, vals))
            try:
                check_grads(fun, *args, argnums=argnums, order=order, **kw)
            except Exception as e:  # say which combination failed
                shapes = [np.shape(a) if not isinstance(a, str) else a for a in args]
                raise AssertionError(f"{getattr(fun, '__name__', fun)} args {shapes} kwargs {kw}: {e}") from e
            n += 1
    assert n > 0


def transform(lims, x):
    return x * (lims[1] - lims[0]) + lims[0]


# ---- complex checks (autograd's check_grads handles complex inputs) ---------------------------

def check_complex(f, *args, argnums=(0,), eps=1e-6, rtol=1e-5, atol=1e-6, order=1):
    """irad's convention: Re<xbar, v> == Re<u, J v> for random complex v and output cotangent u."""
    check_grads(f, *args, argnums=argnums, eps=eps, rtol=rtol, atol=atol, order=order)


# ======================================================================= test_scalar_ops.py

def _scalar(fun, *xs, order=2):
    for x in xs:
        check_grads(fun, x, order=order)


def test_scalar_abs():
    fun = lambda x: 3.0 * np.abs(x)
    _scalar(fun, 1.1, -1.1)
    check_grads(fun, 0.0, order=1)


@pytest.mark.parametrize("name,lims", [
    ("sin", None), ("cos", None), ("tan", (-1.0, 1.0)), ("exp", None), ("exp2", None), ("expm1", None),
    ("log", (0.2, 2.0)), ("log2", (0.2, 2.0)), ("log10", (0.2, 2.0)), ("log1p", (0.2, 2.0)),
    ("cosh", None), ("sinh", None), ("tanh", None), ("arccos", (-0.8, 0.8)), ("arcsin", (-0.8, 0.8)),
    ("arctan", None), ("arccosh", (1.2, 3.0)), ("arcsinh", None), ("arctanh", (-0.8, 0.8)),
    ("sqrt", (0.5, 3.0)), ("square", None), ("reciprocal", (0.5, 2.0)), ("negative", None),
    ("rad2deg", None), ("deg2rad", None), ("degrees", None), ("radians", None), ("sinc", None),
    ("cbrt", (0.5, 2.0)), ("fabs", (0.3, 2.0)),
])
def test_scalar_unary(name, lims):
    f = getattr(np, name)
    fun = lambda x: 3.0 * f(x)
    r = rs(1)
    lo, hi = lims or (-1.5, 1.5)
    _scalar(fun, float(transform((lo, hi), r.rand())), np.float64(transform((lo, hi), r.rand())))


def test_scalar_neg():
    _scalar(lambda x: 3.0 * -x, rs(1).randn())


def test_scalar_sign():
    fun = lambda x: 3.0 * np.sign(x)
    _scalar(fun, 1.1, -1.1)


def test_scalar_power_arg0():
    y = rs(2).randn() ** 2 + 1.0  # autograd: a non-integer exponent
    _scalar(lambda x: np.power(x, y), 1.0 + rs(3).rand())


def test_scalar_power_arg1():
    x = rs(2).randn() ** 2 + 1.0
    _scalar(lambda y: np.power(x, y), rs(3).randn())


def test_scalar_power_arg1_zero():
    _scalar(lambda y: np.power(0.0, y), 1.0 + rs(3).rand())


def test_scalar_mod_arg0():
    _scalar(lambda x: np.mod(x, 1.0 + rs(4).rand()), 1.0 + rs(3).rand() * 0.3)


def test_scalar_mod_arg1():
    _scalar(lambda y: np.mod(4.3, y), 1.3 + rs(3).rand() * 0.3)


def test_scalar_divide_arg0():
    y = rs(5).randn() ** 2 + 1
    _scalar(lambda x: np.divide(x, y), rs(6).randn())


def test_scalar_divide_arg1():
    x = rs(5).randn() ** 2
    _scalar(lambda y: np.divide(x, y), rs(6).randn() ** 2 + 1)


def test_scalar_multiply_args():
    _scalar(lambda x: np.multiply(x, 2.5), rs(7).randn())
    _scalar(lambda y: np.multiply(-1.5, y), rs(7).randn())


def test_scalar_true_divide_args():
    _scalar(lambda x: np.true_divide(x, 1.7), rs(8).randn())
    _scalar(lambda y: np.true_divide(1.7, y), rs(8).randn() ** 2 + 1)


def test_scalar_second_derivatives_through_grad():
    # autograd's older tests check d_fun = grad(fun) against finite differences
    for fun in (lambda x: 3.0 * np.sin(x), lambda x: 3.0 * np.tanh(x), lambda x: 3.0 * np.log(x)):
        d_fun = irad.grad(fun)
        check_grads(d_fun, 0.7)


# ======================================================================= test_binary_ops.py

def _arg_pairs():
    r = rs(0)
    allargs = [2.0, r.randn(4), r.randn(3, 4), r.randn(1, 4)]
    return list(itertools.product(allargs, allargs))


def test_binary_mul():
    for a, b in _arg_pairs():
        check_grads(lambda x, y: x * y, a, b, order=2)


def test_binary_add():
    for a, b in _arg_pairs():
        check_grads(lambda x, y: x + y, a, b, order=2)


def test_binary_sub():
    for a, b in _arg_pairs():
        check_grads(lambda x, y: x - y, a, b, order=2)


def test_binary_div():
    gap = lambda x: np.sqrt(x ** 2 + 0.5)
    for a, b in _arg_pairs():
        check_grads(lambda x, y: x / y, gap(a), gap(b), order=2)


def test_binary_mod():
    gap = lambda x: np.sqrt(x ** 2 + 0.5)
    for a, b in _arg_pairs():
        if a is not b:  # undefined at x == y
            check_grads(lambda x, y: x % y, gap(a), gap(b))


def test_binary_pow():
    pos = lambda x: np.abs(x) + 1.1
    for a, b in _arg_pairs():
        check_grads(lambda x, y: x ** y, pos(a), b, order=2)


def test_binary_arctan2():
    for a, b in _arg_pairs():
        check_grads(np.arctan2, a, b)


def test_binary_hypot():
    for a, b in _arg_pairs():
        check_grads(np.hypot, a, b)


COMPARE_FUNS = [
    lambda x, y: np.sum(x < x) + 0.0,
    lambda x, y: np.sum(x <= y) + 0.0,
    lambda x, y: np.sum(x > y) + 0.0,
    lambda x, y: np.sum(x >= y) + 0.0,
    lambda x, y: np.sum(x == y) + 0.0,
    lambda x, y: np.sum(x != y) + 0.0,
]


def test_comparison_grads_are_zero():
    for a, b in _arg_pairs():
        zeros = (a + b) * 0
        for fun in COMPARE_FUNS:
            ga = irad.grad(fun)(a, b)
            gb = irad.grad(fun, argnums=1)(a, b)
            assert np.shape(ga) == np.shape(a) and np.shape(gb) == np.shape(b)
            assert np.all(ga == 0) and np.all(gb == 0)
            assert np.all(ga == np.zeros_like(zeros) if np.shape(a) == np.shape(zeros) else ga == 0)


def test_comparison_values():
    for a, b in _arg_pairs():
        for fun in COMPARE_FUNS:
            v, _ = irad.value_and_grad(fun)(a, b)
            assert v == fun(a, b)


def test_core_binary_on_python_floats():
    # test_core.py: plain Python floats, no numpy
    def nd(f, x, eps=1e-4):
        return (f(x + eps / 2) - f(x - eps / 2)) / eps

    for fun in (lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x / y, lambda x, y: x * y,
                lambda x, y: x ** y, lambda x, y: x % y):
        x, y = 0.7, 1.8
        assert irad.grad(fun)(x, y) == pytest.approx(nd(lambda x: fun(x, y), x), rel=1e-4, abs=1e-4)
        assert irad.grad(fun, 1)(x, y) == pytest.approx(nd(lambda y: fun(x, y), y), rel=1e-4, abs=1e-4)


def test_core_comparisons_on_python_floats():
    for fun in (lambda x, y: x == y, lambda x, y: x != y, lambda x, y: x <= y, lambda x, y: x >= y,
                lambda x, y: x < y, lambda x, y: x > y):
        g = irad.grad(lambda x, y: fun(x, y) + 0.0)(0.7, 1.8)
        assert g == 0.0


def test_truediv_future_division():
    gap = lambda x: np.sqrt(x ** 2 + 0.5)
    for a, b in _arg_pairs():
        check_grads(lambda x, y: x / y, gap(a), gap(b))


# ======================================================================= test_systematic.py

def _stat_check(fun, complex_ok=True, order=1):
    r = rs(3)
    x, A, B, C, D = 3.5, r.randn(), r.randn(3), r.randn(2, 3), r.randn(1, 3)
    combo(fun, (0,), [x, A], order=order)
    combo(fun, (0,), [B, C, D], axis=[None, 0], keepdims=[True, False], order=order)
    combo(fun, (0,), [C, D], axis=[None, 0, 1], keepdims=[True, False], order=order)


@pytest.mark.parametrize("fun", [np.max, np.mean, np.min, np.sum, np.prod, np.var, np.std],
                         ids=lambda f: f.__name__)
def test_stat(fun):
    _stat_check(fun)


@pytest.mark.parametrize("fun", [np.all, np.any], ids=lambda f: f.__name__)
def test_stat_boolean_outputs_have_no_gradient(fun):
    r = rs(3)
    for x in (r.randn(3), r.randn(2, 3)):
        for axis in (None, 0):
            g = irad.grad(lambda x: np.sum(fun(x, axis=axis)) + np.sum(x * 0.0))(x)
            np.testing.assert_array_equal(g, np.zeros_like(x))


def _unary(fun, lims=(-2, 2), order=2):
    r = rs(4)
    scalar = transform(lims, 0.4)
    vector = transform(lims, r.rand(2))
    mat = transform(lims, r.rand(3, 2))
    mat2 = transform(lims, r.rand(1, 2))
    combo(fun, (0,), [scalar, vector, mat, mat2], order=order)


def _unary_complex(fun, lims=(-2, 2)):
    r = rs(5)
    comp = transform(lims, 0.4) + 0.1j * transform(lims, 0.3)
    matc = transform(lims, r.rand(3, 2)) + 0.1j * r.rand(3, 2)
    for a in (comp, matc):
        check_complex(fun, a)


UNARY = [
    ("sin", np.sin, None, True), ("abs", np.abs, (0.1, 4.0), True), ("absolute", np.absolute, (0.1, 4.0), True),
    ("arccosh", np.arccosh, (1.1, 4.0), True), ("arcsinh", np.arcsinh, (-0.9, 0.9), True),
    ("arctanh", np.arctanh, (-0.9, 0.9), True), ("ceil", np.ceil, (-1.5, 1.5), False),
    ("cos", np.cos, None, True), ("cosh", np.cosh, None, True), ("deg2rad", np.deg2rad, None, False),
    ("degrees", lambda x: np.degrees(x) / 50.0, None, False), ("exp", np.exp, None, True),
    ("exp2", np.exp2, None, True), ("expm1", np.expm1, None, True), ("fabs", np.fabs, None, False),
    ("floor", np.floor, (-1.5, 1.5), False), ("log", np.log, (0.2, 2.0), True),
    ("log10", np.log10, (0.2, 2.0), True), ("log1p", np.log1p, (0.2, 2.0), True),
    ("log2", np.log2, (0.2, 2.0), True), ("rad2deg", lambda x: np.rad2deg(x) / 50.0, None, False),
    ("radians", np.radians, None, False), ("sign", np.sign, None, True), ("sinh", np.sinh, None, True),
    ("sqrt", np.sqrt, (1.0, 3.0), True), ("square", np.square, None, False),
    ("tan", np.tan, (-1.1, 1.1), True), ("tanh", np.tanh, None, True), ("real", np.real, None, True),
    ("real_if_close", np.real_if_close, None, True), ("imag", np.imag, None, True),
    ("conj", np.conj, None, True), ("angle", np.angle, None, True),
]


@pytest.mark.parametrize("name,fun,lims,cplx", UNARY, ids=[u[0] for u in UNARY])
def test_unary_ufunc(name, fun, lims, cplx):
    _unary(fun, lims or (-2, 2))


@pytest.mark.parametrize("name,fun,lims,cplx", [u for u in UNARY if u[3]], ids=[u[0] for u in UNARY if u[3]])
def test_unary_ufunc_complex(name, fun, lims, cplx):
    _unary_complex(fun, lims or (-2, 2))


def _binary(fun, lims_A=(-2, 2), lims_B=(-2, 2), same=True, order=2):
    r = rs(6)
    if same:
        a = [0.6, r.rand(2), r.rand(3, 2), r.rand(1, 2)]
        b = a
    else:
        a = [0.6, r.rand(2), r.rand(3, 2), r.rand(1, 2)]
        b = [0.7, r.rand(2), r.rand(3, 2), r.rand(1, 2)]
    combo(fun, (0, 1), [transform(lims_A, x) for x in a], [transform(lims_B, x) for x in b], order=order)


def _binary_complex(fun, lims_A=(-2, 2), lims_B=(-2, 2)):
    r = rs(7)
    A = [transform(lims_A, x) for x in (0.6 + 0.3j, r.rand(3, 2) + 0.1j * r.rand(3, 2))]
    B = [transform(lims_B, x) for x in (0.1 + 0.2j, r.rand(3, 2) + 0.1j * r.rand(3, 2))]
    for a, b in itertools.product(A, B):
        check_complex(fun, a, b, argnums=(0, 1))


def test_add():
    _binary(np.add)
    _binary_complex(np.add)


def test_logaddexp():
    _binary(np.logaddexp)


def test_logaddexp2():
    _binary(np.logaddexp2)


def test_remainder():
    _binary(np.remainder, lims_A=(-0.9, 0.9), lims_B=(0.7, 1.9), same=False)


def test_true_divide():
    _binary(np.true_divide, lims_B=(0.8, 1.2))


def test_true_divide_neg():
    _binary(np.true_divide, lims_B=(-0.3, -2.0))


def test_mod():
    _binary(np.mod, lims_B=(0.8, 2.1), same=False)


def test_mod_neg():
    _binary(np.mod, lims_B=(-0.3, -2.0), same=False)


def test_op_mul():
    _binary(op.mul)
    _binary_complex(op.mul)


def test_op_add():
    _binary(op.add)
    _binary_complex(op.add)


def test_op_sub():
    _binary(op.sub)
    _binary_complex(op.sub)


def test_op_mod():
    _binary(op.mod, lims_B=(0.3, 2.0), same=False)


def test_op_mod_neg():
    _binary(op.mod, lims_B=(-0.3, -2.0), same=False)


def test_op_div():
    _binary(op.truediv, lims_B=(0.5, 2.0))
    _binary_complex(op.truediv, lims_B=(0.5, 2.0))


def test_op_pow():
    _binary(op.pow, lims_A=(0.7, 2.0))
    _binary_complex(op.pow, lims_A=(0.7, 2.0))


def test_transpose():
    combo(np.transpose, [0], [R(2, 3, 4)],
          axes=[None, [0, 1, 2], [0, 2, 1], [2, 0, 1], [2, 1, 0], [1, 0, 2], [1, 2, 0]])


def test_repeat():
    combo(np.repeat, [0], [R(2, 3, 4), R(3, 1)], repeats=[0, 1, 2], axis=[None, 0, 1])


def test_diff():
    combo(np.diff, [0], [R(5, 5), R(5, 5, 5)], n=[1, 2], axis=[0, 1])
    combo(np.diff, [0], [R(1), R(1, 1)], axis=[0])
    combo(np.diff, [0], [R(1, 1), R(3, 1)], axis=[1])


def test_gradient():
    r = rs(42)
    check_grads(np.gradient, r.randn(10), argnums=0)
    check_grads(np.gradient, r.randn(10, 10), argnums=0)
    check_grads(np.gradient, r.randn(4, 5, 6), argnums=0)
    for a in [None, 0, 1, -1, (0, 1), (0, -1)]:
        check_grads(np.gradient, r.randn(4, 5, 6), argnums=0, axis=a)


def test_tile():
    combo(np.tile, [0], [R(2, 1, 3, 1)], reps=[(1, 4, 1, 2)])
    combo(np.tile, [0], [R(1, 2)], reps=[(1, 2), (2, 3), (3, 2, 1)])
    combo(np.tile, [0], [R(1)], reps=[(2,), 2])


def test_kron():
    combo(np.kron, [0, 1], [R(5, 5), R(4, 4)], [R(3, 3), R(2, 2)])


def test_inner():
    combo(np.inner, [0, 1], [1.5, R(3), R(2, 3)], [0.3, R(3), R(4, 3)])


def test_dot_systematic():
    combo(np.dot, [0, 1], [1.5, R(3), R(2, 3), R(2, 2, 3)], [0.3, R(3), R(3, 4), R(2, 3, 4)])


def test_outer_systematic():
    combo(np.outer, [0, 1], [R(3), R(2, 3)], [R(4), R(3, 2)])


def test_matmul():
    combo(np.matmul, [0, 1], [R(3), R(2, 3), R(2, 2, 3)], [R(3), R(3, 4), R(2, 3, 4)])


def test_matmul_broadcast():
    combo(np.matmul, [0, 1], [R(1, 2, 2, 3)], [R(3, 2, 1, 3, 4)])


def test_tensordot_1():
    combo(np.tensordot, [0, 1], [R(1, 3), R(2, 3, 2)], [R(3), R(3, 1), R(3, 4, 2)], axes=[[(1,), (0,)]])


def test_tensordot_2():
    combo(np.tensordot, [0, 1], [R(3), R(3, 1), R(3, 4, 2)], [R(1, 3), R(2, 3, 2)], axes=[[(0,), (1,)]])


def test_tensordot_3():
    combo(np.tensordot, [0, 1], [R(2, 3), R(2, 3, 4)], [R(1, 2, 3), R(2, 2, 3, 4)],
          axes=[[(0, 1), (1, 2)], [(1, 0), (2, 1)]])


def test_tensordot_4():
    combo(np.tensordot, [0, 1], [R(2, 2), R(4, 2, 2)], [R(2, 2), R(2, 2, 4)], axes=[1, 2])


def test_tensordot_5():
    combo(np.tensordot, [0, 1], [R(4)], [R()], axes=[0])


def test_tensordot_6():
    combo(np.tensordot, [0, 1], [R(2, 6)], [R(6, 3)], axes=[[[-1], [0]]])


def test_tensordot_7():
    combo(np.tensordot, [0, 1], [R(2, 6)], [R(6, 3)], axes=[[-1, 0]])


def test_tensordot_8():
    combo(np.tensordot, [0, 1], [R(2)], [R(2, 2)], axes=[[0, 0]])


@pytest.mark.parametrize("fun", [np.maximum, np.fmax, np.minimum, np.fmin], ids=lambda f: f.__name__)
def test_maximum_minimum(fun):
    combo(fun, [0, 1], [R(1), R(1, 4), R(3, 4)], [R(1), R(1, 4), R(3, 4)])


def test_sort():
    combo(np.sort, [0], [R(1), R(7)])


def test_msort_equivalent():
    combo(lambda x: np.sort(x, axis=0), [0], [R(1), R(7), R(3, 4)])


def test_partition():
    check_grads(np.partition, R(7), kth=3)


@pytest.mark.parametrize("fun", [np.atleast_1d, np.atleast_2d, np.atleast_3d], ids=lambda f: f.__name__)
def test_atleast_nd(fun):
    combo(fun, [0], [1.2, R(1), R(7), R(1, 4), R(2, 4), R(2, 4, 5), R(2, 4, 3, 5)])


def test_einsum_transpose():
    combo(np.einsum, [1], ["ij->ji"], [R(1, 1), R(4, 4), R(3, 4)])


def test_einsum_matmult():
    combo(np.einsum, [1, 2], ["ij,jk->ik"], [R(2, 3)], [R(3, 4)])


def test_einsum_matmult_broadcast():
    combo(np.einsum, [1, 2], ["...ij,...jk->...ik"], [R(2, 3), R(2, 2, 3)], [R(3, 4), R(2, 3, 4)])


def test_einsum_matmult_broadcast_leadzero():
    combo(np.einsum, [1, 2], ["...ij,...jk->...ik"], [R(0, 2, 3)], [R(0, 3, 4)], order=1)


def test_einsum_covsum():
    combo(np.einsum, [1, 2], ["ijk,lji->lki"], [R(3, 4, 4)], [R(4, 4, 3)])


def test_einsum_ellipses():
    combo(np.einsum, [1, 2], ["...jk,...lj->...lk", "...,...->..."], [R(4, 4), R(3, 4, 4)], [R(4, 4), R(3, 4, 4)])


def test_einsum_ellipses_tail():
    combo(np.einsum, [1, 2], ["jk...,lj...->lk..."], [R(3, 2), R(3, 2, 4)], [R(2, 3), R(2, 3, 4)])


def test_einsum_ellipses_center():
    combo(np.einsum, [1, 2], ["j...k,lj...->lk..."], [R(2, 2), R(2, 2, 2)], [R(2, 2), R(2, 2, 2)])


def test_einsum_three_args():
    combo(np.einsum, [1, 2], ["ijk,lji,lli->lki"], [R(3, 4, 4)], [R(4, 4, 3)], [R(4, 4, 3)])


def test_einsum2_transpose():
    combo(np.einsum, [0], [R(1, 1), R(4, 4), R(3, 4)], [(0, 1)], [(1, 0)], order=2)


def test_einsum2_matmult():
    combo(np.einsum, [0, 2], [R(2, 3)], [(0, 1)], [R(3, 4)], [(1, 2)], [(0, 2)], order=2)


def test_einsum2_matmult_broadcast():
    combo(np.einsum, [0, 2], [R(2, 3), R(2, 2, 3)], [(Ellipsis, 0, 1)], [R(3, 4), R(2, 3, 4)],
          [(Ellipsis, 1, 2)], [(Ellipsis, 0, 2)], order=2)


def test_einsum2_covsum():
    combo(np.einsum, [0, 2], [R(3, 4, 4)], [(0, 1, 2)], [R(4, 4, 3)], [(3, 1, 0)], [(3, 2, 0)], order=2)


def test_einsum2_three_args():
    combo(np.einsum, [0, 2, 4], [R(3, 4, 4)], [(0, 1, 2)], [R(4, 4, 3)], [(3, 1, 0)], [R(4, 4, 3)], [(3, 3, 0)],
          [(3, 2, 0)], order=2)


def test_trace_systematic():
    combo(np.trace, [0], [R(5, 5), R(4, 5), R(5, 4), R(3, 4, 5)], offset=[-1, 0, 1])


def test_diag():
    combo(np.diag, [0], [R(5, 5)], k=[-1, 0, 1])


def test_diag_flat():
    combo(np.diag, [0], [R(5)], k=[-1, 0, 1])


def test_tril():
    combo(np.tril, [0], [R(5, 5)], k=[-1, 0, 1])


def test_triu():
    combo(np.triu, [0], [R(5, 5)], k=[-1, 0, 1])


def test_tril_3d():
    combo(np.tril, [0], [R(5, 5, 4)], k=[-1, 0, 1])


def test_triu_3d():
    combo(np.triu, [0], [R(5, 5, 4)], k=[-1, 0, 1])


def test_swapaxes():
    combo(np.swapaxes, [0], [R(3, 4, 5)], axis1=[0, 1, 2], axis2=[0, 1, 2])


def test_rollaxis():
    combo(np.rollaxis, [0], [R(2, 3, 4)], axis=[0, 1, 2], start=[0, 1, 2, 3])


def test_cross():
    combo(np.cross, [0, 1], [R(3, 3)], [R(3, 3)], axisa=[-1, 0, 1], axisb=[-1, 0, 1], axisc=[-1, 0, 1],
          axis=[None, -1, 0, 1], order=1)


def test_vsplit_2d():
    combo(np.vsplit, [0], [R(4, 8)], [4, [1, 2]])


def test_vsplit_3d():
    combo(np.vsplit, [0], [R(4, 4, 4)], [2, [1, 2]])


def test_hsplit_2d():
    combo(np.hsplit, [0], [R(4, 8)], [4, [1, 2]])


def test_hsplit_3d():
    combo(np.hsplit, [0], [R(4, 4, 4)], [2, [1, 2]])


def test_dsplit_3d():
    combo(np.dsplit, [0], [R(4, 4, 4)], [2, [1, 2]])


def test_split_1d():
    combo(np.split, [0], [R(1), R(7)], [1], axis=[0])


def test_split_2d():
    combo(np.split, [0], [R(4, 8)], [4, [1, 2]], axis=[0, 1])


def test_split_3d():
    combo(np.split, [0], [R(4, 4, 4)], [2, [1, 2]], axis=[0, 1, 2])


def test_array_split_1d():
    combo(np.array_split, [0], [R(1), R(7)], [1, 3], axis=[0])


def test_array_split_2d():
    combo(np.array_split, [0], [R(7, 7)], [4, [3, 5]], axis=[0, 1])


def test_array_split_3d():
    combo(np.array_split, [0], [R(7, 7, 7)], [4, [3, 5]], axis=[0, 1, 2])


def test_concatenate_1ist():
    combo(np.concatenate, [0], [(R(1), R(3))], axis=[0])


def test_concatenate_tuple():
    combo(np.concatenate, [0], [[R(1), R(3)]], axis=[0])


def test_concatenate_2d():
    combo(np.concatenate, [0], [(R(2, 2), R(2, 2))], axis=[0, 1])


def test_concatenate_3d():
    combo(np.concatenate, [0], [(R(2, 2, 2), R(2, 2, 2))], axis=[0, 1, 2])


def test_vstack_1d():
    combo(np.vstack, [0], [R(2), (R(2), R(2))])


def test_vstack_2d():
    combo(np.vstack, [0], [R(2, 3), (R(2, 4), R(1, 4))])


def test_vstack_3d():
    combo(np.vstack, [0], [R(2, 3, 4), (R(2, 3, 4), R(5, 3, 4))])


def test_hstack_1d():
    combo(np.hstack, [0], [R(2), (R(2), R(2))])


def test_hstack_2d():
    combo(np.hstack, [0], [R(3, 2), (R(3, 4), R(3, 5))])


def test_hstack_3d():
    combo(np.hstack, [0], [R(2, 3, 4), (R(2, 1, 4), R(2, 5, 4))])


def test_stack_1d():
    combo(np.stack, [0], [(R(2),), (R(2), R(2))], axis=[0, 1])


def test_row_stack():
    combo(lambda xs: np.vstack(xs), [0], [R(2), (R(2), R(2)), R(2, 3), (R(2, 4), R(1, 4))])


def test_column_stack_1d():
    combo(np.column_stack, [0], [R(2), (R(2), R(2))])


def test_column_stack_2d():
    combo(np.column_stack, [0], [R(2, 2), (R(2, 2), R(2, 2))])


def test_select():
    r = rs(8)
    conds = [r.randn(3, 4, 5) > 0 for _ in range(3)]
    combo(np.select, [1], [conds], [[r.randn(3, 4, 5) for _ in range(3)]], default=[0.0, 1.1])


def test_pad():
    combo(np.pad, [0], [R(2, 2)], [0, 3, (3,), (3, 2), ((3, 2),), ((1, 2), (3, 4)), ((0, 0), (0, 0))],
          ["constant"])


def test_pad_modes():
    combo(np.pad, [0], [R(3, 4)], [1, ((1, 2), (0, 3))], ["edge", "reflect", "symmetric", "wrap"])


# ======================================================================= test_numpy.py

def test_dot():
    r = rs(42)
    fun = lambda x, y: np.dot(x, y)
    mat1, mat2, vect1, vect2, vect3 = r.randn(10, 11), r.randn(10, 11), r.randn(10), r.randn(11), r.randn(11)
    check_grads(fun, mat1, vect2)
    check_grads(fun, mat1, mat2.T)
    check_grads(fun, vect1, mat1)
    check_grads(fun, vect2, vect3)


def test_dot_with_floats():
    r = rs(42)
    fun = lambda x, y: np.dot(x, y)
    mat1, vect1, float1 = r.randn(10, 11), r.randn(10), r.randn()
    check_grads(fun, mat1, float1)
    check_grads(fun, float1, mat1)
    check_grads(fun, vect1, float1)
    check_grads(fun, float1, vect1)


def test_dot_method():
    r = rs(42)
    fun = lambda x, y: x.dot(y)
    mat1, mat2, vect1, vect2, vect3 = r.randn(10, 11), r.randn(10, 11), r.randn(10), r.randn(11), r.randn(11)
    check_grads(fun, mat1, vect2)
    check_grads(fun, mat1, mat2.T)
    check_grads(fun, vect1, mat1)
    check_grads(fun, vect2, vect3)


def test_outer():
    r = rs(42)
    fun = lambda x, y: np.outer(x, y)
    v2, v3 = r.randn(11), r.randn(11)
    check_grads(fun, v2, v3)
    check_grads(fun, v2.T, v3)
    check_grads(fun, v2.T, v3.T)


@pytest.mark.parametrize("src", [
    "np.max(x)", "np.max(x, axis=1)", "np.max(x, axis=1, keepdims=True)",
    "np.min(x)", "np.min(x, axis=1)", "np.min(x, axis=1, keepdims=True)",
    "np.sum(x)", "np.sum(x, axis=0)", "np.sum(x, axis=0, keepdims=True)", "np.sum(x, axis=(1, 2))",
    "np.mean(x)", "np.mean(x, axis=0)", "np.mean(x, axis=0, keepdims=True)",
    "np.cumsum(x, axis=0)", "np.cumsum(x, axis=1)", "np.cumsum(x)",
    "np.flipud(x)", "np.fliplr(x)", "np.rot90(x)",
    "x[3, 0, 1]", "x[::-1, 2:4, :]", "x[[0, 1, 2], :, :]", "x[3, 2:, [1, 3]]",
    "x[::-1, 2:4, :] + x[::-1, 3:5, :]", "x[2:5][1:3]",
    "x.reshape((5 * 4, 6))", "np.reshape(x, (5 * 4, 6))", "x.reshape(5 * 4, 6)",
    "x.ravel()", "np.ravel(x)", "x.flatten()", "x.T", "np.squeeze(x[:, :1])", "x[:, :1].squeeze()",
    "np.expand_dims(x, 2)", "np.repeat(x, 2, axis=1)", "np.repeat(x, 1, axis=1)", "np.repeat(x, 2, axis=0)",
    "np.trace(x, offset=1)", "np.trace(x, offset=-2)", "np.diagonal(x, axis1=-1, axis2=-2)",
    "np.sum(x[[0, 0]])", "np.sum(x[[0, 1, 0]])", "np.dot(x[0, 0, :2], x[0, 0, 2:])",
    "np.sum(np.sin(np.nan_to_num(x + np.where(x > 0.5, np.inf, 0.0))))",
])
def test_numpy_3d(src):
    r = rs(42)
    fun = eval(f"lambda x: {src}")
    check_grads(fun, r.randn(5, 6, 4) if "x.T" not in src else r.randn(8, 8), order=2)


@pytest.mark.parametrize("src", [
    "np.roll(x, 2, axis=1)", "np.roll(x, 2)", "np.triu(x, k=2)", "np.tril(x, k=2)",
    "np.clip(x, a_min=0.1, a_max=1.1)", "np.diag(x)", "np.trace(x)", "x[2:4]", "x[-1]", "x[..., -2:]",
    "np.where(x > 0, x, -x)",
])
def test_numpy_2d(src):
    fun = eval(f"lambda x: {src}")
    check_grads(fun, rs(42).randn(5, 5))


def test_trace_offsets():
    r = rs(42)
    for shape, lo, hi in (((10, 11), -9, 11), ((11, 10), -9, 11), ((5, 6, 4, 3), -5, 6)):
        mat = r.randn(*shape)
        for offset in (lo, 0, hi - 1, r.randint(lo, hi)):
            check_grads(lambda x: np.trace(x, offset=offset), mat)


def test_non_numpy_sum():
    r = rs(42)
    check_grads(lambda x, y: sum([x, y]), r.randn(10, 11), r.randn(10, 11))


def test_mean_list_of_values():
    assert irad.grad(lambda x: np.mean([x, x + 2]))(0.0) == pytest.approx(1.0)
    assert irad.grad(lambda x: np.mean((x, x + 2)))(0.0) == pytest.approx(1.0)


def test_std_var_list_of_values():
    assert irad.grad(lambda x: np.std([x, x + 2]))(0.0) == pytest.approx(0.0)
    assert irad.grad(lambda x: np.std((x, x + 2)))(0.0) == pytest.approx(0.0)
    assert irad.grad(lambda x: np.var([x, x + 2]))(0.0) == pytest.approx(0.0)
    assert irad.grad(lambda x: np.var((x, x + 2)))(0.0) == pytest.approx(0.0)
    check_grads(lambda x: np.std([x, 2 * x + 2, 0.5]), 0.3)


def test_norm_list_of_values():
    assert irad.grad(lambda x: np.linalg.norm([x, x + 2]))(0.0) == pytest.approx(1.0)
    assert irad.grad(lambda x: np.linalg.norm((x, x + 2)))(0.0) == pytest.approx(1.0)


def test_simple_append_list():
    check_grads(np.append, [1.0, 2.0, 3.0], 4.0, argnums=(0, 1))


def test_simple_append_arr():
    check_grads(np.append, np.array([1.0, 2.0, 3.0]), 4.0, argnums=(0, 1))


def test_simple_append_list_2d():
    check_grads(np.append, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[7.0, 8.0, 9.0]], argnums=(0, 1), axis=0)


def test_concatenate_closures():
    r = rs(42)
    A, B = r.randn(5, 6, 4), r.randn(4, 6, 4)
    check_grads(lambda x: np.concatenate((A, x)), B)
    check_grads(lambda x: np.concatenate((A, x, A)), A * 2)
    check_grads(lambda x: np.concatenate((A, x, A), axis=1), A * 2)
    check_grads(lambda x: np.concatenate((A, x, A), 1), A * 2)


def test_split_first():
    check_grads(lambda x: np.split(x, 2)[0], rs(42).randn(10))


def test_prod():
    r = rs(42)
    check_grads(lambda x: np.prod(x), r.randn(2, 3) ** 2 / 10.0 + 0.1)
    check_grads(lambda x: np.prod(x, axis=0), r.randn(2, 3) ** 2 + 0.1)
    check_grads(lambda x: np.prod(x, axis=0, keepdims=True), r.randn(2, 3) ** 2 + 0.1)
    check_grads(lambda x: np.prod(x), r.randn(7) ** 2 + 0.1)


def test_array_constructors():
    check_grads(lambda x: np.array([x, x * 1.0, x + 2.5]), 3.0)
    check_grads(lambda x: np.array([[x, x * 1.0, x + 2.5], [x ** 2, x, x / 2.0]]), 3.0)
    check_grads(lambda x: np.array([x, x * 1.0, x + 2.5]) * 2, 3.0)
    check_grads(lambda x: (lambda A: A + A)(np.array([[x, x * 1.0, x + 2.5], [x ** 2, x, x / 2.0]])), 3.0)
    check_grads(lambda x: np.array(x), 3.0)
    r = rs(42)
    check_grads(lambda x: np.array([x, x]), r.randn(3, 2))
    check_grads(lambda x: np.array([[2 * x, x + 1], [x, x]]), r.randn(3, 2))


def test_scalar_array_attributes():
    def fun(x):
        assert np.shape(x) == ()
        assert np.ndim(x) == 0
        assert np.size(x) == 1
        return x ** 2

    assert irad.grad(fun)(3.0) == 6.0

    def fun2(x):
        assert x.shape == () and x.ndim == 0 and x.size == 1 and x.dtype == np.float64
        return x ** 2

    assert irad.grad(fun2)(np.float64(3.0)) == 6.0


def test_len():
    def fun(x):
        assert len(x) == 3
        return x

    check_grads(fun, rs(42).randn(3, 2))


def test_r_c_index_tricks():
    r = rs(42)
    c = r.randn(3, 2)
    A = r.randn(3, 2)
    check_grads(lambda x: np.r_[x], A)
    check_grads(lambda x: np.r_[x, x], A)
    check_grads(lambda x: np.r_[x, c], A)
    check_grads(lambda x: np.r_[x, c, x], A)
    check_grads(lambda x: np.c_[x, c, x], A)
    c1 = r.randn(10)
    check_grads(lambda x: np.r_[x, c1, 1:10], r.randn(10))


def test_no_relation():
    c = rs(42).randn(3, 2)
    for fun in (lambda x: c, lambda x: np.r_[c]):
        y, pb = irad.vjp(fun, rs(1).randn(3, 2))
        np.testing.assert_array_equal(y, c)
        (g,) = pb(np.ones((3, 2)))
        assert g is None or np.all(np.asarray(g) == 0)


def test_var_std_ddof():
    r = rs(42)
    B, C, D = r.randn(3), r.randn(3, 4), r.randn(1, 3)
    for fun in (np.var, np.std):
        combo(fun, (0,), [B, C, D], axis=[None], keepdims=[True, False], ddof=[0, 1])
        combo(fun, (0,), [C, D], axis=[None, 1], keepdims=[True, False], ddof=[2])


def test_where():
    r = rs(42)
    C = r.randn(4, 5) > 0
    check_grads(lambda x, y: np.where(C, x, y), r.randn(4, 5), r.randn(4, 5))


def test_repeat_more():
    r = rs(42)
    check_grads(lambda x: np.repeat(x, 2, axis=0), r.randn(5))
    check_grads(lambda x: np.repeat(x, 1, axis=0), r.randn(5, 1))


def test_tensordot_kwargs_by_position():
    fun = lambda x: np.tensordot(x * np.ones((2, 2)), x * np.ones((2, 2)), 2)
    assert irad.grad(fun)(1.0) == pytest.approx(8.0)
    check_grads(fun, 1.0)


def test_cast_to_int():
    inds = np.ones(5)[:, None]

    def fun(W):
        glued_together = np.concatenate((W, inds), axis=1)  # noqa: F841
        new_W = W[:, :-1]
        new_inds = np.int64(W[:, -1])
        assert new_inds.dtype == np.int64
        return new_W[new_inds].sum()

    W = rs(42).randn(5, 10)
    W[:, -1] = [0.2, 1.3, 2.7, 4.1, 3.5]  # int() truncation stays away from integer boundaries
    check_grads(fun, W)


def test_diagonal_batched():
    r = rs(42)
    fun = lambda D: np.diagonal(D, axis1=-1, axis2=-2)
    check_grads(fun, r.randn(4, 4))
    check_grads(fun, r.randn(3, 4, 4))


def test_make_diagonal_numpy_equivalent():
    # np.make_diagonal is autograd-only; the plain-numpy way of writing it
    r = rs(42)
    fun = lambda D: D[..., :, None] * np.eye(D.shape[-1])
    check_grads(fun, r.randn(4))
    check_grads(fun, r.randn(3, 4))


def test_max_equal_values():
    check_grads(lambda x: np.max(np.array([x, x])), 1.0)


def test_max_equal_values_2d():
    fun = lambda x: np.max(np.array([[x, x], [x, 0.5]]), axis=1)
    check_grads(fun, 1.0)
    check_grads(fun, -1.0)


def test_min_3_way_equality():
    fun = lambda x: np.min(np.array([[x, x, x], [x, 0.5, 0.5], [0.5, 0.5, 0.5], [x, x, 0.5]]), axis=0)
    check_grads(fun, 1.0)
    check_grads(fun, -1.0)


def test_maximum_equal_values():
    check_grads(lambda x: np.maximum(x, x), 1.0)


def test_maximum_equal_values_2d():
    fun = lambda x: np.maximum(np.array([x, x, 0.5]), np.array([[x, 0.5, x], [x, x, 0.5]]))
    for v in (1.0, -1.0, 2.0):
        check_grads(fun, v)


def test_linspace():
    for num in [0, 1, 5]:
        fun = lambda x, y: np.linspace(x, y, num)
        if num == 0:
            y, pb = irad.vjp(fun, 1.2, 3.4)
            assert np.shape(y) == (0,)
            continue
        check_grads(fun, 1.2, 3.4)
        check_grads(fun, 1.2, -3.4)
        check_grads(fun, 1.2, 1.2)


def test_astype():
    x = np.arange(3, dtype="float32")
    f = lambda x: np.sum(np.sin(x.astype("float64")))
    g = irad.grad(f)(x)
    assert g.dtype == np.dtype("float32")
    np.testing.assert_allclose(g, np.cos(x), rtol=1e-6)


# ======================================================================= test_linalg.py

def _sym(fun):
    def new_fun(A, *rest):
        L = np.tril(A)
        return fun((L + np.swapaxes(L, -1, -2)) / 2.0, *rest)
    return new_fun


def rand_psd(D, seed=42):
    mat = rs(seed).randn(D, D)
    return np.dot(mat, mat.T)


def test_inv():
    r = rs(42)
    mat = r.randn(8, 8)
    check_grads(np.linalg.inv, np.dot(mat, mat) + 1.0 * np.eye(8))


def test_inv_3d():
    r = rs(42)
    check_grads(np.linalg.inv, r.randn(4, 4, 4) + 5 * np.eye(4))
    check_grads(np.linalg.inv, r.randn(4, 4, 4, 4) + 5 * np.eye(4))


def test_pinv():
    r = rs(0)
    for M in range(2, 8):
        check_grads(np.linalg.pinv, r.randn(5, M))
        check_grads(np.linalg.pinv, r.randn(2, 5, M))
    low_rank = lambda x: np.linalg.pinv(np.matmul(np.swapaxes(x, -1, -2), x))
    for M in range(2, 5):
        check_grads(low_rank, r.randn(5, M), order=1)
        check_grads(low_rank, r.randn(2, 5, M), order=1)


def test_solve():
    r = rs(42)
    A, B = r.randn(8, 8) + 10.0 * np.eye(8), r.randn(8, 7)
    check_grads(lambda a: np.linalg.solve(a, B), A)
    b1 = r.randn(8)
    check_grads(lambda a: np.linalg.solve(a, b1), A)
    A2 = r.randn(6, 6) + np.eye(6)
    check_grads(lambda b: np.linalg.solve(A2, b), r.randn(6, 5))
    A3, B3 = r.randn(5, 4, 4) + 5 * np.eye(4), r.randn(5, 4)
    check_grads(lambda A: np.linalg.solve(A, B3[..., None])[..., 0], A3)
    B4 = r.randn(5, 4, 6)
    check_grads(lambda A: np.linalg.solve(A, B4), A3)
    check_grads(np.linalg.solve, A3, B4)


def test_det():
    r = rs(42)
    check_grads(np.linalg.det, r.randn(6, 6))
    check_grads(np.linalg.det, r.randn(3, 3, 3))


def test_slogdet():
    r = rs(42)
    mat = r.randn(6, 6)

    def fun(x):
        sign, logdet = np.linalg.slogdet(x)
        return logdet

    check_grads(fun, mat)
    check_grads(fun, -mat)
    mat3 = np.concatenate([(rand_psd(5) + 5 * np.eye(5))[None, ...] for _ in range(3)])
    check_grads(lambda x: np.sum(np.linalg.slogdet(x)[1]), mat3)


def test_norms():
    r = rs(42)
    check_grads(np.linalg.norm, r.randn(6))
    check_grads(np.linalg.norm, r.randn(6, 5))
    check_grads(lambda x: np.linalg.norm(x, axis=(0, 1)), r.randn(6, 5, 4))
    for ord in range(2, 5):
        check_grads(lambda x: np.linalg.norm(x, ord=ord), r.randn(6))
    for axis in range(3):
        check_grads(lambda x: np.linalg.norm(x, axis=axis), r.randn(6, 5, 4))
    check_grads(lambda x: np.linalg.norm(x, ord="nuc"), r.randn(6, 5), order=1)
    check_grads(lambda x: np.linalg.norm(x, ord="nuc", axis=(0, 1)), r.randn(6, 5, 4), order=1)


def test_norms_complex():
    r = rs(42)
    check_complex(np.linalg.norm, r.randn(6) + 1j * r.randn(6))
    check_complex(np.linalg.norm, r.randn(6, 5) + 1j * r.randn(6, 5))
    check_complex(lambda x: np.linalg.norm(x, axis=(0, 1)), r.randn(6, 5, 4) + 1j * r.randn(6, 5, 4))
    for ord in range(2, 5):
        check_complex(lambda x: np.linalg.norm(x, ord=ord), r.randn(6) + 1j * r.randn(6))
    for axis in range(3):
        check_complex(lambda x: np.linalg.norm(x, axis=axis), r.randn(6, 5, 4) + 1j * r.randn(6, 5, 4))


def test_eigh():
    r = rs(42)

    def fun(x):
        w, v = np.linalg.eigh(x)
        return (w, v)

    def fun_u(x):
        w, v = np.linalg.eigh(x, "U")
        return (w, v)

    mat = r.randn(6, 6)  # not symmetric: eigh reads one triangle
    check_grads(fun, mat)
    check_grads(fun_u, mat)
    m = r.randn(2, 3, 6, 6) + 10 * np.eye(6)[None, None, ...]
    hmat = np.einsum("...ij,...kj->...ik", m, m)
    check_grads(fun, hmat)
    check_grads(fun_u, hmat)


def test_cholesky():
    check_grads(_sym(np.linalg.cholesky), rand_psd(6))
    A = np.concatenate([rand_psd(6)[None, :, :] for _ in range(3)], axis=0)
    check_grads(_sym(np.linalg.cholesky), A)


def test_cholesky_reparameterization_trick():
    def fun(A):
        rng = np.random.RandomState(0)
        z = np.dot(np.linalg.cholesky(A), rng.randn(A.shape[0]))
        return np.linalg.norm(z)

    check_grads(_sym(fun), rand_psd(6))


@pytest.mark.parametrize("shape", [(3, 5), (4, 3, 5), (4, 4), (3, 4, 4), (5, 3), (4, 5, 3)])
def test_svd(shape):
    r = rs(42)

    def fun(x):
        u, s, v = np.linalg.svd(x, full_matrices=False)
        return (u, s, v)

    check_grads(fun, r.randn(*shape))
    check_grads(lambda x: np.linalg.svd(x, full_matrices=False, compute_uv=False), r.randn(*shape))


# eigenvector phases are arbitrary: autograd takes np.abs of them, so does irad's port
def test_eig_real():
    def fun(x):
        w, v = np.linalg.eig(x)
        return (np.abs(w), np.abs(v))

    check_grads(fun, rs(42).randn(8, 8))


def test_eig_complex():
    def fun(x):
        w, v = np.linalg.eig(x)
        return (w, np.abs(v))

    r = rs(42)
    check_grads(fun, r.randn(8, 8) + 1j * r.randn(8, 8))


def test_eig_batched():
    def fun(x):
        w, v = np.linalg.eig(x)
        return (w, np.abs(v))

    r = rs(42)
    check_grads(fun, r.randn(5, 8, 8) + 1j * r.randn(5, 8, 8))


def test_eigh_complex():
    # autograd's test_eigh_complex (and its UPLO and batched forms): losses blind to the phases
    r = rs(42)

    def fun(x):
        w, v = np.linalg.eigh(x)
        return (w, np.abs(v))

    def fun_u(x):
        w, v = np.linalg.eigh(x, "U")
        return (w, np.abs(v))
    mat = r.randn(6, 6) + 1j * r.randn(6, 6)   # not Hermitian: eigh reads one triangle
    check_grads(fun, mat)
    check_grads(fun_u, mat)
    m = r.randn(2, 3, 6, 6) + 1j * r.randn(2, 3, 6, 6) + 10 * np.eye(6)
    check_grads(fun, np.einsum("...ij,...kj->...ik", m, m.conj()))


# ======================================================================= containers

def _inputs(kind):
    r = rs(0)
    vals = [r.randn(5, 6), r.randn(4, 3), r.randn(2, 4)]
    if kind == "dict":
        return {"item_1": vals[0], "item_2": vals[1], "item_X": vals[2]}, ("item_1", "item_2", "item_X")
    return (list(vals) if kind == "list" else tuple(vals)), (0, 1, 2)


@pytest.mark.parametrize("kind", ["dict", "list", "tuple"])
def test_container_getter(kind):
    inp, (k1, k2, kx) = _inputs(kind)

    def fun(c):
        return np.sum(c[k1]) + np.sum(c[k2]) + np.sum(c[k2])

    res = irad.grad(fun)(inp)
    assert type(res) is type(inp)
    np.testing.assert_allclose(res[k1], np.ones((5, 6)))
    np.testing.assert_allclose(res[k2], 2 * np.ones((4, 3)))
    np.testing.assert_allclose(res[kx], np.zeros((2, 4)))


@pytest.mark.parametrize("kind", ["dict", "list", "tuple"])
def test_container_grads(kind):
    inp, (k1, k2, kx) = _inputs(kind)

    def fun(c):
        return np.sum(np.sin(c[k1])) + np.sum(np.cos(c[k2]))

    def d_fun(c):
        g = irad.grad(fun)(c)
        return np.sum(g[k1]) + np.sum(np.sin(g[k1])) + np.sum(np.sin(g[k2]))

    check_grads(fun, inp)
    check_grads(d_fun, inp)


def test_dict_iter():
    inp, _ = _inputs("dict")

    def fun(d):
        A = 0.0
        B = 0.0
        for i, k in enumerate(sorted(d)):
            A = A + np.sum(np.sin(d[k])) * (i + 1.0)
            B = B + np.sum(np.cos(d[k]))
        return A + B

    def d_fun(d):
        g = irad.grad(fun)(d)
        return np.sum(g["item_1"]) + np.sum(np.sin(g["item_1"])) + np.sum(np.sin(g["item_2"]))

    check_grads(fun, inp)
    check_grads(d_fun, inp)


def test_dict_items_values_keys():
    inp, _ = _inputs("dict")

    def fun(d):
        A = 0.0
        B = 0.0
        for i, (k, v) in enumerate(sorted(d.items(), key=op.itemgetter(0))):
            A = A + np.sum(np.sin(v)) * (i + 1.0)
            B = B + np.sum(np.cos(v))
        for v in d.values():
            A = A + np.sum(np.sin(v))
        for k in sorted(d.keys()):
            A = A + np.sum(np.cos(d[k]))
        return A + B

    def d_fun(d):
        g = irad.grad(fun)(d)
        return np.sum(g["item_1"]) + np.sum(np.sin(g["item_1"])) + np.sum(np.sin(g["item_2"]))

    check_grads(fun, inp)
    check_grads(d_fun, inp)


def test_dict_get():
    fun = lambda d, x: d.get("item_1", x) ** 2
    check_grads(fun, {"item_1": 3.0}, 2.0, argnums=(0, 1))
    check_grads(fun, {"item_2": 4.0}, 2.0, argnums=(0, 1))
    check_grads(fun, {}, 2.0, argnums=(1,))


def test_make_dict():
    check_grads(lambda x: dict([("a", x)], b=x), 1.0)
    check_grads(lambda x: dict({"a": x}), 1.0)
    check_grads(lambda x: {"a": x, "b": [x, 2 * x]}, 1.0)


def test_builtin_isinstance():
    def checker(ex, type_, truthval):
        assert isinstance(ex, type_) == truthval
        return 1.0

    examples = [
        [list, [[]], [()]],
        [np.ndarray, [np.zeros(1)], [[]]],
        [(tuple, list), [[], ()], [np.zeros(1)]],
    ]
    # autograd's own form: the gradient with respect to the container (an empty one gets its empty
    # structure back, an array zeros), and with respect to a float beside it
    for type_, positive, negative in examples:
        for ex, truth in [(e, True) for e in positive] + [(e, False) for e in negative]:
            checker(ex, type_, truth)
            ge = irad.grad(checker)(ex, type_, truth)
            if isinstance(ex, np.ndarray):
                np.testing.assert_array_equal(ge, np.zeros_like(ex))
            else:
                assert ge == ex and type(ge) is type(ex)
            g = irad.grad(lambda e, x: checker(e, type_, truth) * x, argnums=1)(ex, 2.0)
            assert g == 1.0


def test_container_isinstance_while_traced():
    def fun(x):
        assert isinstance(x, dict)
        return x["x"]

    assert irad.grad(fun)({"x": 1.0}) == {"x": 1.0}

    def fun_t(x):
        assert isinstance(x, tuple)
        return x[0]

    assert irad.grad(fun_t)((1.0, 2.0, 3.0)) == (1.0, 0.0, 0.0)


def test_tuple_nested_higher_order():
    def outer_fun(x):
        def inner_fun(y):
            return y[0] * y[1]

        return np.sum(np.sin(np.array(irad.grad(inner_fun)((x, x)))))

    check_grads(outer_fun, 5.0)
    check_grads(irad.grad(outer_fun), 10.0)
    check_grads(irad.grad(irad.grad(outer_fun)), 10.0)


# ======================================================================= test_logic.py

def test_assert():
    def fun(x):
        assert np.allclose(x, (x * 3.0) / 3.0)
        return np.sum(x)

    check_grads(fun, np.array([1.0, 2.0, 3.0]))


def test_nograd_of_boolean_output():
    # autograd raises TypeError; irad raises GradError: a bool is not a float scalar
    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises(irad.IradError, match="float scalar"):
        irad.grad(lambda x: np.allclose(x, (x * 3.0) / 3.0))(x)
    with pytest.raises(irad.IradError, match="float scalar"):
        irad.grad(lambda x: np.sum(x > 1.5))(x)


def test_falseyness():
    fun = lambda x: np.real(x ** 2 if np.iscomplex(x) else np.sum(x))
    check_grads(fun, 2.0)
    check_complex(fun, 2.0 + 1j)


# ======================================================================= test_complex.py

def test_real_type():
    df = irad.grad(lambda x: np.sum(np.real(x)))
    assert np.isrealobj(df(2.0))
    assert np.iscomplexobj(df(1.0j))


def test_angle_abs():
    r = rs(1)
    check_grads(np.angle, r.rand())
    check_grads(irad.grad(np.angle), r.rand())
    check_complex(np.angle, r.rand() + 1j * r.rand())
    check_grads(np.abs, 1.1)
    check_grads(irad.grad(np.abs), 2.1)
    check_complex(np.abs, 1.1 + 1.2j)


# ======================================================================= test_wrappers.py

def test_return_both():
    fun = lambda x: 3.0 * x ** 3.2
    f, d = irad.value_and_grad(fun)(1.7)
    assert f == fun(1.7)
    assert d == pytest.approx(irad.grad(fun)(1.7))
    assert d == pytest.approx(3.0 * 3.2 * 1.7 ** 2.2)


def test_value_and_grad():
    fun = lambda x: np.sum(np.sin(x) ** 2)
    x = rs(1).randn(5)
    v, g = irad.value_and_grad(fun)(x)
    np.testing.assert_allclose(v, fun(x))
    np.testing.assert_allclose(g, irad.grad(fun)(x))
    np.testing.assert_allclose(g, 2 * np.sin(x) * np.cos(x))


def test_hessian_of_quadratic_via_nested_grad():
    D = 5
    H = rs(1).randn(D, D)
    fun = lambda x: np.dot(np.dot(x, H), x)
    x = rs(2).randn(D)
    gi = lambda x, i: irad.grad(fun)(x)[i]
    hess = np.array([irad.grad(gi)(x, i) for i in range(D)])
    np.testing.assert_allclose(hess, H + H.T, rtol=1e-10, atol=1e-12)


def test_multigrad():
    def complicated_fun(a, b, c, d, e, f=1.1, g=9.0):
        return a + np.sin(b) + np.cosh(c) + np.cos(d) + np.tan(e) + f + g

    A, B, C, D, E, F, G = 0.5, -0.3, 0.2, -1.1, 0.7, 0.6, -0.1
    gd, gb = irad.grad(complicated_fun, argnums=(3, 1))(A, B, C, D, E, f=F, g=G)
    assert gd == pytest.approx(-np.sin(D)) and gb == pytest.approx(np.cos(B))
    check_grads(complicated_fun, A, B, C, D, E, argnums=(0, 1, 2, 3, 4), f=F, g=G)


def test_multigrad_onearg():
    fun = lambda x, y: np.sum(x + np.sin(y))
    packed_fun = lambda xy: np.sum(xy[0] + np.sin(xy[1]))
    A, B = rs(1).randn(3), rs(2).randn(3)
    ga, gb = irad.grad(fun, argnums=(0, 1))(A, B)
    pa, pb = irad.grad(packed_fun)((A, B))
    np.testing.assert_allclose(ga, pa)
    np.testing.assert_allclose(gb, pb)


def test_elementwise_grad_via_vjp():
    simple_fun = lambda a: a + np.sin(a) + np.cosh(a)
    A = rs(1).randn(10)
    y, pb = irad.vjp(simple_fun, A)
    np.testing.assert_allclose(pb(np.ones_like(y))[0], 1 + np.cos(A) + np.sinh(A))


def test_elementwise_grad_multiple_args():
    simple_fun = lambda a, b: a + np.sin(a) + np.cosh(b)
    B = rs(1).randn(10)
    y, pb = irad.vjp(simple_fun, 0.9, B)
    ga, gb = pb(np.ones_like(y))
    np.testing.assert_allclose(gb, np.sinh(B))
    assert ga == pytest.approx(10 * (1 + np.cos(0.9)))


def test_hessian_vector_product():
    fun = lambda a: np.sum(np.sin(a))
    for shape in ((5,), (5, 4), (5, 4, 3)):
        a, v = rs(1).randn(*shape), rs(2).randn(*shape)
        hvp = irad.grad(lambda a, v: np.sum(irad.grad(fun)(a) * v))(a, v)
        np.testing.assert_allclose(hvp, -np.sin(a) * v)


@pytest.mark.parametrize("shape", [(5,), (5, 4), (5, 4, 3)])
def test_vector_jacobian_product(shape):
    fun = lambda a: np.roll(np.sin(a), 1)
    a, V = rs(1).randn(*shape), rs(2).randn(*shape)
    y, pb = irad.vjp(fun, a)
    np.testing.assert_allclose(pb(V)[0], np.cos(a) * np.roll(V, -1))


def test_partial():
    import functools

    def f(x, y):
        return x * y

    assert irad.grad(functools.partial(f, y=2.0))(3.0) == 2.0


def test_dtypes():
    f = lambda x: np.sum(x ** 2)
    y = rs(1).randn(10, 10).astype(np.float32)
    g = irad.grad(f)(y)
    assert g.dtype.type is np.float32
    np.testing.assert_allclose(g, 2 * y, rtol=1e-6)
    y16 = rs(1).randn(10, 10).astype(np.float16)
    g16 = irad.grad(f)(y16)
    assert g16.dtype.type is np.float16
    np.testing.assert_allclose(g16, 2 * y16, rtol=1e-3)


def test_checkpoint_equivalent():
    bar = lambda x, y: 2 * x + y + 5
    foo = lambda x: bar(x, x / 3.0) + bar(x, x ** 2)
    assert irad.grad(foo)(3.0) == pytest.approx(2 + 1 / 3 + 2 + 6)
    baz = lambda *args: sum(args)
    foobaz = lambda x: baz(x, x / 3.0)
    assert irad.grad(foobaz)(3.0) == pytest.approx(4 / 3)


# ======================================================================= test_fft.py

FFT_CASES = [
    ("fft", (5,), {}), ("fft", (4, 6), {"axis": 0}), ("ifft", (5,), {}), ("fft2", (3, 4), {}),
    ("ifft2", (3, 4), {}), ("fftn", (2, 3, 4), {}), ("ifftn", (2, 3, 4), {}), ("rfft", (6,), {}),
    ("rfft", (7,), {"n": 10}), ("rfft2", (4, 6), {}), ("rfftn", (2, 4, 6), {}), ("fftshift", (5, 4), {}),
    ("ifftshift", (5, 4), {}), ("fft", (6,), {"norm": "ortho"}), ("fft", (6,), {"n": 4}),
]


@pytest.mark.parametrize("name,shape,kw", FFT_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in FFT_CASES])
def test_fft(name, shape, kw):
    fn = getattr(np.fft, name)
    x = rs(3).randn(*shape)

    def fun(x):
        y = fn(x, **kw)
        return np.real(y * np.conj(y) + y)

    check_grads(fun, x)


def test_irfft():
    x = rs(3).randn(6)

    def fun(x):
        return np.fft.irfft(np.fft.rfft(x) * np.array([1, 2, 3, 4.0]))

    check_grads(fun, x)


def test_complex_decompositions():
    # autograd's *_complex svd/nuclear-norm tests: singular values, phase-blind factors, nuclear norm
    r = rs(42)
    for shape in ((5, 3), (3, 5), (4, 4)):
        mat = r.randn(*shape) + 1j * r.randn(*shape)
        check_grads(lambda x: np.linalg.svd(x, full_matrices=False, compute_uv=False), mat)
        check_grads(lambda x: tuple(np.abs(f) for f in np.linalg.svd(x, full_matrices=False)), mat)
        check_grads(lambda x: np.linalg.norm(x, ord="nuc"), mat)


# ======================================================================= test_graphs.py

def test_grad_fanout():
    fun = lambda x: np.sin(np.sin(x) + np.sin(x))
    check_grads(fun, rs(1).randn())
    check_grads(irad.grad(fun), rs(2).rand())


def test_grad_const():
    assert irad.grad(lambda x: 1.0)(2.0) == 0.0


def test_grad_identity():
    df = irad.grad(lambda x: x)
    assert df(2.0) == 1.0
    assert irad.grad(df)(2.0) == 0.0


def test_hess_vector_prod():
    randv = rs(1).randn(10)
    fun = lambda x: np.sin(np.dot(x, randv))
    df = irad.grad(fun)
    vector_product = lambda x, v: np.sin(np.dot(v, df(x)))
    A, B = rs(2).randn(10), rs(3).randn(10)
    check_grads(fun, A)
    check_grads(vector_product, A, B)


def test_enclosing_scope_ref():
    def fun(x):
        inner_fun = lambda y: x * y
        return x * irad.grad(inner_fun)(2.0)

    def fun2(x):
        inner_fun = lambda y: y * x
        return x * irad.grad(inner_fun)(2.0)

    check_grads(fun, 1.0)
    check_grads(fun2, 1.0)
    assert irad.grad(fun)(1.5) == pytest.approx(3.0)


def test_mutating_outgrad():
    def fun(a):
        b = a + 1.0
        c = b + 1.5
        d = a + b
        return d + c

    def fun_indexing(a):
        b = a + 1.0
        c = b[0] + 1.5
        d = a + b
        return d + c

    A = rs(1).randn(5)
    check_grads(fun, A)
    check_grads(fun_indexing, A)


def test_complex_mutating_outgrad_from_indexing():
    def fun(a):
        b = a + 1.0j
        c = b[0] + 1.5
        d = a + b
        return np.sum(np.abs(d + c) ** 2)

    A = rs(1).randn(5)
    check_grads(fun, A)
    check_grads(lambda x: np.sum(irad.grad(fun)(x) ** 2), A)


def test_complex_separate_real_and_imaginary():
    def fun(a):
        r, i = np.real(a), np.imag(a)
        return np.sum(np.abs(r) ** 1.4 + np.abs(i) ** 1.3)

    r = rs(1)
    A = r.randn(5, 3) + 0.1j * r.randn(5, 3)
    check_grads(fun, A)
    check_grads(lambda x: np.sum(np.abs(irad.grad(fun)(x)) ** 2), A)


def test_third_derivative():
    fun = lambda x: np.sin(np.sin(x) + np.sin(x))
    df = irad.grad(fun)
    ddf = irad.grad(df)
    dddf = irad.grad(ddf)
    for f in (fun, df, ddf, dddf):
        check_grads(f, rs(4).rand())


def test_third_derivative_other_args():
    fun = lambda x, y: np.sin(np.sin(x) + np.sin(y))
    df = irad.grad(fun)
    ddf = irad.grad(df, 1)
    dddf = irad.grad(ddf)
    for f in (fun, df, ddf, dddf):
        check_grads(f, rs(5).randn(), rs(6).randn())


def test_singleton_array_outputs():
    # autograd's grad accepts size-1 array outputs; irad's grad wants a 0-d output, irad.vjp takes any
    for shape, kw in (((3, 3), {"keepdims": True}), ((3, 1), {"axis": 0, "keepdims": True}),
                      ((1, 3), {"axis": 1, "keepdims": True}), ((3, 1), {"axis": 0}), ((1, 3), {"axis": 1})):
        fun = lambda x: np.sum(np.sin(x), **kw)
        x = rs(7).randn(*shape)
        check_grads(fun, x)
        y, pb = irad.vjp(fun, x)
        np.testing.assert_allclose(pb(np.ones_like(y))[0], np.cos(x))
