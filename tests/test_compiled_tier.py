"""The compiled tier (irad.backends.numba, switched in by irad.tiers): kernels give numpy's bits for
exact arithmetic and a few ulp for transcendental functions; the corpus runs on it, agreeing with
the numpy tier and with finite differences on later calls; hot programs switch, cold ones never
compile, failures and disagreements keep the numpy tier (logged), the disk cache is keyed by the
kernels' source and the versions, and calls from other threads during the switch stay right."""
from __future__ import annotations

import dataclasses
import logging
import os
import threading

import numpy as np
import pytest

pytest.importorskip("numba")  # the `fast` extra (the test extra installs it)

import irad  # noqa: E402 - after the importorskip: without numba there is no compiled tier to test
from irad import backends, tiers  # noqa: E402
from irad.backends import numba as compiled  # noqa: E402
from irad.backends import tier  # noqa: E402
from irad.errors import ConfigError  # noqa: E402
from irad.pytree import flatten  # noqa: E402
from irad.testing import inner, perturb, random_like  # noqa: E402

from functions import CASES  # noqa: E402

#: every special value of float64 the kernels must treat as numpy does
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-310, -1e-310, 5e-324, 1e308, -1e308,
                    np.inf, -np.inf, np.nan, 700.0, -700.0, 710.0, -745.5, 20.0, 1e-8])


@pytest.fixture(autouse=True)
def _numba_backend(monkeypatch, tmp_path):
    monkeypatch.setenv("IRAD_CACHE_DIR", str(tmp_path))  # kernels of earlier tests are not on disk
    was = irad.config().backend
    irad.config(backend="numba")
    yield
    tiers.settle(60)
    irad.config(backend=was)


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    if a.dtype.kind != "f":
        return np.array_equal(a, b)
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.int64), b[~nan].view(np.int64))


def _ulps(got, want):
    fin = np.isfinite(want)
    return np.abs(got[fin] - want[fin]) / np.spacing(np.abs(want[fin]))


def _kernel_program(f, *args):
    g = irad.trace(f, *args)
    assert compiled.has_kernels(g), "nothing fused"
    made = tier.compile_program(g, "kernels")
    low, n = made.lowered, made.kernels
    assert n >= 1
    return low


BITWISE = {
    "add": lambda x, y: (x + y) * 1.0, "sub": lambda x, y: (x - y) * 1.0, "mul": lambda x, y: x * y * 1.0,
    "div": lambda x, y: x / y * 1.0, "np.add": lambda x, y: np.add(x, y) * 1.0,
    "np.divide": lambda x, y: np.divide(x, y) * 1.0, "maximum": lambda x, y: np.maximum(x, y) * 1.0,
    "minimum": lambda x, y: np.minimum(x, y) * 1.0, "where_gt": lambda x, y: np.where(x > y, x, y) * 1.0,
    "where_le": lambda x, y: np.where(x <= y, -x, y * 2.0), "compare_eq": lambda x, y: (x * 1.0) == y,
    "compare_ne": lambda x, y: (x * 1.0) != y, "abs": lambda x, y: np.abs(x) * y, "neg": lambda x, y: -x * y,
    "square": lambda x, y: np.square(x) + y, "pow2": lambda x, y: x ** 2 - y, "reciprocal": lambda x, y: np.reciprocal(x) * y,
    "clip_method": lambda x, y: x.clip(-1.0, 2.0) * 1.0, "clip": lambda x, y: np.clip(x, -0.0, 0.5) * 1.0,
    "sqrt": lambda x, y: np.sqrt(x) * 1.0,
    "chain": lambda x, y: ((x - y) * (x + 2.0) / (y * y + 1.0)) - 3.0 * x,
}


@pytest.mark.parametrize("name", sorted(BITWISE))
def test_exact_kernels_give_numpys_bits_on_special_values(name):
    f = BITWISE[name]
    x, y = (a.copy() for a in np.meshgrid(SPECIAL, SPECIAL))
    with np.errstate(all="ignore"):
        # every pair of special values; a broadcast row; another memory order and strides
        for args in ((x, y), (x, y[:1]), (x.T, y[:, ::-1])):
            low = _kernel_program(f, *args)
            assert "k0(" in low.source
            want = f(*args)
            got = low.fn(*args)[0]
            assert _same_bits(got, want), (name, got, want)
            assert got.flags.f_contiguous == want.flags.f_contiguous


