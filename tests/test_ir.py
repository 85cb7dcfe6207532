"""Unit tests of the IR: types, atoms, ops, graphs, printing, evaluation and pytrees."""
from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import NamedTuple

import numpy as np
import pytest

from irad.ir import (STATE, ArrayT, Const, Graph, Loc, Op, OpaqueT, ScalarT, Var, const, evaluate, format_graph,
                     format_op, iter_vars, map_atoms, typeof, verify)
from irad.pytree import LEAF, NONE, TreeDef, flatten, tree_map, unflatten


# ---- types ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (np.zeros((3, 4)), "f64[3,4]"),
    (np.zeros(3, np.float32), "f32[3]"),
    (np.zeros((2, 0), np.int64), "i64[2,0]"),
    (np.array(1.5), "f64[]"),
    (np.float64(2.0), "f64[]"),
    (np.zeros(2, bool), "bool[2]"),
    (np.zeros(2, np.complex128), "c128[2]"),
    (1.5, "float"), (3, "int"), (True, "bool"), (1j, "complex"),
    ("s", "str"), (None, "NoneType"),
])
def test_types_print(value, text) -> None:
    assert str(typeof(value)) == text


def test_types_are_values() -> None:
    assert typeof(np.zeros((3, 4))) == ArrayT("float64", (3, 4))
    assert typeof(np.zeros((3, 4))) != typeof(np.zeros((4, 3)))
    assert typeof(np.float64(1.0)) == ArrayT("float64", (), True) != typeof(np.array(1.0))
    assert typeof(1.0) == ScalarT("float") and hash(typeof(1.0)) == hash(ScalarT("float"))
    assert str(STATE) == "state" and OpaqueT("state") == STATE
    assert typeof(1.0).is_float and typeof(np.ones(2)).is_float and typeof(1j).is_float
    assert not typeof(3).is_float and not typeof(np.ones(2, int)).is_float and not STATE.is_float


# ---- constants ------------------------------------------------------------------------------

def test_const_equality_and_hash() -> None:
    assert Const(1.5, ScalarT("float")) == const(1.5)
    assert hash(const(1.5)) == hash(const(1.5))
    assert const(1) != const(1.0)  # the type is part of the value
    assert const(True) != const(1)
    assert const("a") == const("a") and const((1, 2)) == const((1, 2))
    assert const(slice(1, 3)) == const(slice(1, 3))
    a = np.ones(3)
    assert const(a) == const(a) and hash(const(a)) == hash(const(a))
    assert const(a) != const(np.ones(3))  # arrays: by identity, never by (ambiguous) value
    assert const(np.float64(1.0)) != const(np.float64(1.0))
    lst = [1, 2]
    assert const(lst) == const(lst) and const(lst) != const([1, 2])  # mutable: by identity
    idx = (slice(None), 0, Ellipsis)
    assert const(idx) == const((slice(None), 0, Ellipsis)) and hash(const(idx)) == hash(const(idx))
    assert const((1, 2)) != const((1.0, 2.0))
    assert const((np.ones(2),)) != const((np.ones(2),))
    assert len({const(1.5), const(1.5), const(2.5)}) == 2
    assert const(1.5) != 1.5


def test_const_prints() -> None:
    assert str(const(2.0)) == "2.0"
    assert str(const(slice(None, 2))) == ":2"
    assert str(const(slice(1, None, -1))) == "1::-1"
    assert str(const(Ellipsis)) == "..."
    assert str(const(None)) == "None"
    assert str(const(np.float64(0.5))) == "float64(0.5)"
    assert str(const(np.dtype("float32"))) == "dtype(float32)"
    assert str(const(np.ones(2))) == "<f64[2]>"
    assert str(const(np.sin)) == "sin"
    assert str(const(np.ndarray)) == "numpy.ndarray"
    assert str(const(int)) == "int"


# ---- ops --------------------------------------------------------------------------------------

F3 = ArrayT("float64", (3,))


def test_op_inputs_with_nested_args() -> None:
    a, b, c, d = (Var(i, F3) for i in range(4))
    op = Op("numpy.concatenate", ([a, (b, const(1.0))], {"k": c}), (("axis", const(0)), ("w", [d, a])),
            (Var(9, ArrayT("float64", (9,))),), np.concatenate)
    assert op.inputs == [a, b, c, d, a]  # order of appearance, duplicates kept
    assert op.kw("axis") == 0 and op.kw("w") == [d, a] and op.kw("missing", 7) == 7
    assert op.out == Var(9, ArrayT("float64", (9,)))


def test_var_hint_is_not_identity() -> None:
    assert Var(1, F3, "x") == Var(1, F3, "y") and hash(Var(1, F3, "x")) == hash(Var(1, F3))
    assert Var(1, F3) != Var(1, ScalarT("float"))


def test_map_atoms() -> None:
    a = Var(0, F3)
    r = map_atoms(([a, const(1)], {"k": a}, 5), lambda x: "V" if isinstance(x, Var) else "C")
    assert r == (["V", "C"], {"k": "V"}, 5)


