"""Loops stay loops: ``irad.loops.reroll`` finds runs of identical iterations, reverse mode turns a
loop op into a forward loop and a reverse loop, lowering writes Python ``for`` loops.

Every case: the rerolled graph evaluates as the unrolled one; gradients of the compiled program,
on its second and third calls (new values), equal the unrolled program's and central finite
differences (``irad.check_grads``, orders 1 and 2)."""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.testing import check_grads
from irad import loops
from irad.ir import evaluate, verify

R = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def short_loops_reroll():
    """These loops are short (12 ops and more): re-roll them."""
    with loops.rerolling(True, min_ops=12):
        yield


def rnn(W, U, xs, h0):
    h = h0
    loss = 0.0
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[t])
        loss = loss + np.sum(h * h)
    return loss


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def lstm(Wx, Wh, b, xs):
    n = Wh.shape[1]
    h = np.zeros(n)
    c = np.zeros(n)
    total = 0.0
    for t in range(xs.shape[0]):
        z = Wx @ xs[t] + Wh @ h + b
        i, f, o, g = sigmoid(z[:n]), sigmoid(z[n:2 * n]), sigmoid(z[2 * n:3 * n]), np.tanh(z[3 * n:])
        c = f * c + i * g
        h = o * np.tanh(c)
        total = total + np.sum(h ** 2)
    return total


def euler(k, y0):
    y = y0
    dt = 0.05
    for _ in range(30):
        y = y + dt * (-k * y + np.sin(y))
    return np.sum(y * y)


def rows(w, X):
    s = 0.0
    for r in X:
        s = s + np.sin(r @ w)
    return s


def nested(W, b, h0):
    h = h0
    loss = 0.0
    for _ in range(4):
        for _ in range(5):
            h = np.tanh(W @ h + b)
        loss = loss + np.sum(h)
    return loss


def branchy(W, h0):
    h = h0
    for _ in range(8):
        if np.sum(h) > 0:
            h = np.tanh(W @ h)
        else:
            h = np.sin(W @ h) + 0.5
    return np.sum(h)


def first_differs(W, x):
    for t in range(8):
        if t == 0:
            h = np.tanh(x)
        else:
            h = np.tanh(W @ h + x)
    return np.sum(h ** 2)