TRANSCENDENTAL = {"exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "tanh": np.tanh,
                  "cosh": np.cosh, "sinh": np.sinh}


@pytest.mark.parametrize("name", sorted(TRANSCENDENTAL))
def test_transcendental_kernels_are_within_a_few_ulp(name, monkeypatch):
    monkeypatch.setattr(compiled.CONFIG, "fuse_transcendental", True)  # (the default where numpy's are scalar)
    fn = TRANSCENDENTAL[name]
    rng = np.random.default_rng(3)
    xs = np.concatenate([SPECIAL, rng.standard_normal(4000) * 30, rng.uniform(-2, 2, 4000),
                         10.0 ** rng.uniform(-300, 3, 2000) * rng.choice([-1, 1], 2000)])
    with np.errstate(all="ignore"):
        low = _kernel_program(lambda x: fn(x), xs)
        want = fn(xs)
        got = low.fn(xs)[0]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    assert _ulps(got, want).max() <= 4
    zero = want == 0
    assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero]))


def test_a_tanh_pullback_chain_is_one_kernel(monkeypatch):
    monkeypatch.setattr(compiled.CONFIG, "fuse_transcendental", True)

    def f(x, w):
        return np.sum(np.tanh(x @ w) ** 2)

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((64, 32)), rng.standard_normal((32, 16))
    vg = irad.value_and_grad(f, argnums=1)
    vg(x, w)
    g = vg.program(x, w).graph
    groups = compiled.plan(g)
    assert any({g.ops[i].prim for i in gr.ops} >= {"numpy.cosh", "operator.mul"} for gr in groups)


def test_transcendental_functions_of_big_arrays_stay_numpy_where_numpys_are_faster(monkeypatch):
    monkeypatch.setattr(compiled.CONFIG, "fuse_transcendental", False)
    big = irad.trace(lambda x: np.tanh(x * 2.0) + 1.0, np.ones((64, 64)))
    small = irad.trace(lambda x: np.tanh(x * 2.0) + 1.0, np.ones((8, 16)))
    assert [[big.ops[i].prim for i in gr.ops] for gr in compiled.plan(big)] == []  # (two 1-op chains around it)
    assert [[small.ops[i].prim for i in gr.ops] for gr in compiled.plan(small)] == \
        [["operator.mul", "numpy.tanh", "operator.add"]]


def test_an_unrolled_loop_compiles_each_distinct_kernel_once():
    def f(x):
        for _ in range(6):
            x = x * 0.5 + np.abs(x) * 0.25
        return np.sum(x)

    g = irad.trace(f, np.ones(40))
    specs = compiled.specs_of(g)
    assert sum(len(v) for v in specs.values()) >= 1
    names = {s.name for v in specs.values() for s in v}
    assert len(names) <= 2


# ---- the corpus on the compiled tier -----------------------------------------------------------

#: cases that change what they read on every call (a nonlocal counter): each call traces anew, so
#: no program of theirs is ever hot
RETRACING = {"nonlocal_accumulator"}
DIFF = [c for c in CASES if c.differentiable and not c.impure and not c.guards and c.name not in RETRACING]