def test_format_op_and_graph() -> None:
    x, y = Var(0, F3), Var(1, F3)
    w = np.ones(3)
    op = Op("numpy.add", (x, Const(w, typeof(w), "global W")), (("dtype", const("float64")),), (y,), np.add,
            Loc("/a/b/model.py", 7, "loss"))
    assert format_op(op) == "%1: f64[3] = numpy.add[dtype='float64'](%0, $W)"
    guard = Op("irad.primitives.guard", (x,), (("expected", const(True)),), (), lambda v, expected: None)
    assert format_op(guard) == "irad.primitives.guard[expected=True](%0)"
    g = Graph("f", (x,), (op,), (y, const(2.0)))
    assert format_graph(g) == "\n".join([
        "graph f(%0: f64[3]) -> (f64[3], float):",
        "  $W: f64[3] = global W",
        "  %1: f64[3] = numpy.add[dtype='float64'](%0, $W) # model.py:7",
        "  return %1, 2.0",
    ])
    assert str(op.loc) == "model.py:7" and op.loc.long == "loss (/a/b/model.py:7)"


def test_graph_replace_and_provenance() -> None:
    x, y = Var(0, F3), Var(1, F3)
    op = Op("numpy.sin", (x,), (), (y,), np.sin)
    g = Graph("f", (x,), (op,), (y,))
    h = g.replace(ops=(), outputs=(x,), provenance=("after dce: removed 1 op",))
    assert g.ops == (op,) and g.outputs == (y,) and g.provenance == ()  # the original is untouched
    assert h.ops == () and h.outputs == (x,) and h.name == "f" and h.inputs == g.inputs
    assert str(h).splitlines()[-1] == "# after dce: removed 1 op"
    verify(h)
    with pytest.raises(Exception):
        g.ops = ()  # frozen


def test_evaluate_and_iter_vars() -> None:
    x, y, z = Var(0, F3), Var(1, F3), Var(2, ArrayT("float64", ()))
    g = Graph("f", (x,), (Op("numpy.sin", (x,), (), (y,), np.sin), Op("numpy.sum", (y,), (), (z,), np.sum)), (z, y))
    out = evaluate(g, [np.zeros(3)])
    assert out[0] == 0.0 and out[1].shape == (3,)
    assert list(iter_vars(g)) == [x, y, z]
    assert g.guards == []
    assert g(np.zeros(3))[0] == 0.0  # no trees: a tuple of outputs


def test_unpacking_op() -> None:
    x = Var(0, ArrayT("float64", (2, 2)))
    q, r = Var(1, ArrayT("float64", (2, 2))), Var(2, ArrayT("float64", (2, 2)))
    g = Graph("qr", (x,), (Op("numpy.linalg.qr", (x,), (), (q, r), np.linalg.qr, unpack=True),), (q, r))
    verify(g)
    assert str(g).splitlines()[1] == "  %1: f64[2,2], %2: f64[2,2] = numpy.linalg.qr(%0)"
    qv, rv = g(np.eye(2))
    np.testing.assert_allclose(qv @ rv, np.eye(2))


# ---- pytrees ----------------------------------------------------------------------------------

Point = namedtuple("Point", "x y")


class Pair(NamedTuple):
    a: object
    b: object


@pytest.mark.parametrize("tree", [
    1.0, None, (), [], {},
    (1.0, [2.0, 3.0], {"b": 4.0, "a": (5.0, None)}),
    {"z": 1, "a": 2, "m": [3, {"q": 4}]},
    Point(1.0, [2.0]), Pair(Point(1, 2), {"k": (3,)}),
    OrderedDict([("b", 1.0), ("a", 2.0)]),
    [np.ones(2), (np.zeros(3), "s")],
])
def test_pytree_round_trip(tree) -> None:
    leaves, td = flatten(tree)
    assert td.num_leaves == len(leaves)
    back = unflatten(td, leaves)
    assert type(back) is type(tree)
    assert repr(back) == repr(tree)
    assert flatten(back)[1] == td and hash(flatten(back)[1]) == hash(td)


def test_pytree_dict_order_is_insertion_order() -> None:
    leaves, td = flatten({"b": 1, "a": 2})
    assert leaves == [1, 2] and td.keys == ("b", "a")
    assert flatten({"a": 2, "b": 1})[1] != td  # a different order is a different structure
    assert list(unflatten(td, [10, 20])) == ["b", "a"]


def test_pytree_namedtuple_kind_and_paths() -> None:
    leaves, td = flatten({"params": Pair(np.ones(2), [1.0, 2.0]), "x": 3.0})
    assert td.children[0].kind is Pair
    assert list(td.paths("p")) == ["p.params.a", "p.params.b[0]", "p.params.b[1]", "p.x"]
    assert isinstance(unflatten(td, leaves)["params"], Pair)


def test_pytree_leaves_and_none() -> None:
    assert flatten(None) == ([], NONE)
    assert flatten(2.0) == ([2.0], LEAF)
    leaves, td = flatten([1, (2, 3)], is_leaf=lambda v: type(v) is tuple)
    assert leaves == [1, (2, 3)]
    assert tree_map(lambda v: v * 10, {"a": (1, [2])}) == {"a": (10, [20])}
    assert TreeDef("leaf") == LEAF
