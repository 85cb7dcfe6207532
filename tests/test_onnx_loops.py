"""Loop ops export as ONNX ``Loop`` nodes: the gradient programs of tests/test_loops.py's loops,
run in onnxruntime on new values, equal the unrolled irad program and the function."""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad import loops
from test_loops import CASES, _close, _unrolled_grad, branchy

onnx = pytest.importorskip("onnx", reason="ONNX export needs the onnx package (pip install irad[onnx])")
pytest.importorskip("onnxruntime", reason="running exported models needs onnxruntime (pip install irad[onnx])")

from irad.onnx import ExportError, export  # noqa: E402  (imports onnx: after importorskip)
from onnx_run import run_model  # noqa: E402  (imports onnxruntime: after importorskip)


@pytest.fixture(autouse=True)
def short_loops_reroll():
    with loops.rerolling(True, min_ops=12):
        yield


def _loop_nodes(graph) -> int:
    """``Loop`` nodes in an ONNX graph, counting those inside loop bodies."""
    k = 0
    for node in graph.node:
        if node.op_type == "Loop":
            k += 1
            k += sum(_loop_nodes(a.g) for a in node.attribute if a.name == "body")
    return k


def _leaves(args):
    return [x for a in args for x in (a if isinstance(a, list) else [a])]


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_exports_as_onnx_loops(name):
    f, make = CASES[name]
    args = make()
    nums = tuple(range(len(args)))
    model = export(f, *args, argnums=nums)
    assert _loop_nodes(model.graph) >= 2  # the forward loop and the reverse loop
    prog = irad.compile(f, *args, argnums=nums)
    for _ in range(2):
        new = make()
        _, out = run_model(model, prog, new)
        _close(out[0], f(*new))
        want = _unrolled_grad(f, new, nums)
        got, at = [], 1
        for a, w in zip(new, want):
            k = len(a) if isinstance(a, list) else 1
            got.append(out[at] if k == 1 else list(out[at:at + k]))
            at += k
        assert at == len(out)
        for g, w in zip(got, want):
            _close(tuple(np.ravel(np.asarray(g, float))), tuple(np.ravel(np.asarray(w, float))), 1e-9)


@pytest.mark.parametrize("name", ["rnn", "nested", "reversed_rows", "stacked_states", "rosen_list"])
def test_forward_exports_as_onnx_loops(name):
    f, make = CASES[name]
    args = make()
    model = export(f, *args, gradient=False)
    assert _loop_nodes(model.graph) >= 1
    prog = irad.compile(f, *args)
    new = make()
    _, out = run_model(model, prog, new)
    _close(out[0], f(*new))


def test_a_nested_loop_is_a_loop_inside_a_loop_body():
    f, make = CASES["nested"]
    model = export(f, *make(), gradient=False)
    inner = [a.g for n in model.graph.node if n.op_type == "Loop" for a in n.attribute if a.name == "body"]
    assert any(n.op_type == "Loop" for g in inner for n in g.node)


def test_a_loop_with_a_guard_in_its_step_is_written_out_and_refused_as_before():
    W, h = np.eye(3) * 0.9, np.array([0.5, 0.5, 0.5])
    prog = irad.compile(branchy, W, h, argnums=(0, 1))
    assert any(op.prim == loops.LOOP_PRIM for op in prog.graph.ops)
    with pytest.raises(ExportError, match="value-dependent control flow"):
        export(branchy, W, h, argnums=(0, 1))


@pytest.mark.parametrize("name", ["rnn", "reversed_rows", "rosen_list"])
def test_checkpointed_loops_export_as_loops_inside_loops(name):
    f, make = CASES[name]
    args = make()
    nums = tuple(range(len(args)))
    with loops.checkpointing(0):
        model = export(f, *args, argnums=nums)
        prog = irad.compile(f, *args, argnums=nums)
    # rnn's 6 iterations are 3 segments of 2 (a loop in each segment loop's body); the others' 7
    # are prime: one loop each way, which keeps only the carries
    assert _loop_nodes(model.graph) >= (4 if name == "rnn" else 2)
    new = make()
    _, out = run_model(model, prog, new)
    _close(out[0], f(*new))
    want = [x for w in _unrolled_grad(f, new, nums) for x in (w if isinstance(w, list) else [w])]
    for g, w in zip(out[1:], want):
        _close(np.asarray(g, float), np.asarray(w, float), 1e-9)


def test_importing_an_exported_loop_says_what_to_do():
    """irad's ONNX import does not read ``Loop`` yet: the error names the node and the way out."""
    from irad.onnx import LoadError, load

    f, make = CASES["rnn"]
    args = make()
    model = export(f, *args, gradient=False)
    with pytest.raises(LoadError, match=r"Loop.*not imported yet.*rerolling\(False\)"):
        load(model)
    with loops.rerolling(False):
        unrolled = export(f, *args, gradient=False)
    g = load(unrolled)
    _close(irad.ir.evaluate(g, list(args))[0], f(*args))