def _fd_check(f, args, argnums, value, grads, rng):
    """<grad, v> against a central difference of f along a random v."""
    eps = 1e-6
    vs = [random_like(args[a], rng) for a in argnums]
    plus, minus = list(args), list(args)
    for a, v in zip(argnums, vs):
        plus[a] = perturb(args[a], eps, v)
        minus[a] = perturb(args[a], -eps, v)
    fd = (f(*plus) - f(*minus)) / (2 * eps)
    got = sum(inner(g, v) for g, v in zip(grads, vs))
    assert abs(got - fd) <= 1e-5 * max(1.0, abs(fd)), (got, fd)
    assert np.allclose(value, f(*args), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", DIFF, ids=[c.name for c in DIFF])
def test_corpus_on_the_compiled_tier(case):
    rng = np.random.default_rng(5)
    args = case.make_args(rng)
    vg = irad.value_and_grad(case.fn, argnums=case.argnums)
    with tiers.compile_after(1):
        vg(*args)
    prog = vg.program(*args)  # the first cached call: the compile starts (where there is something to compile)
    if tier.prospect(prog.graph) is None:
        assert prog.upgrade != "numba" and prog.compiled is None
        return
    numpy_fn = prog.fn
    assert tiers.settle(120)
    for k in range(3):  # calls 3, 4, 5: the switch, then the compiled tier
        fresh = case.make_args(rng)
        value, grads = vg(*fresh)  # (argnums a tuple: grads a tuple)
        _fd_check(case.fn, fresh, case.argnums, value, grads, rng)
    assert vg.traces == 1
    assert prog.tier == "numba", prog.compiled
    assert prog.fn is not numpy_fn
    leaves = flatten(fresh)[0]
    xs = leaves if prog.dyn_pos is None else [leaves[i] for i in prog.dyn_pos]
    assert tiers.agree(numpy_fn(*xs), prog.fn(*xs)) is None


def _rule_cases():
    """The rule tests' cases whose arguments are all float64 arrays (the ones a kernel can read)."""
    import test_rules  # (the rule tests' table of cases; tests/ is on the path, as for functions.py)
    out = []
    for p in test_rules.CASES:
        fn, args, kwargs, opts = p.values
        if args and all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in args):
            out.append(pytest.param(fn, args, kwargs, tuple(opts.get("wrt") or range(len(args))), id=p.id))
    return out


@pytest.mark.parametrize("fn,args,kwargs,nums", _rule_cases())
def test_rule_programs_on_the_compiled_tier(fn, args, kwargs, nums):
    """Each rule's case as a program (<ȳ, fn(args)>, its gradient): where its inlined forward and
    pullback fuse, the compiled tier agrees with the numpy tier and with finite differences."""
    rng = np.random.default_rng(11)
    with np.errstate(all="ignore"):
        ybar = random_like(fn(*args, **kwargs), rng)

    def loss(*a):
        return inner(ybar, fn(*a, **kwargs))

    vg = irad.value_and_grad(loss, argnums=nums)
    with tiers.compile_after(None), np.errstate(all="ignore"):
        vg(*args)
        prog = vg.program(*args)
    if not compiled.has_kernels(prog.graph):
        assert prog.compiled is None
        return
    made = tier.compile_program(prog.graph, "rule")
    low, n = made.lowered, made.kernels
    assert n >= 1
    leaves = flatten(args)[0]
    xs = leaves if prog.dyn_pos is None else [leaves[i] for i in prog.dyn_pos]
    with np.errstate(all="ignore"):
        old, new = prog.fn(*xs), low.fn(*xs)
    assert tiers.agree(old, new) is None, tiers.agree(old, new)
    value, grads = prog.unpack(new)
    _fd_check(loss, args, nums, value, grads, rng)  # (argnums a tuple: grads a tuple)


# ---- tiering -----------------------------------------------------------------------------------

def mlp(W1, W2, x):
    h = np.tanh(x @ W1)
    return np.sum(np.log1p(np.exp(h @ W2)))


def _mlp_args(rng, n=32):
    return rng.standard_normal((8, 16)) * 0.3, rng.standard_normal((16, 4)) * 0.3, rng.standard_normal((n, 8))


def test_a_hot_program_switches_and_stays_right(caplog):
    rng = np.random.default_rng(1)
    args = _mlp_args(rng)
    vg = irad.value_and_grad(mlp, argnums=(0, 1))
    irad.config(log="backend")
    try:
        with tiers.compile_after(3), caplog.at_level(logging.INFO, logger="irad.backend"):
            vg(*args)
            for _ in range(3):
                vg(*args)
            prog = vg.program(*args)
            assert prog.compiled is not None and prog.tier == "numpy"
            assert tiers.settle(120)
            for _ in range(3):
                fresh = _mlp_args(rng)
                value, grads = vg(*fresh)
                _fd_check(mlp, fresh, (0, 1), value, grads, rng)
    finally:
        irad.config(log=None)
    assert prog.tier == "numba" and prog.hot is None
    assert "numba kernel(s)" in caplog.text and "compiled tier runs from now on" in caplog.text
    assert "k0(" in prog.source
    assert vg.traces == 1


