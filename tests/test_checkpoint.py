"""``irad.checkpoint`` / ``irad.remat`` (issue 15, part 5): rematerialisation.

A checkpointed call keeps only its arguments for the backward pass, whose pullback recomputes
the function with a compiled ``irad.vjp`` program.  Gradients are checked on the second and later
calls of the same compiled object against central finite differences in float64 (short loops)
and against hand-written backpropagation (a 1,000-step loop); that less state is kept is checked
structurally, on the residuals between the forward and the backward programs (memory itself is
measured in ``benchmarks/checkpoint_memory.py``, not asserted).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import irad
from irad import ad, passes
from irad.passes import evaluate_residuals, split
from irad.errors import MutationError, TraceError, UnsupportedError
from irad.trace import trace_values


def fd_grad(f, x, eps=1e-6):
    x = np.asarray(x, dtype=float)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def cell(h, W):
    z = np.tanh(h @ W)
    return h + 0.5 * np.sin(z) * z


def rnn(h, W, steps, ck):
    for _ in range(steps):
        h = irad.checkpoint(cell)(h, W) if ck else cell(h, W)
    return np.sum(h * h)


def make(rng, batch=3, width=4):
    return rng.standard_normal((batch, width)), rng.standard_normal((width, width)) / np.sqrt(width)


def test_checkpoint_outside_a_trace_is_the_function():
    h, W = make(np.random.default_rng(0))
    np.testing.assert_array_equal(irad.checkpoint(cell)(h, W), cell(h, W))
    assert irad.remat is irad.checkpoint and irad.checkpoint(cell).__name__ == "cell"


@pytest.mark.parametrize("steps", [1, 5])
def test_same_gradient_as_without_checkpoint_and_finite_differences(steps):
    rng = np.random.default_rng(steps)
    g_ck = irad.grad(rnn, argnums=(0, 1))
    g_plain = irad.grad(rnn, argnums=(0, 1))
    for _ in range(3):
        h, W = make(rng)
        gh, gW = g_ck(h, W, steps, True)
        ph, pW = g_plain(h, W, steps, False)
        np.testing.assert_allclose(gh, ph, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gW, pW, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gh, fd_grad(lambda h: rnn(h, W, steps, True), h), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gW, fd_grad(lambda W: rnn(h, W, steps, True), W), rtol=1e-6, atol=1e-8)


def test_value_and_grad_and_vjp():
    rng = np.random.default_rng(2)
    vg = irad.value_and_grad(rnn)
    f = irad.checkpoint(cell)
    for _ in range(3):
        h, W = make(rng)
        v, gh = vg(h, W, 3, True)
        assert v == pytest.approx(rnn(h, W, 3, False), rel=1e-12)
        np.testing.assert_allclose(gh, irad.grad(rnn)(h, W, 3, False), rtol=1e-12)
        ybar = rng.standard_normal(h.shape)
        y, pb = irad.vjp(lambda h, W: f(f(h, W), W), h, W)
        y2, pb2 = irad.vjp(lambda h, W: cell(cell(h, W), W), h, W)
        np.testing.assert_allclose(y, y2, rtol=1e-12)
        for a, b in zip(pb(ybar), pb2(ybar)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def two_cells(h, W):
    h = irad.checkpoint(cell)(h, W)
    return irad.checkpoint(cell)(h, W)


def nested(h, W):
    for _ in range(3):
        h = irad.checkpoint(two_cells)(h, W)
    return np.sum(np.tanh(h))


def test_nested_checkpointed_blocks():
    rng = np.random.default_rng(3)
    g = irad.grad(nested, argnums=(0, 1))
    for _ in range(3):
        h, W = make(rng)
        gh, gW = g(h, W)
        np.testing.assert_allclose(gh, fd_grad(lambda h: nested(h, W), h), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gW, fd_grad(lambda W: nested(h, W), W), rtol=1e-6, atol=1e-8)


def test_grad_of_grad_through_checkpoint():
    rng = np.random.default_rng(4)
    h, W = make(rng)
    w = rng.standard_normal(h.shape)
    inner = irad.grad(rnn)
    outer = irad.grad(lambda W: np.sum(inner(h, W, 2, True) * w))
    for _ in range(3):
        W = make(rng)[1]
        np.testing.assert_allclose(outer(W), fd_grad(lambda W: np.sum(inner(h, W, 2, True) * w), W),
                                   rtol=1e-6, atol=1e-8)


# ---- a 1,000-step loop ----------------------------------------------------------------------


def step(h, W):
    return np.tanh(h @ W)


def chunk(h, W, k):
    for _ in range(k):
        h = step(h, W)
    return h


def long_loop(h, W, steps, k):
    """``k == 1``: checkpoint every step; else checkpoint chunks of ``k`` steps."""
    for _ in range(steps // k):
        h = irad.checkpoint(step)(h, W) if k == 1 else irad.checkpoint(chunk)(h, W, k)
    return np.sum(h * h)


def bptt(h, W, steps):
    """Hand-written backpropagation through time of ``long_loop``."""
    hs = [h]
    for _ in range(steps):
        hs.append(np.tanh(hs[-1] @ W))
    dh, dW = 2 * hs[-1], np.zeros_like(W)
    for t in range(steps, 0, -1):
        dz = dh * (1 - hs[t] ** 2)
        dW += hs[t - 1].T @ dz
        dh = dz @ W.T
    return dh, dW


@pytest.mark.parametrize("k", [1, 25])
def test_thousand_step_loop_matches_hand_written_backpropagation(k):
    rng = np.random.default_rng(5)
    g = irad.grad(long_loop, argnums=(0, 1))
    for _ in range(3):
        h, W = make(rng, 2, 3)
        gh, gW = g(h, W, 1000, k)
        wh, wW = bptt(h, W, 1000)
        np.testing.assert_allclose(gh, wh, rtol=1e-9, atol=1e-13)
        np.testing.assert_allclose(gW, wW, rtol=1e-9, atol=1e-13)
    assert g.traces == 1


def test_short_loop_finite_differences():
    rng = np.random.default_rng(6)
    g = irad.grad(long_loop, argnums=(0, 1))
    for _ in range(3):
        h, W = make(rng, 2, 3)
        gh, gW = g(h, W, 6, 2)
        np.testing.assert_allclose(gh, fd_grad(lambda h: long_loop(h, W, 6, 2), h), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(gW, fd_grad(lambda W: long_loop(h, W, 6, 2), W), rtol=1e-6, atol=1e-9)


# ---- what is kept between the forward and the backward pass ---------------------------------


def residual_arrays(f, *args):
    """The arrays the forward program hands the backward one (vjp's split), apart from the
    arguments themselves: (how many, bytes)."""
    g, tracer, _ = trace_values(f, args, {})
    joint = ad.reverse(g, tracer.values, list(range(len(g.inputs))), seed="input")
    fwd, _, _ = split(joint, passes.run(joint.graph))
    found: dict[int, np.ndarray] = {}

    def walk(x):
        if isinstance(x, np.ndarray):
            found.setdefault(id(x), x)
        elif isinstance(x, (tuple, list)):
            for e in x:
                walk(e)
        elif isinstance(x, dict):
            for e in x.values():
                walk(e)
    walk(evaluate_residuals(fwd, joint, tracer.values))
    for v in g.inputs:  # (the trace's copies of the arguments)
        found.pop(id(tracer.values[v.id]), None)
    return len(found), sum(x.nbytes for x in found.values())


def test_checkpoint_keeps_fewer_and_smaller_residuals():
    h, W = make(np.random.default_rng(7), 8, 16)
    n_plain, b_plain = residual_arrays(lambda h, W: rnn(h, W, 20, False), h, W)
    n_ck, b_ck = residual_arrays(lambda h, W: rnn(h, W, 20, True), h, W)
    n_chunk, b_chunk = residual_arrays(lambda h, W: long_loop(h, W, 20, 5), h, W)
    # per step: the cell's intermediates without checkpoint, its input (one array) with it; and
    # the last output, which the loss's own pullback reads
    assert n_ck == 20 and b_ck == 20 * h.nbytes
    assert n_plain >= 3 * 20 and b_plain >= 3 * b_ck
    assert n_chunk == 4 and b_chunk == 4 * h.nbytes  # one input per chunk of 5 steps (and the output)


def test_the_recomputation_is_not_merged_away():
    """The pullback recomputes the cell: no pass inlines it next to the forward ops, where CSE
    would share the forward's values with it (JAX's prevent_cse)."""
    h, W = make(np.random.default_rng(8))
    prog = irad.compile(rnn, h, W, 3, True, argnums=(0, 1))
    text = str(prog.graph)
    assert text.count("rule_fwd[irad.custom.checkpoint_call](cell, ") == 3
    assert text.count("pullback[irad.custom.checkpoint_call](") == 3
    assert "numpy.tanh" not in text and "checkpoint_pullback(" in prog.source


# ---- trust: what the checkpointed function reads, and what it may not do ---------------------


SHIFT = 0.25


def shifted(h, W):
    return np.tanh(h @ W + SHIFT)


def test_a_global_read_by_the_checkpointed_function_is_a_dependency():
    mod = sys.modules[__name__]
    loss = lambda h, W: np.sum(irad.checkpoint(shifted)(h, W) ** 2)  # noqa: E731
    g = irad.grad(loss, argnums=1)
    h, W = make(np.random.default_rng(9))
    try:
        for shift in (0.25, 0.25, -1.0, -1.0):
            mod.SHIFT = shift
            np.testing.assert_allclose(g(h, W), fd_grad(lambda W: loss(h, W), W), rtol=1e-6, atol=1e-8)
        mod.SHIFT = np.full(4, 0.5)  # another shape: the outer program retraces
        np.testing.assert_allclose(g(h, W), fd_grad(lambda W: loss(h, W), W), rtol=1e-6, atol=1e-8)
    finally:
        mod.SHIFT = 0.25


def test_a_closure_holding_a_traced_value_is_refused():
    def loss(h, W):
        return np.sum(irad.checkpoint(lambda h: np.tanh(h @ W))(h))
    with pytest.raises(TraceError, match=r"(?s)checkpoint of .*<lambda>.*: it holds a value being traced "
                                         r"\(W, through a closure\).*pass it as an argument"):
        irad.grad(loss)(*make(np.random.default_rng(10)))


RNG = np.random.default_rng(0)


def noisy(h, W):
    return np.tanh(h @ W) * RNG.uniform(size=h.shape)


def test_random_draws_inside_a_checkpoint_are_refused():
    with pytest.raises(UnsupportedError, match=r"(?s)checkpoint of noisy .*numpy\.random.*draw the random values "
                                               r"outside"):
        irad.grad(lambda h, W: np.sum(irad.checkpoint(noisy)(h, W)))(*make(np.random.default_rng(11)))


def in_place(h, W):
    h *= 2.0
    return np.tanh(h @ W)


def test_in_place_updates_inside_a_checkpoint_are_refused():
    with pytest.raises(MutationError, match=r"checkpoint of in_place .*updates an argument"):
        irad.grad(lambda h, W: np.sum(irad.checkpoint(in_place)(h * 1.0, W)))(*make(np.random.default_rng(12)))


def scaled_cell(h, W, scale=1.0):
    return np.tanh(scale * (h @ W))


def test_static_arguments_and_keywords():
    rng = np.random.default_rng(13)

    def loss(h, W, n):
        for _ in range(n):
            h = irad.checkpoint(scaled_cell)(h, W, scale=0.5)
        return np.sum(h)
    g = irad.grad(loss, argnums=1)
    for n in (2, 2, 3):
        h, W = make(rng)
        np.testing.assert_allclose(g(h, W, n), fd_grad(lambda W: loss(h, W, n), W), rtol=1e-6, atol=1e-8)
