"""``has_aux=True`` for grad, value_and_grad and vjp (issue 15, part 3): JAX's layouts.

``f`` returns ``(out, aux)``; ``aux`` is any pytree computed by the same program and not
differentiated.  Every check runs the compiled object several times with new values (the first
call's result comes from trace time) and compares with finite differences of ``out`` alone.
"""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.errors import GradError
from irad.testing import numerical_vjp


def loss_aux(w, x):
    pred = np.tanh(x @ w)
    loss = np.mean((pred - 1.0) ** 2) + np.sum(w ** 2) * 0.1
    return loss, {"pred": pred, "count": 3, "norm": (np.linalg.norm(w), np.max(pred))}


def only_loss(w, x):
    return loss_aux(w, x)[0]


def _values(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(4), rng.standard_normal((6, 4))


def _assert_tree_close(a, b):
    if isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for k in a:
            _assert_tree_close(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for u, v in zip(a, b):
            _assert_tree_close(u, v)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_grad_returns_grad_and_aux():
    g = irad.grad(loss_aux, has_aux=True)
    for seed in range(3):
        w, x = _values(seed)
        gw, aux = g(w, x)
        np.testing.assert_allclose(gw, numerical_vjp(only_loss, (w, x), 1.0)[0], rtol=1e-6, atol=1e-8)
        _assert_tree_close(aux, loss_aux(w, x)[1])
    assert g.traces == 1


def test_value_and_grad_layout_and_argnums():
    v = irad.value_and_grad(loss_aux, argnums=(0, 1), has_aux=True)
    for seed in range(3):
        w, x = _values(seed)
        (loss, aux), (gw, gx) = v(w, x)
        assert loss == pytest.approx(only_loss(w, x))
        _assert_tree_close(aux, loss_aux(w, x)[1])
        want = numerical_vjp(only_loss, (w, x), 1.0)
        np.testing.assert_allclose(gw, want[0], rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gx, want[1], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("aux", [
    lambda x: x * 3.0,                     # an array that depends on x: still not differentiated
    lambda x: (np.sum(x), [x[0], {"k": 2}]),
    lambda x: None,
    lambda x: 7,
])
def test_aux_is_not_differentiated(aux):
    f = lambda x: (np.sum(np.sin(x)), aux(x))  # noqa: E731
    g = irad.grad(f, has_aux=True)
    for x in (np.array([0.1, 0.4]), np.array([1.0, -2.0]), np.array([0.3, 0.3])):
        gx, a = g(x)
        np.testing.assert_allclose(gx, np.cos(x), rtol=1e-12)
        want = aux(x)
        if want is None:
            assert a is None
        else:
            _assert_tree_close(a, want)


def test_scalar_argument_and_one_element_loss():
    g = irad.grad(lambda t: (np.reshape(t ** 3, (1,)), {"t2": t * t}), has_aux=True)
    for t in (0.5, 1.5, -2.0):
        gt, aux = g(t)
        assert gt == pytest.approx(3 * t * t)
        assert aux["t2"] == pytest.approx(t * t)


def test_vjp_has_aux():
    def f(x, w):
        y = np.tanh(x * w)
        return (y * 2.0, np.sum(y)), {"mean": np.mean(y), "k": 2}

    def y_only(x, w):
        return f(x, w)[0]

    ct = (np.array([1.0, -0.5, 2.0]), 0.7)
    for i in range(3):
        x, w = np.arange(3.0) + 0.2 * i, 0.5 + 0.1 * i
        y, pb, aux = irad.vjp(f, x, w, has_aux=True)
        gx, gw = pb(ct)
        want = numerical_vjp(y_only, (x, w), ct)
        np.testing.assert_allclose(gx, want[0], rtol=1e-6, atol=1e-8)
        assert gw == pytest.approx(want[1], rel=1e-6)
        _assert_tree_close(y, y_only(x, w))
        _assert_tree_close(aux, f(x, w)[1])
        # the same function without has_aux is another program: y is the whole pair
        y2, pb2 = irad.vjp(f, x, w)
        assert isinstance(y2, tuple) and len(y2) == 2 and isinstance(y2[1], dict)


def test_has_aux_inside_an_outer_grad():
    def outer(p):
        gx, aux = irad.grad(lambda x: (np.sum(x * x * p), x * p), has_aux=True)(np.array([1.0, 2.0]))
        y, pb, aux2 = irad.vjp(lambda x: (x * p, np.sum(x)), np.ones(2), has_aux=True)
        return np.sum(gx) + np.sum(aux) + np.sum(pb(np.ones(2))[0]) + aux2

    def plain(p):  # gx = 2 x p, aux = x p, pb = p, aux2 = 2
        return 2 * 3.0 * p + 3.0 * p + 2 * p + 2.0
    g = irad.grad(outer)
    for p in (0.5, 2.0, -1.0):
        assert g(p) == pytest.approx((plain(p + 1e-6) - plain(p - 1e-6)) / 2e-6, rel=1e-6)


@pytest.mark.parametrize("f, returned", [
    (lambda x: np.sum(x), "a single value"),
    (lambda x: (np.sum(x), 1.0, 2.0), "a tuple of 3"),
    (lambda x: [np.sum(x)], "a list of 1"),
])
def test_not_a_pair_is_a_grad_error(f, returned):
    for make in (lambda: irad.grad(f, has_aux=True)(np.ones(2)),
                 lambda: irad.value_and_grad(f, has_aux=True)(np.ones(2)),
                 lambda: irad.vjp(f, np.ones(2), has_aux=True)):
        with pytest.raises(GradError, match=f"has_aux=True: the function must return a pair .*{returned}"):
            make()


def test_first_part_must_be_a_scalar_for_grad():
    with pytest.raises(GradError, match="one float scalar"):
        irad.grad(lambda x: (x * 2.0, 1.0), has_aux=True)(np.ones(2))