def test_a_cold_program_never_compiles():
    rng = np.random.default_rng(2)
    args = _mlp_args(rng, n=4)
    vg = irad.value_and_grad(mlp, argnums=(0, 1))
    for _ in range(20):
        vg(*args)
    prog = vg.program(*args)
    assert prog.upgrade == "numba" and prog.compiled is None and prog.tier == "numpy"
    assert prog.hot[0] > 1000  # small arrays: their calls take long to outweigh a compile


def test_big_arrays_compile_sooner_than_small_ones():
    small = irad.trace(lambda x: (x * 2.0 + 1.0) * x, np.ones(10))
    big = irad.trace(lambda x: (x * 2.0 + 1.0) * x, np.ones(10 ** 6))
    assert tiers.calls_before_compiling(big) < tiers.calls_before_compiling(small)


def test_the_numpy_backend_never_compiles():
    irad.config(backend="numpy")
    vg = irad.value_and_grad(mlp, argnums=(0, 1))
    args = _mlp_args(np.random.default_rng(0))
    with tiers.compile_after(1):
        for _ in range(5):
            vg(*args)
    prog = vg.program(*args)
    assert prog.upgrade is None and prog.compiled is None and prog.tier == "numpy"


def _hot_logged(vg, args, caplog):
    """``_hot`` with the backend topic logged into ``caplog``."""
    irad.config(log="backend")
    try:
        with caplog.at_level(logging.INFO, logger="irad.backend"):
            return _hot(vg, args)
    finally:
        irad.config(log=None)


def _hot(vg, args, calls=4):
    with tiers.compile_after(2):
        for _ in range(calls):
            vg(*args)
    assert tiers.settle(120)
    for _ in range(2):
        vg(*args)
    return vg.program(*args)


def test_a_failed_compile_keeps_the_numpy_tier_and_says_why(monkeypatch, caplog):
    def broken(g, name):
        raise RuntimeError("no kernels today")

    monkeypatch.setattr(tier, "compile_program", broken)
    rng = np.random.default_rng(3)
    args = _mlp_args(rng)
    vg = irad.value_and_grad(mlp, argnums=(0, 1))
    prog = _hot_logged(vg, args, caplog)
    assert prog.tier == "numpy" and prog.hot is None
    assert "stays on numpy: it did not compile (RuntimeError: no kernels today)" in caplog.text
    fresh = _mlp_args(rng)
    value, grads = vg(*fresh)
    _fd_check(mlp, fresh, (0, 1), value, grads, rng)


def test_a_compiled_tier_that_disagrees_is_not_used(monkeypatch, caplog):
    real = tier.compile_program

    def wrong(g, name):
        made = real(g, name)
        low = made.lowered
        fn = low.fn

        def off(*xs):
            out = fn(*xs)
            return (out[0] * (1 + 1e-6),) + tuple(out[1:])
        return dataclasses.replace(made, lowered=type(low)(low.source, off, low.name))

    monkeypatch.setattr(tier, "compile_program", wrong)
    args = _mlp_args(np.random.default_rng(4))
    vg = irad.value_and_grad(mlp, argnums=(0, 1))
    prog = _hot_logged(vg, args, caplog)
    assert prog.tier == "numpy"
    assert "stays on numpy: output 0 differs" in caplog.text
    np.testing.assert_allclose(vg(*args)[0], mlp(*args), rtol=1e-13)


def test_agree_compares_structure_dtypes_nans_and_magnitudes():
    a = (np.float64(1.0), np.array([1.0, np.nan, np.inf]), np.array([1, 2]))
    assert tiers.agree(a, a) is None
    assert tiers.agree(a, a[:2]) is not None
    assert "nan" in tiers.agree(a, (a[0], np.array([1.0, 2.0, np.inf]), a[2]))
    assert "differs" in tiers.agree(a, (a[0], a[1], np.array([1, 3])))
    assert tiers.agree(a, (a[0] + 1e-14, a[1], a[2])) is None
    assert "differs by" in tiers.agree(a, (a[0] + 1e-6, a[1], a[2]))
    assert "float32" in tiers.agree(a, (a[0], a[1].astype(np.float32), a[2]))


