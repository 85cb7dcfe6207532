"""Generated code never runs user text (DESIGN.md §7, issue 12 defect 9).

Every hostile value below (a dict key whose ``repr`` is code, ``Enum`` keys, strings with quotes,
newlines and backslashes, keyword names no source may spell, docstrings, Unicode lookalikes that
NFKC-normalise to one identifier, crafted ONNX names and attributes) must never execute and never
change a result: value and gradient match central differences on the second and later calls of
one compiled object.  The payloads set ``builtins._irad_pwned``; the fixture checks it never is.
"""
from __future__ import annotations

import builtins
import enum
import types
from typing import Any, Callable

import numpy as np
import pytest

import irad
from irad.errors import LoadError
from irad.lower import lower
from irad.testing import numerical_vjp

PAYLOAD = "__import__('builtins').__setattr__('_irad_pwned', 1)"
#: strings that break out of a literal, a docstring, a comment or a line if spliced
BREAKOUTS = ["a'b", 'a"b', "a\\", "a\nb", '"""', "'''", "x') or " + PAYLOAD + " or ('",
             '""" + ' + PAYLOAD + ' + """', "\\'); " + PAYLOAD + "; ('", "a\rb", "a\u2028b", "\u202e#"]
#: those irad may not spell as a literal ('a"b' is a plain literal; "a'b" is not)
UNSPELLABLE = [s for s in BREAKOUTS if "'" in s or "\\" in s or not (s.isascii() and s.isprintable())]


@pytest.fixture(autouse=True)
def never_executed():
    if hasattr(builtins, "_irad_pwned"):
        delattr(builtins, "_irad_pwned")
    yield
    assert not hasattr(builtins, "_irad_pwned"), "generated code ran user text"


