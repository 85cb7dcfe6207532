"""Integers are data unless they shape the program (issue 15 part 7, ``irad.intdata``).

An ``int`` argument is an input of the compiled program: an optimiser calling ``grad(loss)(w, i)``
with a new step ``i`` traces once.  Where the int shapes the program (a shape, a slice bound, a
loop count, a list index, ``axis=``...) the program is guarded on its value, and where it decides a
branch on a predicate of it: every call is right whatever the int.  Every gradient here is
checked against central finite differences in float64, on calls that ran a cached program.
"""
from __future__ import annotations

import enum
import math
import threading
import warnings
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import irad
import irad.api

RTOL, ATOL = 1e-6, 1e-8


def fd_grad(f: Callable[..., Any], x: np.ndarray, *rest: Any, **kw: Any) -> np.ndarray:
    """Central differences of scalar ``f`` in its first (float64 array) argument."""
    h = 1e-6
    out = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = h
        out.flat[k] = (f(x + e, *rest, **kw) - f(x - e, *rest, **kw)) / (2 * h)
    return out


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times any transform traced (the calls of ``trace_values`` made by irad.api)."""
    count = [0]
    real = irad.api.trace_values

    def counting(*a: Any, **k: Any) -> Any:
        count[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(irad.api, "trace_values", counting)
    yield count


def check_calls(f: Callable[..., Any], x: np.ndarray, ints: list[Any], **kw: Any) -> irad.api.GradFunction:
    """``value_and_grad(f)`` at each int: value and gradient right, every time."""
    vg = irad.value_and_grad(f)
    for i in ints:
        value, grad = vg(x, i, **kw)
        assert value == pytest.approx(f(x, i, **kw), rel=1e-12, abs=1e-12), i
        np.testing.assert_allclose(grad, fd_grad(f, x, i, **kw), rtol=RTOL, atol=ATOL, err_msg=f"int {i}")
    return vg


X = np.array([0.3, -1.2, 0.7, 2.0])


# ---- the optimiser loop ---------------------------------------------------------------------

def adam_like_loss(w: np.ndarray, i: int) -> Any:
    decay = 0.5 ** (i / 10)
    lr = 0.1 / (1 + i)
    warm = np.sqrt(i + 1)
    return np.sum(np.tanh(w) ** 2) * decay * lr + warm * np.sum(w * i) * 1e-3


def test_optimiser_loop_traces_once(traces: list[int]) -> None:
    g = irad.grad(adam_like_loss)
    w = np.array([0.5, -0.3, 1.2])
    for i in range(100):
        gw = g(w, i)
        if i:  # a cached program answered
            np.testing.assert_allclose(gw, fd_grad(adam_like_loss, w, i), rtol=RTOL, atol=ATOL)
        w = w - 0.1 * gw
    assert g.traces == 1 and traces[0] == 1
    src = g.program(w, 7).source
    assert src.splitlines()[0] == "def adam_like_loss_grad(w, i):"  # the int is an input of the program


def test_unused_int_is_an_input(traces: list[int]) -> None:
    check_calls(lambda x, i: np.sum(x ** 3), X, list(range(10)))
    assert traces[0] == 1


@pytest.mark.parametrize("name, f", [
    ("0.5 ** i", lambda x, i: np.sum(x ** 2) * 0.5 ** i),
    ("lr / (1 + i)", lambda x, i: np.sum(np.sin(x)) * 0.1 / (1 + i)),
    ("x * i", lambda x, i: np.sum(x * i)),
    ("np.sqrt(i + 1)", lambda x, i: np.sum(x) * np.sqrt(i + 1)),
    ("math", lambda x, i: np.sum(x) * math.log(i + 2) + math.factorial(i % 5) * x[0]),
    ("float(i), abs, -i, //, %", lambda x, i: np.sum(x) * float(abs(-i) // 2 % 3 + 1)),
    ("i ** 2, i << 1, i & 3", lambda x, i: np.sum(x) * (i ** 2 + (i << 1) + (i & 3))),
    ("np.float64(i)", lambda x, i: np.sum(x * np.float64(i))),
    ("x[i] (an array index)", lambda x, i: x[i] ** 2 * 3.0),
    ("x[i] = ... (an array index)", lambda x, i: np.sum(_set(x.copy(), i) ** 2)),
    ("sum([i, 1])", lambda x, i: np.sum(x) * sum([i, 1])),
])
def test_arithmetic_is_data(traces: list[int], name: str, f: Callable[..., Any]) -> None:
    check_calls(f, X, [0, 1, 2, 3, -1] if "index" in name else [0, 1, 2, 3, 7])
    assert traces[0] == 1, name


def _set(a: np.ndarray, i: int) -> np.ndarray:
    a[i] = 5.0 * a[0]
    return a


# ---- decisions and structural uses ----------------------------------------------------------

def test_branch_on_predicate_guards_the_predicate(traces: list[int]) -> None:
    def f(x: np.ndarray, i: int) -> Any:
        y = np.sum(x ** 2) * 0.9 ** i
        if i % 10 == 0:
            y = y + np.sum(np.cos(x))
        return y

    check_calls(f, X, list(range(100)))
    assert traces[0] == 2  # one path per outcome of `i % 10 == 0`


def test_comparison_branch(traces: list[int]) -> None:
    check_calls(lambda x, i: np.sum(x) * (2.0 if i > 5 else 3.0) + i * x[0], X, list(range(12)))
    assert traces[0] == 2


STRUCTURAL: list[tuple[str, Callable[..., Any]]] = [
    ("range(i)", lambda x, i: sum(np.sin(x[0]) * k for k in range(i)) + x[1]),
    ("np.zeros(i)", lambda x, i: np.sum(x) + len(np.zeros(i)) * x[0]),
    ("np.ones((i, 2)) shape", lambda x, i: np.sum(np.ones((i, 2)) @ x[:2])),
    ("x[:i]", lambda x, i: np.sum(x[:i] ** 2)),
    ("x[i:i + 2]", lambda x, i: np.sum(x[i:i + 2] ** 2)),
    ("list index", lambda x, i: [x[0], x[1] * 2, x[2] * 3][i] ** 2),
    ("list slice", lambda x, i: sum([x[0], x[1], x[2], x[3]][:i]) * 2.0),
    ("dict key", lambda x, i: {0: x[0], 1: x[1] * 2, 2: x[2]}[i] ** 2),
    ("len([0] * i)", lambda x, i: np.sum(x) * len([0] * i)),
    ("axis=i", lambda x, i: np.sum(np.sum(np.outer(x, np.arange(1.0, 5.0)), axis=i) * np.arange(4.0))),
    ("np.tile reps", lambda x, i: np.sum(np.tile(x, i) ** 2)),
    ("reshape", lambda x, i: np.sum(np.reshape(x, (i, -1))[0] ** 2)),
    ("np.linspace num", lambda x, i: np.sum(np.linspace(0.0, 1.0, i)) * np.sum(x)),
    ("enumerate start", lambda x, i: sum(k * v for k, v in enumerate(x, i))),
    ("str(i)", lambda x, i: np.sum(x) * len(str(i * 7))),
    ("f-string", lambda x, i: np.sum(x) * len(f"{i:03d}")),
    ("list.insert index", lambda x, i: _insert(x, i)),
]


def _insert(x: np.ndarray, i: int) -> Any:
    items = [x[0], x[1], x[2]]
    items.insert(i, x[3] * 5.0)
    return items[0] * 1.0 + items[1] * 2.0 + items[2] * 3.0 + items[3] * 4.0


@pytest.mark.parametrize("name, f", STRUCTURAL, ids=[n for n, _ in STRUCTURAL])
def test_structural_use_specialises(traces: list[int], name: str, f: Callable[..., Any]) -> None:
    values = [0, 1, 0] if name == "axis=i" else \
        [0, 1, 2, 1, 0] if name in ("list index", "dict key", "x[i:i + 2]", "list.insert index") else [1, 2, 4, 2, 1]
    check_calls(f, X, values)
    assert traces[0] == len(set(values)), name  # one program per value, reused when it comes back


def test_int_used_arithmetically_and_structurally(traces: list[int]) -> None:
    def f(x: np.ndarray, n: int) -> Any:
        return np.sum(x[:n] ** 2) * 0.5 ** n + sum(np.cos(x[k]) for k in range(n)) / (n + 1)

    check_calls(f, X, [1, 2, 3, 2, 4, 1])
    assert traces[0] == 4


def test_membership_and_identity(traces: list[int]) -> None:
    """``3 in [i, 5]`` and ``i in (1, 2)`` are decisions; ``i is j`` and ``i is 3`` as CPython
    answers them (equal small ints are one object)."""
    check_calls(lambda x, i: np.sum(x) * (2.0 if 3 in [i, 5] else 1.0) + (i in (1, 2)) * x[0], X, [3, 1, 4, 3, 2])
    ns: dict[str, Any] = {"np": np}
    with warnings.catch_warnings():  # (`i is 3` is what is tested: the SyntaxWarning says it is unusual)
        warnings.simplefilter("ignore", SyntaxWarning)
        exec("def same(x, i, j):\n"
             "    return np.sum(x) * (2.0 if i is j else 3.0) + (1.0 if i is 3 else 0.0) * x[0]\n", ns)
    same = ns["same"]
    vg = irad.value_and_grad(same)
    for i, j in [(3, 3), (3, 4), (4, 4), (3, 3), (7, 3)]:
        np.testing.assert_allclose(vg(X, i, j)[1], fd_grad(same, X, i, j), rtol=RTOL, atol=ATOL)


def test_derived_int_guard_is_on_the_derived_value(traces: list[int]) -> None:
    """`range(i % 2)` specialises on `i % 2`, not on `i`."""
    check_calls(lambda x, i: np.sum(x) * i + sum(x[0] for _ in range(i % 2)), X, list(range(10)))
    assert traces[0] == 2


# ---- where ints come from -------------------------------------------------------------------

def test_ints_in_containers(traces: list[int]) -> None:
    def f(x: np.ndarray, cfg: dict[str, Any]) -> Any:
        a, b = cfg["steps"]
        return np.sum(x ** 2) * cfg["scale"] * 0.9 ** a / (1 + b)

    vg = irad.value_and_grad(f)
    for k in range(6):
        cfg = {"steps": (k, [k + 1][0]), "scale": 2.0}
        value, grad = vg(X, cfg)
        assert value == pytest.approx(f(X, cfg), rel=1e-12)
        np.testing.assert_allclose(grad, fd_grad(f, X, cfg), rtol=RTOL, atol=ATOL)
    assert traces[0] == 1


def test_int_in_a_list_argument(traces: list[int]) -> None:
    check_calls(lambda x, ij: np.sum(x) * ij[0] - ij[1] * x[0], X, [[1, 2], [3, 4], [5, -6]])
    assert traces[0] == 1


def test_int_keyword_argument(traces: list[int]) -> None:
    def f(x: np.ndarray, scale: float = 1.0, *, step: int = 0) -> Any:
        return np.sum(x ** 2) * scale / (step + 1)

    vg = irad.value_and_grad(f)
    for step in range(5):
        value, grad = vg(X, 2.0, step=step)
        assert value == pytest.approx(f(X, 2.0, step=step))
        np.testing.assert_allclose(grad, fd_grad(lambda x: f(x, 2.0, step=step), X), rtol=RTOL, atol=ATOL)
    assert traces[0] == 1


# ---- the other transforms -------------------------------------------------------------------

def test_vjp_with_int(traces: list[int]) -> None:
    def f(x: np.ndarray, i: int) -> np.ndarray:
        return np.sin(x) * 0.5 ** i + i

    for i in range(6):
        y, pb = irad.vjp(f, X, i)
        np.testing.assert_allclose(y, f(X, i))
        ybar = np.arange(1.0, 5.0)
        cx, ci = pb(ybar)
        assert ci is None  # an int gets no cotangent
        np.testing.assert_allclose(cx, fd_grad(lambda x: np.sum(f(x, i) * ybar), X), rtol=RTOL, atol=ATOL)
    assert traces[0] == 1


def test_compile_program_takes_the_int(traces: list[int]) -> None:
    def f(x: np.ndarray, n: int) -> Any:
        return np.sum(x ** n)

    prog = irad.compile(f, X, 2)
    assert "x ** n" in prog.source or "n)" in prog.source
    for n in (2, 3, 4):
        value, grad = prog(X, n)
        assert value == pytest.approx(f(X, n))
        np.testing.assert_allclose(grad, fd_grad(f, X, n), rtol=RTOL, atol=ATOL)
    assert traces[0] == 1


def test_nested_grad_with_int(traces: list[int]) -> None:
    def f(x: float, i: int) -> Any:
        return x ** 3 * 0.5 ** i + i * x

    d2 = irad.grad(irad.grad(f))
    for i in range(6):
        assert d2(1.3, i) == pytest.approx(6 * 1.3 * 0.5 ** i)
    assert d2.traces == 1


def test_aux_int_output_is_a_plain_int() -> None:
    g = irad.grad(lambda x, i: (np.sum(x) * i, i * 2 + 1), has_aux=True)
    for i in (3, 4, 2 ** 70):
        grad, aux = g(X, i)
        assert type(aux) is int and aux == i * 2 + 1
        np.testing.assert_allclose(grad, np.full(4, float(i)))


# ---- size, sign and type of the int ---------------------------------------------------------

def test_large_and_negative_ints_are_exact(traces: list[int]) -> None:
    """The program computes with Python ints: 2**70 + 1 - 2**70 is 1, not 0 (no int64 wrap, no
    float rounding)."""
    def f(x: np.ndarray, i: int) -> Any:
        return np.sum(x) * ((i + 1 - i) + (i * 3) % 7) + x[0] * ((i ** 2) % 5)

    check_calls(f, X, [2 ** 70, -2 ** 70, 2 ** 63, 2 ** 62, -3, 0, 2 ** 64 + 5])
    assert traces[0] == 1


def test_large_int_meets_numpy(traces: list[int]) -> None:
    """numpy reads a Python int alone by its value (int64, uint64, an object): guarded."""
    f = lambda x, i: np.sum(x) * np.sqrt(i)  # noqa: E731
    check_calls(f, X, [4, 9, 2 ** 63, 2 ** 63 + 2 ** 20, 16])
    with pytest.raises(TypeError):  # numpy's own error, as without irad
        irad.grad(f)(X, 2 ** 64)
    check_calls(lambda x, i: np.sum(x * i) * 1e-21, X, [3, 2 ** 70, 2 ** 63])  # beside an array: weak


def test_weak_promotion_is_kept() -> None:
    """``float32 * i`` stays float32 (numpy reads an exact Python int weakly; irad hands it one)."""
    x32 = np.array([0.1, 0.7, 1.3], np.float32)
    prog = irad.compile(lambda x, i: np.sum(x * i / 3), x32, 3)
    for i in (3, 5):
        value, grad = prog(x32, i)
        want = np.sum(x32 * i / 3)
        assert value.dtype == np.float32 and value == want
        assert grad.dtype == np.float32


def test_int_power_sign_is_guarded(traces: list[int]) -> None:
    """``2 ** i`` is a float for a negative ``i``; ``i ** 0.5`` complex for a negative ``i``."""
    check_calls(lambda x, i: np.sum(x) * 2 ** i, X, [0, 1, 3, -1, -2, 2])
    assert traces[0] == 2
    check_calls(lambda x, i: np.sum(x) * abs(i ** 0.5), X, [4, 9, -4, -1, 1])
    assert traces[0] == 4


def test_division_by_an_int_zero_raises_as_python_does() -> None:
    g = irad.grad(lambda x, i: np.sum(x) * (1.0 / i))  # (a numpy scalar / 0 is inf, as without irad)
    np.testing.assert_allclose(g(X, 4), np.full(4, 0.25))
    with pytest.raises(ZeroDivisionError):
        g(X, 0)


def test_user_code_sees_an_int() -> None:
    seen: list[Any] = []

    def f(x: np.ndarray, i: int) -> Any:
        seen.append((type(i) is int, i.__class__ is int, isinstance(i, int), type(i).__name__, repr(i), str(i),
                     i.real, i.imag, i.bit_length(), type(i + 1) is int))
        return np.sum(x) * i

    irad.grad(f)(X, 5)
    assert seen == [(True, True, True, "int", "5", "5", 5, 0, 3, True)]


LAST: Any = None


class Counter:
    def __init__(self) -> None:
        self.step = 0


def test_no_traced_int_leaks_into_the_world() -> None:
    c = Counter()
    log: list[Any] = []

    def f(x: np.ndarray, i: int) -> Any:
        global LAST
        c.step = i
        log.append(i)
        LAST = (i, [i + 1])
        return np.sum(x) * i

    g = irad.grad(f)
    g(X, 3)
    assert type(c.step) is int and c.step == 3
    assert all(type(v) is int for v in log)
    assert LAST == (3, [4]) and type(LAST[0]) is int and type(LAST[1][0]) is int
    g(X, 4)  # (a program sets the attribute again after each run)
    assert type(c.step) is int and c.step == 4


# ---- what stays static ----------------------------------------------------------------------

class Mode(enum.IntEnum):
    A = 1
    B = 2


def test_bools_and_int_enums_stay_static(traces: list[int]) -> None:
    check_calls(lambda x, flag: np.sum(x) * (2.0 if flag else 3.0), X, [True, False, True])
    assert traces[0] == 2
    traces[0] = 0
    check_calls(lambda x, m: np.sum(x) * m, X, [Mode.A, Mode.B, Mode.A])
    assert traces[0] == 2


def test_irad_trace_shows_ints_as_constants() -> None:
    g = irad.trace(lambda x, n: np.sum(x) * n, X, 3)
    assert len(g.inputs) == 1 and g.statics


# ---- threads --------------------------------------------------------------------------------

def test_threads_with_different_ints() -> None:
    def loss(w: np.ndarray, i: int) -> Any:
        y = np.sum(np.tanh(w) ** 2) * 0.9 ** i
        if i % 3 == 0:
            y = y * 2.0
        return y + np.sum(w[: 1 + i % 2])

    for _ in range(3):
        g = irad.grad(loss)
        results: dict[int, np.ndarray] = {}
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def work(k: int) -> None:
            try:
                barrier.wait()
                for i in range(k, 40, 4):
                    results[i] = g(X, i)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for i, got in results.items():
            np.testing.assert_allclose(got, fd_grad(loss, X, i), rtol=RTOL, atol=ATOL, err_msg=f"int {i}")
        assert len(results) == 40


def test_programs_per_signature_are_bounded():
    """An int that shapes the program (a slice bound) makes one program per value under one key;
    the key keeps at most MAX_PATHS of them, and every result stays right."""
    from irad.signature import MAX_PATHS

    def f(x, n):
        return np.sum(x[:n] ** 2)
    g = irad.grad(f)
    x = np.arange(1.0, 81.0)
    with pytest.warns(irad.api.RetraceWarning, match="retraced"):  # (the paths keep changing: it says so)
        for n in range(1, MAX_PATHS + 10):
            np.testing.assert_allclose(g(x, n), np.where(np.arange(80) < n, 2 * x, 0.0))
    assert all(len(progs) <= MAX_PATHS for progs in g.cache._entries.values())
