"""A corpus of plain-numpy functions, written as people write them, shared by the tracer tests
and (later) the gradient checks.

Each ``Case`` pairs a function with a maker of fresh arguments of the same shapes and types.
``differentiable`` cases return a scalar float loss that is smooth at generic inputs; their
gradient is checked with respect to ``argnums``.  ``guards`` cases branch on traced values, so a
graph evaluated on fresh inputs may raise ``GuardError`` (then it is compared with a retrace).
``impure`` cases draw random numbers or print: compare them with ``np.random`` seeded alike.

The registration decorator ``case(...)`` returns the function unchanged.
"""
from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
import math
from collections import OrderedDict, namedtuple
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import numpy as np


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    make_args: Callable[[np.random.Generator], tuple[Any, ...]]  # fresh inputs of the same shapes/types
    differentiable: bool = True  # scalar float output, smooth at generic inputs
    argnums: tuple[int, ...] = (0,)  # float arguments to differentiate later
    guards: bool = False  # value-dependent control flow: fresh inputs may raise GuardError
    impure: bool = False  # random draws / prints: compare with np.random seeded alike
    tags: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"Case({self.name})"


CASES: list[Case] = []


def case(make_args: Callable[[np.random.Generator], tuple[Any, ...]], **kw: Any) -> Callable[[Any], Any]:
    def register(fn: Any) -> Any:
        CASES.append(Case(kw.pop("name", fn.__name__), fn, make_args, **kw))
        return fn
    return register


# ---- argument makers ------------------------------------------------------------------------

def normal(*shapes: tuple[int, ...]) -> Callable[[np.random.Generator], tuple[Any, ...]]:
    return lambda r: tuple(r.standard_normal(s) for s in shapes)


def positive(*shapes: tuple[int, ...]) -> Callable[[np.random.Generator], tuple[Any, ...]]:
    return lambda r: tuple(r.uniform(0.5, 2.0, s) for s in shapes)


def floats(n: int) -> Callable[[np.random.Generator], tuple[Any, ...]]:
    return lambda r: tuple(float(v) for v in r.uniform(0.5, 2.0, n))


def by_name(name: str) -> Case:
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(name)


# ---- constants the functions read -----------------------------------------------------------

W_GLOBAL = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
BIAS_GLOBAL = np.array([0.1, -0.2, 0.3])
SCALE = 0.5
MASK_GLOBAL = np.array([True, False, True, True, False])
COEFFS = [1.0, -0.5, 0.25, -0.125]
IDX_GLOBAL = np.array([3, 0, 2, 2])


# ==== plain functions and numpy ==============================================================

@case(normal((8, 5), (5,)), argnums=(0, 1), tags=("numpy",))
def loss(W, b):
    h = np.tanh(W @ b)
    return np.sum(h)


@case(normal((6,), (6,)), argnums=(0, 1))
def mse(pred, target):
    return np.mean((pred - target) ** 2)


@case(normal((7,)))
def softplus_sum(x):
    return np.sum(np.log1p(np.exp(x)))


@case(normal((9,)))
def logsumexp(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


@case(lambda r: (r.standard_normal((5, 4)), r.integers(0, 4, 5)))
def softmax_cross_entropy(logits, labels):
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(labels)), labels].mean()


@case(normal((10,)))
def sigmoid_sum(x):
    return (1.0 / (1.0 + np.exp(-x))).sum()


@case(normal((3, 4), (3, 4)), argnums=(0, 1), tags=("ufunc-kwargs",))
def ufunc_keywords(x, y):
    s = np.add(x, y, dtype=np.float64)
    p = np.multiply(s, 0.5, casting="same_kind")
    m = np.sum(p, axis=0, keepdims=True)
    q = np.power(np.exp(x), 2.0)
    return float(np.mean(m) + np.mean(q, axis=None))


@case(normal((6, 4)))
def mean_var_std(x):
    mu = x.mean(axis=0)
    var = np.var(x, axis=0, ddof=1)
    return np.sum(mu ** 2) + np.sum(var) + x.std()


@case(lambda r: (r.standard_normal((4, 6)), r.uniform(0.5, 1.5, 6), r.standard_normal(6)), argnums=(0, 1, 2))
def layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps) * gamma + beta
    return np.sum(y * y)


@case(normal((3, 4), (4, 5)), argnums=(0, 1))
def einsum_contract(a, b):
    c = np.einsum("ij,jk->ik", a, b)
    return np.einsum("ik,ik->", c, c)


@case(normal((5, 3)))
def linalg_norm(x):
    return np.linalg.norm(x) + np.linalg.norm(x, axis=1).sum()


@case(normal((3, 2), (4, 2)), argnums=(0, 1))
def concat_stack(a, b):
    c = np.concatenate([a, b], axis=0)
    s = np.stack([a[0], b[1]], axis=1)
    v = np.vstack((a, b))
    h = np.hstack([a[:, 0], b[:, 1]])
    return c.sum() + (s ** 2).sum() + v.mean() + h @ h


@case(normal((12,)))
def leaky_relu_where(x):
    return np.where(x > 0, x, 0.1 * x).sum()


@case(normal((8,)))
def cumsum_diff(x):
    c = np.cumsum(x)
    d = np.diff(c * c)
    return d.sum() + np.cumprod(x[:3]).sum()


@case(normal((4,), (4,)), argnums=(0, 1))
def outer_trace_dot(x, y):
    return np.trace(np.outer(x, y)) + np.dot(x, y) + np.inner(x, x) + np.vdot(y, y)


@case(normal((9,)))
def sort_top3(x):
    return np.sort(x)[-3:].sum()


@case(normal((5,), (5,)), argnums=(0, 1))
def maximum_minimum(x, y):
    return np.maximum(x, y).sum() - np.minimum(x, 0.5 * y).sum() + np.fmax(x, y).mean()


@case(normal((3,)))
def expand_broadcast(x):
    e = np.expand_dims(x, 0)
    b = np.broadcast_to(e, (4, 3))
    s = np.squeeze(b[:1])
    return (b * np.arange(4.0)[:, None]).sum() + s @ s


@case(lambda r: (r.standard_normal((4, 4)) + 5 * np.eye(4), r.standard_normal(4)), argnums=(0, 1))
def linalg_solve_inv(A, b):
    x = np.linalg.solve(A, b)
    return x @ x + np.trace(np.linalg.inv(A)) + np.log(np.linalg.det(A))


@case(positive((6,)))
def exp_log_sqrt_chain(x):
    return np.sum(np.sqrt(x) * np.log(x) + np.exp(-x) * np.sin(x) + np.arctan(x) * np.cosh(x / 4))


@case(normal((4, 3), (3,), (3,)), argnums=(0, 1, 2))
def mlp_two_layer(x, w, b):
    h = np.tanh(x * w + b)
    out = h @ np.ones(3)
    return np.mean(out ** 2)


