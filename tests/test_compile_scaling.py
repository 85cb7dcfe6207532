"""What the first-call work (issue 16, parts 4 and 5) changed keeps behaviour: the first call's
result is the compiled program's, values released during the trace-time evaluation are never
needed again, and the faster analyses (CSE key, DCE traversal, the inline pass's flattening and
sample bookkeeping) agree with the plain ones.  No timing here: costs are measured in
``benchmarks/compile_scaling.py``."""
from __future__ import annotations

import gc
import importlib
from collections import namedtuple

import networkx as nx
import numpy as np
import pytest

import irad
import irad.passes as P
from irad import ad, loops
from irad.ir import FLOAT, ArrayT, Const, Graph, Op, Var, collector_paused, const, map_atoms
from irad.pytree import flatten
from irad.trace import trace_values

analysis = importlib.import_module("irad.passes.analysis")
cse_mod = importlib.import_module("irad.passes.cse")
inline_mod = importlib.import_module("irad.passes.inline")

BIG = 1 << 16  # at least ad._SHARE_MIN elements: a rule's state shares the traced output


def scalar_steps(xs: list[float], steps: int) -> float:
    total = 0.0
    for i in range(steps):
        v = xs[i % len(xs)]
        total = total + v * v * 0.5 + 0.1 * v
    return total


def array_steps(w: np.ndarray, steps: int) -> float:
    h = w
    for _ in range(steps):
        h = np.tanh(h * w) + 0.1 * h
    return np.sum(h)


def chain(x: np.ndarray) -> float:
    y = np.sin(x)
    w = np.exp(-(y * x))
    return np.sum(w * y + np.tanh(x))


def chain_grad(x: np.ndarray) -> np.ndarray:
    y, c, t = np.sin(x), np.cos(x), np.tanh(x)
    w = np.exp(-(y * x))
    return w * c - w * y * (c * x + y) + (1 - t * t)


def _fd(f, x, eps=1e-6):
    x = np.asarray(x, float)
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


# ---- the first call is the compiled program's call ----------------------------------------------

def test_long_scalar_loop_first_call_equals_the_program_and_new_values_are_right():
    xs = [0.01 * (k + 1) for k in range(16)]
    vg = irad.value_and_grad(scalar_steps)
    v1, g1 = vg(xs, 200)
    v2, g2 = vg(xs, 200)
    assert v1 == v2 and g1 == g2
    traces = vg.traces
    ys = [0.3 - 0.02 * k for k in range(16)]
    v3, g3 = vg(ys, 200)
    assert vg.traces == traces
    assert v3 == pytest.approx(scalar_steps(ys, 200))
    want = _fd(lambda a: scalar_steps(list(a), 200), ys)
    np.testing.assert_allclose(g3, want, rtol=1e-6, atol=1e-7)


def test_long_array_loop_first_call_equals_the_program_and_new_values_are_right():
    w = np.linspace(0.1, 0.9, 8)
    vg = irad.value_and_grad(array_steps)
    v1, g1 = vg(w, 100)
    v2, g2 = vg(w, 100)
    assert v1 == v2
    np.testing.assert_array_equal(g1, g2)
    u = np.linspace(-0.5, 0.7, 8)
    v3, g3 = vg(u, 100)
    assert vg.traces == 1
    np.testing.assert_allclose(v3, array_steps(u, 100), rtol=1e-12)
    np.testing.assert_allclose(g3, _fd(lambda a: array_steps(a, 100), u), rtol=1e-6, atol=1e-8)


def test_big_input_first_call_with_shared_rule_state_matches_later_calls_and_the_hand_gradient():
    x = np.random.default_rng(0).normal(size=BIG)
    vg = irad.value_and_grad(chain)
    v1, g1 = vg(x)
    v2, g2 = vg(x)
    assert v1 == v2
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_allclose(g1, chain_grad(x), rtol=1e-12, atol=1e-14)
    z = x[::-1].copy()
    v3, g3 = vg(z)
    np.testing.assert_allclose(v3, chain(z), rtol=1e-12)
    np.testing.assert_allclose(g3, chain_grad(z), rtol=1e-12, atol=1e-14)


