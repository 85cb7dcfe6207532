"""Nested transforms over captured values (issue 23).

An inner function differentiated by ``grad``/``value_and_grad``/``vjp`` reads a value that the
*outer* transform is tracing, by closure, in every way Python consumes a sequence: unpacking,
``list``/``tuple``/``*``, comprehensions, ``for``, ``len``, ``bool``, ``float``, ``sum``/``zip``/
``enumerate``/``iter``/``max``, ``np.array`` of it, attribute and ``dict.get`` access.  The outer
gradient (``d/dp`` of the inner derivative) must equal central finite differences of the whole
composition on the second and later calls, nested two and three deep.  Also: ``vjp`` of an
integer array is a ``GradError``, as ``grad`` is.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irad
from irad.errors import GradError


class Box:
    def __init__(self, w):
        self.w = w


# how the outer value is captured: build(p) -> captured object, view(c) -> a 2-sequence of values
KINDS = {
    "array_1d": (lambda p: p, lambda c: c),
    "array_0d": (lambda p: p[0] * 1.0, lambda c: [c, c * c]),
    "list": (lambda p: [p[0], p[1]], lambda c: c),
    "tuple": (lambda p: (p[0], p[1]), lambda c: c),
    "dict": (lambda p: {"a": p[0], "b": p[1]}, lambda c: [c["a"], c.get("b")]),
    "attribute": (lambda p: Box(p), lambda c: c.w),
    "list_of_arrays": (lambda p: [p[:1], p[1:]], lambda c: [c[0][0], c[1][0]]),
}


def _ab(v, x):
    a, b = v
    return a * x + b * x * x


def _for(v, x):
    s = 0.0
    for i, w in enumerate(v):
        s = s + w * x ** (i + 1)
    return s


def _next(v, x):
    it = iter(v)
    a = next(it)
    b = next(it)
    return a * x + b * x * x


# how the inner function consumes it
FORMS = {
    "unpack": _ab,
    "list": lambda v, x: _ab(list(v), x),
    "star": lambda v, x: _ab([*v], x),
    "comprehension": lambda v, x: _ab([w for w in v], x),
    "for": _for,
    "tuple": lambda v, x: _ab(tuple(v), x),
    "len": lambda v, x: _ab(list(v), x) * (len(v) / 2),
    "bool": lambda v, x: _ab(list(v), x) * (1.0 if bool(len(v)) and bool(v[0]) else 0.0),
    "float": lambda v, x: _ab([float(w) for w in v], x),
    "sum": lambda v, x: sum(v) * x,
    "zip": lambda v, x: sum(w * c for w, c in zip(v, [x, x * x])),
    "enumerate": lambda v, x: sum(w * x ** (i + 1) for i, w in enumerate(v)),
    "np_array": lambda v, x: np.sum(np.array([v[0], v[1]]) * np.array([x, x * x])),
    "iter_next": _next,
    "max_min": lambda v, x: max(v) * x + min(v) * x * x,
    "sorted": lambda v, x: _ab(sorted(v), x),
    "branch": lambda v, x: _ab(v, x) * (2.0 if list(v)[0] > 0 else 3.0),
}


def _inner_derivative(kind, form, p, x0=2.0, eps=1e-5):
    """d/dx of the inner function at x0 for plain values (central difference)."""
    build, view = KINDS[kind]
    c = build(p)
    g = lambda x: FORMS[form](view(c), x)  # noqa: E731
    return (g(x0 + eps) - g(x0 - eps)) / (2 * eps)


def _fd_outer(kind, form, p, eps=1e-5):
    return np.array([(_inner_derivative(kind, form, p + eps * e) - _inner_derivative(kind, form, p - eps * e))
                     / (2 * eps) for e in np.eye(len(p))])


def _outer(kind, form, how):
    build, view = KINDS[kind]
    use = FORMS[form]

    def outer(p):
        c = build(p)

        def inner(x):
            return use(view(c), x)
        if how == "grad":
            return irad.grad(inner)(2.0)
        if how == "value_and_grad":
            return irad.value_and_grad(inner)(2.0)[1]
        if how == "vjp":
            return irad.vjp(inner, 2.0)[1](1.0)[0]
        # three deep: a middle transform between the outer one and the inner one
        def middle(y):
            def inner2(x):
                return use(view(c), x) * y
            return irad.grad(inner2)(2.0)
        return irad.grad(middle)(1.5)
    return outer


P_VALUES = [np.array([0.5, 0.1]), np.array([0.9, -0.4]), np.array([1.3, 0.7])]


@pytest.mark.parametrize("how", ["grad", "value_and_grad", "vjp", "three_deep"])
@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_captured_value_keeps_its_dependence(kind, form, how):
    g = irad.grad(_outer(kind, form, how))
    for p in P_VALUES:  # the first call traces; the others run the compiled program (or retrace on a guard)
        np.testing.assert_allclose(g(p.copy()), _fd_outer(kind, form, p), rtol=1e-5, atol=1e-7)


def test_the_issue_example():
    def outer(p):
        def inner(x):
            a, b = p
            return a * x + b * x * x
        return irad.grad(inner)(2.0)    # = a + 4 b
    g = irad.grad(outer)
    for p in P_VALUES:
        np.testing.assert_allclose(g(p), [1.0, 4.0])
    v = irad.value_and_grad(outer)
    for p in P_VALUES:
        val, grad = v(p)
        assert val == pytest.approx(p[0] + 4 * p[1])
        np.testing.assert_allclose(grad, [1.0, 4.0])


def test_survival_fitter_pattern():
    """lifelines-style: the hazard is the elementwise derivative of a cumulative hazard whose
    parameters the outer (fitting) gradient traces; the parameters are unpacked inside."""
    def cumulative_hazard(params, t):
        lam, rho = params
        return (t / lam) ** rho

    def hazard(params, t):
        _, pb = irad.vjp(lambda tt: cumulative_hazard(params, tt), t)
        return pb(np.ones_like(t))[0]

    def neg_log_likelihood(params, t):
        return -np.sum(np.log(hazard(params, t)) - cumulative_hazard(params, t))

    def exact(params, t):
        lam, rho = params
        return -np.sum(np.log(rho / lam * (t / lam) ** (rho - 1)) - (t / lam) ** rho)

    t = np.array([1.0, 2.0, 3.5])
    g = irad.grad(neg_log_likelihood)
    for params in (np.array([2.0, 1.5]), np.array([1.2, 0.8]), np.array([3.0, 2.5])):
        fd = np.array([(exact(params + 1e-6 * e, t) - exact(params - 1e-6 * e, t)) / 2e-6 for e in np.eye(2)])
        np.testing.assert_allclose(g(params, t), fd, rtol=1e-6)


# ---- a property: random inner functions over captured outer values -------------------------------

CONSUME = ["index", "unpack", "for", "list", "comprehension", "sum", "zip", "attribute", "dict"]
EXPRS = [
    lambda a, b, x: a * x + b * x * x,
    lambda a, b, x: np.sin(a * x) * b,
    lambda a, b, x: np.exp(a * x) / (1.0 + b * b),
    lambda a, b, x: (a - x) ** 2 * np.cos(b),
    lambda a, b, x: np.tanh(a + b * x),
]


def _consume(how, p):
    """Read the two captured values of ``p`` in one of Python's ways."""
    if how == "index":
        return p[0], p[1]
    if how == "unpack":
        a, b = p
        return a, b
    if how == "for":
        vals = []
        for v in p:
            vals.append(v)
        return vals[0], vals[1]
    if how == "list":
        return tuple(list(p))
    if how == "comprehension":
        return tuple(v * 1.0 for v in p)
    if how == "sum":
        return sum(p) - p[1], p[1]
    if how == "zip":
        a, b = (v * w for v, w in zip(p, (1.0, 1.0)))
        return a, b
    if how == "attribute":
        return Box(p).w[0], Box(p).w[1]
    d = {"a": p[0], "b": p[1]}
    return d.get("a"), d.get("b", 0.0)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(how=st.sampled_from(CONSUME), e1=st.integers(0, len(EXPRS) - 1), e2=st.integers(0, len(EXPRS) - 1),
       deep=st.booleans(), p0=st.floats(-1.0, 1.0), p1=st.floats(-1.0, 1.0))