class CodeRepr:
    """A dict key whose ``repr`` is code (and whose ``str`` is too, for the name hints)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"{PAYLOAD} or {self.n}"

    __str__ = __repr__

    def __hash__(self) -> int:
        return hash(("CodeRepr", self.n))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CodeRepr) and other.n == self.n


class Color(enum.Enum):
    RED = 1
    GREEN = "g"


def check_calls(gf: Callable[..., Any], f: Callable[..., Any], args: tuple[Any, ...], calls: int = 3) -> None:
    """``gf`` returns ``(value, grad)`` of ``f`` (``value_and_grad``, a ``Program``): its calls after
    the first (the cached program) match ``f`` and central differences in float64, on fresh
    arguments each call."""
    rng = np.random.default_rng(0)
    for k in range(calls):
        a = args if k == 0 else irad.testing.random_like(args, rng)
        value, grad = gf(*a)
        if k == 0:
            continue
        np.testing.assert_allclose(value, f(*a), rtol=1e-12, atol=1e-12)
        (want,) = numerical_vjp(f, a, 1.0)[:1]
        for g, w in zip(irad.pytree.flatten(grad)[0], irad.pytree.flatten(want)[0]):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)


# ---- dict keys in pullback index paths and dict arguments ------------------------------------

def dsum(d):
    return sum(np.sum(np.sin(v) * w) for w, v in zip(range(2, 2 + len(d)), d.values()))


def _dsum_fwd(d):
    return dsum(d), d


def _dsum_bwd(d, ybar):
    return ({k: ybar * w * np.cos(v) for w, (k, v) in zip(range(2, 2 + len(d)), d.items())},)


irad.defrule(dsum, _dsum_fwd, _dsum_bwd)

HOSTILE_KEYS = [CodeRepr(0), CodeRepr(1), Color.RED, Color.GREEN, (CodeRepr(2), "t'\n"), ("a", 1), 7, -3,
                2 ** 100, True, None, 1.5, float("inf"), b"b'\n", frozenset({CodeRepr(3)}), *BREAKOUTS]


def keyed_loss(x):
    return dsum({k: x * (i + 1) for i, k in enumerate(HOSTILE_KEYS)})


@pytest.mark.parametrize("passes", [None, []], ids=["pipeline", "no_passes"])
def test_hostile_dict_keys_in_pullback_paths(passes):
    """The pullback returns a dict keyed by the hostile keys: its index paths name each key."""
    x = np.linspace(0.1, 1.0, 3)
    prog = irad.compile(keyed_loss, x, passes=passes)
    for k in UNSPELLABLE:
        assert repr(k) not in prog.source
    assert PAYLOAD not in prog.source and "Color" not in prog.source
    compile(prog.source, "<check>", "exec")  # every key spelled as valid source
    check_calls(prog, keyed_loss, (x,))
    check_calls(irad.value_and_grad(keyed_loss, passes=passes), keyed_loss, (x,))
    g = irad.grad(keyed_loss, passes=passes)
    for _ in range(3):
        np.testing.assert_allclose(g(x), numerical_vjp(keyed_loss, (x,), 1.0)[0], rtol=1e-6)


def test_hostile_keys_of_the_differentiated_argument():
    """Keys of the argument itself become name hints and (for dicts inside ops) constants."""
    def loss(p):
        return sum(np.sum(np.tanh(p[k]) * (i + 1)) for i, k in enumerate(p))

    p = {k: np.linspace(0.1 * (i + 1), 1.0, 2) for i, k in enumerate(HOSTILE_KEYS)}
    check_calls(irad.value_and_grad(loss), loss, (p,))


# ---- keyword names and strings --------------------------------------------------------------

def wsum(x, **kw):
    return np.sum(np.sin(x) * sum(v * (i + 1) for i, v in enumerate(kw.values())))


def _wsum_fwd(x, **kw):
    return wsum(x, **kw), (x, sum(v * (i + 1) for i, v in enumerate(kw.values())))


def _wsum_bwd(s, ybar):
    x, c = s
    return (ybar * c * np.cos(x),)


irad.defrule(wsum, _wsum_fwd, _wsum_bwd)


def test_keyword_names_no_source_could_spell():
    """``**{"a b": ..}`` must not be a SyntaxError, ``ﬁ=`` must not become ``fi=``, and the callee
    sees the keywords in their order (its result depends on it)."""
    kws = {"fi": 2.0, "a b": 3.0, "ﬁ": 5.0, "x_ｂar": 7.0, "x_bar": 11.0, "lambda": 13.0,
           "x); " + PAYLOAD + "; (": 17.0}

    def loss(x):
        return wsum(x, **kws)

    x = np.linspace(0.1, 1.0, 3)
    prog = irad.compile(loss, x)
    assert PAYLOAD not in prog.source and "ﬁ" not in prog.source and "ｂ" not in prog.source
    check_calls(prog, loss, (x,))
    check_calls(irad.value_and_grad(loss), loss, (x,))


def _weight(tag: str) -> int:
    return 1 + sum(map(ord, tag)) % 97  # any change to the string changes the result


def tagged(x, tag):
    return np.sum(np.sin(x)) * _weight(tag)


def _tagged_fwd(x, tag):
    return tagged(x, tag), (x, tag)


def _tagged_bwd(s, ybar):
    x, tag = s
    return ybar * _weight(tag) * np.cos(x), None


irad.defrule(tagged, _tagged_fwd, _tagged_bwd)


@pytest.mark.parametrize("tag", BREAKOUTS + ["ok", "x" * 200, "e\u0301", "\x00"])
def test_string_arguments_reach_the_callee_intact(tag):
    def loss(x):
        return tagged(x, tag) + np.sum(x * x)

    x = np.linspace(0.1, 1.0, 3)
    prog = irad.compile(loss, x)
    if tag in UNSPELLABLE:
        assert repr(tag) not in prog.source
    check_calls(prog, loss, (x,))


# ---- docstrings, function names -------------------------------------------------------------

@pytest.mark.parametrize("doc", BREAKOUTS)
def test_docstring_is_a_value_not_source(doc):
    def loss(x):
        return np.sum(np.sin(x) * x)

    x = np.linspace(0.1, 1.0, 3)
    prog = irad.compile(loss, x)
    low = lower(prog.graph, "loss_grad", docstring=doc)
    assert low.fn.__doc__ == doc
    assert doc not in low.source and low.source == prog.source
    for _ in range(2):
        value, grad = low.fn(x)
        np.testing.assert_allclose(value, loss(x))
        np.testing.assert_allclose(grad, numerical_vjp(loss, (x,), 1.0)[0], rtol=1e-6)


@pytest.mark.parametrize("name", ["np", "lambda", "print", "x):\n    " + PAYLOAD + "\ndef y(", "ｌｏｓｓ", "θ", "",
                                  "__builtins__", "_leaves", "1x"])
def test_hostile_function_names(name):
    def loss(x):
        return np.sum(np.sin(x) * x)

    loss.__name__ = loss.__qualname__ = name
    x = np.linspace(0.1, 1.0, 3)
    prog = irad.compile(loss, x)
    header = prog.source.splitlines()[0]
    assert header.isascii() and PAYLOAD not in prog.source
    check_calls(prog, loss, (x,))
    check_calls(irad.value_and_grad(loss), loss, (x,))
    low = lower(prog.graph, name)  # the name a caller passes is a hint as well
    assert low.name.isidentifier() and low.name.isascii()
    np.testing.assert_allclose(low.fn(x)[0], loss(x))


# ---- Unicode lookalikes: distinct names stay distinct variables -----------------------------

LOOKALIKES = ["x_bar", "x_\uff42ar", "fi", "\ufb01", "x", "\U0001d465", "\uff58", "\u03b8", "theta", "\u212b",
              "\u00c5", "\u210c", "H"]


def test_lookalike_dict_keys_stay_distinct():
    """``x_ｂar`` and ``x_bar`` are one identifier once Python NFKC-normalises source."""
    def loss(p):
        return sum(np.sum(np.sin(p[k]) * (i + 1)) for i, k in enumerate(LOOKALIKES))

    p = {k: np.linspace(0.1, 0.2 * (i + 1), 2) for i, k in enumerate(LOOKALIKES)}
    prog = irad.compile(loss, p)
    header = prog.source.splitlines()[0]
    assert header.isascii()
    assert len(set(header[header.index("(") + 1:header.index(")")].split(", "))) == len(LOOKALIKES)
    check_calls(prog, loss, (p,))
    check_calls(irad.value_and_grad(loss), loss, (p,))


def test_lookalike_argument_names_stay_distinct():
    """Python's compiler would merge ``x_ｂar`` into ``x_bar``; code objects need not."""
    def base(a, b, c, d):
        return np.sum(np.sin(a) + 2 * np.cos(b) * a + 3 * c * c + 5 * np.tanh(d) * b)

    loss = types.FunctionType(base.__code__.replace(co_varnames=("x_bar", "x_ｂar", "fi", "ﬁ")), base.__globals__)
    x = tuple(np.linspace(0.1, 0.3 * (i + 1), 3) for i in range(4))
    prog = irad.compile(loss, *x, argnums=(0, 1, 2, 3))
    header = prog.source.splitlines()[0]
    assert header.isascii() and len(set(header[header.index("(") + 1:header.index(")")].split(", "))) == 4
    rng = np.random.default_rng(1)
    for k in range(3):
        a = x if k == 0 else tuple(rng.standard_normal(3) for _ in range(4))
        value, grads = prog(*a)
        if k:
            np.testing.assert_allclose(value, loss(*a))
            for g, w in zip(grads, numerical_vjp(loss, a, 1.0)):
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)