def test_a_traced_output_updated_in_place_later_is_not_shared_into_rule_state():
    """The rule's own output is shared only when it equals the traced value at the time of the
    transform: an output the function later updates in place keeps the rule's copy."""
    def f(x):
        y = np.tanh(x)
        z = y * x
        y += 1.0  # the traced array changes after tanh's output was taken
        return np.sum(z * y)

    x = np.random.default_rng(1).normal(size=BIG)
    vg = irad.value_and_grad(f)
    v1, g1 = vg(x)
    v2, g2 = vg(x)
    assert v1 == v2
    np.testing.assert_array_equal(g1, g2)
    t = np.tanh(x)
    want = (1 - t * t) * x * (t + 1) + t * (t + 1) + t * x * (1 - t * t)
    np.testing.assert_allclose(g1, want, rtol=1e-10, atol=1e-12)


def test_intermediates_released_by_the_transform_are_not_needed_by_guards_or_the_pullback():
    """A value the backward pass reads far from where it was made, and one a branch decided on,
    still give the right gradient on the first and later calls (also down the other branch)."""
    def f(x):
        a = np.sin(x)
        b = np.exp(a) * x
        c = b * b
        if np.sum(a) > 0:
            d = c * a
        else:
            d = c - a
        return np.sum(d * a) + np.sum(np.cos(b))

    x = np.abs(np.random.default_rng(2).normal(size=BIG)) + 0.1
    vg = irad.value_and_grad(f)
    v1, g1 = vg(x)
    v2, g2 = vg(x)
    assert v1 == v2
    np.testing.assert_array_equal(g1, g2)
    small = x[:5].copy()
    np.testing.assert_allclose(irad.grad(f)(small), _fd(f, small), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(vg(-x)[1], irad.grad(f)(-x), rtol=1e-12)  # the other branch: a retrace
    neg = -small
    np.testing.assert_allclose(irad.grad(f)(neg), _fd(f, neg), rtol=1e-6, atol=1e-8)


def test_vjp_residuals_survive_the_released_cotangents():
    x = np.random.default_rng(3).normal(size=BIG)
    y, pb = irad.vjp(chain, x)
    assert y == pytest.approx(chain(x))
    (gx,) = pb(1.0)
    np.testing.assert_allclose(gx, chain_grad(x), rtol=1e-12, atol=1e-14)
    (gx2,) = pb(2.0)
    np.testing.assert_allclose(gx2, 2 * chain_grad(x), rtol=1e-12, atol=1e-14)


def test_reverse_keeps_the_values_of_the_graph_its_seeds_and_its_outputs():
    x = np.random.default_rng(4).normal(size=7)
    g, tracer, _ = trace_values(chain, (x,), {})
    joint = ad.reverse(g, tracer.values, [0], seed="input")
    for v in g.inputs + tuple(o for op in g.ops for o in op.outs):
        assert v.id in joint.values
    for y in joint.ybar_inputs:
        assert y.id in joint.values
    for o in joint.graph.outputs:
        if isinstance(o, Var):
            assert o.id in joint.values
    grad = joint.values[joint.graph.outputs[-1].id]
    np.testing.assert_allclose(grad, chain_grad(x), rtol=1e-12)
    # the rule states stay (residuals of the backward graph), the cotangents on the way go
    states = [op.outs[-1].id for op in joint.graph.ops if op.prim == "rule_fwd"]
    assert all(s in joint.values for s in states)
    on_the_way = [o.id for op in joint.graph.ops if op.prim == "pullback" for o in op.outs
                  if all(o.id != g.id for g in joint.graph.outputs if isinstance(g, Var))]
    assert on_the_way and not any(c in joint.values for c in on_the_way)


# ---- the inline pass's sample bookkeeping ------------------------------------------------------

def test_inline_with_released_samples_inlines_every_rule_of_a_long_graph():
    """Samples are dropped after the last rule that reads them; a value read by rules far apart
    (``x`` at the start and at the end, cotangents summed from many uses) still has its sample."""
    def f(x):
        h = x
        for _ in range(30):
            h = np.tanh(h) * x + h
        return np.sum(h * x)

    with loops.rerolling(False):  # the loop written out: a long graph
        joint = irad.compile(f, np.linspace(0.1, 1.0, 5), passes=[]).graph
    plans = inline_mod.plan_rules(joint)
    n_rules = sum(1 for op in joint.ops if op.prim == "rule_fwd")
    n_pullbacks = sum(1 for op in joint.ops if op.prim == "pullback")
    assert n_rules >= 90 and len(plans) == n_rules + n_pullbacks
    done = P.inline_pullbacks(joint)
    assert not any(op.prim in ("rule_fwd", "pullback") for op in done.ops)
    x = np.linspace(-0.4, 0.8, 5)
    np.testing.assert_allclose(irad.grad(f)(x), _fd(f, x), rtol=1e-6, atol=1e-8)


def test_host_tree_flattens_as_flatten_does():
    NT = namedtuple("NT", "a b")
    v1, v2 = Var(1, FLOAT), Var(2, ArrayT("float64", (3,)))
    live = Const(np.ones(3), ArrayT("float64", (3,)), "global W", True)
    cases = [((v1, v2), {}), ((v1, const(2.0)), {}), (((v1, v2), v2), {}), ((v1,), {"axis": const((0, 1))}),
             ((v1, const(None)), {"keepdims": const(True)}), (([v1, const(3)], {"k": v2}), {}), ((live, v1), {}),
             ((const(np.float32(1)), const("s"), const(slice(1, 2))), {}), ((const(NT(1, 2)),), {}),
             ((const(np.int64(3)),), {"x": const([1, 2])}), ((NT(v1, 2),), {})]
    for args, kw in cases:
        want_live: dict[int, Const] = {}

        def hleaf(a, want_live=want_live):
            if isinstance(a, Var):
                return a
            if a.live:
                want_live[id(a.value)] = a
            return a.value

        want = flatten((tuple(map_atoms(a, hleaf) for a in args), {k: map_atoms(a, hleaf) for k, a in kw.items()}))
        leaves: list = []
        got_live: dict[int, Const] = {}
        tree = inline_mod.TreeDef("tuple", (0, 1), (inline_mod._host_tree(args, leaves, got_live),
                                                    inline_mod._host_tree(kw, leaves, got_live)))
        assert tree == want[1]
        assert len(leaves) == len(want[0]) and all(a is b for a, b in zip(leaves, want[0]))
        assert got_live.keys() == want_live.keys()


# ---- CSE and DCE ------------------------------------------------------------------------------

def _slow_key(op: Op):
    args = cse_mod._freeze(map_atoms(op.args, cse_mod._atom_key))
    return (op.prim, id(op.fn), args, tuple((k, cse_mod._freeze(map_atoms(v, cse_mod._atom_key))) for k, v in op.kwargs),
            op.unpack, tuple(o.type for o in op.outs))


def test_cse_key_of_flat_arguments_is_the_general_key():
    x, y = Var(1, FLOAT), Var(2, FLOAT)
    for args in [(x, y), (x, const(2.0)), (const(1.0), x), (x,), ()]:
        op = Op("operator.add", args, (), (Var(9, FLOAT),), np.add)
        assert cse_mod._key(op) == _slow_key(op)
    nested = Op("numpy.concatenate", ([x, y],), (("axis", const(0)),), (Var(9, FLOAT),), np.concatenate)
    assert cse_mod._key(nested) == _slow_key(nested)
    assert cse_mod._key(Op("operator.add", (x, const(2.0)), (), (Var(9, FLOAT),), np.add)) != \
        cse_mod._key(Op("operator.add", (x, const(3.0)), (), (Var(9, FLOAT),), np.add))


def test_cse_leaves_untouched_ops_as_they_were():
    def f(x):
        a = np.sin(x)
        b = np.sin(x)
        return np.sum(a * b) + np.sum(np.cos(x))

    g = irad.trace(f, np.ones(3))
    out = P.cse(g)
    assert len(out.ops) == len(g.ops) - 1
    kept = [op for op in out.ops if op in g.ops]
    assert any(op is o for op in kept for o in g.ops)  # not rebuilt when nothing in it changed
    x = np.linspace(0, 1, 3)
    assert out(x) == pytest.approx(f(x))


def test_dce_one_traversal_keeps_what_per_root_ancestors_keep():
    def f(x, n):
        t = 0.0
        dead = 0.0
        for i in range(n):
            if x[i % 3] > 0:  # a guard per step: many roots
                t = t + x[i % 3] * 2.0
            dead = dead + np.cos(x[i % 3])
        return t

    g = irad.trace(f, np.array([0.5, -1.0, 2.0]), 12)
    dg = analysis.to_nx(g)
    roots = ["out"] + [i for i, op in enumerate(g.ops) if analysis.has_effect(op)]
    assert len(roots) > 5
    want = set(roots)
    for r in roots:
        want |= nx.ancestors(dg, r)
    assert analysis.ancestors_of(analysis.to_nx(g), roots) == want
    out = P.dce(g)
    assert len(out.ops) == sum(1 for i in range(len(g.ops)) if i in want)
    x = np.array([1.5, -0.5, 0.25])
    assert out(x, 12) == pytest.approx(f(x, 12))


def test_collector_paused_restores_the_collector():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ValueError):
        with collector_paused():
            raise ValueError
    assert gc.isenabled()