@case(normal((5,)))
def clip_abs_sign(x):
    return np.sum(np.clip(x, -0.8, a_max=0.9) * np.sign(x) + np.abs(x) ** 1.5)


@case(normal((4, 3)))
def tile_repeat_pad(x):
    t = np.tile(x, (2, 1))
    r = np.repeat(x, 2, axis=1)
    p = np.pad(x, ((1, 0), (0, 2)))
    return t.sum() + (r ** 2).sum() + p.mean()


@case(normal((6,)), differentiable=False)
def integer_outputs(x):
    return np.argmax(x), np.argsort(x), np.count_nonzero(x > 0)


# ==== ndarray methods and attributes ==========================================================

@case(normal((3, 4)), tags=("methods",))
def methods_chain(x):
    y = x.reshape(2, 6).T
    z = y.sum(axis=1)
    return z.max() + y.mean() + x.T.dot(np.ones(3)).sum()


@case(normal((3, 4)))
def methods_misc(x):
    f = x.flatten() + x.ravel()
    c = x.copy()
    s = x.swapaxes(0, 1).transpose(1, 0)
    p = (x[:, :2] ** 2 + 1.0).prod(axis=0)
    q = x.clip(-1.0, 1.0).squeeze()
    return f.sum() + c.max(axis=0).sum() + s.min() + p.sum() + q.var() + x.cumsum().sum()


@case(normal((2, 3)))
def attributes_shape(x):
    n = x.shape[0] * x.shape[1]
    assert x.ndim == 2 and x.size == n and x.dtype == np.float64
    return x.sum() / x.size + len(x) * x.mean() + float(x.itemsize)


@case(normal((5,)))
def astype_float(x):
    y = x.astype(np.float64)
    z = x.astype("float64", copy=False)
    return (y * z).sum()


@case(normal((5,)), differentiable=False)
def astype_int(x):
    return (x * 10).astype(np.int64), x.round(2), np.floor(x)


@case(normal((4,)))
def real_imag_complex(x):
    z = x + 1j * x[::-1]
    return float(np.sum(z.real ** 2 + z.imag) + np.abs(z).sum())


# ==== Python operators on arrays and floats ===================================================

@case(lambda r: (r.standard_normal((3, 3)), r.uniform(0.5, 2.0, (3, 3))), argnums=(0, 1), tags=("operators",))
def array_operators(a, b):
    c = a + b - a * b / b ** 2
    d = c @ a.T
    e = -d + (+a) * 2
    return (e * e).sum() + (a @ b).trace()


@case(lambda r: (r.standard_normal((6,)) * 3, r.uniform(0.5, 2.0, (6,))), differentiable=False)
def floordiv_mod(a, b):
    return a // b, a % b, a // 2.0, divmod(a, b)[1]


@case(normal((5,), (5,)), differentiable=False)
def comparisons_to_arrays(a, b):
    return a < b, a <= 0.0, a == a, a != b, b > a, b >= 1.0


@case(floats(2), argnums=(0, 1), tags=("float",))
def float_operators(x, y):
    z = x * y + x / y - y ** 2 + 3.0 - x
    return -z + (+x) * 2.0 ** y + 1.0 / x + x ** 0.5


@case(floats(2), differentiable=False)
def float_floordiv_mod(x, y):
    return (x * 7) // y, (x * 7) % y


@case(normal((4,)))
def reflected_scalars(x):
    return np.sum(1.0 - x + 2.0 / (x * x + 1.0) + 2.0 ** x - 3 * x)


@case(lambda r: (r.standard_normal((4,)), float(r.uniform(0.5, 2.0))), argnums=(0, 1))
def array_with_python_float(x, s):
    return np.sum(x * s + s / (1.0 + x * x)) * s


@case(lambda r: (r.standard_normal((3,)), r.standard_normal((3,)).astype(np.float32)), differentiable=False)
def mixed_dtypes(a, b):
    return a + b, b * 2, (b * b).sum(), np.float32(2.0) * b


@case(normal((3, 4), (4,)), argnums=(0, 1))
def numpy_scalars(x, v):
    s = np.float64(2.5)
    m = x.sum()
    n = m * s + np.float64(1.0) / (m * m + 1.0)
    return n + v[0] * v[1] + np.float64(v @ v)


# ==== indexing and slicing ====================================================================

@case(normal((4, 5)), tags=("indexing",))
def basic_indexing(x):
    a = x[0] + x[-1]
    b = x[1:3, ::2]
    c = x[:, 1]
    d = x[..., 0]
    e = x[None, :, 2]
    f = x[1:-1:2, 4]
    return a.sum() + (b * b).sum() + c @ d + e.sum() + f.sum() + x[2, 3]


@case(normal((6, 3)))
def negative_steps(x):
    r = x[::-1]
    s = x[4:0:-2, ::-1]
    return (r[0] * x[-1]).sum() + (s ** 2).sum() + x[-1::-3, -1].sum()


@case(normal((5, 4)))
def advanced_int_indexing(x):
    a = x[np.array([0, 2, 2])]
    b = x[[0, 1], [1, 3]]
    c = x[IDX_GLOBAL, 1:]
    d = x[:, [3, 0]]
    return (a ** 2).sum() + b.sum() + c.mean() + d.sum()


@case(normal((5,)), guards=True)  # the mask is the user's array, read live: its count is guarded
def constant_mask_indexing(x):
    return (x[MASK_GLOBAL] ** 2).sum() + x[~MASK_GLOBAL].sum()


@case(normal((8,)), guards=True)
def data_mask_indexing(x):
    pos = x[x > 0]
    return (pos ** 2).sum()


@case(lambda r: (r.standard_normal((4, 3)), r.integers(0, 4, 3)), differentiable=True)
def traced_int_index(x, idx):
    return (x[idx] ** 2).sum() + x[idx, np.arange(3)].sum()


@case(normal((2, 3, 4)))
def ellipsis_none(x):
    a = x[..., None]
    b = x[0, ..., 1:]
    c = x[:, None, ..., -1]
    return a.sum() + (b * b).sum() + c.mean()


@case(normal((5,), (3,)), argnums=(0, 1), differentiable=False)
def take_choose_gather(x, y):
    return np.take(x, [4, 0]), x.take([1, 1]), np.take_along_axis(y, np.array([2, 0]), axis=0)


# ==== iteration and unpacking =================================================================

@case(normal((4, 3)), tags=("iteration",))
def iterate_rows(x):
    acc = 0.0
    for row in x:
        acc = acc + row @ row
    return acc


@case(normal((3,)))
def unpack_vector(x):
    a, b, c = x
    return a * b + b * c - c * a


@case(normal((5, 2)))
def star_unpack(x):
    first, *rest = x
    *init, last = x
    return (first * last).sum() + sum(r.sum() for r in rest) + len(init)


@case(normal((3, 2), (3, 2)), argnums=(0, 1))
def zip_enumerate_rows(x, y):
    total = 0.0
    for i, (a, b) in enumerate(zip(x, y)):
        total += (i + 1) * (a @ b)
    return total


