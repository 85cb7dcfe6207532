"""The fast entry of a cached gradient program (``irad.entry``): on the calls it answers, the same
result as the generic path and as finite differences; every call it must not answer (another
structure, dtype, shape, static, registry, a changed world, a failed guard) goes to the generic
path, which is then right too."""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import pytest

import irad
import irad.api
from irad.pytree import flatten
from irad.testing import numerical_vjp

RNG = np.random.default_rng(7)


def fd_grads(f, args, argnums):
    """Central differences of scalar ``f`` for each of ``argnums`` (irad's own checker)."""
    out = []
    for a in argnums:
        def of_one(x, a=a):
            return f(*args[:a], x, *args[a + 1:])
        out.append(numerical_vjp(of_one, (args[a],), 1.0)[0])
    return out


def assert_tree_close(got, want, rtol=1e-6, atol=1e-8):
    lg, tg = flatten(got)
    lw, tw = flatten(want)
    assert tg == tw, (tg, tw)
    for a, b in zip(lg, lw):
        if a is None or b is None:
            assert a is None and b is None
        elif isinstance(b, str):
            assert a == b
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def generic(f, argnums=0, **kw):
    """The gradient function with its entries switched off: every call takes the generic path."""
    vg = irad.value_and_grad(f, argnums, **kw)
    vg._use_entry = lambda prog, args: None
    return vg


W = np.array([0.5, -1.0, 2.0])


def f_array(x):
    return np.sum(W * np.sin(x) * x)


def f_scalar(x):
    return x * x * 3.0 + np.cos(x)


def f_floats(xs):
    t = 0.0
    for v in xs:
        t = t + v * v * 0.5 + np.sin(v)
    return t


def f_dict(p):
    return np.sum(np.tanh(p["w"]) * p["b"]) + np.sum(p["b"] ** 2)


def f_nested(p):
    (a, b), d = p
    return np.sum(a * b) + d["c"] * np.sum(a) + np.sum(d["e"][0] * d["e"][1])


def f_two(x, y):
    return np.sum(x[:, None] * y[None, :] ** 2)


def f_static(x, mode, flag, nothing):
    out = np.sum(x ** 3) if mode == "cube" else np.sum(x ** 2)
    return out * 2.0 if flag else out


def f_zero_d(x):
    return np.exp(x) * x


def f_odict(p):
    return np.sum(p["a"] * p["z"]) + np.sum(p["z"])


def f_npscalar(x, s):
    return np.sum(x * s) * s


def f_list_of_arrays(xs):
    return sum(np.sum(np.cos(a) * i) for i, a in enumerate(xs))


CASES = [
    ("array", f_array, lambda: (RNG.normal(size=3),), 0),
    ("array 2-d", f_array, lambda: (RNG.normal(size=(4, 3)),), 0),
    ("0-d array", f_zero_d, lambda: (np.array(0.3),), 0),
    ("python float", f_scalar, lambda: (0.7,), 0),
    ("list of floats", f_floats, lambda: ([float(v) for v in RNG.normal(size=20)],), 0),
    ("tuple of floats", f_floats, lambda: (tuple(float(v) for v in RNG.normal(size=5)),), 0),
    ("dict of arrays", f_dict, lambda: ({"w": RNG.normal(size=3), "b": RNG.normal(size=3)},), 0),
    ("OrderedDict", f_odict, lambda: (OrderedDict(z=RNG.normal(size=2), a=RNG.normal(size=2)),), 0),
    ("nested", f_nested, lambda: (((RNG.normal(size=2), RNG.normal(size=2)),
                                   {"c": 1.5, "e": [RNG.normal(size=(2, 2)), RNG.normal(size=(2, 2))]}),), 0),
    ("two args, argnums=(0, 1)", f_two, lambda: (RNG.normal(size=3), RNG.normal(size=2)), (0, 1)),
    ("two args, argnums=1", f_two, lambda: (RNG.normal(size=3), RNG.normal(size=2)), 1),
    ("broadcast", f_two, lambda: (RNG.normal(size=1), RNG.normal(size=4)), 0),
    ("statics", f_static, lambda: (RNG.normal(size=3), "cube", True, None), 0),
    ("numpy scalar", f_npscalar, lambda: (RNG.normal(size=3), np.float64(1.5)), (0, 1)),
    ("list of arrays", f_list_of_arrays, lambda: ([RNG.normal(size=2), RNG.normal(size=(2, 2))],), 0),
]


