"""ONNX models for the import tests (tests/test_onnx_import*.py), checked three ways: the model read
back with ``irad.onnx.load_function`` computes what onnxruntime computes (float32 to 1e-5, float64
to 1e-10), and irad's gradient of it, on the second and later calls of one compiled object, equals
central finite differences in float64.  Imported after ``pytest.importorskip("onnxruntime")``."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

import irad
import irad.onnx as ionnx
from irad.testing import numerical_vjp

TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-10}


@dataclass(frozen=True)
class Const:
    """A node input given as an initializer (axes, shapes, indices: what handlers need constant)."""
    value: Any


def node_model(op: str, args: Sequence[Any], attrs: dict[str, Any] | None = None, n_out: int = 1,
               opset: int = 21) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model of one node ``op``: each of ``args`` is an array (a graph input), a ``Const`` (an
    initializer) or None (an omitted optional input).  Returns the model and its feeds."""
    names, inputs, inits, feeds = [], [], [], {}
    for k, a in enumerate(args):
        if a is None:
            names.append("")
            continue
        name = f"in{k}"
        names.append(name)
        if isinstance(a, Const):
            inits.append(numpy_helper.from_array(np.asarray(a.value), name))
        else:
            a = np.asarray(a)
            elem = helper.np_dtype_to_tensor_dtype(a.dtype)
            inputs.append(helper.make_tensor_value_info(name, elem, a.shape))
            feeds[name] = a
    outs = [f"out{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, name=f"the_{op}", **(attrs or {}))
    graph = helper.make_graph([node], f"one_{op}", inputs,
                              [helper.make_value_info(o, onnx.TypeProto()) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)  # what onnxruntime reads
    return model, feeds


def check_node(op: str, args: Sequence[Any], attrs: dict[str, Any] | None = None, n_out: int = 1,
               opset: int = 21, grad: bool = True, want: list[np.ndarray] | None = None,
               forward: bool = True) -> Any:
    """``check_model`` of the one-node model of ``op``."""
    model, feeds = node_model(op, args, attrs, n_out, opset)
    return check_model(model, feeds, grad=grad, want=want, forward=forward)


class Erf(OpRun):  # NOTE: the evaluator takes the op type from the class name
    """Erf in the input's precision (onnx's reference evaluator computes it in float32)."""
    op_domain = ""

    def _run(self, x: np.ndarray) -> tuple[np.ndarray]:
        return (np.vectorize(math.erf, otypes=[x.dtype])(x),)


class Gelu(OpRun):
    """Gelu's formula in the input's precision (the function body onnx expands has float32
    constants: 3e-9 off in float64)."""
    op_domain = ""

    def _run(self, x: np.ndarray, approximate: str = "none") -> tuple[np.ndarray]:
        if approximate == "tanh":
            c = np.sqrt(2 / np.pi).astype(x.dtype)
            return ((0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x ** 3)))).astype(x.dtype),)
        return ((0.5 * x * (1 + Erf._run(self, x / np.sqrt(2))[0])).astype(x.dtype),)


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs; where it has no kernel for a type (float64 ``Erf``, ``Tan``, ``Conv``
    ...), those of onnx's reference evaluator, the spec's own implementation, with ``Erf`` and
    ``Gelu`` in the input's precision."""
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except ort.capi.onnxruntime_pybind11_state.NotImplemented:
        return list(ReferenceEvaluator(model, new_ops=[Erf, Gelu]).run(None, feeds))
    return sess.run(None, feeds)


def _as_list(y: Any) -> list[Any]:
    return list(y) if isinstance(y, tuple) else [y]


def _close(got: Any, want: np.ndarray, what: str) -> None:
    want = np.asarray(want)
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, onnxruntime {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, onnxruntime {want.dtype}"
    if want.dtype.kind not in "fc":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    tol = TOL[want.dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)


def model_inputs(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def check_model(model: onnx.ModelProto, feeds: dict[str, np.ndarray], grad: bool = True,
                params: str = "constants", seed: int = 0, want: list[np.ndarray] | None = None,
                shapes: dict[str, tuple[int, ...]] | None = None, forward: bool = True) -> Any:
    """The model read back agrees with onnxruntime; with ``grad``, irad's gradient of a random
    weighting of its float outputs, w.r.t. every float64 input (and the parameters, with
    ``params="inputs"``), equals finite differences on the 2nd and 3rd calls of one compiled
    gradient.  ``want``: the outputs, where no runtime computes them in float64 to 1e-10 (the
    reference evaluator's float64 ``Gelu`` rounds its constants to float32); ``forward=False``:
    where none computes them, the gradient only.  Returns the loaded function."""
    want = (run_ort(model, feeds) if want is None else want) if forward else None
    fn = ionnx.load_function(model, params=params, shapes=shapes)
    xs = [feeds[n] for n in model_inputs(model)]
    extra = [fn.params] if params == "inputs" else []
    got = _as_list(fn(*xs, *extra))
    if want is not None:
        assert len(got) == len(want), f"{len(got)} outputs, onnxruntime {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            _close(g, w, f"output {k} of {model.graph.name}")
    want = got if want is None else want  # only the shapes of the outputs' weights below
    if not grad:
        return fn
    args = xs + extra
    wrt = tuple(i for i, a in enumerate(args)
                if isinstance(a, dict) or (np.asarray(a).dtype == np.float64))
    assert wrt, "no float64 input to differentiate"
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal(np.shape(w)) if np.asarray(w).dtype.kind == "f" else None for w in want]

    def loss(*a: Any) -> Any:
        total = 0.0
        for y, c in zip(_as_list(fn(*a)), weights):
            if c is not None:
                total = total + np.sum(y * c)
        return total

    gf = irad.grad(loss, argnums=wrt)
    gf(*args)  # the first call: its result comes from trace time

    def moved(a: Any, k: int) -> Any:  # same signs and shapes, other values
        if isinstance(a, dict):
            return {n: moved(v, k) for n, v in a.items()}
        a = np.asarray(a)
        if a.dtype != np.float64:
            return a
        return a * (1 + 0.05 * np.random.default_rng(seed + k).standard_normal(a.shape))

    for k in (1, 2):
        at = [moved(a, k) for a in args]
        g = gf(*at)
        g = g if isinstance(g, tuple) else (g,)
        fd = numerical_vjp(loss, tuple(at), 1.0)
        for i, gi in zip(wrt, g):
            gl, fl = irad.pytree.flatten(gi)[0], irad.pytree.flatten(fd[i])[0]
            assert len(gl) == len(fl)
            for a, b in zip(gl, fl):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6,
                                           err_msg=f"gradient w.r.t. argument {i} of {model.graph.name}")
    return fn
