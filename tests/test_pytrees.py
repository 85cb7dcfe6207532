"""Pytrees of the user's own types: dataclasses, namedtuples, OrderedDicts, registered classes and
model objects as arguments and outputs of ``grad``, ``value_and_grad``, ``vjp`` and ``compile``.

Every gradient is checked against central finite differences in float64, computed here by a
walk over the float leaves that does not use irad's pytree code, on the second and later calls of
one ``irad.grad`` object (the first call's result comes from the trace).
"""
from __future__ import annotations

import copy
import dataclasses
import types
from collections import OrderedDict, namedtuple
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

import irad
from irad.errors import GradError, MutationError
from irad.pytree import flatten_args
from irad.signature import call_key

RNG = np.random.default_rng(7)
H = 1e-6
FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, np.ufunc)


# ---- the test's own walk over float leaves ---------------------------------------------------

def float_leaves(x: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    """{path: value} of the float leaves of ``x``: arrays, Python floats, in containers, dataclass
    fields and object attributes."""
    if isinstance(x, np.ndarray):
        return {path: x} if x.dtype.kind == "f" else {}
    if isinstance(x, float):
        return {path: x}
    if x is None or isinstance(x, (bool, int, str) + FUNCTIONS):
        return {}
    if isinstance(x, dict):
        items: Any = x.items()
    elif isinstance(x, (list, tuple)):
        items = enumerate(x)
    elif dataclasses.is_dataclass(x):
        items = [(f.name, getattr(x, f.name)) for f in dataclasses.fields(x)]
    elif hasattr(x, "__dict__"):
        items = vars(x).items()
    else:
        return {}
    out: dict[tuple[Any, ...], Any] = {}
    for k, v in items:
        out.update(float_leaves(v, path + (k,)))
    return out


def replaced(x: Any, path: tuple[Any, ...], v: Any) -> Any:
    """A copy of ``x`` with the leaf at ``path`` replaced (the original untouched)."""
    if not path:
        return v
    k, rest = path[0], path[1:]
    if isinstance(x, dict):
        y = copy.copy(x)
        y[k] = replaced(x[k], rest, v)
        return y
    if isinstance(x, list):
        y = list(x)
        y[k] = replaced(x[k], rest, v)
        return y
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return x._replace(**{x._fields[k]: replaced(x[k], rest, v)})
    if isinstance(x, tuple):
        return tuple(replaced(e, rest, v) if i == k else e for i, e in enumerate(x))
    y = copy.copy(x)
    object.__setattr__(y, k, replaced(getattr(x, k), rest, v))
    return y


def numeric_grad(f: Callable[..., Any], args: tuple[Any, ...], a: int) -> dict[tuple[Any, ...], Any]:
    """Central differences of scalar ``f`` in every float leaf of argument ``a``."""
    out = {}
    for path, val in float_leaves(args[a]).items():
        if isinstance(val, float):
            def at(t: float) -> float:
                new = list(args)
                new[a] = replaced(args[a], path, val + t)
                return float(f(*new))
            out[path] = (at(H) - at(-H)) / (2 * H)
            continue
        g = np.zeros_like(val)
        for i in np.ndindex(val.shape):
            vals = []
            for t in (H, -H):
                v = val.copy()
                v[i] += t
                new = list(args)
                new[a] = replaced(args[a], path, v)
                vals.append(float(f(*new)))
            g[i] = (vals[0] - vals[1]) / (2 * H)
        out[path] = g
    return out


def same_types(g: Any, x: Any) -> None:
    """``g`` has ``x``'s structure: the same container and node types all the way down; the leaves
    of ``x`` that are not floats are None in ``g``."""
    if isinstance(x, (np.ndarray, float)) and not (isinstance(x, np.ndarray) and x.dtype.kind != "f"):
        assert isinstance(g, type(x)) or isinstance(x, float) and isinstance(g, (float, np.floating)), (g, x)
        return
    if x is None or isinstance(x, (bool, int, str, np.ndarray) + FUNCTIONS):
        assert g is None, (g, x)
        return
    assert type(g) is type(x), (type(g), type(x))
    if isinstance(x, dict):
        assert list(g) == list(x)
        for k in x:
            same_types(g[k], x[k])
    elif isinstance(x, (list, tuple)):
        assert len(g) == len(x)
        for a, b in zip(g, x):
            same_types(a, b)
    elif dataclasses.is_dataclass(x):
        for f in dataclasses.fields(x):
            if f.metadata.get("static"):
                assert getattr(g, f.name) == getattr(x, f.name)
            else:
                same_types(getattr(g, f.name), getattr(x, f.name))
    else:  # an object; a registered class's STATIC attributes (its aux) are kept
        assert list(vars(g)) == list(vars(x))
        for k in vars(x):
            if k in getattr(type(x), "STATIC", ()):
                assert getattr(g, k) == getattr(x, k)
            else:
                same_types(getattr(g, k), getattr(x, k))


def check(f: Callable[..., Any], g: Any, args: tuple[Any, ...], a: int, rtol: float = 1e-6) -> None:
    """``g`` (irad's gradient of argument ``a``) against central differences."""
    same_types(g, args[a])
    want = numeric_grad(f, args, a)
    got = float_leaves(g)
    assert set(got) == set(want), (sorted(map(str, got)), sorted(map(str, want)))
    for path in want:
        np.testing.assert_allclose(got[path], want[path], rtol=rtol, atol=1e-8, err_msg=str(path))


def calls(f: Callable[..., Any], make: Callable[[], tuple[Any, ...]], argnums: Any = 0, n: int = 3) -> Any:
    """One ``irad.grad`` object, called ``n`` times on fresh arguments of one structure; the
    gradients of the second and later calls are checked."""
    g = irad.grad(f, argnums=argnums)
    nums = (argnums,) if isinstance(argnums, int) else argnums
    for i in range(n):
        args = make()
        got = g(*args)
        if i:
            for k, a in enumerate(nums):
                check(f, got if isinstance(argnums, int) else got[k], args, a)
    assert g.traces == 1
    return g


def normal(*shape: int) -> Any:
    return RNG.standard_normal(shape) if shape else float(RNG.standard_normal())


# ---- dataclasses --------------------------------------------------------------------------

@dataclass
class Layer:
    W: np.ndarray
    b: np.ndarray
    scale: float = 1.0
    n_in: int = 3
    act: str = field(default="tanh", metadata={"static": True})


@dataclass(frozen=True)
class FrozenLayer:
    W: np.ndarray
    b: np.ndarray
    scale: float = 1.0
    n_in: int = 3
    act: str = field(default="tanh", metadata={"static": True})


def layer_loss(p: Any, x: np.ndarray) -> Any:
    act = np.tanh if p.act == "tanh" else np.sin
    return np.sum(act(x @ p.W + p.b) ** 2) * p.scale + p.n_in * np.sum(p.b)


@pytest.mark.parametrize("cls", [Layer, FrozenLayer])
def test_dataclass_gradient_is_an_instance_of_it(cls: type) -> None:
    g = calls(layer_loss, lambda: (cls(normal(3, 2), normal(2), 0.7), normal(3)))
    p = cls(normal(3, 2), normal(2), 0.7)
    got = g(p, normal(3))
    assert type(got) is cls and got.n_in is None and got.act == "tanh"


def test_dataclass_and_x_together_and_value_and_grad() -> None:
    vg = irad.value_and_grad(layer_loss, argnums=(0, 1))
    for i in range(3):
        p, x = Layer(normal(3, 2), normal(2), 0.4), normal(3)
        value, (gp, gx) = vg(p, x)
        if i:
            assert value == pytest.approx(layer_loss(p, x), rel=1e-12)
            check(layer_loss, gp, (p, x), 0)
            check(layer_loss, gx, (p, x), 1)


def nested_loss(params: list[dict[str, Any]], x: np.ndarray) -> Any:
    for d in params:
        x = np.tanh(x @ d["layer"].W + d["layer"].b) * d.get("gain", 1.0)
    return np.sum(x ** 2)


def test_nested_dataclass_in_dict_in_list() -> None:
    calls(nested_loss, lambda: ([{"layer": Layer(normal(3, 4), normal(4))},
                                 {"layer": FrozenLayer(normal(4, 2), normal(2)), "gain": 0.9}], normal(3)))


Pair = namedtuple("Pair", ["w", "c"])


def nt_loss(pair: Any, od: OrderedDict[str, Any]) -> Any:
    return np.sum(np.sin(pair.w * od["u"])) * pair.c + np.sum(od["v"] ** 3)


def test_namedtuple_and_ordered_dict() -> None:
    g = calls(nt_loss, lambda: (Pair(normal(3), 1.3), OrderedDict([("u", normal(3)), ("v", normal(2))])),
              argnums=(0, 1))
    gp, go = g(Pair(normal(3), 1.3), OrderedDict([("u", normal(3)), ("v", normal(2))]))
    assert type(gp) is Pair and type(go) is OrderedDict and list(go) == ["u", "v"]


# ---- registered classes -------------------------------------------------------------------

class Poly:
    """Coefficients (a child), an offset (a child) and a power (aux: static, in the key)."""

    STATIC = ("power",)

    def __init__(self, coef: Any, offset: Any, power: int) -> None:
        self.coef, self.offset, self.power = coef, offset, power

    def __call__(self, x: Any) -> Any:
        return sum(c * x ** (k * self.power) for k, c in enumerate(self.coef)) + self.offset


irad.register_pytree(Poly, lambda p: ((p.coef, p.offset), p.power), lambda power, ch: Poly(ch[0], ch[1], power))


def poly_loss(p: Poly, x: np.ndarray) -> Any:
    return np.sum(np.sin(p(x)))


def test_registered_class_with_aux() -> None:
    g = calls(poly_loss, lambda: (Poly([normal(), normal(), normal()], 0.3, 2), normal(4)))
    got = g(Poly([normal(), normal()], 0.3, 2), normal(4))  # another structure: two coefficients
    assert type(got) is Poly and got.power == 2 and len(got.coef) == 2
    assert g.traces == 2
    for power in (1, 3):  # the aux is in the key: a new power retraces, and is right
        p, x = Poly([normal(), normal()], 0.3, power), normal(4)
        g(p, x)
        check(poly_loss, g(p, x), (p, x), 0)
    assert g.traces == 4


def test_registered_class_matches_jax() -> None:
    jax = pytest.importorskip("jax", reason="the comparison with JAX needs jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    class Affine:
        def __init__(self, A: Any, b: Any, name: str) -> None:
            self.A, self.b, self.name = A, b, name

    flat = lambda m: ((m.A, m.b), m.name)  # noqa: E731
    unflat = lambda name, ch: Affine(ch[0], ch[1], name)  # noqa: E731
    irad.register_pytree(Affine, flat, unflat)
    jax.tree_util.register_pytree_node(Affine, flat, unflat)

    def loss(m: Any, x: Any, xp: Any = np) -> Any:
        return xp.sum(xp.tanh(m.A @ x + m.b) ** 2)

    g = irad.grad(loss)
    jg = jax.grad(lambda m, x: loss(m, x, jnp))
    for _ in range(3):
        m, x = Affine(normal(2, 3), normal(2), "lin"), normal(3)
        got = g(m, x)
        want = jg(Affine(jnp.asarray(m.A), jnp.asarray(m.b), "lin"), jnp.asarray(x))
        assert type(got) is Affine and got.name == "lin"
        np.testing.assert_allclose(got.A, np.asarray(want.A), rtol=1e-12)
        np.testing.assert_allclose(got.b, np.asarray(want.b), rtol=1e-12)


def test_registering_again_changes_the_layout_and_retraces() -> None:
    class Two:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

    irad.register_pytree(Two, lambda t: ((t.a, t.b), None), lambda _, ch: Two(*ch))
    f = lambda t: np.sum(t.a * 2.0 + t.b ** 2)  # noqa: E731
    g = irad.grad(f)
    t = Two(normal(3), normal(3))
    g(t)
    irad.register_pytree(Two, lambda t: ((t.b, t.a), None), lambda _, ch: Two(ch[1], ch[0]))  # children swapped
    check(f, g(t), (t,), 0)
    assert g.traces == 2


# ---- model objects ------------------------------------------------------------------------

class Dense:
    def __init__(self, n_in: int, n_out: int) -> None:
        self.W = RNG.standard_normal((n_in, n_out)) / np.sqrt(n_in)
        self.b = np.zeros(n_out) + 0.1
        self.n_out = n_out

    def __call__(self, x: Any) -> Any:
        return x @ self.W + self.b


class MLP:
    def __init__(self, sizes: list[int]) -> None:
        self.layers = [Dense(a, b) for a, b in zip(sizes, sizes[1:])]
        self.activation = np.tanh
        self.name = "mlp"
        self.temperature = 0.8

    def __call__(self, x: Any) -> Any:
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x) / self.temperature


def mlp_loss(model: MLP, x: np.ndarray, y: np.ndarray) -> Any:
    return np.mean((model(x) - y) ** 2)


def test_model_object_gradient_is_model_shaped() -> None:
    g = calls(mlp_loss, lambda: (MLP([3, 4, 2]), normal(5, 3), normal(5, 2)))
    m = MLP([3, 4, 2])
    got = g(m, normal(5, 3), normal(5, 2))
    assert type(got) is MLP and type(got.layers[0]) is Dense
    assert got.name is None and got.activation is None and got.layers[0].n_out is None
    assert isinstance(got.temperature, float)


def test_model_attributes_rebound_or_mutated_between_calls_are_seen() -> None:
    g = irad.grad(mlp_loss)
    m, x, y = MLP([3, 4, 2]), normal(5, 3), normal(5, 2)
    g(m, x, y)
    m.layers[0].W = normal(3, 4)  # rebound, same shape: a new value of an input
    check(mlp_loss, g(m, x, y), (m, x, y), 0)
    m.layers[1].b[:] = 2.0  # updated in place
    check(mlp_loss, g(m, x, y), (m, x, y), 0)
    m.temperature = 1.7  # a float attribute: an input too
    check(mlp_loss, g(m, x, y), (m, x, y), 0)
    assert g.traces == 1
    m.activation = np.sin  # a static attribute: in the key
    check(mlp_loss, g(m, x, y), (m, x, y), 0)
    m.layers[0].W, m.layers[0].b = normal(3, 6), normal(6)  # new shapes (and the next layer's)
    m.layers[1].W = normal(6, 2)
    check(mlp_loss, g(m, x, y), (m, x, y), 0)
    m.layers.append(Dense(2, 2))  # a new layer: a new structure
    check(mlp_loss, g(m, x, y), (m, x, y), 0)
    del m.name  # an attribute gone
    check(mlp_loss, g(m, x, y), (m, x, y), 0)
    assert g.traces == 5


def test_objects_not_differentiated_stay_static_and_are_read_live() -> None:
    g = irad.grad(mlp_loss, argnums=1)
    m, x, y = MLP([3, 2]), normal(4, 3), normal(4, 2)
    g(m, x, y)
    m.layers[0].W *= 3.0
    check(mlp_loss, g(m, x, y), (m, x, y), 1)
    m.layers[0].W = normal(3, 2)
    check(mlp_loss, g(m, x, y), (m, x, y), 1)


def test_a_differentiated_object_the_function_writes_to_is_an_error() -> None:
    def remember(m: MLP, x: Any, y: Any) -> Any:
        m.last = x
        return mlp_loss(m, x, y)

    with pytest.raises(MutationError, match="attribute of an object it differentiates"):
        irad.grad(remember)(MLP([3, 2]), normal(4, 3), normal(4, 2))


def test_reading_the_original_behind_the_copy_is_an_error() -> None:
    model = MLP([3, 2])

    def loss(m: MLP, x: Any, y: Any) -> Any:
        return mlp_loss(m, x, y) + 0.1 * np.sum(model.layers[0].W ** 2)

    with pytest.raises(GradError, match=r"reads attribute 'layers' of the MLP object it differentiates.*\n  at "
                                        r".*test_pytrees.py:\d+"):
        irad.grad(loss)(model, normal(4, 3), normal(4, 2))


def test_a_cycle_is_an_error_naming_the_attribute() -> None:
    m = MLP([3, 2])
    m.layers[0].owner = m
    with pytest.raises(GradError, match=r"an object that contains itself: MLP.layers\[0\].owner is the MLP"):
        irad.grad(mlp_loss)(m, normal(4, 3), normal(4, 2))


# ---- outputs, vjp, compile ------------------------------------------------------------------

@dataclass(frozen=True)
class State:
    pos: np.ndarray
    energy: Any
    label: str = field(default="s", metadata={"static": True})


def step(x: np.ndarray, k: float) -> State:
    return State(np.sin(x) * k, np.sum(x ** 2) * k, "stepped")


def test_vjp_returns_a_dataclass_and_takes_its_cotangent() -> None:
    for _ in range(3):
        x, k = normal(3), 1.7
        y, pb = irad.vjp(step, x, k)
        assert type(y) is State and y.label == "stepped"
        np.testing.assert_allclose(y.pos, np.sin(x) * k)
        ybar = State(normal(3), 0.6, "stepped")
        gx, gk = pb(ybar)
        dot = lambda x, k: float(np.sum(step(x, k).pos * ybar.pos) + step(x, k).energy * ybar.energy)  # noqa: E731
        check(dot, gx, (x, k), 0)
        assert gk == pytest.approx(numeric_grad(dot, (x, k), 1)[()], rel=1e-6)
    with pytest.raises(GradError, match="cotangent has structure"):
        pb(State(normal(3), 0.6, "other"))  # the static field is structure


def test_vjp_of_a_dataclass_argument_gives_a_dataclass_cotangent() -> None:
    for _ in range(3):
        p, x = Layer(normal(3, 2), normal(2), 0.5), normal(3)
        y, pb = irad.vjp(layer_loss, p, x)
        gp, gx = pb(1.0)
        check(layer_loss, gp, (p, x), 0)
        check(layer_loss, gx, (p, x), 1)


def test_compile_with_a_dataclass_argument() -> None:
    p, x = FrozenLayer(normal(3, 2), normal(2), 0.5), normal(3)
    prog = irad.compile(layer_loss, p, x)
    for _ in range(2):
        p, x = FrozenLayer(normal(3, 2), normal(2), 0.5), normal(3)
        value, gp = prog(p, x)
        assert value == pytest.approx(layer_loss(p, x), rel=1e-12)
        check(layer_loss, gp, (p, x), 0)


def test_has_aux_returns_a_dataclass_aux() -> None:
    def loss(x: np.ndarray) -> tuple[Any, State]:
        s = step(x, 2.0)
        return s.energy, s

    g = irad.grad(loss, has_aux=True)
    for _ in range(2):
        x = normal(3)
        gx, aux = g(x)
        assert type(aux) is State and aux.label == "stepped"
        np.testing.assert_allclose(aux.pos, np.sin(x) * 2.0)
        np.testing.assert_allclose(gx, 4.0 * x)


# ---- the cache key --------------------------------------------------------------------------

def test_static_field_and_field_shape_changes_retrace() -> None:
    g = irad.grad(layer_loss)
    p, x = Layer(normal(3, 2), normal(2)), normal(3)
    g(p, x)
    g(Layer(normal(3, 2), normal(2)), normal(3))
    assert g.traces == 1
    p = Layer(normal(3, 2), normal(2), act="sin")  # a static field: part of the key
    check(layer_loss, g(p, x), (p, x), 0)
    assert g.traces == 2
    p = Layer(normal(3, 5), normal(5))  # a field's shape
    check(layer_loss, g(p, x), (p, x), 0)
    assert g.traces == 3
    p = Layer(normal(3, 5), normal(5), n_in=4)  # an int field
    check(layer_loss, g(p, x), (p, x), 0)


def test_key_order_is_flatten_order() -> None:
    m = MLP([3, 4, 2])
    args = ([{"l": Layer(normal(2, 2), normal(2))}, Pair(normal(1), 2.0)], m, Poly([1.0, normal()], 0.5, 2), 3,
            Layer(normal(1, 1), normal(1)))
    for deep in (frozenset(), frozenset({0, 1}), frozenset({0, 1, 2, 3, 4})):
        _, key_leaves = call_key(args, {"k": Layer(normal(1), normal(1))}, deep)
        flat, _ = flatten_args(args, {"k": Layer(normal(1), normal(1))}, deep)
        assert len(key_leaves) == len(flat)
        assert all(a is b or isinstance(a, str) and a == b for a, b in zip(key_leaves[:-3], flat[:-3]))
    assert call_key(args, {}, frozenset({1}))[0] != call_key(args, {}, frozenset())[0]


# ---- errors ---------------------------------------------------------------------------------

class Slotted:
    __slots__ = ("W",)

    def __init__(self, W: np.ndarray) -> None:
        self.W = W


def test_an_unsupported_type_names_it_and_the_three_ways_out() -> None:
    with pytest.raises(GradError) as e:
        irad.grad(lambda s, x: np.sum(s.W * x))(Slotted(np.ones(3)), np.ones(3))
    msg = str(e.value)
    assert "argument 0 (type Slotted)" in msg and "__slots__" in msg
    assert "make Slotted a dataclass" in msg and "irad.register_pytree(Slotted, flatten, unflatten)" in msg
    assert "pass its arrays" in msg and "test_pytrees.py:" in msg
    assert "integer and boolean" not in msg


def test_an_unsupported_object_inside_a_model_names_its_path() -> None:
    class Holder:
        def __init__(self) -> None:
            self.inner = Slotted(np.ones(3))
            self.b = np.ones(3)

    with pytest.raises(GradError, match=r"argument 0 \(inner: type Slotted\).*register_pytree"):
        irad.grad(lambda h: np.sum(h.inner.W * h.b))(Holder())


def test_a_library_object_in_argnums_is_refused_and_ints_keep_their_message() -> None:
    with pytest.raises(GradError, match=r"argument 0 \(type Generator\).*standard library|installed package"):
        irad.grad(lambda r, x: np.sum(x))(np.random.default_rng(0), np.ones(2))
    with pytest.raises(GradError, match="integer and boolean inputs get no gradient"):
        irad.grad(lambda n, x: np.sum(x) * n)(3, np.ones(2))


def test_unhashable_static_field_is_an_error() -> None:
    @dataclass
    class Cfg:
        w: np.ndarray
        sizes: list = field(default_factory=list, metadata={"static": True})

    with pytest.raises(GradError, match=r"field marked static \(sizes\).*not hashable"):
        irad.grad(lambda c: np.sum(c.w))(Cfg(np.ones(2), [1, 2]))


def test_register_pytree_refuses_builtin_containers() -> None:
    with pytest.raises(TypeError, match="already handles"):
        irad.register_pytree(dict, lambda d: ((), None), lambda a, c: {})
    with pytest.raises(TypeError, match="already handles"):
        irad.register_pytree(Pair, lambda d: ((), None), lambda a, c: Pair(1, 2))


# ---- nested transforms ----------------------------------------------------------------------

class Wave:
    def __init__(self) -> None:
        self.W = np.array([1.0, 2.0, 3.0])


WAVE = Wave()
PARAMS = {"W": np.array([1.0, 2.0, 3.0])}


def wave_loss(m: Any, x: Any) -> Any:
    W = m["W"] if isinstance(m, dict) else m.W
    return np.sum(np.sin(W * x))


@pytest.mark.parametrize("world", [WAVE, PARAMS], ids=["object", "dict"])
def test_a_nested_grad_of_a_world_object_is_never_stale(world: Any) -> None:
    """The inner grad reads the object for its call key; the outer program depends on what it read."""
    def outer(x: Any) -> Any:
        g = irad.grad(wave_loss)(world, x)
        return np.sum((g["W"] if isinstance(g, dict) else g.W) ** 2)

    def plain(x: Any) -> Any:  # d/dW sum(sin(W x)) = x cos(W x)
        W = world["W"] if isinstance(world, dict) else world.W
        return np.sum((x * np.cos(W * x)) ** 2)

    go, x = irad.grad(outer), np.array([0.3, 0.5, 0.7])
    go(x)
    check(plain, go(x), (x,), 0)
    new = np.array([2.0, -1.0, 0.5])
    if isinstance(world, dict):
        world["W"] = new
    else:
        world.W = new
    check(plain, go(x), (x,), 0)
    new[:] = [0.1, 0.2, 0.3]  # in place
    check(plain, go(x), (x,), 0)


def test_nested_grad_with_respect_to_a_model() -> None:
    def outer(m: Wave, x: Any) -> Any:
        return np.sum(irad.grad(wave_loss)(m, x).W ** 2)

    def plain(m: Wave, x: Any) -> Any:
        return np.sum((x * np.cos(m.W * x)) ** 2)

    go = irad.grad(outer)
    for _ in range(3):
        m, x = Wave(), normal(3)
        m.W = normal(3)
        check(plain, go(m, x), (m, x), 0, rtol=1e-5)