@pytest.mark.parametrize("name,f,make,argnums", CASES, ids=[c[0] for c in CASES])
def test_entry_agrees_with_generic_and_fd(name, f, make, argnums):
    vg = irad.value_and_grad(f, argnums)
    ref = generic(f, argnums)
    nums = (argnums,) if isinstance(argnums, int) else argnums
    args = make()
    vg(*args)
    vg(*args)  # the second call builds and installs the entry
    prog = vg.program(*args)
    assert prog._entry and vg.cache.fast is prog._entry, "no entry for a plain structure"
    for _ in range(3):  # calls 3-5: through the entry, on new values of the same structure
        args = make()
        value, grad = vg(*args)
        rvalue, rgrad = ref(*args)
        assert_tree_close(value, rvalue, rtol=1e-14, atol=0)
        assert_tree_close(grad, rgrad, rtol=1e-14, atol=0)
        assert_tree_close(value, f(*args), rtol=1e-12, atol=1e-14)
        fd = fd_grads(f, args, nums)
        assert_tree_close(grad, fd[0] if isinstance(argnums, int) else tuple(fd))
    assert vg.traces == 1


def test_grad_and_has_aux_layouts():
    def f(x):
        return np.sum(x ** 2), {"norm": np.linalg.norm(x), "twice": 2 * x}
    x = RNG.normal(size=4)
    for with_value in (True, False):
        fn = irad.value_and_grad(f, has_aux=True) if with_value else irad.grad(f, has_aux=True)
        for _ in range(4):
            x = RNG.normal(size=4)
            out = fn(x)
            if with_value:
                (value, aux), g = out
                assert value == pytest.approx(np.sum(x ** 2))
            else:
                g, aux = out
            assert aux["norm"] == pytest.approx(np.linalg.norm(x))
            np.testing.assert_array_equal(aux["twice"], 2 * x)
            np.testing.assert_allclose(g, 2 * x, rtol=1e-14)
        assert fn.cache.fast is not None
    g = irad.grad(f_dict)
    p = {"w": RNG.normal(size=3), "b": RNG.normal(size=3)}
    for _ in range(3):
        out = g(p)
    assert list(out) == ["w", "b"] and g.cache.fast is not None
    assert_tree_close(out, numerical_vjp(f_dict, (p,), 1.0)[0])


def _near_misses():
    """(name, hot arguments, other arguments): the others must not be answered by the hot entry."""
    a = RNG.normal(size=3)
    return [
        ("shape", f_array, (a,), (RNG.normal(size=4),)),
        ("ndim", f_array, (a,), (RNG.normal(size=(1, 3)),)),
        ("dtype float32", f_array, (a,), (a.astype(np.float32),)),
        ("dtype complex", f_array, (a,), (a + 0.5j,)),
        ("byte order", f_array, (a,), (a.astype(">f8"),)),
        ("array subclass", f_array, (a,), (np.asarray(a).view(_Sub),)),
        ("a list, not an array", f_array, (a,), (list(a),)),
        ("float to int", f_scalar, (0.7,), (2,)),
        ("float to numpy float", f_scalar, (0.7,), (np.float64(0.7),)),
        ("float to 0-d array", f_scalar, (0.7,), (np.array(0.7),)),
        ("list length", f_floats, ([0.1, 0.2, 0.3],), ([0.1, 0.2],)),
        ("an int in a list of floats", f_floats, ([0.1, 0.2, 0.3],), ([0.1, 2, 0.3],)),
        ("a numpy float in a list", f_floats, ([0.1, 0.2, 0.3],), ([0.1, np.float64(0.2), 0.3],)),
        ("list to tuple", f_floats, ([0.1, 0.2, 0.3],), ((0.1, 0.2, 0.3),)),
        ("dict key order", f_dict, ({"w": a, "b": a * 2},), ({"b": a * 2, "w": a},)),
        ("dict value shape", f_dict, ({"w": a, "b": a * 2},), ({"w": a, "b": RNG.normal(size=(2, 3))},)),
        ("dict to OrderedDict", f_dict, ({"w": a, "b": a * 2},), (OrderedDict(w=a, b=a * 2),)),
        ("static string", f_static, (a, "cube", True, None), (a, "square", True, None)),
        ("static bool", f_static, (a, "cube", True, None), (a, "cube", False, None)),
        ("None to a static", f_static, (a, "cube", True, None), (a, "cube", True, "x")),
        ("nested leaf shape", f_nested, (((a, a), {"c": 1.5, "e": [np.eye(2), np.eye(2)]}),),
         (((a, a), {"c": 1.5, "e": [np.eye(2), np.ones((2, 1))]}),)),
        ("nested float to array", f_nested, (((a, a), {"c": 1.5, "e": [np.eye(2), np.eye(2)]}),),
         (((a, a), {"c": np.array([1.5, 2.0, 0.5]), "e": [np.eye(2), np.eye(2)]}),)),
        ("argument count", f_two, (a, a), (a,)),
    ]