def test_lookalike_keyword_arguments():
    def loss(**kw):
        return sum(np.sum(np.sin(v) * (i + 1)) for i, v in enumerate(kw.values()))

    kw = {k: np.linspace(0.1, 0.2 * (i + 1), 2) for i, k in enumerate(["x_bar", "x_ｂar", "fi", "ﬁ"])}
    g = irad.value_and_grad(lambda p: loss(**p))
    check_calls(g, lambda p: loss(**p), (kw,))


# ---- literals irad spells mean what they say --------------------------------------------------

@pytest.mark.parametrize("base", [-2.0, -0.5, -3])
def test_negative_literal_base_of_a_power(base):
    """``-2.0 ** n`` is ``-(2.0 ** n)``: a negative literal left of ``**`` needs parentheses."""
    def loss(x, n):
        return np.sum(np.sin(x) * np.clip(base ** n, -1e3, 1e3))

    x, n = np.linspace(0.1, 1.0, 3), np.array([1, 2, 3])
    vg = irad.value_and_grad(loss)
    prog = irad.compile(loss, x, n)
    rng = np.random.default_rng(2)
    for k in range(3):
        a = (x, n) if k == 0 else (rng.standard_normal(3), rng.integers(0, 5, 3))
        for value, grad in (vg(*a), prog(*a)):
            np.testing.assert_allclose(value, loss(*a))
            np.testing.assert_allclose(grad, numerical_vjp(lambda x: loss(x, a[1]), a[:1], 1.0)[0], rtol=1e-6)


# ---- ONNX: a model file is untrusted input --------------------------------------------------

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import irad.onnx as ionnx  # noqa: E402


def _model(nodes, inputs, outputs, name="g", inits=()):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, TensorProto.DOUBLE, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in outputs],
                          initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _concat(**attrs):
    return _model([helper.make_node("Concat", ["a", "b"], ["y"], **attrs)], [("a", [2, 3]), ("b", [2, 3])], ["y"])


def _refused(model, *words):
    """Every way to read ``model`` raises ``LoadError`` naming one of ``words`` (onnx's own shape
    inference refuses some models before irad reads a node; irad's checks refuse the rest)."""
    for read in (ionnx.to_source, ionnx.load_function, ionnx.load):
        with pytest.raises(LoadError) as e:
            read(model)
        assert any(w in str(e.value) for w in words), str(e.value)


@pytest.mark.parametrize("axis", ["0), " + PAYLOAD + ", (0", "0", 1.5, [0, 1], 2, -3])
def test_onnx_concat_axis_is_checked(axis):
    _refused(_concat(axis=axis), "Concat")


def test_onnx_missing_required_attribute():
    _refused(_concat(), "axis missing", "Required attribute axis")


def _pads():
    return onnx.numpy_helper.from_array(np.array([1, 1], dtype=np.int64), "pads")


