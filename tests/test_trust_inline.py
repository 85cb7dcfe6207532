"""A rule body that the inline pass traces into a program reads the world like user code does:
what it read (a global, a closure cell) is an assumption of the program, checked on every call.
Before, the pass baked the value it saw into the program: a silently stale derivative."""
from __future__ import annotations

import numpy as np

import irad

K = 2.0


def scaled(x):
    return x * 1.0


def _scaled_fwd(x):
    return x * 1.0, x


def _scaled_bwd(state, ybar):
    return (ybar * K,)  # deliberately reads a global: the rule's derivative is K


irad.defrule(scaled, _scaled_fwd, _scaled_bwd)


def loss(x):
    return np.sum(scaled(x) ** 2)


def test_grad_sees_a_rebound_global_of_an_inlined_rule():
    global K
    x = np.array([1.0, 2.0])
    g = irad.grad(loss)
    try:
        for _ in range(2):
            np.testing.assert_allclose(g(x), 2 * x * 2.0)
        K = 3.0
        for _ in range(2):
            np.testing.assert_allclose(g(x), 2 * x * 3.0)
    finally:
        K = 2.0


def test_vjp_jacrev_and_jvp_see_it_too():
    global K
    x = np.array([1.0, 2.0])
    try:
        for k in (2.0, 5.0):
            K = k
            for _ in range(2):
                _, pb = irad.vjp(loss, x)
                np.testing.assert_allclose(pb(1.0)[0], 2 * x * k)
                np.testing.assert_allclose(irad.jacrev(loss)(x), 2 * x * k)
                _, t = irad.jvp(lambda x: scaled(x) * 1.0, (x,), (np.ones(2),))
                np.testing.assert_allclose(t, np.full(2, k))  # forward mode derived from the pullback
    finally:
        K = 2.0
