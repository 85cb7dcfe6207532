"""Decisions made in C over traced values -- ``sorted``, ``list.sort``, ``min``/``max`` with a key,
``heapq`` (``nsmallest``/``nlargest``/``merge``, ``heapify``/``heappush``/``heappop``...),
``bisect``, ``statistics.median`` -- are guarded (issue 21).

Numbers sorted without a key are ``np.sort`` in the program (recomputed at each call, ties
splitting the gradient as its rule does). Any other order is found on the values and guarded by
the ``n - 1`` comparisons of the neighbours it puts side by side (a winner by its ``n - 1``
comparisons), so that a later call whose order differs traces again. Every case is checked on
the second and later calls of one compiled object, including calls whose order differs from the
traced one, against the plain function and central finite differences."""
from __future__ import annotations

import bisect
import heapq
import statistics

import numpy as np
import pytest

import irad
from irad.testing import numerical_vjp

W = np.array([1.0, 10.0, 100.0, 1000.0])
# the first two orders agree, the others differ from them and from each other
POINTS = [np.array([0.3, -1.2, 2.5, 0.9]), np.array([0.35, -1.1, 2.4, 1.0]), np.array([2.0, 0.1, -0.5, 1.5]),
          np.array([-0.4, 3.0, 1.2, 0.2]), np.array([1.1, 0.7, 0.2, -2.0])]


def weighted(items):
    return sum(w * v for w, v in zip(W, items))