@pytest.mark.parametrize("node, inputs, words", [
    (helper.make_node("Compress", ["a", "c"], ["y"], axis="0), " + PAYLOAD + ", (0"), [("a", [3]), ("c", [3])],
     ["axis must be an int", "unsupported type"]),  # (the float condition is refused by ONNX's inference)
    (helper.make_node("Gather", ["a", "c"], ["y"], axis=1.0), [("a", [3]), ("c", [2])],
     ["axis must be an int", "unsupported type"]),
    (helper.make_node("Einsum", ["a", "a"], ["y"], equation="i,i->'); " + PAYLOAD + "; ('"), [("a", [3])],
     ["equation", "Equation"]),
    (helper.make_node("Pad", ["a", "pads"], ["y"], mode="constant'); " + PAYLOAD + "; ('"), [("a", [3])],
     ["mode must be one of", "mode"]),
    (helper.make_node("Transpose", ["a"], ["y"], perm="(1, 0)); " + PAYLOAD + "; ((0"), [("a", [2, 3])],
     ["perm must be a list of ints", "perm"]),
    (helper.make_node("Cast", ["a"], ["y"], to="float64); " + PAYLOAD + "; (x"), [("a", [3])],
     ["to must be an int", "Attribute to"]),
    (helper.make_node("ReduceSum", ["a"], ["y"], keepdims=7), [("a", [3])], ["keepdims must be 0 or 1"]),
    (helper.make_node("Abs", ["a"], ["y"], note=PAYLOAD), [("a", [3])], ["does not read: note", "note"]),
    (helper.make_node("Abs", ["a"], ["y"], domain="evil"), [("a", [3])], ["domain"]),
], ids=["compress_axis_code", "gather_axis_float", "einsum_code", "pad_mode_code", "transpose_perm_code",
        "cast_to_code", "keepdims_range", "unknown_attribute", "foreign_domain"])
def test_onnx_attributes_are_checked(node, inputs, words):
    _refused(_model([node], inputs, ["y"], inits=[_pads()] if "pads" in node.input else ()), *words)


def test_onnx_unreadable_bytes():
    _refused(b"\x08\x07" + PAYLOAD.encode(), "<model>")


HOSTILE_NAME = "y\"'\n" + PAYLOAD + "\n#"


def test_onnx_hostile_names_load_safely():
    """Graph, node, input, output and initializer names are user text: hints at most."""
    w = onnx.numpy_helper.from_array(np.array([1.5, -2.0, 0.5]), "w'\n" + PAYLOAD)
    nodes = [helper.make_node("Mul", ["x_ｂar", w.name], ["t'\n" + PAYLOAD], name=HOSTILE_NAME),
             helper.make_node("Sub", ["t'\n" + PAYLOAD, "x_bar"], [HOSTILE_NAME], name="n\\"),
             helper.make_node("Tanh", [HOSTILE_NAME], ["ﬁ"], name="'''")]
    model = _model(nodes, [("x_ｂar", [3]), ("x_bar", [3])], ["ﬁ"], inits=[w],
                   name="g():\n    " + PAYLOAD + "\ndef h")
    imported = ionnx.to_source(model)
    src, inputs = imported.source, imported.inputs
    assert src.isascii() and PAYLOAD not in src
    assert len({n for n, _, _ in inputs}) == 2
    fn = ionnx.load_function(model)

    def ref(a, b):
        return np.tanh(a * np.array([1.5, -2.0, 0.5]) - b)

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(3), rng.standard_normal(3)
    np.testing.assert_allclose(fn(a, b), ref(a, b))
    g = ionnx.load(model)
    np.testing.assert_allclose(g(a, b), ref(a, b))

    def loss(a, b):
        return np.sum(fn(a, b) ** 2)

    vg = irad.value_and_grad(loss, argnums=(0, 1))
    for k in range(3):
        a, b = rng.standard_normal(3), rng.standard_normal(3)
        value, grads = vg(a, b)
        if k:
            np.testing.assert_allclose(value, np.sum(ref(a, b) ** 2))
            for got, want in zip(grads, numerical_vjp(lambda a, b: np.sum(ref(a, b) ** 2), (a, b), 1.0)):
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_onnx_valid_attributes_still_load():
    """The checks refuse only what is malformed: a valid negative axis loads and computes."""
    fn = ionnx.load_function(_concat(axis=-1))
    a, b = np.ones((2, 3)), np.zeros((2, 3))
    np.testing.assert_array_equal(fn(a, b), np.concatenate([a, b], axis=-1))
    eq = _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,kj->ik")], [("a", [2, 3]), ("b", [4, 3])],
                ["y"])
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(4, 3)
    np.testing.assert_allclose(ionnx.load_function(eq)(a, b), a @ b.T)