@case(normal((4, 2)))
def unpack_rows_in_loop(x):
    s = 0.0
    for u, v in x:
        s += u * v
    return s


# ==== builtins ================================================================================

@case(normal((4, 3)), tags=("builtins",))
def builtin_sum_rows(x):
    return sum(x).sum() + sum([v * v for v in x[0]]) + sum(x[1], 1.0)


@case(floats(3), argnums=(0, 1, 2))
def builtin_abs_min_max_floats(a, b, c):
    return abs(a - 3.0) + min(a, b + 2.0) * max(c, 0.1) + max([a, b + 5.0, c])


@case(normal((5,)))
def builtin_abs_array(x):
    return abs(x).sum() + abs(float(x[0]) - 10.0)


@case(normal((3, 2)))
def builtin_float_len(x):
    n = len(x)
    total = float(x.sum()) / n
    return total + float(x[0, 0]) * len(x[0])


@case(normal((4, 3)))
def builtin_map_range(x):
    rows = list(map(np.tanh, x))
    rng = [rows[i] * i for i in range(1, len(rows), 2)]
    return sum(r.sum() for r in rng) + sum(map(lambda r: r @ r, rows))


@case(lambda r: ({"b": r.standard_normal(3), "a": r.standard_normal(3), "c": r.standard_normal(3)},))
def builtin_sorted_keys(params):
    total = 0.0
    for i, k in enumerate(sorted(params)):
        total = total + (i + 1) * np.sum(params[k] ** 2)
    order = sorted([3, 1, 2], reverse=True)
    return total * order[0]


@case(lambda r: ({"w2": r.standard_normal(2), "w1": r.standard_normal(2)},))
def builtin_sorted_items(params):
    total = 0.0
    for k, v in sorted(params.items()):
        total = total * 0.5 + np.sum(v * v) * len(k)
    return total


@case(normal((3,)), differentiable=False)
def builtin_containers(x):
    t = tuple(x)
    l = list(reversed(x))
    d = dict(zip("abc", x))
    return t, l, d, isinstance(x, np.ndarray), type(x).__name__


@case(floats(4), argnums=(0, 1, 2, 3))
def builtin_round_pow(a, b, c, d):
    return pow(a, 2) + pow(b, c) + round(3.14159, 2) * d + divmod(7, 2)[0] * a


# ==== math functions ==========================================================================

@case(floats(2), argnums=(0, 1), tags=("math",))
def math_functions(x, y):
    return math.exp(x) * math.sin(y) + math.log(x) - math.sqrt(y) + math.tanh(x * y) + math.pow(x, 1.5) + \
        math.hypot(x, y) + math.atan2(y, x) + math.cos(math.pi * x)


@case(normal((3,)))
def math_on_numpy_scalars(x):
    return math.exp(x[0]) + math.log(1.0 + x[1] ** 2) + math.fsum([x[2], 1.0])


# ==== pytrees in and out ======================================================================

Point = namedtuple("Point", ["x", "y"])


class Params(NamedTuple):
    W: Any
    b: Any


@case(lambda r: ((r.standard_normal(3), r.standard_normal(3)),), tags=("pytree",))
def tuple_in(pair):
    a, b = pair
    return np.sum(a * b)


@case(lambda r: ({"W": r.standard_normal((3, 2)), "b": r.standard_normal(2)}, r.standard_normal((4, 3))))
def dict_params(params, x):
    h = np.tanh(x @ params["W"] + params["b"])
    return np.mean(h ** 2)


@case(lambda r: ({"layers": [{"W": r.standard_normal((3, 3)), "b": r.standard_normal(3)} for _ in range(2)],
                  "scale": float(r.uniform(0.5, 1.5))}, r.standard_normal(3)))
def nested_pytree(params, x):
    h = x
    for layer in params["layers"]:
        h = np.tanh(layer["W"] @ h + layer["b"])
    return params["scale"] * np.sum(h)


@case(lambda r: (Point(r.standard_normal(2), r.standard_normal(2)),))
def namedtuple_in(p):
    return np.sum(p.x * p.y) + p[0][1]


@case(lambda r: (Params(r.standard_normal((2, 2)), r.standard_normal(2)), r.standard_normal(2)))
def typed_namedtuple_in(params, x):
    W, b = params
    return np.sum(np.tanh(W @ x + params.b)) + np.sum(b)


@case(normal((3,), (3,)), differentiable=False)
def pytree_out(a, b):
    return {"sum": a + b, "parts": [a, (b, a * b)], "pt": Point(a.sum(), b.sum()), "n": 3, "none": None}


@case(lambda r: ([float(v) for v in r.uniform(0.5, 2, 5)],), tags=("float",))
def list_of_floats(xs):
    total = 0.0
    for v in xs:
        total += v * v - 0.5 * v
    return total


@case(lambda r: (OrderedDict(b=r.standard_normal(2), a=r.standard_normal(2)),), differentiable=False)
def dict_comprehension_out(d):
    return {k: v * 2 for k, v in d.items()}


# ==== loops (unrolled) ========================================================================

@case(lambda r: (r.standard_normal((4, 3)), r.standard_normal((3, 3)) * 0.5, r.standard_normal(3)),
      argnums=(0, 1, 2), tags=("loop",))
def rnn_unrolled(xs, W, h0):
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + xs[t])
    return np.sum(h ** 2)


@case(lambda r: (r.standard_normal((4, 4)), r.standard_normal(4)), argnums=(0, 1))
def power_iteration(A, v):
    S = A @ A.T
    for _ in range(5):
        v = S @ v
        v = v / np.linalg.norm(v)
    return v @ S @ v


@case(normal((3, 3)))
def nested_loops(x):
    total = 0.0
    for i in range(3):
        for j in range(i + 1):
            total = total + x[i, j] * x[j, i]
    return total


@case(lambda r: (r.standard_normal(4), 3))
def loop_static_int_arg(x, n):
    y = x
    for _ in range(n):
        y = np.sin(y) + x
    return y.sum()


@case(normal((5,)))
def scalar_comparisons_as_data(x):
    """Comparisons of numpy scalars feed np.where and arithmetic, never an ``if``: no guard."""
    s = x.sum()
    gate = np.where(s > 0, 1.0, -1.0)
    m = s > 1.0
    m |= np.max(x) > 3.0
    return gate * np.sum(np.where(m, x, x ** 2)) + float(s < 0) * s


@case(floats(2), argnums=(0, 1))
def python_float_pow_and_abs(a, b):
    """pow/abs of Python floats: their pullbacks inline (no bool from a float comparison)."""
    return abs(a - 1.5) + a ** b + math.pow(b, 1.5) + (a * b) ** 2.0


# ==== value-dependent branches (guards) =======================================================

@case(normal((5,)), guards=True, tags=("guard",))
def branch_on_sum(x):
    if x.sum() > 0:
        return np.sum(x ** 2)
    else:
        return np.sum(np.exp(x))