def test_graph_helpers_are_unchanged_by_the_fast_inputs():
    x, y = Var(1, FLOAT), Var(2, FLOAT)
    op = Op("f", (x, const(1.0), (y, x), [y], {"k": x}), (("w", y),), (Var(3, FLOAT),), abs)
    assert [v.id for v in op.inputs] == [1, 2, 1, 2, 1, 2]
    assert isinstance(Graph("g", (x, y), (op,), (op.outs[0],)), Graph)


# ---- instrumented rule bodies on disk -----------------------------------------------------------

def test_a_twin_stored_on_disk_loads_as_the_one_instrumented_here(tmp_path):
    from irad import instrument
    from irad.rules import numpy_rules, python_rules

    cache = instrument._DiskCache()
    cache._dir = str(tmp_path)
    for fn in (python_rules.mul_pullback, numpy_rules._sech2, numpy_rules.max_pullback):
        code = fn.__code__
        twin = instrument.instrument_code(code)
        key = cache.key(code)
        assert key is not None and cache.load(key) is None
        cache.store(key, twin)
        loaded, names = cache.load(key)
        assert loaded is not twin and loaded == twin  # the same bytecode, constants (hooks too) and names
        assert [c.co_code for c in instrument._nested(loaded)] == [c.co_code for c in instrument._nested(twin)]
        assert names[0][0] == instrument.GLOBAL_NAMES[id(twin)]
    user = scalar_steps.__code__  # not irad's own code: never stored
    assert cache.key(user) is None
    (tmp_path / key).write_bytes(b"not marshal data")
    assert cache.load(key) is None


def test_the_disk_cache_can_be_turned_off(monkeypatch):
    from irad import instrument

    for off in ("off", "", "0"):
        monkeypatch.setenv("IRAD_CACHE_DIR", off)
        cache = instrument._DiskCache()
        assert cache.directory() is None
        assert cache.key(instrument._global_names.__code__) is None
    monkeypatch.setenv("IRAD_CACHE_DIR", "/some/where")
    assert instrument._DiskCache().directory().startswith("/some/where/instrument-")


def test_gradients_are_the_same_with_twins_instrumented_or_loaded_from_disk(tmp_path):
    import os
    import subprocess
    import sys

    code = ("import numpy as np, irad\n"
            "x = np.linspace(-1, 1, 7)\n"
            "def f(x):\n"
            "    return np.mean(np.tanh(x) * np.max(x) + np.sum(x * x)) / np.std(x)\n"
            "print(repr(irad.value_and_grad(f)(x)[1].tolist()))\n")
    env = {**os.environ, "IRAD_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    assert runs[0].stdout == runs[1].stdout
    stored = [p for d in tmp_path.iterdir() for p in d.iterdir()]
    assert stored and not any(p.name.startswith(".tmp-") for p in stored)