class _Sub(np.ndarray):
    pass


def _outcome(fn, args):
    try:
        return "ok", fn(*args)
    except Exception as e:  # noqa: BLE001 - the generic path's error is the expected outcome
        return "error", type(e)


@pytest.mark.parametrize("name,f,hot,other", _near_misses(), ids=[c[0] for c in _near_misses()])
def test_other_calls_take_the_generic_path(name, f, hot, other):
    vg = irad.value_and_grad(f)
    for _ in range(3):
        vg(*hot)
    entry = vg.cache.fast
    assert entry is not None
    assert entry(other, vg.cache) is irad.entry.MISS
    got = _outcome(vg, other)
    want = _outcome(generic(f), other)
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        assert_tree_close(got[1], want[1], rtol=1e-14, atol=0)
    else:
        assert got[1] is want[1]
    for _ in range(2):  # back and forth: each structure gets its own answer
        assert_tree_close(vg(*hot), generic(f)(*hot), rtol=1e-14, atol=0)
        if got[0] == "ok":
            assert_tree_close(vg(*other), want[1], rtol=1e-14, atol=0)


def test_a_changed_world_is_seen():
    """A rebound global, a changed closure cell and a reassigned method: the entry's inline
    assumption check refuses, and the generic path retraces."""
    global W
    x = RNG.normal(size=3)
    vg = irad.value_and_grad(f_array)
    for _ in range(3):
        vg(x)
    saved = W
    try:
        W = np.array([3.0, 1.0, -2.0])
        value, grad = vg(x)
        assert value == pytest.approx(np.sum(W * np.sin(x) * x))
        np.testing.assert_allclose(grad, fd_grads(f_array, (x,), (0,))[0], rtol=1e-6)
        assert vg.traces == 2
        W *= 2.0  # in place: read live, no retrace
        for _ in range(2):
            value, grad = vg(x)
            np.testing.assert_allclose(grad, fd_grads(f_array, (x,), (0,))[0], rtol=1e-6)
        assert vg.traces == 2
    finally:
        W = saved

    def scaled():
        c = 2.0

        def h(x):
            return np.sum(x) * c

        def set_c(v):
            nonlocal c
            c = v
        return h, set_c
    h, set_c = scaled()
    vg = irad.grad(h)
    for _ in range(3):
        np.testing.assert_allclose(vg(x), np.full(3, 2.0))
    set_c(7.0)
    for _ in range(2):
        np.testing.assert_allclose(vg(x), np.full(3, 7.0))

    def g(x):
        return scale.f(x)

    class Scale:
        def f(self, x):
            return np.sum(x) * 2.0

    scale = Scale()
    vg = irad.grad(g)
    for _ in range(3):
        np.testing.assert_allclose(vg(x), np.full(3, 2.0))
    Scale.f = lambda self, x: np.sum(x * x)
    for _ in range(2):
        np.testing.assert_allclose(vg(x), 2 * x)
    scale = Scale()
    scale.f = lambda x: np.sum(x) * 5.0
    for _ in range(2):
        np.testing.assert_allclose(vg(x), np.full(3, 5.0))


