"""``Tracer.call`` decides by the callable's type first (``_CALL_BY_TYPE``), then by ordered checks
(irad transforms, dunder builtins, the SPECIAL table, classes, user callables, plum).  The table
may only hold types that none of the ordered checks can claim, or moving them first would change
how a call is traced."""
from __future__ import annotations

import functools
import operator

import numpy as np

import irad
from irad import specials
from irad.trace import call_order_problems


def test_no_ordered_check_can_claim_a_type_the_table_decides() -> None:
    assert call_order_problems() == []


def test_the_check_sees_a_conflicting_row() -> None:
    getter = operator.itemgetter(0)
    specials.SPECIAL[id(getter)] = (getter, lambda t, a, k: None)  # a SPECIAL row the table would shadow
    try:
        assert any("has a SPECIAL row" in p for p in call_order_problems())
    finally:
        del specials.SPECIAL[id(getter)]
    assert call_order_problems() == []


def test_each_row_of_the_table_traces_its_calls() -> None:
    """One call of each kind the table decides, differentiated, on the 2nd and 3rd calls."""
    class Model:
        def __init__(self) -> None:
            self.w = 1.5

        def apply(self, x):
            return np.sin(x) * self.w

        @staticmethod
        def scale(x):
            return 2.0 * x

        @classmethod
        def shift(cls, x):
            return x + 1.0

    @functools.lru_cache(maxsize=None)
    def table(n):
        return n + 1

    m = Model()
    poly = np.vectorize(lambda v: v * v + 1.0)

    def f(x):
        y = m.apply(x)                                   # bound method
        y = functools.partial(np.multiply, 3.0)(y)       # partial
        y = Model.scale(y) + Model.shift(y)              # staticmethod, classmethod
        y = y * table(2)                                 # lru_cache wrapper
        y = y + poly(x)                                  # np.vectorize
        parts = list.__getitem__([y, x], 0)              # a method descriptor through its class
        first = operator.itemgetter(0)(parts)            # a getter
        return np.sum(np.tanh(parts)) + first + np.sum(np.transpose(np.atleast_2d(x)))  # ufunc, dispatchers

    g = irad.grad(f)
    for seed in (1, 2, 3):
        x = np.random.default_rng(seed).normal(size=4)
        h = 1e-6
        fd = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(4)])
        np.testing.assert_allclose(g(x), fd, rtol=1e-6, atol=1e-8)