@case(floats(2), argnums=(0, 1), guards=True)
def branch_on_floats(a, b):
    r = a * b if a > b else a + b
    if r < 1.5 and a > 0.7:
        r = r * 2.0
    return r


@case(normal((6,)), guards=True)
def python_relu_loop(x):
    total = 0.0
    for v in x:
        total += v if v > 0 else 0.01 * v
    return total


@case(normal((4,)), guards=True)
def branch_any_all(x):
    if np.any(x > 1.0) or (x < -3).all():
        return np.sum(x ** 3)
    return np.sum(x ** 2)


@case(normal((4,)), guards=True)
def branch_not_and(x):
    y = x * 1.0
    if not (x[0] > 0 and x[1] > 0):
        y = -y
    return y.sum() + (1.0 if x[2] > 0 else 2.0) * x[3]


@case(normal((5,)), guards=True)
def traced_int_conversion(x):
    k = int(np.argmax(x))
    return x[k] * 2.0 + x[(k + 1) % 5]


# ==== while loops =============================================================================

@case(lambda r: (float(r.uniform(1.0, 4.0)),), guards=True, tags=("while",))
def newton_sqrt(a):
    x = a
    while abs(x * x - a) > 1e-10:
        x = 0.5 * (x + a / x)
    return x


@case(normal((3,)), guards=True)
def while_traced_norm(x):
    steps = 0
    while np.linalg.norm(x) > 0.1 and steps < 10:
        x = x * 0.5
        steps += 1
    return x.sum()


@case(normal((4,)))
def while_static_counter(x):
    i, acc = 0, 0.0
    while i < 4:
        acc = acc + x[i] * (i + 1)
        i += 1
    return acc


# ==== in-place updates ========================================================================

@case(normal((5,), (2,)), argnums=(0, 1), tags=("inplace",))
def setitem_int_slice(x, y):
    a = x.copy()
    a[0] = y[0]
    a[2:4] = y * 3.0
    a[-1] = a[0] + a[1]
    return np.sum(a ** 2)


@case(normal((6,)), tags=("inplace",))
def setitem_data_mask(x):
    a = x.copy()
    a[a < 0] = 0.0
    return np.sum(a * x)


@case(normal((3,), (3,)), argnums=(0, 1))
def augmented_assign(x, y):
    a = x * 1.0
    a += y
    a *= 2.0
    a -= x ** 2
    a /= 3.0
    return a.sum()


@case(normal((4,)))
def out_keyword(x):
    buf = np.empty_like(x)
    np.exp(x, out=buf)
    np.multiply(buf, x, out=buf)
    return buf.sum()


@case(normal((4,)))
def fill_then_set(x):
    a = np.zeros(4)
    a.fill(2.0)
    a[1] = x[0]
    a[3] = x[2] * x[3]
    return (a * x).sum()


@case(normal((3, 2), (3, 2)), argnums=(0, 1))
def copyto_inplace(x, y):
    a = np.zeros_like(x)
    np.copyto(a, x)
    a[0] = y[0]
    return np.sum(a * y)


@case(normal((5,), (4,)), argnums=(0, 1))
def add_at_scatter(x, v):
    a = x.copy()
    np.add.at(a, IDX_GLOBAL, v)
    return np.sum(a ** 2)


@case(normal((6,), (2,)), argnums=(0, 1))
def augmented_subscript(x, y):
    a = x.copy()
    a[1:3] += y
    a[0] += 1.0
    a[[4, 5]] *= y
    return np.sum(a ** 2)


@case(normal((3, 3)))
def inplace_on_fresh_array_in_loop(x):
    out = np.zeros((3,))
    for i in range(3):
        out[i] = x[i] @ x[:, i]
    return out.sum()


@case(normal((4,)))
def setitem_traced_value_into_constant(x):
    a = np.ones((2, 4))
    a[1] = np.tanh(x)
    a[0, 1:3] = x[:2]
    return np.sum(a * a)


# ==== constants from globals, closure cells, defaults =========================================

@case(normal((2, 4)), tags=("const",))
def global_constants(x):
    return np.sum(np.tanh(x @ W_GLOBAL + BIAS_GLOBAL) * SCALE)


def _make_closure_const():
    M = np.arange(6.0).reshape(2, 3) / 10
    k = 1.5

    def closure_const(x):
        return np.sum((x @ M) ** 2) * k
    return closure_const


case(normal((4, 2)), name="closure_const")(_make_closure_const())


@case(normal((3,)))
def default_constant(x, w=np.array([1.0, 2.0, 3.0]), p=2):
    return np.sum(w * x ** p)


# ==== Python float scalar code ================================================================

@case(floats(1), tags=("float",))
def horner_polynomial(x):
    acc = 0.0
    for c in reversed(COEFFS):
        acc = acc * x + c
    return acc


@case(lambda r: ([float(v) for v in r.uniform(0.5, 2, 4)], [float(v) for v in r.uniform(0.5, 2, 4)]),
      argnums=(0, 1))
def float_dot_lists(xs, ys):
    return sum(a * b for a, b in zip(xs, ys)) / len(xs)


@case(floats(3), argnums=(0, 1, 2))
def float_scalar_mix_numpy(a, b, c):
    v = np.array([a, b, c])
    return float(v @ v) + a * np.tanh(b) + np.exp(c) / 2


# ==== functions and calling conventions =======================================================

def _helper_square(v):
    return v * v


@case(normal((4,)), tags=("calls",))
def call_module_function(x):
    return np.sum(_helper_square(x) + _helper_square(x[0]))


@case(normal((4,)))
def nested_function(x):
    def inner(v, k):
        def innermost(w):
            return np.sin(w) * k
        return innermost(v) + v
    return inner(x, 2.0).sum() + inner(x[::-1], 0.5).sum()


@case(normal((5,)))
def lambdas(x):
    act = lambda z: np.maximum(z, 0.01 * z)
    sq = lambda z, p=2: z ** p
    return np.sum(sq(act(x))) + (lambda: x.mean())()


def _make_scaler(s):
    def scale(v):
        return v * s
    return scale


@case(normal((3,)))
def closure_factory(x):
    double = _make_scaler(2.0)
    by_x0 = _make_scaler(x[0])
    return np.sum(double(x) + by_x0(x))


@case(normal((4, 2)))
def nonlocal_accumulator(x):
    total = 0.0
    count = 0

    def add(v):
        nonlocal total, count
        total = total + v
        count += 1

    for row in x:
        add(row @ row)
    return total / count


@case(normal((4, 3)))
def comprehensions(x):
    rows = [np.sin(r) for r in x]
    pairs = {i: r.sum() for i, r in enumerate(rows) if i % 2 == 0}
    nested = [a * b for a in x[0] for b in x[1]]
    uniq = {int(k) for k in range(3)}
    return sum(pairs.values()) + sum(nested) + len(uniq) * rows[1].mean()


@case(normal((5,)))
def generator_expressions(x):
    s = sum(v ** 2 for v in x)
    m = max(v for v in x[:2])
    t = tuple(np.exp(v) for v in x[2:])
    return s + m + t[0] * t[-1]


