"""The compiled tier's loops (irad/backends/compiled_loops.py): a loop compiled whole, checked on
the calls after the switch against finite differences and against the numpy tier."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import irad  # noqa: E402 - after the importorskip: without numba there is no compiled tier to test
from irad import loops, tiers  # noqa: E402
from irad.backends import compiled_loops, tier  # noqa: E402
from irad.pytree import flatten  # noqa: E402

from test_compiled_tier import _fd_check  # noqa: E402 - (the compiled tier's FD check: <grad, v> along a random v)


@pytest.fixture(scope="module")
def _shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("numba-loops")  # (one per module: a loop compiled once is loaded after)


@pytest.fixture(autouse=True)
def _numba_backend(monkeypatch, _shared_cache):
    monkeypatch.setenv("IRAD_CACHE_DIR", str(_shared_cache))
    monkeypatch.setattr(tiers.CONFIG, "compile_in_thread", False)
    was = irad.config().backend
    irad.config(backend="numba")
    yield
    tiers.settle(60)
    irad.config(backend=was)


# ---- the functions ------------------------------------------------------------------------

def rnn(Wx, Wh, xs):
    h = np.zeros((xs.shape[1], Wh.shape[0]))
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ Wx + h @ Wh + 0.1)
    return np.mean(h * h)


def euler(x0, k):
    x = x0
    for _ in range(12):
        x = x + 0.05 * (np.sin(x) * k - x ** 3)
    return np.sum(x * x)


def energy(W, h0):
    h, total = h0, 0.0
    for _ in range(8):
        h = np.tanh(W @ h)
        total = total + np.sum(h * h)  # (a np.float64 carry)
    return total


def rows(X, w):
    h = np.zeros(w.shape[0])
    for row in X:
        h = np.exp(-(h * w + row) ** 2)
    return np.sum(h)


def scaled(h, cs):
    for c in cs:  # (Python floats: an `each` input, stacked)
        h = np.log1p(h * h * c + 1.0) - np.maximum(h, 0.2)
    return np.sum(h)


G = np.linspace(0.5, 1.5, 6)


def captured(h):
    for _ in range(10):
        h = np.cosh(h * G) * 0.5 - h  # (G: a captured global, read live)
    return np.sum(h)


def _rnn_args(rng):
    return rng.normal(scale=0.3, size=(4, 6)), rng.normal(scale=0.3, size=(6, 6)), rng.normal(size=(10, 3, 4))


CASES = {
    "rnn": (rnn, _rnn_args, (0, 1, 2)),
    "euler": (euler, lambda rng: (rng.normal(size=5), rng.uniform(0.5, 1.0, size=5)), (0, 1)),
    "energy": (energy, lambda rng: (rng.normal(scale=0.4, size=(6, 6)), rng.normal(size=6)), (0, 1)),
    "rows": (rows, lambda rng: (rng.normal(scale=0.5, size=(9, 4)), rng.normal(size=4)), (0, 1)),
    "scaled": (scaled, lambda rng: (rng.uniform(0.1, 1.0, size=(2, 3)), [float(c) for c in rng.uniform(0.5, 1, 7)]),
               (0, 1)),
    "captured": (captured, lambda rng: (rng.normal(scale=0.3, size=6),), (0,)),
}


def _switched(f, args, argnums):
    vg = irad.value_and_grad(f, argnums=argnums)
    with tiers.compile_after(1):
        vg(*args)
        prog = vg.program(*args)  # the count reached: compiled (in this call: compile_in_thread off)
        vg(*args)  # the switch: both tiers run, the compiled one kept if they agree
    return vg, prog


@pytest.mark.parametrize("name", list(CASES))
def test_a_loop_runs_compiled_and_stays_right(name):
    f, make, argnums = CASES[name]
    rng = np.random.default_rng(7)
    args = make(rng)
    vg, prog = _switched(f, args, argnums)
    assert prog.tier == "numba", prog.compiled
    assert prog.compiled.loops >= 1
    assert "compiled_loop(" in prog.source
    numpy_fn = prog.numpy_tier[1]
    for _ in range(3):  # calls after the switch: the compiled tier, on new arguments
        fresh = make(rng)
        value, grads = vg(*fresh)
        _fd_check(f, fresh, argnums, value, grads, rng)
        leaves = flatten(fresh)[0]
        xs = leaves if prog.dyn_pos is None else [leaves[i] for i in prog.dyn_pos]
        assert tiers.agree(numpy_fn(*xs), prog.fn(*xs)) is None
    assert vg.traces == 1


def test_the_rnn_backward_reads_the_forward_rows_in_reverse():
    """The RNN's joint graph (under the size at which loops re-roll while tracing) is re-rolled into a
    forward loop and a reverse loop; the reverse loop reads the forward loop's stacked rows as one
    reversed slice, and no row is bound one by one where only the loops read it."""
    args = _rnn_args(np.random.default_rng(1))
    vg = irad.value_and_grad(rnn, argnums=(0, 1))
    vg(*args)
    g = vg.program(*args).graph
    assert not any(op.prim == loops.LOOP_PRIM for op in g.ops)  # (10 steps: unrolled while tracing)
    fused, n, _ = compiled_loops.compile_loops(g)
    assert n == 2
    calls = [op for op in fused.ops if op.prim == compiled_loops.LOOP_CALL]
    assert len(calls) == 2
    backward_reads = {a.id for a in calls[1].args if hasattr(a, "id")}
    slices = [op for op in fused.ops if op.prim == "operator.getitem" and isinstance(op.args[1].value, slice)
              and op.outs[0].id in backward_reads]
    assert slices and all(op.args[1].value.step == -1 for op in slices)
    assert 3 * len(fused.ops) < len(g.ops)


def _joint(f, *args):
    vg = irad.value_and_grad(f)
    vg(*args)
    return vg.program(*args).graph


def test_a_step_numba_cannot_run_stays_written_out():
    def sorted_steps(x):
        for _ in range(6):
            x = np.sort(x) * 0.9 + 0.1
        return np.sum(x * x)

    g = _joint(sorted_steps, np.arange(5.0))
    assert any(op.prim == loops.LOOP_PRIM for op in loops.reroll(g, min_ops=0).ops)  # (it does re-roll)
    prepared = compiled_loops.prepare(g)
    assert not any(op.prim == loops.LOOP_PRIM for op in prepared.ops)
    assert len(prepared.ops) == len(g.ops)


def test_a_loop_numba_rejects_stays_a_numpy_loop(monkeypatch):
    real = compiled_loops.load_module

    def refuse(source):
        if "compiled_loop" in source:
            raise RuntimeError("numba says no")
        return real(source)

    monkeypatch.setattr(compiled_loops, "load_module", refuse)
    rng = np.random.default_rng(3)
    args = _rnn_args(rng)
    vg, prog = _switched(rnn, args, (0, 1, 2))
    assert prog.compiled.loops == 0
    assert "compiled_loop(" not in prog.source and "for i in range(" in prog.source  # (a numpy loop)
    fresh = _rnn_args(rng)
    value, grads = vg(*fresh)
    _fd_check(rnn, fresh, (0, 1, 2), value, grads, rng)


def test_a_captured_array_changed_in_place_is_read_by_the_compiled_loop():
    rng = np.random.default_rng(4)
    (h,) = CASES["captured"][1](rng)
    vg, prog = _switched(captured, (h,), (0,))
    assert prog.tier == "numba" and prog.compiled.loops >= 1
    was = G.copy()
    try:
        G[:] = was * 1.3
        value, (grad,) = vg(h)
        assert np.allclose(value, captured(h), rtol=1e-12)
        _fd_check(captured, (h,), (0,), value, (grad,), rng)
    finally:
        G[:] = was


def test_the_loop_source_is_irads_own_text():
    def secret_user_name(h, w):
        for _ in range(6):
            h = np.tanh(h * w) + h
        return np.sum(h)

    g = _joint(secret_user_name, np.ones(3), np.ones(3))
    prepared, specs = compiled_loops.planned(g)
    assert specs
    for spec in specs.values():
        assert "secret" not in spec.source and "test_compiled_loops" not in spec.source


def test_the_prospect_counts_the_loops_and_finds_them_on_disk():
    args = _rnn_args(np.random.default_rng(5))
    vg = irad.value_and_grad(rnn, argnums=(0, 1))
    vg(*args)
    g = vg.program(*args).graph
    before = tier.prospect(g)
    assert before is not None and before.loops == 2
    tier.compile_program(g, "rnn_compiled")
    after = tier.prospect(g)
    assert after.on_disk and after.loops == 2 and after.compile_s() < before.compile_s()


def test_the_log_says_how_many_loops_were_compiled(caplog):
    import logging

    irad.config(log="backend")
    try:
        with caplog.at_level(logging.INFO, logger="irad.backend"):
            _switched(rnn, _rnn_args(np.random.default_rng(6)), (0, 1))
    finally:
        irad.config(log=None)
    assert "and 2 loop(s)" in caplog.text and "the compiled tier runs from now on" in caplog.text


def test_a_graph_with_a_loop_and_a_short_run_gets_both_compiled():
    """A loop re-rolled while tracing and a short run the compiled tier re-rolls, in one program:
    both compiled, right on the calls after the switch."""
    def two_loops(h, w):
        for _ in range(120):  # (re-rolled while tracing: over 400 ops)
            h = np.tanh(h * w + 0.5) * 0.9 + h * 0.1
        for _ in range(5):  # (short: re-rolled by the compiled tier only)
            h = np.sin(h) * w + h
        return np.sum(h * h)

    rng = np.random.default_rng(8)
    args = (rng.normal(size=4), rng.uniform(0.5, 1.0, size=4))
    g = _joint(two_loops, *args)
    assert any(op.prim == loops.LOOP_PRIM for op in g.ops)
    prepared = compiled_loops.prepare(g)
    assert sum(op.prim == loops.LOOP_PRIM for op in prepared.ops) > sum(op.prim == loops.LOOP_PRIM for op in g.ops)
    vg, prog = _switched(two_loops, args, (0, 1))
    assert prog.tier == "numba" and prog.compiled.loops >= 3
    for _ in range(2):
        fresh = (rng.normal(size=4), rng.uniform(0.5, 1.0, size=4))
        value, grads = vg(*fresh)
        _fd_check(two_loops, fresh, (0, 1), value, grads, rng)