def test_property_random_inner_functions(how, e1, e2, deep, p0, p1):
    f1, f2 = EXPRS[e1], EXPRS[e2]

    def inner_value(p, x):
        a, b = _consume(how, p)
        return f1(a, b, x) + f2(b, a, x) * 0.5

    def outer(p):
        def inner(x):
            return inner_value(p, x)
        if not deep:
            return irad.grad(inner)(0.7)

        def middle(y):
            return irad.grad(lambda x: inner(x) * y)(0.7)
        return irad.grad(middle)(1.3)

    def plain(p, eps=1e-5):  # d/dx inner at 0.7 (d/dy of y * that is the same)
        return (inner_value(p, 0.7 + eps) - inner_value(p, 0.7 - eps)) / (2 * eps)

    g = irad.grad(outer)
    for p in (np.array([p0, p1]), np.array([p0 + 0.25, p1 - 0.5])):
        fd = np.array([(plain(p + 1e-5 * e) - plain(p - 1e-5 * e)) / 2e-5 for e in np.eye(2)])
        np.testing.assert_allclose(g(p), fd, rtol=1e-4, atol=1e-6)


# ---- vjp and integer inputs ------------------------------------------------------------------


@pytest.mark.parametrize("arg", [np.array([1, 2]), np.array([[1, 2], [3, 4]]), np.int64(3), np.array([True, False]),
                                 [np.array([1, 2]), np.array([3])]])