def test_the_disk_cache_is_keyed_by_source_and_versions():
    rng = np.random.default_rng(6)
    args = _mlp_args(rng)
    prog = _hot(irad.value_and_grad(mlp, argnums=(0, 1)), args)
    assert prog.tier == "numba" and not prog.compiled.from_disk
    files = [f for f in os.listdir(compiled.cache_directory()) if f.endswith(".py")]
    assert len(files) == 1
    again = irad.value_and_grad(mlp, argnums=(0, 1))  # a new function: its kernels are on disk
    again(*args)
    prog2 = again.program(*args)  # its first cached call starts the compile at once
    assert prog2.compiled is not None
    assert tiers.settle(120)
    again(*args)
    assert prog2.tier == "numba" and prog2.compiled.from_disk

    # another function: another module; other versions: another directory
    other = _hot(irad.value_and_grad(lambda W1, W2, x: np.sum(np.tanh(x @ W1) ** 2) + np.sum(W2), argnums=(0, 1)), args)
    assert other.tier == "numba"
    assert len([f for f in os.listdir(compiled.cache_directory()) if f.endswith(".py")]) == 2
    here = compiled.cache_directory()
    for name, version in (("_numba_version", "0.0.other"), ("_irad_version", "99")):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(compiled, name, lambda: version)
            assert compiled.cache_directory() != here
    assert compiled.cache_directory() == here


def test_without_a_disk_cache_kernels_compile_in_memory(monkeypatch, tmp_path):
    monkeypatch.setenv("IRAD_CACHE_DIR", "off")
    assert compiled.cache_directory() is None
    prog = _hot(irad.value_and_grad(mlp, argnums=(0, 1)), _mlp_args(np.random.default_rng(7)))
    assert prog.tier == "numba" and not prog.compiled.from_disk