@case(normal((3, 4)))
def partial_functions(x):
    colsum = functools.partial(np.sum, axis=0)
    scaled = functools.partial(_scale_shift, shift=1.0)
    return np.sum(colsum(x) ** 2) + np.sum(scaled(x, 3.0))


def _scale_shift(v, s, shift=0.0):
    return v * s + shift


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        return out
    return wrapper


def scaled_by(k):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return k * fn(*args, **kwargs)
        return wrapper
    return deco


@logged
@scaled_by(3.0)
def _decorated_model(x, w):
    return np.tanh(x * w)


@case(normal((4,), (4,)), argnums=(0, 1))
def wraps_decorators(x, w):
    return np.sum(_decorated_model(x, w=w))


@logged
def decorated_entry(x):
    return np.sum(x ** 3)


case(normal((3,)), name="decorated_entry")(decorated_entry)


def _tree_sum(v):
    if v.shape[0] == 1:
        return v[0]
    half = v.shape[0] // 2
    return _tree_sum(v[:half]) + _tree_sum(v[half:])


@case(normal((7,)))
def recursion_on_shape(x):
    return _tree_sum(np.sin(x))


def _power(x, n):
    return 1.0 if n == 0 else x * _power(x, n - 1)


@case(floats(1))
def recursion_on_int(x):
    return _power(x, 4) + _power(x * 0.5, 2)


def _with_defaults(x, a=2.0, *, b=0.5, c=None):
    y = x * a + b
    return y if c is None else y * c


@case(normal((3,)))
def defaults_and_keyword_only(x):
    return np.sum(_with_defaults(x) + _with_defaults(x, 3.0, b=1.0) + _with_defaults(x, c=x))


def _combine(*xs, **weights):
    total = 0.0
    for i, v in enumerate(xs):
        total = total + weights.get(f"w{i}", 1.0) * np.sum(v)
    return total


@case(normal((3,), (2,)), argnums=(0, 1))
def star_args_kwargs(x, y):
    parts = [x, y, x * y[0]]
    opts = {"w0": 2.0, "w2": 0.5}
    return _combine(*parts, **opts) + _combine(x, w0=x[0])


@case(normal((4,)))
def functools_reduce(x):
    return functools.reduce(lambda a, b: a * 0.5 + b, x, 0.0)


# ==== classes: methods through the MRO, static/class methods, dunders, properties ==============

class Layer:
    def __init__(self, W, b):
        self.W = W
        self.b = b

    def forward(self, x):
        return self.activation(x @ self.W + self.b)

    def activation(self, z):
        return np.tanh(z)

    def __call__(self, x):
        return self.forward(x)


class ReluLayer(Layer):
    def activation(self, z):
        return np.maximum(z, 0.1 * z)


class ScaledLayer(ReluLayer):
    def forward(self, x):
        return 2.0 * super().forward(x)


@case(lambda r: (r.standard_normal((3, 2)), r.standard_normal(2), r.standard_normal((4, 3))),
      argnums=(0, 1, 2), tags=("class",))
def methods_through_mro(W, b, x):
    layers = [Layer(W, b), ReluLayer(W, b), ScaledLayer(W, b)]
    return sum(np.sum(layer(x) ** 2) for layer in layers)


class A:
    def f(self, x):
        return x + 1.0


class B(A):
    def f(self, x):
        return super().f(x) * 2.0


class C(A):
    def f(self, x):
        return super().f(x) ** 2


class D(B, C):
    def f(self, x):
        return super().f(x) - 1.0


@case(normal((3,)))
def diamond_super(x):
    return np.sum(D().f(x))


class Model:
    scale = 3.0

    def __init__(self, w):
        self.w = w

    @staticmethod
    def act(z):
        return np.tanh(z)

    @classmethod
    def from_size(cls, w, n):
        return cls(w[:n])

    @classmethod
    def scaled(cls, z):
        return cls.scale * z

    def __call__(self, x):
        return self.scaled(Model.act(x * self.w)).sum()


@case(normal((3,), (3,)), argnums=(0, 1))
def static_and_class_methods(w, x):
    m = Model.from_size(w, 3)
    return m(x) + Model.act(x[0]) + m.act(w[1])


class Vec:
    def __init__(self, data):
        self.data = data

    def __add__(self, other):
        other = other.data if isinstance(other, Vec) else other
        return Vec(self.data + other)

    def __radd__(self, other):
        return Vec(other + self.data)

    def __mul__(self, other):
        return Vec(self.data * (other.data if isinstance(other, Vec) else other))

    __rmul__ = __mul__

    def __sub__(self, other):
        return Vec(self.data - other.data)

    def __rsub__(self, other):
        return Vec(other - self.data)

    def __truediv__(self, k):
        return Vec(self.data / k)

    def __neg__(self):
        return Vec(-self.data)

    def __matmul__(self, other):
        return self.data @ other.data

    def __getitem__(self, i):
        return self.data[i]

    def __len__(self):
        return self.data.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self.data[i]

    def __lt__(self, other):
        return self.norm() < other.norm()

    def norm(self):
        return np.sqrt(self @ self)

    @property
    def first(self):
        return self.data[0]

    @functools.cached_property
    def total(self):
        return self.data.sum()


@case(normal((3,), (3,)), argnums=(0, 1), tags=("dunder",))
def user_dunders(a, b):
    u, v = Vec(a), Vec(b)
    w = 2.0 * u + v * 3.0 - (-u) / 2.0
    x = 1.0 + w
    y = 0.5 - x
    return (y @ v) + w[0] * w[-1] + len(w) + sum(iter(u)) + x.first + y.total + v.total


@case(normal((3,), (3,)), argnums=(0, 1), guards=True)
def user_comparison_dunder(a, b):
    u, v = Vec(a), Vec(b)
    bigger = v if u < v else u
    return bigger.norm()


class Affine:
    def __init__(self, W, b):
        self.W, self.b = W, b

    def __call__(self, x):
        return x @ self.W + self.b


@case(normal((3, 2), (2,), (4, 3)), argnums=(0, 1, 2))
def callable_instance(W, b, x):
    f = Affine(W, b)
    return np.sum(np.tanh(f(x)) ** 2)


class Circle:
    def __init__(self, r):
        self._r = r

    @property
    def r(self):
        return self._r

    @r.setter
    def r(self, value):
        self._r = value * 1.0

    @property
    def area(self):
        return math.pi * self.r ** 2


@case(floats(1), tags=("property",))
def properties(r):
    c = Circle(r)
    a = c.area
    c.r = r * 2
    return a + c.area


@dataclass
class Dense:
    W: np.ndarray
    b: np.ndarray
    scale: float = 1.0
    extras: list = field(default_factory=list)

    def __post_init__(self):
        self.extras.append(self.scale * 2)

    def __call__(self, x):
        return self.scale * np.tanh(x @ self.W + self.b) + self.extras[0]