def test_a_failed_guard_takes_the_other_path():
    def f(x):
        if np.sum(x) > 0:
            return np.sum(x ** 3)
        return np.sum(np.sin(x))
    vg = irad.grad(f)
    pos, neg = np.array([1.0, 2.0]), np.array([-1.0, -2.0])
    for _ in range(3):
        for x in (pos, neg, neg, pos):
            np.testing.assert_allclose(vg(x), 3 * x ** 2 if np.sum(x) > 0 else np.cos(x), rtol=1e-14)
    assert vg.traces == 2

    def h(x, n):
        t = 0.0
        for i in range(n):  # an int that shapes the program: a guard on its value
            t = t + np.sum(x) * i
        return t
    vg = irad.grad(h)
    x = np.ones(2)
    for n in (3, 3, 4, 4, 3, 5, 3):
        np.testing.assert_allclose(vg(x, n), np.full(2, n * (n - 1) / 2))


def test_a_new_rule_is_seen():
    def opaque(x):
        return np.sum(x * x)

    def f(x):
        return opaque(x) * 2.0
    vg = irad.grad(f)
    x = np.array([1.0, -2.0])
    for _ in range(3):
        np.testing.assert_allclose(vg(x), 4 * x)
    irad.defrule(opaque, lambda x: (np.sum(x * x), x), lambda s, ybar: (ybar * 3.0 * s,))
    for _ in range(2):
        np.testing.assert_allclose(vg(x), 6 * x)  # the (deliberately different) rule's answer


def test_no_entry_where_the_program_has_effects():
    def update(x, buf):
        buf *= 2.0  # in place: written back after each run
        return np.sum(x * buf)
    vg = irad.grad(update)
    x, buf = np.ones(2), np.array([1.0, 3.0])
    for k in range(1, 4):
        np.testing.assert_allclose(vg(x, buf), np.array([1.0, 3.0]) * 2.0 ** k)
    assert vg.program(x, buf)._entry is False and vg.cache.fast is None

    rng = np.random.default_rng(0)

    def noisy(x):
        return np.sum(x * rng.normal(size=x.shape))
    vg = irad.grad(noisy)
    draws = np.random.default_rng(0)
    for _ in range(3):
        np.testing.assert_allclose(vg(np.ones(3)), draws.normal(size=3), rtol=1e-14)
    assert vg.cache.fast is None


def test_the_least_recently_used_key_goes():
    vg = irad.grad(f_array)
    vg.cache.max_keys = 3
    for n in (1, 1, 1, 2, 1, 1):  # key 1 is answered by its entry after key 2 arrived
        vg(np.ones((n, 3)))
    vg(np.ones((3, 3)))
    vg(np.ones((4, 3)))  # evicts the least recently used: key 2
    keys = [k[0][0] for k in vg.cache._entries]
    assert ((np.dtype(float), (1, 3)) in keys) and ((np.dtype(float), (2, 3)) not in keys), keys


def test_generated_code_holds_no_user_text():
    def user_function_name(p, label):
        return np.sum(p["user_key_text"] * 2.0) if label == "user_static_text" else 0.0
    vg = irad.value_and_grad(user_function_name)
    args = ({"user_key_text": np.ones(2)}, "user_static_text")
    for _ in range(3):
        vg(*args)
    src = vg.cache.fast.__irad_source__
    for text in ("user_function_name", "user_key_text", "user_static_text"):
        assert text not in src


def test_threads_calling_with_two_structures():
    vg = irad.value_and_grad(f_array)
    xs = [RNG.normal(size=3), RNG.normal(size=(2, 3))]
    want = [generic(f_array)(x) for x in xs]
    errors: list[str] = []
    barrier = threading.Barrier(6)

    def work(i):
        barrier.wait()
        for k in range(300):
            x = xs[(i + k) % 2]
            value, grad = vg(x)
            wv, wg = want[(i + k) % 2]
            if value != wv or not np.array_equal(grad, wg):
                errors.append(f"thread {i} call {k}")
    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert vg.traces <= 2 * 6