def test_calls_from_threads_during_the_switch_stay_right():
    rng = np.random.default_rng(8)
    inputs = [_mlp_args(rng) for _ in range(6)]
    vg = irad.value_and_grad(mlp, argnums=(0, 1))
    want = []
    with tiers.compile_after(2):
        for a in inputs:
            v, g = vg(*a)
            want.append((v, g))
    errors = []

    def worker(k):
        try:
            for r in range(60):
                i = (k + r) % len(inputs)
                v, g = vg(*inputs[i])
                if tiers.agree((want[i][0],) + want[i][1], (v,) + g) is not None:
                    errors.append((k, r, tiers.agree((want[i][0],) + want[i][1], (v,) + g)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tiers.settle(120)
    for a in inputs:
        vg(*a)
    assert not errors, errors[:3]
    assert vg.program(*inputs[0]).tier == "numba"


def test_backend_settings():
    assert irad.config(backend="numpy").backend == "numpy"
    assert irad.config(backend="AUTO").backend == "auto"
    with pytest.raises(ConfigError, match="unknown irad backend 'jax'.*numpy, numba, auto"):
        irad.config(backend="jax")
    monkey = pytest.MonkeyPatch()
    try:
        monkey.setattr(backends, "_INSTALLED", [False])
        with pytest.raises(ConfigError, match=r"needs numba: pip install 'irad\[fast\]'"):
            irad.config(backend="numba")
        assert not backends.Config("auto").compiled_tier()
    finally:
        monkey.undo()
    assert backends.Config("auto").compiled_tier()


def test_the_environment_variable_sets_the_backend(monkeypatch):
    monkeypatch.setenv("IRAD_BACKEND", "numpy")
    assert backends._from_env().backend == "numpy"
    monkeypatch.setenv("IRAD_BACKEND", "bogus")
    with pytest.warns(UserWarning, match="IRAD_BACKEND ignored"):
        assert backends._from_env().backend == "numpy"


def test_kernel_source_holds_no_user_text():
    def f(x, y):  # a docstring, names and a string constant that must not reach generated code
        """user docstring 'quoted'"""
        return np.sum(np.tanh(x * 3.0 + y) * 0.1)

    g = irad.trace(f, np.ones(5), np.ones(5))
    specs = compiled.specs_of(g)
    src = compiled.module_source([s for ss in specs.values() for s in ss])
    assert "user" not in src and "quoted" not in src
    assert all(line.isascii() for line in src.splitlines())


def test_a_program_on_the_compiled_tier_is_traced_through_its_numpy_program():
    rng = np.random.default_rng(9)
    W1, W2, x = _mlp_args(rng)
    inner = irad.grad(mlp, argnums=0)

    def outer(W):
        return np.sum(inner(W, W2, x) ** 2)

    irad.grad(outer)(W1)  # (a first outer trace: the call key the inner program has inside one)
    prog = inner.program(W1, W2, x)
    prog.hot[0] = 1  # hot now: the next call starts the compile
    inner(W1, W2, x)
    assert tiers.settle(120)
    inner(W1, W2, x)
    assert prog.tier == "numba" and prog.numpy_tier is not None
    g = irad.grad(outer)  # its trace runs the inner program on traced values: its numpy program
    for _ in range(2):
        W = W1 + 0.01 * rng.standard_normal(W1.shape)
        v = rng.standard_normal(W.shape)
        eps = 1e-6
        fd = (outer(W + eps * v) - outer(W - eps * v)) / (2 * eps)
        assert abs(np.sum(g(W) * v) - fd) <= 1e-5 * max(1.0, abs(fd))


def test_compiled_programs_of_irad_compile_switch_too():
    rng = np.random.default_rng(10)
    args = _mlp_args(rng)
    with tiers.compile_after(2):
        prog = irad.compile(mlp, *args, argnums=(0, 1))
    for _ in range(3):
        prog(*args)
    assert tiers.settle(120)
    for _ in range(3):
        fresh = _mlp_args(rng)
        value, grads = prog(*fresh)
        _fd_check(mlp, fresh, (0, 1), value, grads, rng)
    assert prog.tier == "numba"


def test_a_synchronous_compile_switches_at_the_call_that_reaches_the_count(monkeypatch):
    monkeypatch.setattr(tiers.CONFIG, "compile_in_thread", False)
    rng = np.random.default_rng(12)
    args = _mlp_args(rng)
    vg = irad.value_and_grad(mlp, argnums=(0, 1))
    with tiers.compile_after(2):
        vg(*args)
        vg(*args)
        prog = vg.program(*args)  # the 2nd cached call: compiles, checks and switches
    assert prog.tier == "numba" and prog.compiled.thread is None
    fresh = _mlp_args(rng)
    value, grads = vg(*fresh)
    _fd_check(mlp, fresh, (0, 1), value, grads, rng)


def test_a_later_process_loads_the_kernels_from_disk(tmp_path):
    """The disk cache across processes: the second process's program loads its kernels (numba's
    cache rebuilds them by importing their module) and switches."""
    script = tmp_path / "hot.py"
    script.write_text(
        "import numpy as np, irad\n"
        "from irad import tiers\n"
        "irad.config(backend='numba')\n"
        "def f(x, w):\n"
        "    return np.sum(np.tanh(x @ w) * 0.5 + (x @ w) ** 2)\n"
        "x, w = np.linspace(-1, 1, 24).reshape(6, 4), np.linspace(0, 1, 12).reshape(4, 3)\n"
        "vg = irad.value_and_grad(f, argnums=1)\n"
        "with tiers.compile_after(2):\n"
        "    for _ in range(3):\n"
        "        vg(x, w)\n"
        "assert tiers.settle(120)\n"
        "v, g = vg(x, w)\n"
        "p = vg.program(x, w)\n"
        "assert p.tier == 'numba', p.compiled\n"
        "print(p.compiled.from_disk, repr(v))\n")
    import subprocess
    import sys
    env = dict(os.environ, IRAD_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    first, second = (r.stdout.split() for r in runs)
    assert first[0] == "False" and second[0] == "True"
    assert first[1] == second[1]


def test_a_program_with_an_impure_call_keeps_the_numpy_tier(capsys):
    """Its switch would run it twice: each call must print once, as the function does."""
    def f(x, w):
        h = np.tanh(x @ w) * 0.5 + 1.0
        print("called")
        return np.sum(h * h)

    rng = np.random.default_rng(13)
    args = (rng.standard_normal((6, 4)), rng.standard_normal((4, 3)))
    vg = irad.value_and_grad(f, argnums=1)
    with tiers.compile_after(1):
        for _ in range(4):
            vg(*args)
    assert tiers.settle(120)
    vg(*args)
    prog = vg.program(*args)
    assert prog.upgrade is None and prog.tier == "numpy"
    assert capsys.readouterr().out.count("called") == 6