@dataclass(frozen=True)
class Frozen:
    a: Any
    b: Any

    def combine(self):
        return self.a * self.b


@case(normal((3, 2), (2,), (3,)), argnums=(0, 1, 2), tags=("dataclass",))
def dataclasses_case(W, b, x):
    layer = Dense(W, b, scale=0.5)
    fr = Frozen(x, x[::-1])
    fr2 = dataclasses.replace(fr, b=x * 2)
    return np.sum(layer(x) ** 2) + np.sum(fr.combine()) + np.sum(fr2.combine())


class Sequence_:
    def __init__(self, *layers):
        self.layers = list(layers)

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self):
        return len(self.layers)

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@case(normal((3, 3), (3,), (3,)), argnums=(0, 1, 2))
def user_container_class(W, b, x):
    net = Sequence_(Affine(W, b), np.tanh, Affine(W.T, b))
    first = net[0]
    return np.sum(net(x) ** 2) + np.sum(first(x)) * len(net)


# ==== random numbers (impure) =================================================================

@case(normal((10,)), impure=True, tags=("random",))
def dropout(x):
    mask = np.random.rand(*x.shape) > 0.5
    return np.sum(x * mask / 0.5)


@case(normal((5,)), impure=True)
def additive_noise(x):
    noise = np.random.normal(0.0, 0.1, size=x.shape)
    return np.sum((x + noise) ** 2) + np.random.uniform()


@case(normal((4,)), impure=True)
def seeded_generator(x):
    rng = np.random.default_rng(0)
    return np.sum(x * rng.normal(size=4)) + rng.uniform()


# ==== generators ==============================================================================

def _layers_gen(x, n):
    h = x
    for i in range(n):
        h = np.tanh(h + i)
        yield h


@case(normal((3,)), tags=("generator",))
def generator_function(x):
    return sum(h.sum() for h in _layers_gen(x, 3))


@case(normal((4,)))
def generator_next_and_send(x):
    def running():
        acc = 0.0
        while True:
            v = yield acc
            acc = acc + v

    g = running()
    next(g)
    for v in x:
        last = g.send(v * v)
    g.close()
    return last


@case(normal((2, 3)))
def yield_from(x):
    def rows(m):
        yield from m
        yield m.sum(axis=0)

    return sum(np.sum(r ** 2) for r in rows(x))


# ==== try/except, with-blocks =================================================================

@case(normal((3,)), tags=("try",))
def try_except(x):
    try:
        y = np.sum(x ** 2)
        raise ValueError("boom")
    except ValueError:
        y = y + 1.0
    finally:
        y = y * 2.0
    try:
        d = {"a": x}
        z = d["b"]
    except KeyError:
        z = x * 3.0
    return y + z.sum()


@case(lambda r: (r.standard_normal((3, 3)),))
def try_linalg_error(x):
    try:
        L = np.linalg.cholesky(x @ x.T + 3.0 * np.eye(3))
    except np.linalg.LinAlgError:
        L = np.eye(3)
    return np.sum(L)


@contextlib.contextmanager
def _scaled_context(k):
    yield k * 2.0


class _Recorder:
    def __init__(self):
        self.entered = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        return False


@case(normal((4,)), tags=("with",))
def with_blocks(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(x * x + 1.0)
    with _scaled_context(1.5) as k:
        y = y * k
    with _Recorder() as rec:
        y = y + rec.entered
    return np.sum(y)


# ==== f-strings and print (impure) =============================================================

@case(normal((3,)), impure=True, tags=("print",))
def print_traced_values(x):
    s = x.sum()
    print(f"loss={s:.4f} first={x[0]!r} n={len(x)}")
    print("mean", x.mean(), sep=": ")
    msg = "value %.3f" % float(s)
    print(msg, str(x[1]))
    return s * 2.0


# ==== misc: mixing everything ================================================================

@case(lambda r: ({"W1": r.standard_normal((4, 5)) * 0.5, "b1": np.zeros(5), "W2": r.standard_normal((5, 1)) * 0.5},
                 r.standard_normal((6, 4)), r.standard_normal((6, 1))), tags=("model",))
def mlp_regression(params, X, y):
    h = np.tanh(X @ params["W1"] + params["b1"])
    pred = h @ params["W2"]
    return np.mean((pred - y) ** 2) + 1e-3 * sum(np.sum(w ** 2) for k, w in params.items() if k.startswith("W"))


@case(normal((5, 2)), tags=("model",))
def pairwise_distances(X):
    diff = X[:, None, :] - X[None, :, :]
    d2 = np.sum(diff ** 2, axis=-1) + np.eye(len(X))
    return np.sum(1.0 / d2)


@case(lambda r: (r.standard_normal((6,)), r.standard_normal((6,))), argnums=(0, 1), tags=("model",))
def attention_scores(q, k):
    s = np.outer(q, k) / np.sqrt(len(q))
    s = s - s.max(axis=-1, keepdims=True)
    a = np.exp(s)
    a /= a.sum(axis=-1, keepdims=True)
    return np.sum(a @ k)


@case(lambda r: (r.uniform(0.1, 0.9, 5), r.integers(0, 2, 5).astype(np.float64)), tags=("model",))
def binary_cross_entropy(p, y):
    return -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))


@case(normal((8,)), tags=("model",))
def conv1d_valid(x):
    k = np.array([0.25, 0.5, 0.25])
    out = np.array([x[i:i + 3] @ k for i in range(len(x) - 2)])
    return np.sum(out ** 2) + np.convolve(x, k, mode="valid").sum()


@case(lambda r: (r.standard_normal((3, 3)) * 0.3,), tags=("model",))
def matrix_exp_series(A):
    term = np.eye(3)
    total = np.eye(3)
    for n in range(1, 8):
        term = term @ A / n
        total = total + term
    return np.trace(total)


@case(normal((4,)), tags=("model",))
def physics_step(x):
    pos, vel = x[:2].copy(), x[2:].copy()
    dt = 0.1
    for _ in range(5):
        acc = -pos - 0.1 * vel
        vel = vel + dt * acc
        pos = pos + dt * vel
    return 0.5 * vel @ vel + 0.5 * pos @ pos


@case(floats(3), argnums=(0, 1, 2), tags=("float",))
def float_ode_euler(y0, k, c):
    y, t = y0, 0.0
    ys = []
    for _ in range(6):
        y = y + 0.1 * (-k * y + c * math.sin(t))
        t += 0.1
        ys.append(y)
    return sum(ys) / len(ys)


@case(normal((3, 4)), differentiable=False)
def returns_array(x):
    return np.tanh(x) @ x.T


@case(normal((3,)), differentiable=False)
def returns_input_unchanged(x):
    return x


@case(normal((3,), (3,)), argnums=(0, 1), differentiable=False)
def returns_constant_and_inputs(x, y):
    return 1.0, x, (y, 2), np.ones(2)


@case(floats(1), differentiable=False)
def returns_python_float_plain(x):
    return x * 2.0 + 1.0