def rosen_list(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2
    return s


def rosen_array(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2
    return s


def reversed_rows(w, X):
    s = 0.0
    for t in range(X.shape[0] - 1, -1, -1):
        s = s * 0.9 + np.cos(X[t] @ w)
    return s


def stacked_states(W, xs):
    h = np.zeros(W.shape[0])
    hs = []
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + xs[t])
        hs.append(h)
    H = np.stack(hs)
    return np.sum(H[1:] * H[:-1])


def float_per_step(k, y0):
    y = y0
    for t in range(10):
        y = y + (0.1 * t) * np.tanh(k * y)  # a float that changes per iteration: an input of the step
    return np.sum(y)


def int_per_step(k, y0):
    y = y0
    for t in range(10):
        y = np.tanh(k * y + t)  # an int that changes per iteration: the run stays unrolled
    return np.sum(y)


def columns(X, w):
    s = 0.0
    for t in range(X.shape[1]):
        s = s + np.sum(np.sin(X[:, t] * w))  # the columns of X: one stacked input, moved to axis 0
    return s


def last_axis_reversed(X, w):
    s = 0.0
    for t in range(X.shape[2] - 1, -1, -1):
        s = s * 0.9 + np.sum(np.cos(X[:, :, t] @ w))
    return s


def while_counted(W, h0):
    h, i = h0, 0
    while i < 7:
        h = np.tanh(W @ h)
        i += 1
    return np.sum(h * h)


def while_converges(W, h0):
    h = h0
    while np.sum(h * h) > 1e-3:  # a trip count that guards fix: each iteration checks it again
        h = 0.5 * np.tanh(W @ h)
    return np.sum(h)


def prints(k, y0):
    y = y0
    for _ in range(6):
        y = np.tanh(k * y)
        print(float(np.sum(y)) > 100)
    return np.sum(y)


CASES = {
    "rnn": (rnn, lambda: (R.normal(size=(3, 3)) * 0.5, R.normal(size=(3, 2)), R.normal(size=(7, 2)), R.normal(size=3))),
    "lstm": (lstm, lambda: (R.normal(size=(8, 3)) * 0.5, R.normal(size=(8, 2)) * 0.5, R.normal(size=8), R.normal(size=(6, 3)))),
    "euler": (euler, lambda: (np.abs(R.normal(size=4)), R.normal(size=4))),
    "rows": (rows, lambda: (R.normal(size=3), R.normal(size=(9, 3)))),
    "nested": (nested, lambda: (R.normal(size=(3, 3)) * 0.4, R.normal(size=3), R.normal(size=3))),
    "first_differs": (first_differs, lambda: (R.normal(size=(3, 3)) * 0.4, R.normal(size=3))),
    "rosen_list": (rosen_list, lambda: ([float(v) for v in R.normal(size=9)],)),
    "rosen_array": (rosen_array, lambda: (R.normal(size=9),)),
    "reversed_rows": (reversed_rows, lambda: (R.normal(size=3), R.normal(size=(8, 3)))),
    "stacked_states": (stacked_states, lambda: (R.normal(size=(3, 3)) * 0.5, R.normal(size=(7, 3)))),
    "float_per_step": (float_per_step, lambda: (R.normal(size=3), R.normal(size=3))),
    "while_counted": (while_counted, lambda: (R.normal(size=(3, 3)) * 0.5, R.normal(size=3))),
    "columns": (columns, lambda: (R.normal(size=(3, 9)), R.normal(size=3))),
    "last_axis_reversed": (last_axis_reversed, lambda: (R.normal(size=(2, 3, 8)), R.normal(size=3))),
}
ROLLED = set(CASES)


def _graph(f, args):
    return irad.trace(f, *args)


def _unrolled_grad(f, args, nums):
    with loops.rerolling(False):
        return irad.grad(f, argnums=nums)(*args)


def _close(a, b, tol=1e-10):
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        np.testing.assert_allclose(np.asarray(x, float), np.asarray(y, float), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_reroll_makes_a_loop_that_evaluates_as_the_unrolled_graph(name):
    f, make = CASES[name]
    args = make()
    g = _graph(f, args)
    r = verify(loops.reroll(g))
    assert any(op.prim == loops.LOOP_PRIM for op in r.ops), str(r)
    assert len(r.ops) < len(g.ops)
    assert "irad.loop" in str(r)
    leaves = [x for a in args for x in (a if isinstance(a, list) else [a])]
    _close(tuple(evaluate(r, leaves)), tuple(evaluate(g, leaves)), 1e-12)
    u = verify(loops.unroll(r))
    assert not any(op.prim == loops.LOOP_PRIM for op in u.ops)
    _close(tuple(evaluate(u, leaves)), tuple(evaluate(g, leaves)), 1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_of_the_loop_program(name):
    f, make = CASES[name]
    args = make()
    nums = tuple(range(len(args)))
    prog = irad.compile(f, *args, argnums=nums)
    assert "for i" in prog.source and any(op.prim == loops.LOOP_PRIM for op in prog.graph.ops)
    gf = irad.value_and_grad(f, argnums=nums)
    gf(*args)
    for _ in range(2):  # second and third calls, on new values: the compiled program answers
        new = make()
        v, g = gf(*new)
        _close(v, f(*new))
        _close(g, _unrolled_grad(f, new, nums), 1e-9)
        check_grads(f, *new, order=1)


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_order(name):
    f, make = CASES[name]
    check_grads(f, *make(), order=2)


def test_loop_op_prints_its_step_nested():
    W, U, xs, h0 = CASES["rnn"][1]()
    text = str(loops.reroll(_graph(rnn, (W, U, xs, h0))))
    assert "irad.loop[rnn_loop(n=6)]" in text  # the first step adds to 0.0: it stays unrolled
    assert "\n      graph rnn_loop(" in text and "numpy.tanh" in text


def test_rows_of_an_array_are_one_stacked_input():
    W, U, xs, h0 = CASES["rnn"][1]()
    r = loops.reroll(_graph(rnn, (W, U, xs, h0)))
    (op,) = [op for op in r.ops if op.prim == loops.LOOP_PRIM]
    assert loops.loop_of(op).xs_kinds == ("stack",)
    assert any(o.prim == "operator.getitem" and "1:7" in str(r) for o in r.ops)


@pytest.mark.parametrize("name, axis", [("columns", 1), ("last_axis_reversed", 2)])
def test_an_index_along_a_later_axis_is_one_stacked_input(name, axis):
    f, make = CASES[name]
    r = loops.reroll(_graph(f, make()))
    (op,) = [op for op in r.ops if op.prim == loops.LOOP_PRIM]
    assert loops.loop_of(op).xs_kinds == ("stack",)
    moves = [o for o in r.ops if o.prim == "numpy.moveaxis"]
    assert len(moves) == 1 and moves[0].args[1].value == axis


def test_nested_loops_nest():
    W, b, h0 = CASES["nested"][1]()
    r = loops.reroll(_graph(nested, (W, b, h0)))
    outer = [op for op in r.ops if op.prim == loops.LOOP_PRIM and
             any(o.prim == loops.LOOP_PRIM for o in loops.loop_of(op).body.ops)]
    assert outer, str(r)
    inner = [op for op in loops.loop_of(outer[0]).body.ops if op.prim == loops.LOOP_PRIM]
    assert loops.loop_of(inner[0]).n == 5


def test_a_guard_in_the_step_checks_every_iteration():
    W = np.eye(3) * 0.9
    h = np.array([0.5, 0.5, 0.5])  # every iteration takes the tanh branch
    gf = irad.value_and_grad(branchy, argnums=(0, 1))
    gf(W, h)
    prog = irad.compile(branchy, W, h, argnums=(0, 1))
    assert any(op.prim == loops.LOOP_PRIM for op in prog.graph.ops)
    v, g = gf(W, h * 1.1)
    _close(g, _unrolled_grad(branchy, (W, h * 1.1), (0, 1)))
    # a start from which later iterations take the other branch: the guard fails, irad traces again
    h2 = np.array([0.2, 0.1, 0.05])
    W2 = -np.eye(3) * 1.5
    v2, g2 = gf(W2, h2)
    _close(v2, branchy(W2, h2))
    _close(g2, _unrolled_grad(branchy, (W2, h2), (0, 1)))
    check_grads(branchy, W2, h2, order=2)


def test_a_while_loop_whose_trip_count_guards_fix():
    W = np.eye(3) * 0.8
    h = np.array([1.0, 2.0, 1.5])
    prog = irad.compile(while_converges, W, h, argnums=(0, 1))
    assert any(op.prim == loops.LOOP_PRIM and loops.step_has_effect(op) for op in prog.graph.ops)
    gf = irad.value_and_grad(while_converges, argnums=(0, 1))
    gf(W, h)
    for W2, h2 in ((W * 1.01, h), (W * 0.5, h * 3.0)):  # the same trip count; then another one: a retrace
        v, g = gf(W2, h2)
        _close(v, while_converges(W2, h2))
        _close(g, _unrolled_grad(while_converges, (W2, h2), (0, 1)), 1e-9)
        check_grads(while_converges, W2, h2, order=2)


def test_an_int_that_changes_per_iteration_leaves_the_loop_unrolled():
    k, y0 = R.normal(size=3), R.normal(size=3) * 0.1
    g = _graph(int_per_step, (k, y0))
    assert not any(op.prim == loops.LOOP_PRIM for op in loops.reroll(g).ops)
    gf = irad.grad(int_per_step, argnums=(0, 1))
    gf(k, y0)
    _close(gf(k * 0.5, y0), _unrolled_grad(int_per_step, (k * 0.5, y0), (0, 1)))
    check_grads(int_per_step, k, y0)


def test_a_float_that_changes_per_iteration_is_an_input_of_the_step():
    k, y0 = CASES["float_per_step"][1]()
    r = loops.reroll(_graph(float_per_step, (k, y0)))
    (op,) = [op for op in r.ops if op.prim == loops.LOOP_PRIM]
    assert "each" in loops.loop_of(op).xs_kinds


def test_a_print_in_the_loop_leaves_it_unrolled(capsys):
    k, y0 = R.normal(size=3), R.normal(size=3)
    g = _graph(prints, (k, y0))
    assert not any(op.prim == loops.LOOP_PRIM for op in loops.reroll(g).ops)
    gf = irad.grad(prints, argnums=(0, 1))
    gf(k, y0)
    capsys.readouterr()
    got = gf(k, y0)
    assert capsys.readouterr().out.count("False") == 6  # the program prints as f does, every iteration
    _close(got, _unrolled_grad(prints, (k, y0), (0, 1)))


def test_vjp_of_a_loop():
    W, U, xs, h0 = CASES["rnn"][1]()

    def states(W, h0):
        h = h0
        hs = []
        for t in range(xs.shape[0]):
            h = np.tanh(W @ h + U @ xs[t])
            hs.append(h)
        return np.stack(hs)

    y, pb = irad.vjp(states, W, h0)
    ybar = R.normal(size=y.shape)
    with loops.rerolling(False):
        y2, pb2 = irad.vjp(states, W, h0)
    _close(y, y2)
    _close(pb(ybar), pb2(ybar))
    _close(pb(ybar * 2), pb2(ybar * 2))


def test_a_long_loop_compiles_to_a_short_program():
    x = R.normal(size=400)
    prog = irad.compile(rosen_array, x)
    assert prog.source.count("\n") < 150
    gf = irad.grad(rosen_array)
    gf(x)
    _close(gf(x * 0.5), _unrolled_grad(rosen_array, (x * 0.5,), 0), 1e-8)


def test_by_default_only_long_runs_reroll():
    W, U, xs, h0 = CASES["rnn"][1]()
    with loops.rerolling(True, min_ops=loops.Config().min_ops):
        assert not any(op.prim == loops.LOOP_PRIM for op in irad.compile(rnn, W, U, xs, h0).graph.ops)
        x = R.normal(size=200)
        assert any(op.prim == loops.LOOP_PRIM for op in irad.compile(rosen_array, x).graph.ops)


def test_reroll_off_switch():
    W, U, xs, h0 = CASES["rnn"][1]()
    with loops.rerolling(False):
        prog = irad.compile(rnn, W, U, xs, h0)
    assert not any(op.prim == loops.LOOP_PRIM for op in prog.graph.ops)


def test_a_signed_zero_that_changes_per_iteration_is_not_one_constant():
    zs = [0.0, -0.0] * 4

    def f(x):
        s = x
        for z in zs:
            s = np.arctan2(z, s) - 4.0 + s * 0.5  # s stays negative; arctan2(-0.0, negative) is -pi, arctan2(0.0, negative) is pi
        return np.sum(s)

    x = -np.abs(R.normal(size=3)) - 0.5
    r = loops.reroll(_graph(f, (x,)))
    _close(tuple(evaluate(r, [x])), (f(x),), 1e-12)
    gf = irad.value_and_grad(f)
    gf(x)
    v, g = gf(x * 1.1)
    _close(v, f(x * 1.1))
    check_grads(f, x)


# ---- checkpointing: loops.checkpoint_loops (the sqrt(n) schedule) ---------------------------------


def _remat_loops(g):
    return [op for op in g.ops if op.prim == loops.LOOP_PRIM and loops.loop_of(op).remat]


@pytest.mark.parametrize("name", sorted(CASES))
def test_checkpointed_loops_give_the_unrolled_gradient(name):
    f, make = CASES[name]
    args = make()
    nums = tuple(range(len(args)))
    with loops.checkpointing(0):
        prog = irad.compile(f, *args, argnums=nums)
        assert "remat" in str(prog.graph), str(prog.graph)
        gf = irad.value_and_grad(f, argnums=nums)
        gf(*args)
        for _ in range(2):  # second and third calls, on new values
            new = make()
            v, g = gf(*new)
            _close(v, f(*new))
            _close(g, _unrolled_grad(f, new, nums), 1e-9)
            check_grads(f, *new, order=1)


@pytest.mark.parametrize("name", ["rnn", "nested", "reversed_rows"])
def test_checkpointed_loops_second_order(name):
    f, make = CASES[name]
    with loops.checkpointing(0):
        check_grads(f, *make(), order=2)


def test_a_loop_of_n_iterations_becomes_segments_of_the_divisor_nearest_sqrt_n():
    W, xs = R.normal(size=(3, 3)) * 0.4, R.normal(size=(37, 3))  # the first step is peeled: 36 = 6 x 6
    g = loops.reroll(_graph(stacked_states, (W, xs)))
    c = verify(loops.checkpoint_loops(g, None, 0))
    (outer,) = _remat_loops(c)
    lo = loops.loop_of(outer)
    assert lo.n == 6
    (inner,) = [op for op in lo.body.ops if op.prim == loops.LOOP_PRIM]
    assert loops.loop_of(inner).n == 6 and not loops.loop_of(inner).remat
    leaves = [W, xs]
    _close(tuple(evaluate(c, leaves)), tuple(evaluate(g, leaves)), 1e-12)


def test_a_checkpointed_loop_keeps_one_carry_per_segment():
    """The forward loop of a checkpointed 36-step RNN stacks 6 carries, not 36 iterations' state."""
    W, U, h0 = R.normal(size=(3, 3)) * 0.5, R.normal(size=(3, 2)), R.normal(size=3)
    xs = R.normal(size=(37, 2))
    with loops.checkpointing(0):
        prog = irad.compile(rnn, W, U, xs, h0, argnums=(0, 1))
    (fwd,) = [op for op in prog.graph.ops if op.prim == loops.LOOP_PRIM and loops.loop_of(op).remat]
    lo = loops.loop_of(fwd)
    assert lo.n == 6
    stacked = [o for o in fwd.outs if getattr(o.type, "shape", ())[:1] == (6,)]
    assert stacked and all(o.type.shape[0] == 6 for o in stacked)
    assert not any(getattr(o.type, "shape", ())[:1] == (36,) for o in fwd.outs)


def test_a_prime_number_of_iterations_is_checkpointed_per_iteration():
    W, xs = R.normal(size=(3, 3)) * 0.4, R.normal(size=(14, 3))  # 13 re-rolled iterations
    g = loops.reroll(_graph(stacked_states, (W, xs)))
    c = loops.checkpoint_loops(g, None, 0)
    (op,) = _remat_loops(c)
    assert loops.loop_of(op).n == 13 and not any(b.prim == loops.LOOP_PRIM for b in loops.loop_of(op).body.ops)
    with loops.checkpointing(0):
        v, gr = irad.value_and_grad(stacked_states, argnums=(0, 1))(W, xs)
        v, gr = irad.value_and_grad(stacked_states, argnums=(0, 1))(W * 0.9, xs)
    _close(gr, _unrolled_grad(stacked_states, (W * 0.9, xs), (0, 1)), 1e-9)


def test_small_loops_are_not_checkpointed_by_default():
    f, make = CASES["rnn"]
    prog = irad.compile(f, *make(), argnums=(0,))
    assert "remat" not in str(prog.graph)
    assert loops.CONFIG.checkpoint_bytes is not None and loops.CONFIG.checkpoint_bytes > 1 << 20