def test_vjp_of_an_integer_array_is_a_grad_error_like_grad(arg):
    f = lambda x: np.sum(np.asarray(x[0] if isinstance(x, list) else x) * 2.0)  # noqa: E731
    with pytest.raises(GradError, match=r"argument 0 \(.*(int|bool).*\) is not differentiable"):
        irad.vjp(f, arg)
    with pytest.raises(GradError, match=r"argument 0 \(.*\) is not differentiable"):
        irad.grad(f)(arg)


@pytest.mark.parametrize("idx", [[0, 2], np.array([0, 2]), np.array([True, False, True])])
def test_vjp_integer_data_beside_floats_gets_none(idx):
    """Labels and indices beside float arguments are data (JAX gives them a zero float0)."""
    for _ in range(2):
        y, pb = irad.vjp(lambda x, i: x[i] * 2.0, np.ones(3), idx)
        gx, gi = pb(np.ones(2))
    np.testing.assert_array_equal(gx, [2.0, 0.0, 2.0])
    assert gi is None


def test_vjp_python_ints_are_parameters():
    y, pb = irad.vjp(lambda n: np.ones(3) * 2.0, 3)   # a size: no cotangent, and no error
    assert pb(np.ones(3)) == (None,)


def test_nested_vjp_of_integer_array_inside_a_trace_is_an_error():
    def outer(p):
        idx = np.array([0, 1])
        return irad.vjp(lambda i: np.sum(p[i]), idx)[0]
    with pytest.raises(GradError, match="argument 0"):
        irad.grad(outer)(np.ones(3))


@pytest.mark.parametrize("empty", [{}, (), []])
def test_empty_container_arguments_get_their_empty_structure(empty):
    """autograd's test_dict::test_get: d.get(key, x) over an empty dict; JAX returns {} for {}."""
    g = irad.grad(lambda d, x: (d.get("a", x) if isinstance(d, dict) else x) ** 2, argnums=(0, 1))
    for x in (2.0, 3.0, -1.5):
        gd, gx = g(empty, x)
        assert gd == empty and type(gd) is type(empty)
        assert gx == pytest.approx(2 * x)


def test_integer_argument_error_names_the_function_and_file():
    with pytest.raises(GradError, match=r"grad of .*test_nested_capture.py:\d+\): argument 0 \(int\)"):
        irad.grad(lambda n, x: np.sum(x) * n, argnums=(0, 1))(3, np.ones(2))