@case(normal((3, 3)), differentiable=False)
def returns_list_of_rows(x):
    return [r * i for i, r in enumerate(x)]


@case(normal((2,)))
def string_keys_and_getattr(x):
    cfg = {"act": "tanh", "scale": 2.0}
    act = getattr(np, cfg["act"])
    return np.sum(act(x) * cfg["scale"])


@case(normal((4,)))
def global_function_table(x):
    out = 0.0
    for name in ("sin", "cos"):
        out = out + np.sum(_ACTS[name](x))
    return out


_ACTS = {"sin": np.sin, "cos": np.cos}


@case(lambda r: (r.standard_normal(3), [r.standard_normal(3) for _ in range(3)]), argnums=(0, 1))
def list_of_arrays_arg(x, ws):
    return sum(np.sum(np.tanh(w * x)) for w in ws) + np.sum(np.array(ws) @ x)


@case(normal((3,)))
def array_from_list_of_traced(x):
    a = np.array([x[0], x[1] * 2.0, 1.0])
    b = np.asarray([[x[2], 0.0], [0.0, x[0]]])
    return a @ a + np.trace(b) + np.linalg.det(b + 2 * np.eye(2))


@case(normal((3,)))
def isinstance_and_type_checks(x):
    y = x if isinstance(x, np.ndarray) else np.asarray(x)
    if type(y) is np.ndarray and y.ndim == 1:
        y = y * 2.0
    return np.sum(y ** 2)


@case(normal((2, 2)))
def aliasing_asarray(x):
    y = np.asarray(x)
    z = np.asanyarray(y)
    return np.sum(y * z + x)


@case(floats(1))
def float_literal_aliasing(x):
    # the input may be the very same object as a literal in user code
    return x * 2.0 + 2.0


@case(normal((3,)))
def view_then_use(x):
    a = x.copy()
    v = a[:2]
    w = v * 2.0
    a[2] = 5.0
    return np.sum(w) + a.sum()


@case(normal((4,)))
def sum_with_start_and_chain(x):
    parts = [x[:2], x[2:]]
    return sum((p ** 2 for p in parts), np.zeros(2)).sum() + np.sum([p.sum() for p in parts])


@case(normal((3,)))
def kwargs_call_of_numpy(x):
    return np.sum(a=x ** 2, axis=0) + np.mean(x, axis=0, keepdims=False) + np.linspace(0, 1, num=3) @ x


@case(normal((2, 3)))
def chained_comparisons_static(x):
    n, m = x.shape
    if 0 < n < m <= 3:
        return np.sum(x)
    return np.sum(x ** 2)


@case(normal((3,)))
def conditional_expression_static(x, mode="sq"):
    f = (lambda v: v ** 2) if mode == "sq" else np.abs
    return np.sum(f(x))


@case(normal((2, 2)))
def walrus_and_match(x):
    if (n := x.shape[0]) == 2:
        s = x.sum() * n
    else:
        s = x.sum()
    match x.shape:
        case (2, 2):
            s = s + x[0, 0]
        case _:
            s = s - 1.0
    return s


# ==== views and in-place updates through them ================================================

@case(normal((4,)), tags=("inplace", "view"))
def view_read_after_base_update(x):
    a = x.copy()
    v = a[:2]
    a *= 2.0
    return v.sum() + a.sum()


@case(normal((3, 3), (3,)), argnums=(0, 1), tags=("inplace", "view"))
def row_view_written_back(x, y):
    a = x.copy()
    row = a[1]
    row += y
    row[0] = y[2] * 3.0
    return np.sum(a ** 2) + row.sum()


@case(normal((2, 3), (2,)), argnums=(0, 1), tags=("inplace", "view"))
def transpose_view_written_back(x, y):
    a = x.copy()
    t = a.T
    t[1] = y
    return np.sum(a * x) + t.sum()


@case(normal((2,), (3,)), argnums=(0, 1), tags=("inplace", "view"))
def untracked_buffer_slices(y, z):
    out = np.zeros(6)
    out[1:3] += y
    out[3:] = z
    out[::2] *= 2.0
    return np.sum(out ** 2)


@case(normal((2, 2)), tags=("inplace", "view"))
def chained_index_assignment(x):
    buf = np.zeros((3, 2))
    for i in range(2):
        for j in range(2):
            buf[i][j] = x[i, j] ** 2
    buf[2][:] = x.sum(axis=0)
    return np.sum(buf * buf)


@case(normal((5,)), tags=("inplace", "view"))
def overlapping_shift(x):
    a = x.copy()
    a[1:] = a[:-1]
    a[0] = 0.5
    return np.sum(a * np.arange(5.0))


@case(normal((3, 4)), tags=("inplace", "view"))
def reshape_view_update(x):
    a = x.copy()
    flat = a.reshape(-1)
    flat[::2] = 0.0
    b = a.ravel()
    return np.sum(a * x) + b.sum()


@case(normal((4,)), tags=("inplace",))
def inplace_then_branchless_loop(x):
    acc = np.zeros(4)
    for k in range(3):
        acc += x * (k + 1)
        acc[k] -= x[k]
    return acc @ acc


# ==== more builtins, callbacks and protocols ==================================================

class Bag:
    """Sequence protocol through __getitem__/__len__ only, plus __contains__, __bool__, __array__."""

    def __init__(self, *items):
        self.items = list(items)

    def __getitem__(self, i):
        return self.items[i] * 1.0

    def __len__(self):
        return len(self.items)

    def __contains__(self, v):
        return any(v is it for it in self.items)

    def __array__(self, dtype=None, copy=None):
        return np.stack([np.asarray(it) for it in self.items])

    def __getattr__(self, name):
        if name == "head":
            return self.items[0] * 2.0
        raise AttributeError(name)


@case(normal((3,), (3,)), argnums=(0, 1), tags=("dunder",))
def user_sequence_protocol(a, b):
    bag = Bag(a, b)
    total = 0.0
    for item in bag:  # iteration through __getitem__
        total = total + item.sum()
    rev = list(reversed(bag))
    n = len(bag) if bag else 0
    arr = np.asarray(bag)
    return total + rev[0] @ rev[1] + n + np.sum(arr ** 2) + float(a in bag) + bag.head.sum()


class Money:
    def __init__(self, amount):
        self.amount = amount

    def __float__(self):
        return self.amount * 1.0

    def __abs__(self):
        return Money(abs(self.amount))

    def __bool__(self):
        return self.amount > 0

    def __repr__(self):
        return f"Money({self.amount:.2f})"

    def __lt__(self, other):
        return self.amount < other.amount


@case(floats(3), argnums=(0, 1, 2), guards=True, tags=("dunder",))
def user_numeric_protocol(a, b, c):
    ms = [Money(a), Money(-b), Money(c * 2.0)]
    total = sum(float(abs(m)) for m in ms)
    if ms[1]:
        total = total * 2.0
    cheapest = min(ms)
    ordered = sorted(ms)
    return total + float(cheapest) + float(ordered[-1])


