"""The unrolled tier (``irad.tiers``): a hot program whose loops step through scalar work is lowered
again with its loops written out.

For every case of the class (Python floats, numpy scalars, two carries, a nested loop, a reversed
index, a guard in the step, a scalar rule, a keyword argument): the program qualifies; it runs its
loop until the ``hot_calls``-th cached call and straight-line code from then on; on the calls after
that (new values each time) it gives the same bits as a program that never leaves its first tier,
and gradients equal central finite differences.  Programs outside the class keep their loops; the
world changing under a promoted program (a global rebound, an array updated in place, a guard
flipped) is seen as before; threads promote a program once and all get its results."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import irad
from irad import loops, tiers

R = np.random.default_rng(7)
HOT = 4  # the cached call that promotes, in these tests


@pytest.fixture(autouse=True)
def short_loops_hot_early():
    """These loops are short: re-roll them (12 ops and more) and promote at the 4th cached call.
    (The numpy backend: a program that keeps its loops counts toward no compiled tier either.)"""
    was = irad.config().backend
    irad.config(backend="numpy")
    try:
        with loops.rerolling(True, min_ops=12), tiers.hot_after(HOT):
            yield
    finally:
        irad.config(backend=was)


def poly_list(xs):
    total = 0.0
    for i, v in enumerate(xs):
        total = total + v * v * 0.5 + 0.1 * i * v
    return total


def rosen_list(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2
    return s


def rosen_array(x):  # x[i] of an f64[n]: numpy scalars
    s = 0.0
    for i in range(x.shape[0] - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2
    return s


def two_carries(xs):
    a, b = 0.0, 1.0
    for v in xs:
        a, b = b, 0.5 * a + math.sin(v) * b
    return a + b * b


def nested(xs):
    s = 0.0
    for j in range(4):
        for k in range(5):
            s = s * 0.9 + math.exp(-xs[5 * j + k] ** 2)
        s = math.tanh(s)
    return s


def reversed_index(xs):
    s = 0.0
    for i in range(len(xs) - 1, -1, -1):
        s = s * 0.8 + xs[i] * xs[i]
    return s


def guarded(xs):
    s = 0.0
    for v in xs:
        if v > -5.0:  # a guard in every step (holds on these inputs)
            s = s + v * v
        else:
            s = s - v
    return s


def with_scale(xs, scale=1.0):
    s = 0.0
    for v in xs:
        s = s + scale * v * v
    return s


def _floats(n):
    return lambda: ([float(v) for v in R.normal(size=n)],)


CASES = {
    "poly_list": (poly_list, _floats(12)),
    "rosen_list": (rosen_list, _floats(10)),
    "rosen_array": (rosen_array, lambda: (R.normal(size=10),)),
    "two_carries": (two_carries, _floats(12)),
    "nested": (nested, lambda: ([float(v) for v in R.normal(size=20) * 0.5],)),
    "reversed_index": (reversed_index, _floats(12)),
    "guarded": (guarded, _floats(12)),
}


def _flat(x):
    return np.array(x, dtype=float).ravel()


def _fd(f, x, eps=1e-6):
    """Central differences of scalar ``f`` at ``x`` (a list of floats or an f64 array)."""
    base = _flat(x)
    out = np.empty_like(base)
    for k in range(base.size):
        up, down = base.copy(), base.copy()
        up[k] += eps
        down[k] -= eps
        wrap = (lambda a: list(map(float, a))) if isinstance(x, list) else (lambda a: a.reshape(np.shape(x)))
        out[k] = (f(wrap(up)) - f(wrap(down))) / (2 * eps)
    return out


def _same_bits(a, b):
    return np.array_equal(_flat(a[1]), _flat(b[1])) and a[0] == b[0]


def _promoted(vg, args):
    """Run ``vg`` up to its promotion; returns its program."""
    vg(*args)
    prog = vg.program(*args)
    for _ in range(HOT):
        vg(*args)
    return prog


@pytest.mark.parametrize("name", CASES)
def test_promoted_program_gives_first_tier_bits_and_finite_differences(name):
    f, make = CASES[name]
    args = make()
    vg = irad.value_and_grad(f)
    vg(*args)
    prog = vg.program(*args)  # (runs it: the first cached call)
    assert prog.hot == [HOT - 1], "qualifies"
    first_source = prog.source
    assert "for " in first_source
    for k in range(2, HOT):  # cached calls 2..HOT-1 run the loop
        vg(*args)
        assert prog.source is first_source and prog.hot == [HOT - k], k
    vg(*args)  # the HOT-th cached call promotes
    assert prog.hot is None and "for " not in prog.source and prog.graph is vg.program(*args).graph
    with tiers.hot_after(None):  # (read when a program is compiled)
        reference = irad.value_and_grad(f)  # never leaves its first tier
        reference(*args)
    assert reference.program(*args).hot is None and "for " in reference.program(*args).source
    for k in range(20):  # (a rewrite that is not exact would differ by an ulp on some inputs)
        new = make()
        got = vg(*new)
        want = reference(*new)
        assert _same_bits(got, want), name
        if k < 3:
            np.testing.assert_allclose(got[0], f(*new), rtol=1e-12)
            np.testing.assert_allclose(_flat(got[1]), _fd(f, new[0]), rtol=1e-6, atol=1e-7)
    assert "for " not in prog.source and "for " in reference.program(*args).source


def test_promotion_keeps_the_entry_fast_and_rebuilds_it():
    xs = _floats(12)()[0]
    vg = irad.value_and_grad(poly_list)
    prog = _promoted(vg, (xs,))
    assert prog.hot is None
    vg(xs)  # the entry built again, for the new function
    entry = vg.cache.fast
    assert entry is not None and "-= 1" not in entry.__irad_source__
    assert entry((xs,), vg.cache) is not irad.entry.MISS


def test_entry_counts_toward_promotion():
    """Cached calls that take the fast entry count too: a program served only by its entry is
    promoted at the same call as one served by the generic path."""
    xs = _floats(12)()[0]
    vg = irad.value_and_grad(poly_list)
    vg(xs)
    vg(xs)  # the first cached call: its entry is built
    prog = vg.program(xs)  # the second (the generic path)
    assert vg.cache.fast is not None and prog.hot == [HOT - 2]
    vg(xs)  # through the entry
    assert prog.hot == [HOT - 3]
    vg(xs)
    assert prog.hot is None and "for " not in prog.source


def test_keyword_call_promotes_through_the_generic_path():
    xs = _floats(12)()[0]
    vg = irad.value_and_grad(with_scale)
    for _ in range(HOT + 1):
        got = vg(xs, scale=1.5)
    prog = vg.program(xs, scale=1.5)
    assert prog.hot is None and "for " not in prog.source
    want = sum(1.5 * v * v for v in xs)
    assert got[0] == pytest.approx(want, rel=1e-12)
    np.testing.assert_allclose(got[1], [3.0 * v for v in xs], rtol=1e-12)


def test_compiled_program_promotes_when_called():
    xs = _floats(10)()[0]
    prog = irad.compile(rosen_list, xs)
    assert prog.hot == [HOT]
    for _ in range(HOT - 1):
        prog(xs)
    assert prog.hot == [1] and "for " in prog.source
    prog(xs)  # the HOT-th call
    assert prog.hot is None and "for " not in prog.source
    new = _floats(10)()[0]
    for _ in range(2):  # new values, the same key: the promoted program
        val, g = prog(new)
        assert val == pytest.approx(rosen_list(new), rel=1e-12)
        np.testing.assert_allclose(g, _fd(rosen_list, new), rtol=1e-6, atol=1e-7)


def rnn_step(W, h0):
    h = h0
    for _ in range(6):
        h = np.tanh(W @ h)
    return np.sum(h)


def draws(xs):
    s = 0.0
    for v in xs:
        s = s + v * np.random.normal()
    return s


def test_array_steps_impure_steps_and_custom_pipelines_keep_their_loops():
    W, h = R.normal(size=(3, 3)) * 0.5, R.normal(size=3)
    vg = irad.value_and_grad(rnn_step)
    vg(W, h)
    assert vg.program(W, h).hot is None  # a step of f64[3] ops: its loop's bookkeeping is noise
    xs = _floats(12)()[0]
    vg = irad.value_and_grad(draws)
    vg(xs)
    assert vg.program(xs).hot is None
    vg = irad.value_and_grad(poly_list, passes=[])
    vg(xs)
    assert vg.program(xs).hot is None
    with tiers.hot_after(None):
        vg = irad.value_and_grad(poly_list)
        vg(xs)
    assert vg.program(xs).hot is None


def straight(xs):
    return xs[0] * xs[1] + xs[2]


def test_no_loop_or_too_big_stays():
    xs = _floats(3)()[0]
    vg = irad.value_and_grad(straight)
    vg(xs)
    assert vg.program(xs).hot is None  # nothing to unroll
    big = _floats(12)()[0]
    was = tiers.CONFIG.max_ops
    tiers.CONFIG.max_ops = 20
    try:
        vg = irad.value_and_grad(poly_list)
        vg(big)
    finally:
        tiers.CONFIG.max_ops = was
    assert tiers.unrolled_size(vg.program(big).graph) > 20 and vg.program(big).hot is None


SCALE = 2.0
WEIGHTS = np.linspace(0.5, 1.5, 12)


def global_scaled(xs):
    s = 0.0
    for v in xs:
        s = s + SCALE * v * v
    return s


def weighted(xs):
    s = 0.0
    for i in range(len(xs)):
        s = s + WEIGHTS[i] * xs[i] * xs[i]
    return s


def test_world_changing_under_a_promoted_program():
    global SCALE, WEIGHTS
    xs = _floats(12)()[0]
    vg = irad.value_and_grad(global_scaled)
    prog = _promoted(vg, (xs,))
    assert prog.hot is None
    SCALE = 3.0
    try:
        for _ in range(2):
            val, g = vg(xs)
            np.testing.assert_allclose(g, [6.0 * v for v in xs], rtol=1e-12)
    finally:
        SCALE = 2.0
    vw = irad.value_and_grad(weighted)
    prog = _promoted(vw, (xs,))
    assert prog.hot is None and "for " not in prog.source
    WEIGHTS *= 2.0  # in place: the program reads the array at each call
    try:
        for _ in range(2):
            val, g = vw(xs)
            np.testing.assert_allclose(g, 2 * WEIGHTS * np.array(xs), rtol=1e-12)
            np.testing.assert_allclose(g, _fd(weighted, xs), rtol=1e-6, atol=1e-7)
    finally:
        WEIGHTS /= 2.0


def test_a_guard_flipped_after_promotion_retraces():
    xs = [abs(v) for v in _floats(12)()[0]]
    vg = irad.value_and_grad(guarded)
    prog = _promoted(vg, (xs,))
    assert prog.hot is None and "for " not in prog.source
    flipped = list(xs)
    flipped[5] = -7.0  # the 6th step takes the other branch
    for _ in range(2):
        val, g = vg(flipped)
        assert val == pytest.approx(guarded(flipped), rel=1e-12)
        np.testing.assert_allclose(g, _fd(guarded, flipped), rtol=1e-6, atol=1e-7)
    val, g = vg(xs)  # the promoted program again
    assert vg.program(xs) is prog
    assert val == pytest.approx(guarded(xs), rel=1e-12)
    np.testing.assert_allclose(g, [2 * v for v in xs], rtol=1e-12)


def test_threads_promote_once_and_agree():
    xs = _floats(12)()[0]
    with tiers.hot_after(None):
        want = irad.value_and_grad(two_carries)(xs)
    with tiers.hot_after(40):
        vg = irad.value_and_grad(two_carries)
        vg(xs)
    prog = vg.program(xs)
    lowered = []
    real = tiers.promote

    def counting(p, leaves=()):
        if p.hot is not None:
            lowered.append(p)
        real(p, leaves)

    results, errors = [], []
    tiers.promote = counting
    try:
        def work():
            try:
                for _ in range(30):
                    results.append(vg(xs))
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)
        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        tiers.promote = real
    assert not errors
    assert prog.hot is None and "for " not in prog.source
    assert 1 <= len(lowered) <= 6 and all(p is prog for p in lowered)  # asked by each thread that reached 0
    assert len(results) == 180 and all(_same_bits(r, want) for r in results)


def test_promoted_gradient_differentiated_again():
    """A promoted gradient program, traced by an outer ``grad`` (a Hessian-vector product)."""
    x = R.normal(size=10)
    v = R.normal(size=10)
    g = irad.grad(rosen_array)
    for _ in range(HOT + 2):
        g(x)
    assert g.program(x).hot is None
    hvp = irad.grad(lambda y: np.sum(g(y) * v))
    for _ in range(2):
        x2 = R.normal(size=10)
        eps = 1e-6
        fd = (g(x2 + eps * v) - g(x2 - eps * v)) / (2 * eps)
        np.testing.assert_allclose(hvp(x2), fd, rtol=1e-5, atol=1e-6)


def test_a_failed_unrolling_keeps_the_loop_and_the_call_succeeds(monkeypatch, caplog):
    xs = _floats(12)()[0]
    vg = irad.value_and_grad(poly_list)
    vg(xs)
    prog = vg.program(xs)
    source = prog.source

    def broken(g):
        raise RuntimeError("no unrolling today")

    monkeypatch.setattr(tiers, "unroll", broken)
    was = irad.config().log
    irad.config(log="trace")
    try:
        with caplog.at_level("INFO", logger="irad"):
            for _ in range(HOT + 2):
                val, g = vg(xs)
    finally:
        irad.config(log=was)
    assert prog.hot is None and prog.source is source  # asked once, and the first tier stays
    assert val == pytest.approx(poly_list(xs), rel=1e-12)
    np.testing.assert_allclose(g, [v + 0.1 * i for i, v in enumerate(xs)], rtol=1e-12)
    assert "unrolling failed (RuntimeError: no unrolling today)" in caplog.text


def test_promotion_is_logged(caplog):
    xs = _floats(12)()[0]
    was = irad.config().log
    irad.config(log="trace")
    try:
        with caplog.at_level("INFO", logger="irad"):
            vg = irad.value_and_grad(poly_list)
            for _ in range(HOT + 1):
                vg(xs)
    finally:
        irad.config(log=was)
    assert "poly_list: hot: its loops unrolled" in caplog.text
