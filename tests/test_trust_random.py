"""Random reorderings of traced values: ``rng.shuffle``, ``rng.permutation``, ``random.shuffle``.

The order is an impure op of its own (``irad.primitives.draw_order``), drawn at each call exactly as the
user's call draws, and the values are gathered by it, so a compiled program shuffles anew on
every call, leaves the generator in the state the function leaves it in, and its gradient undoes
that call's order.  Every case is checked on the second and later calls of one compiled object:
the value and the generator's state against the plain function run from the same state, the
gradient against central finite differences run from that state too."""
from __future__ import annotations

import random

import numpy as np
import pytest

import irad
from irad.errors import MutationError, NoRuleError
from irad.testing import numerical_vjp


class Source:
    """A random source the function reads, with its state saved and restored around a call."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.rng: object = {"generator": np.random.default_rng(7), "legacy": np.random.RandomState(7),
                            "global_legacy": np.random.mtrand._rand, "stdlib": random.Random(7),
                            "stdlib_global": random._inst}[kind]

    def get(self) -> object:
        return self.rng.bit_generator.state if isinstance(self.rng, np.random.Generator) else self.rng.get_state() \
            if isinstance(self.rng, np.random.RandomState) else self.rng.getstate()

    def set(self, state: object) -> None:
        if isinstance(self.rng, np.random.Generator):
            self.rng.bit_generator.state = state
        elif isinstance(self.rng, np.random.RandomState):
            self.rng.set_state(state)
        else:
            self.rng.setstate(state)

    def shuffle(self, x: object) -> None:
        if self.kind == "global_legacy":
            np.random.shuffle(x)
        elif self.kind == "stdlib_global":
            random.shuffle(x)
        else:
            self.rng.shuffle(x)

    def permutation(self, x: object) -> object:
        return np.random.permutation(x) if self.kind == "global_legacy" else self.rng.permutation(x)


def same_state(a: object, b: object) -> bool:
    if isinstance(a, tuple) and a and isinstance(a[0], str):  # RandomState.get_state()
        return all(np.array_equal(u, v) if isinstance(u, np.ndarray) else u == v for u, v in zip(a, b))
    return a == b


NUMPY_SOURCES = ("generator", "legacy", "global_legacy")
ALL_SOURCES = NUMPY_SOURCES + ("stdlib", "stdlib_global")


def programs(src: Source) -> dict[str, tuple[object, tuple[int, ...]]]:
    w1, w2 = np.linspace(0.5, 2.0, 5), np.linspace(-1.0, 1.0, 15).reshape(5, 3)

    def shuffle_1d(p):
        y = np.sin(p)
        src.shuffle(y)
        return (y * w1).sum() + y[0] ** 2

    def shuffle_list_of_scalars(p):
        items = [p[0] * 2.0, np.cos(p[1]), p[2], p[3] ** 2, p[4]]
        src.shuffle(items)
        return items[0] * 1.5 + items[1] * items[2] - items[4]

    def shuffle_rows_2d(p):
        y = p * p
        src.shuffle(y)
        return (y * w2).sum() + y[1, 2]

    def shuffle_list_of_rows(p):
        rows = list(p * 2.0)
        src.shuffle(rows)
        return (rows[0] * w2[0]).sum() + np.sum(rows[1] ** 2)

    def shuffle_a_view(p):
        y = p.copy()
        src.shuffle(y[1:])
        return (y * w1).sum() + y[2] * y[0]

    def permutation_1d(p):
        return (src.permutation(p ** 2) * w1).sum()

    def permutation_rows(p):
        return (src.permutation(np.tanh(p)) * w2).sum()

    def shuffle_result_unused(p):
        y = p.copy()
        src.shuffle(y)
        return (p * w1).sum()

    cases = {"shuffle_1d": (shuffle_1d, (5,)), "shuffle_list_of_scalars": (shuffle_list_of_scalars, (5,)),
             "shuffle_a_view": (shuffle_a_view, (5,)), "shuffle_list_of_rows": (shuffle_list_of_rows, (5, 3)),
             "shuffle_result_unused": (shuffle_result_unused, (5,))}
    if src.kind in NUMPY_SOURCES:  # random.shuffle of a 2-d array swaps rows through views (refused below)
        cases.update({"shuffle_rows_2d": (shuffle_rows_2d, (5, 3)), "permutation_1d": (permutation_1d, (5,)),
                      "permutation_rows": (permutation_rows, (5, 3))})
    if src.kind == "generator":
        def shuffle_axis_1(p):
            y = p + 1.0
            src.rng.shuffle(y, axis=1)
            return (y * w2).sum() + y[0, 0] * y[4, 2]

        def permutation_axis_last(p):
            return (src.rng.permutation(p * 3.0, axis=-1) * w2).sum()
        cases.update({"shuffle_axis_1": (shuffle_axis_1, (5, 3)),
                      "permutation_axis_last": (permutation_axis_last, (5, 3))})
    return cases


CASES = [(kind, name) for kind in ALL_SOURCES for name in programs(Source(kind))]


@pytest.mark.parametrize("kind,name", CASES)
def test_reordering_is_drawn_at_each_call_and_differentiated(kind, name):
    src = Source(kind)
    f, shape = programs(src)[name]
    vg = irad.value_and_grad(f)
    data = np.random.default_rng(3)
    orders = set()
    for _ in range(4):
        x = data.normal(size=shape)
        start = src.get()
        value, grad = vg(x)
        after = src.get()
        src.set(start)
        expected = f(x)
        assert same_state(src.get(), after), "the program left the generator in another state than f"
        np.testing.assert_allclose(value, expected, rtol=1e-12)

        def from_start(z):
            src.set(start)
            return f(z)
        np.testing.assert_allclose(grad, numerical_vjp(from_start, (x,), 1.0)[0], rtol=1e-6, atol=1e-8)
        src.set(after)
        orders.add(np.asarray(grad).tobytes())
    assert vg.traces == 1
    if name != "shuffle_result_unused":
        assert len(orders) > 1, "every call drew the same order: the program replays the traced one"


def test_the_order_is_an_op_of_its_own():
    rng = np.random.default_rng(0)

    def f(p):
        y = p.copy()
        rng.shuffle(y)
        return y[0]
    text = str(irad.trace(f, np.arange(3.0)))
    assert "irad.primitives.draw_order" in text and "numpy.take" in text


def test_a_generator_made_inside_the_function_is_made_at_each_call():
    def f(p):
        r = np.random.default_rng(0)
        return (r.permutation(p) * np.arange(4.0)).sum()
    vg = irad.value_and_grad(f)
    x = np.array([1.0, 2.0, 3.0, 5.0])
    for _ in range(3):
        value, grad = vg(x)
        np.testing.assert_allclose(value, f(x))
        np.testing.assert_allclose(grad, numerical_vjp(f, (x,), 1.0)[0], atol=1e-8)


def refused_random_shuffle_2d(p):
    y = p * 1.0
    random.shuffle(y)  # swaps rows through views: duplicates rows, not a permutation
    return y.sum()


def refused_mixed_list(p):
    items = [p[0], "label", p[1]]
    np.random.default_rng(0).shuffle(items)
    return items[0] * 1.0 if not isinstance(items[0], str) else items[2] * 1.0


def shuffled_then_reversed(p):
    items = [p[0], p[1] ** 2, p[2]]
    random.Random(0).shuffle(items)
    items.reverse()
    return items[0] * 2.0 + items[1]


@pytest.mark.parametrize("f,error,names", [
    (refused_random_shuffle_2d, MutationError, "random.Random.shuffle"),
    (refused_mixed_list, MutationError, "shuffle of a list of traced values with other objects"),
    (lambda p: (np.random.default_rng(0).permuted(p) * np.arange(3.0)).sum(), NoRuleError, "permuted"),
    (lambda p: np.random.default_rng(0).choice(p, 2).sum(), NoRuleError, "choice"),
])
def test_reorderings_irad_has_no_rule_for_are_named_errors(f, error, names):
    with pytest.raises(error, match=names):
        irad.grad(f)(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) if f is refused_random_shuffle_2d
                     else np.array([1.0, 2.0, 3.0]))


def test_a_shuffled_list_is_an_ordinary_list_afterwards():
    vg = irad.value_and_grad(shuffled_then_reversed)
    for x in (np.array([1.0, 3.0, 0.5]), np.array([2.0, -1.0, 4.0])):
        value, grad = vg(x)
        np.testing.assert_allclose(value, shuffled_then_reversed(x))
        np.testing.assert_allclose(grad, numerical_vjp(shuffled_then_reversed, (x,), 1.0)[0], atol=1e-8)


@pytest.mark.parametrize("kind", ALL_SOURCES)
def test_a_guard_after_a_draw_retraces_without_drawing_twice(kind):
    """A run that fails a guard has already drawn: the generator's state is put back before the
    retrace, so that the call draws once, as the function does (and gets the same numbers)."""
    src = Source(kind)

    def f(p):
        items = [(p[0], "a"), (p[1] * 2.0, "b"), (p[2], "c")]
        order = src.permutation(3) if kind in NUMPY_SOURCES else src.rng.sample(range(3), 3)
        items = [items[int(i)] for i in order]  # indexing a list by a drawn int guards it
        return items[0][0] * 1.0 + items[1][0] * 10.0

    vg = irad.value_and_grad(f)
    x = np.array([1.0, 2.0, 3.0])
    for _ in range(6):
        start = src.get()
        value, grad = vg(x)
        after = src.get()
        src.set(start)
        assert value == f(x)
        assert same_state(src.get(), after)

        def from_start(z):
            src.set(start)
            return f(z)
        np.testing.assert_allclose(grad, numerical_vjp(from_start, (x,), 1.0)[0], atol=1e-8)
        src.set(after)