@case(normal((3, 2)), guards=True, tags=("builtins",))  # filter(None, ...) truth-tests traced items
def callbacks_in_c_builtins(x):
    rows = list(map(np.sum, x))
    pos = list(filter(None, [r * 0.0 + 1.0 for r in rows]))
    total = functools.reduce(np.add, x)
    floats_ = list(map(float, x[0]))
    pairs = sorted([(k, r) for k, r in zip("cab", rows)], key=lambda kv: kv[0])
    best = max(zip("xyz", rows), key=lambda kv: kv[0])
    lst = [x[1], x[0]]
    lst.sort(key=lambda r: str(r.shape))
    return sum(rows) + len(pos) + total.sum() + sum(floats_) + pairs[0][1] * best[1] + lst[0].sum()


def _three(a, b, c):
    return a * b - c


@case(normal((3,), (3, 2)), argnums=(0, 1), tags=("calls",))
def star_call_of_array(x, m):
    parts = [*x]
    first, *others = m
    return _three(*x) + sum(parts) + _three(*m).sum() + first @ others[0] + np.hypot(*m[0])


@case(normal((2,)), differentiable=False, impure=True, guards=True, tags=("print",))
def strings_from_traced_values(x):
    label = f"{x[0]:+.3f}|{x[1]!s}"
    sign = "neg" if label.startswith("-") else "pos"
    words = label.split("|")
    print(sign, words[0].upper(), repr(x.sum()), "%s" % (x * 2,), "%.2f/%s" % (x[0], x[1:]), sep=",")
    return label, len(words)


@case(normal((3,)), tags=("generator",))
def generator_of_pairs_consumed_by_dict(x):
    def pairs(v):
        for i, val in enumerate(v):
            yield f"k{i}", val * val

    d = dict(pairs(x))
    return d["k0"] + d["k2"] - sum(d.values()) * 0.5


@case(normal((3,)), tags=("class",))
def class_defined_inside(x):
    class Poly:
        def __init__(self, c):
            self.c = c

        def __call__(self, t):
            return sum(ci * t ** i for i, ci in enumerate(self.c))

    p = Poly(x)
    return p(0.5) + p(x[0])


@case(normal((4,)), tags=("class",))
def dataclass_with_array_ops(x):
    @dataclass
    class Box:
        lo: Any
        hi: Any

        @property
        def width(self):
            return self.hi - self.lo

        def contains(self, p):
            return np.all((p >= self.lo) & (p <= self.hi))

    b = Box(x[:2], x[:2] + np.exp(x[2:]))
    return np.sum(b.width ** 2) + np.sum(b.lo)


@case(lambda r: (r.standard_normal(3), {"a": 1, "b": 2}), tags=("pytree",))
def static_dict_argument(x, config):
    return np.sum(x * config["a"] + config["b"])


@case(normal((3,)), tags=("with",))
def nested_functions_with_state(x):
    history = []

    def step(v):
        history.append(v.sum())
        return v * 0.5

    v = x
    for _ in range(3):
        v = step(v)
    return sum(history) + np.sum(v)


@case(normal((3,)), tags=("inplace", "view"))
def untracked_reshaped_buffer(x):
    buf = np.zeros(6)
    m = buf.reshape(2, 3)
    m[0] = x
    m[1] = x ** 2
    return buf @ np.arange(6.0)


@case(normal((4,)), guards=True, tags=("builtins",))
def any_all_of_traced_truths(x):
    y = x * 1.0
    if any(v > 1.5 for v in x):
        y = y * 2.0
    if all(abs(v) < 3.0 for v in x) and not any(x > 10.0):
        y = y + 1.0
    return np.sum(y ** 2) + float(any([x[0] * 0.0]))


@case(lambda r: ([float(v) for v in r.uniform(0.5, 2, 3)], [float(v) for v in r.uniform(0.5, 2, 3)]),
      argnums=(0, 1), tags=("builtins", "float"))
def c_reducers_over_iterators(xs, ws):
    import operator
    dot = math.fsum(map(operator.mul, xs, ws))
    prod = math.prod(w + 1.0 for w in ws)
    return dot + prod


@case(normal((3,)), impure=True, differentiable=False, tags=("print",))
def join_of_formatted_values(x):
    line = ", ".join(f"{v:.3f}" for v in x)
    print("[" + line + "]")
    print(*x, sep=" | ")
    return line


class AbstractLayer(abc.ABC):
    """A user class with a metaclass (abc.ABCMeta): its __init__ must still be traced."""

    def __init__(self, w):
        self.w = w * 2.0

    @abc.abstractmethod
    def forward(self, x):
        ...


class ConcreteLayer(AbstractLayer):
    def forward(self, x):
        return np.tanh(x * self.w)


@case(normal((3,), (3,)), argnums=(0, 1), tags=("class",))
def abc_subclass(w, x):
    return np.sum(ConcreteLayer(w).forward(x) ** 2)


@functools.lru_cache(maxsize=None)
def _cached_poly(v):
    return v * v + 0.5 * v


@case(floats(1), tags=("calls",))
def lru_cached_function(a):
    return _cached_poly(a) + _cached_poly(a * 2.0)


@case(normal((4,)), tags=("inplace", "ufunc-kwargs"))
def ufunc_out_where_and_cast(x):
    out = np.full(4, 0.25)
    np.exp(x, out=out, where=x > 0)
    low = np.zeros(4, dtype=np.float32)
    np.multiply(x, 2.0, out=low)
    return np.sum(out * x) + float(low.astype(np.float64) @ np.ones(4)) * 0.0 + np.sum(np.maximum(x, 0.0, out=None))


@case(lambda r: (r.standard_normal(2) * 10,), guards=True, differentiable=False, tags=("print",))
def characters_of_a_traced_string(x):
    label = f"{x[0]:.1f}"
    digits = sum(1 for ch in label if ch.isdigit())
    return len(label) + digits, label[0] == "-", x * len(label)


@case(normal((3,), (2, 3)), argnums=(0, 1), tags=("inplace", "view"))
def views_of_an_untracked_buffer(x, m):
    buf = np.zeros((2, 3))
    t = buf.T  # attribute views of an untracked array
    top, bottom = np.vsplit(buf, 2)  # views returned inside a list by a numpy function
    buf[0] = x
    bottom += x * 2.0
    total = top.sum() + bottom.sum() + t[1].sum()
    grid = np.ones((2, 3))
    for row, src in zip(grid, m):  # rows of an untracked array are views too
        row *= src
    return total + np.sum(grid ** 2)


@case(normal((3,)), tags=("inplace", "view"))
def fortran_ordered_buffer_views(x):
    buf = np.zeros((3, 2), order="F")
    left, right = np.hsplit(buf, 2)  # views of an F-ordered buffer, returned in a list
    buf[:, 0] = x
    right += x[:, None] ** 2
    return left.sum() * 2.0 + right.sum() + buf.sum()