CASES = {
    "sorted": lambda x: weighted(sorted(x)),
    "sorted_reverse": lambda x: weighted(sorted(x, reverse=True)),
    "sorted_list_of_floats": lambda x: weighted(sorted([float(v) * 1.0 for v in x])),
    "sorted_key": lambda x: weighted(sorted(x, key=lambda v: (v - 1.0) ** 2)),
    "sorted_key_reverse": lambda x: weighted(sorted(x, key=abs, reverse=True)),
    "sorted_tuples": lambda x: weighted(t[0] for t in sorted([(x[i], i) for i in range(4)])),
    "sorted_by_second_item": lambda x: weighted(t[1] for t in sorted([("abcd"[i], x[i]) for i in range(4)],
                                                                     key=lambda t: t[1])),
    "sorted_rows": lambda x: sum(np.sum(r * r) * w for w, r in zip(W, sorted(list(x.reshape(2, 2)),
                                                                            key=lambda r: r[0] + r[1]))),
    "sorted_dict_items": lambda x: weighted(kv[1] for kv in sorted({"a": x[0], "b": x[1], "c": x[2]}.items(),
                                                                   key=lambda kv: kv[1])),
    "list_sort": lambda x: (lambda items: (items.sort(), weighted(items))[1])(list(x)),
    "list_sort_key_reverse": lambda x: (lambda items: (items.sort(key=lambda v: v * v, reverse=True),
                                                       weighted(items))[1])(list(x)),
    "top_k": lambda x: sum(sorted(x)[-2:]) * 3.0,
    "max_key": lambda x: max([(x[0], "a"), (x[1], "b"), (x[2], "c")], key=lambda t: t[0])[0] * 3.0,
    "min_key_default": lambda x: min([x[0] * 2.0, x[1], x[3]], key=lambda v: -v, default=0.0) * 5.0,
    "max_of_tuples": lambda x: max((x[i] * 2.0, i) for i in range(4))[0],
    "max_key_picks_a_branch": lambda x: (np.sin(x[0]) if max(range(4), key=lambda i: x[i]) == 2 else x[3] ** 2),
    "max_row_by_key": lambda x: np.sum(max(list(x.reshape(2, 2)), key=lambda r: r[0] - r[1]) ** 2),
    "min_of_rows_as_tuples": lambda x: min(tuple(r) for r in x.reshape(2, 2))[1] * 7.0,
    "nsmallest": lambda x: weighted(heapq.nsmallest(3, x)),
    "nsmallest_tuples_key": lambda x: sum(t[0] * w for w, t in zip(W, heapq.nsmallest(3, [(x[i], -i) for i in range(4)],
                                                                                       key=lambda t: t[0] * t[0]))),
    "nlargest_rows": lambda x: sum(np.sum(r) * w for w, r in zip(W, heapq.nlargest(2, list(x.reshape(2, 2)),
                                                                                 key=lambda r: r[1]))),
    "nlargest_key": lambda x: weighted(heapq.nlargest(2, x, key=abs)),
    "merge": lambda x: weighted(heapq.merge(sorted(x[:2]), sorted(x[2:]))),
    "merge_key_reverse": lambda x: weighted(heapq.merge(sorted(x[:2], key=abs, reverse=True),
                                                        sorted(x[2:], key=abs, reverse=True), key=abs, reverse=True)),
    "heappush_heappop": lambda x: (lambda h: ([heapq.heappush(h, v) for v in x],
                                              weighted(heapq.heappop(h) for _ in range(4)))[1])([]),
    "heapify_layout": lambda x: (lambda h: (heapq.heapify(h), weighted(h))[1])(list(x)),
    "heapify_tuples": lambda x: (lambda h: (heapq.heapify(h), heapq.heappop(h)[0] * 2.0 + h[0][0])[1])(
        [(x[i], i) for i in range(4)]),
    "heappushpop_heapreplace": lambda x: (lambda h: heapq.heappushpop(h, x[2]) * 3.0 + heapq.heapreplace(h, x[3]) * 5.0
                                          + h[0])(sorted([x[0], x[1]])),
    "bisect": lambda x: x[bisect.bisect(sorted([x[0], x[1]]), 0.5)] * 3.0,
    "insort": lambda x: (lambda items: (bisect.insort(items, x[2]), weighted(items))[1])(sorted([x[0], x[1]])),
    "median": lambda x: statistics.median(x) * 3.0,
    "median_low_high": lambda x: statistics.median_low(x) + 2.0 * statistics.median_high(list(x[:3])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_orders_and_winners_are_guarded_and_differentiated(name):
    f = CASES[name]
    vg = irad.value_and_grad(f)
    for x in POINTS:
        value, grad = vg(x)
        np.testing.assert_allclose(value, f(x), rtol=1e-12)
        np.testing.assert_allclose(grad, numerical_vjp(f, (x,), 1.0)[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name,retraces", [("sorted_key", True), ("max_key", True), ("merge", True),
                                           ("sorted_tuples", True), ("sorted", False), ("list_sort", False),
                                           ("nsmallest", False)])
def test_an_order_that_holds_reuses_the_program_and_one_that_differs_traces_again(name, retraces):
    """(Numbers sorted without a key are np.sort in the program: no order to guard, no retrace.)"""
    f = CASES[name]
    vg = irad.value_and_grad(f)
    vg(POINTS[0])
    vg(POINTS[1])  # the same order: the same program
    assert vg.traces == 1
    vg(POINTS[3])
    assert vg.traces == (2 if retraces else 1)


@pytest.mark.parametrize("f", [
    lambda x: weighted(sorted(x)),
    lambda x: weighted(sorted(x, reverse=True)),
    lambda x: statistics.median(x) * 3.0 + statistics.median(list(x[:3])),
    lambda x: weighted(heapq.nsmallest(3, x)),
], ids=["sorted", "sorted_reverse", "median", "nsmallest"])
def test_ties_between_numbers_split_the_gradient_as_finite_differences_do(f):
    """Two equal numbers share their cotangents evenly (np.sort's rule), as central differences do.
    (Among three or more equal numbers an even split is a subgradient, but central differences
    give each the mean of the group's extreme weights.)"""
    vg = irad.value_and_grad(f)
    for x in (np.array([0.3, 0.3, 2.5, 0.9]), np.array([0.5, -1.0, 0.5, 2.0]), POINTS[0]):
        value, grad = vg(x)
        np.testing.assert_allclose(value, f(x))
        np.testing.assert_allclose(grad, numerical_vjp(f, (x,), 1.0)[0], rtol=1e-6, atol=1e-7)


def test_ties_between_keys_follow_pythons_stability():
    def f(x):  # the keys tie at x[0] == x[1]: Python keeps them in their order, and so does the program
        return weighted(t[1] for t in sorted([(0, x[0]), (0, x[1]), (1, x[2])], key=lambda t: t[0] + t[1] * 0.0))

    vg = irad.value_and_grad(f)
    for x in (np.array([0.3, 0.3, 2.5, 0.9]), np.array([0.3, 0.7, 2.5, 0.9])):
        value, grad = vg(x)
        np.testing.assert_allclose(value, f(x))
        np.testing.assert_allclose(grad, [1.0, 10.0, 100.0, 0.0])


def test_the_program_holds_one_comparison_per_neighbour():
    def f(x):
        return weighted(sorted(x, key=lambda v: -v))

    graph = irad.trace(f, POINTS[0])
    guards = [op for op in graph.ops if op.prim == "irad.primitives.guard"]
    assert len(guards) == 3
