"""ONNX import against the ONNX spec's own examples: the node test cases that ship with the
``onnx`` package (``onnx.backend.test.case.node``, the conformance suite runtimes are held to),
for every op of the standard set irad reads.  Each one-node case loads and reproduces the spec's
outputs, or is refused with ``LoadError`` for a reason listed in ``REFUSED`` (a new refusal, a
wrong value or any other exception fails).  Integer inputs (axes, pads, k, shapes: what real
models carry as initializers) are bound as initializers; irad reads them as constants.

Skipped where ``onnx`` is not installed (``pip install irad[onnx]``).
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX import needs the onnx package (pip install irad[onnx])")

from onnx import numpy_helper  # noqa: E402

import irad.onnx as ionnx  # noqa: E402

OPS = """MatMul Gemm Add Sub Mul Div Neg Abs Exp Log Sqrt Pow Tanh Sigmoid Relu LeakyRelu Elu Selu Gelu
Softplus Softmax LogSoftmax Erf Clip Min Max Sum Mean ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd
ReduceLogSumExp ReduceL2 ReduceL1 ReduceSumSquare Reshape Flatten Transpose Squeeze Unsqueeze Concat Split
Slice Gather GatherElements Expand Tile Pad Where Equal Less Greater Not Cast Shape ConstantOfShape Range
Identity Dropout BatchNormalization LayerNormalization Conv ConvTranspose MaxPool AveragePool
GlobalAveragePool GlobalMaxPool Einsum CumSum TopK ArgMax ArgMin HardSigmoid HardSwish Softsign Celu
Mish Sin Cos Tan Floor Ceil Reciprocal Sign IsNaN IsInf And Or Xor LessOrEqual GreaterOrEqual""".split()

# why a case may be refused: the words of its LoadError
REFUSED = {
    "training mode": "a random op (Dropout, BatchNormalization in training mode)",
    "training_mode = 1": "as above",
    "the Indices output": "MaxPool's argmax output",
    "not a real or integer tensor": "strings, bfloat16, sequences, optionals: not numpy numbers",
    "a cast to": "float8/int4 and other types numpy has no dtype for",
    "is not a tensor type": "as above",
    "type case mismatch": "a sequence or optional where a tensor was declared (ONNX's inference)",
    "is a value reported above": "a node reading a value refused for one of the reasons above",
}


@functools.lru_cache(maxsize=1)
def cases_by_op() -> dict[str, list]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case modules compute their examples, overflow included
        from onnx.backend.test.case.node import collect_testcases
        cases = collect_testcases(None)
    out: dict[str, list] = {}
    for c in cases:
        if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type in OPS:
            out.setdefault(c.model.graph.node[0].op_type, []).append(c)
    return out


def _array(v):
    return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)


def _bind_integer_inputs(model, inputs):
    """The model with its integer inputs made initializers of the example's values; the rest."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep, rest = [], []
    for vi, v in zip(model.graph.input, inputs):
        v = _array(v)
        if v.dtype.kind in "iu":
            m.graph.initializer.append(numpy_helper.from_array(v, vi.name))
        else:
            keep.append(vi)
            rest.append(v)
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m, rest


def _agrees(got, want) -> str | None:
    got, want = np.asarray(got), _array(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{got.shape}, the spec {want.dtype}{want.shape}"
    if want.dtype.kind in "fc":
        tol = 1e-10 if want.dtype == np.float64 else 1e-4
        ok = np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
    else:
        ok = np.array_equal(got, want)
    return None if ok else f"values differ by up to {np.max(np.abs(got.astype(float) - want.astype(float)))}"


@pytest.mark.parametrize("op", OPS)
def test_spec_examples(op):
    cases = cases_by_op().get(op, [])
    if not cases:
        pytest.skip(f"this onnx version ships no one-node example of {op}")
    passed, problems = 0, []
    for c in cases:
        for inputs, outputs in c.data_sets:
            model, xs = _bind_integer_inputs(c.model, inputs)
            try:
                fn = ionnx.load_function(model)
            except ionnx.LoadError as err:
                if not all(any(k in p for k in REFUSED) for p in err.problems):
                    problems.append(f"{c.name}: refused: {err.problems}")
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # log(0), 0/0 in the spec's edge cases
                got = fn(*xs)
            got = list(got) if isinstance(got, tuple) else [got]
            if len(got) != len(outputs):
                problems.append(f"{c.name}: {len(got)} outputs, the spec {len(outputs)}")
                continue
            why = [w for w in (_agrees(g, o) for g, o in zip(got, outputs)) if w]
            if why:
                problems.append(f"{c.name}: {why[0]}")
            else:
                passed += 1
    assert not problems, "\n".join(problems)
    assert passed, f"no example of {op} loads"
