"""Import of the ai.onnx.ml ops (irad/onnx/load_ml.py): one-node models of each op and its
attributes, and whole skl2onnx models built here, read back with ``irad.onnx.load_function``.

Each must compute what onnxruntime, the reference implementation of the domain, computes (its
kernels work in float32: score outputs are float32 for any input).  Gradients: where onnxruntime
runs an op in float64, ``check_model``'s own check; where it has float32 only (or float32 outputs),
the float32 model is fed float64, which the loaded function then computes in float64, and its
gradient is checked against finite differences.  Variants where onnxruntime and the spec disagree
are refused.

Skipped where ``onnx``/``onnxruntime`` are not installed (``pip install irad[onnx]``); the skl2onnx
models where skl2onnx or scikit-learn are not.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX import needs the onnx package (pip install irad[onnx])")
ort = pytest.importorskip("onnxruntime", reason="checking imported models needs onnxruntime (pip install irad[onnx])")

from onnx import helper  # noqa: E402

import irad.onnx as ionnx  # noqa: E402
from onnx_import_util import Const, check_model, model_inputs, node_model, run_ort  # noqa: E402

RNG = np.random.default_rng(7)
X32 = RNG.standard_normal((4, 3)).astype(np.float32)


def ml_model(op: str, args: list, attrs: dict | None = None, n_out: int = 1, ml_opset: int = 3):
    """``node_model`` with its node in the ai.onnx.ml domain."""
    model, feeds = node_model(op, args, attrs, n_out, opset=21)
    model.graph.node[0].domain = "ai.onnx.ml"
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", ml_opset))
    return model, feeds


def _list(y):
    return list(y) if isinstance(y, tuple) else [y]


def check_ml(model, feeds, grad: bool = True):
    """Forward as fed against onnxruntime; with ``grad``, the gradient of the model fed float64
    (its float32 inputs cast) against finite differences."""
    fn = check_model(model, feeds, grad=False)
    if grad:
        f64 = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}
        want = _list(fn(*[f64[k] for k in model_inputs(model)]))
        for w, o in zip(want, run_ort(model, feeds)):  # float64 computes what float32 does, nearly
            np.testing.assert_allclose(w, o, rtol=1e-5, atol=1e-5)
        check_model(model, f64, want=want)
    return fn


def refused(model, *words: str) -> str:
    with pytest.raises(ionnx.LoadError) as err:
        ionnx.load_function(model)
    for w in words:
        assert w in str(err.value), (w, str(err.value))
    return str(err.value)


# ---- ArrayFeatureExtractor -----------------------------------------------------------------

@pytest.mark.parametrize("x,y", [
    (X32, Const(np.array([2, 0, 2], np.int64))),
    (RNG.standard_normal((2, 3, 5)), np.array([[4, 1]], np.int64)),  # float64, indices an input
    (RNG.standard_normal(5), Const(np.array([3, 1], np.int64))),    # a vector: one row out
    (np.arange(12, dtype=np.int64).reshape(3, 4), Const(np.array([[1], [3]], np.int64)))])
def test_array_feature_extractor(x, y):
    model, feeds = ml_model("ArrayFeatureExtractor", [x, y])
    check_model(model, feeds, grad=x.dtype == np.float64)


def test_array_feature_extractor_out_of_range():
    refused(ml_model("ArrayFeatureExtractor", [X32, Const(np.array([3], np.int64))])[0], "out of range")


# ---- Normalizer ----------------------------------------------------------------------------

ROWS = np.array([[1.0, -2.0, 0.5], [-1.0, -3.0, -0.25], [0.2, 0.7, 1.5]], np.float32)  # one of max < 0


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2", None])
@pytest.mark.parametrize("x", [ROWS, ROWS[2]], ids=["matrix", "vector"])
def test_normalizer(norm, x):
    model, feeds = ml_model("Normalizer", [x], {} if norm is None else {"norm": norm})
    check_ml(model, feeds)


@pytest.mark.parametrize("dt", [np.float64, np.int64, np.int32])
def test_normalizer_types(dt):
    """Computed in float32 for any input, a row of zeros left as it is."""
    x = np.array([[3, -4, 1], [0, 0, 0]], dt)
    for norm in ("MAX", "L1", "L2"):
        fn = check_model(*ml_model("Normalizer", [x], {"norm": norm}), grad=False)
        assert fn(x).dtype == np.float32


# ---- Scaler --------------------------------------------------------------------------------

@pytest.mark.parametrize("x", [X32, X32.astype(np.float64), (X32 * 10).astype(np.int64), X32[0]],
                         ids=["float32", "float64", "int64", "vector"])
@pytest.mark.parametrize("k", [1, 3])
def test_scaler(x, k):
    attrs = {"offset": [0.5, -1.0, 2.0][:k], "scale": [2.0, 0.25, -3.0][:k]}
    model, feeds = ml_model("Scaler", [x], attrs)
    check_ml(model, feeds, grad=x.dtype == np.float32)


def test_scaler_refused():
    refused(ml_model("Scaler", [X32], {"offset": [0.5, 1.0], "scale": [2.0, 1.0]})[0], "2 scales")
    refused(ml_model("Scaler", [X32], {"offset": [0.5], "scale": [2.0, 1.0, 3.0]})[0], "one length")


# ---- LinearRegressor -----------------------------------------------------------------------

COEF3 = [0.3, -0.2, 0.1, 0.05, 0.4, -0.3, -0.1, 0.2, 0.25]  # 3 targets of 3 features, small


@pytest.mark.parametrize("attrs", [
    {"coefficients": COEF3[:3], "intercepts": [0.5]},
    {"coefficients": COEF3[:3], "targets": 1},
    {"coefficients": COEF3, "intercepts": [0.1, -0.2, 0.3], "targets": 3},
    {"coefficients": COEF3, "targets": 3, "post_transform": "NONE"},
    {"coefficients": COEF3, "intercepts": [0.1, -0.2, 0.3], "targets": 3, "post_transform": "LOGISTIC"},
    {"coefficients": COEF3, "intercepts": [0.1, -0.2, 0.3], "targets": 3, "post_transform": "SOFTMAX"},
    {"coefficients": COEF3, "intercepts": [0.1, -0.2, 0.3], "targets": 3, "post_transform": "SOFTMAX_ZERO"},
    {"coefficients": [0.05] * 9, "intercepts": [0.5, 0.4, 0.6], "targets": 3, "post_transform": "PROBIT"},
    {"coefficients": [0.05] * 3, "intercepts": [0.55], "post_transform": "PROBIT"}], ids=str)
def test_linear_regressor(attrs):
    model, feeds = ml_model("LinearRegressor", [X32], attrs)
    check_ml(model, feeds)


def test_linear_regressor_vector():
    model, feeds = ml_model("LinearRegressor", [X32[1]], {"coefficients": COEF3, "targets": 3})
    fn = check_ml(model, feeds)
    assert fn(X32[1]).shape == (1, 3)


def test_linear_regressor_refused():
    refused(ml_model("LinearRegressor", [X32], {"coefficients": COEF3[:3], "post_transform": "LOGISTIC"})[0],
            "LOGISTIC of one target")
    refused(ml_model("LinearRegressor", [X32], {"coefficients": COEF3[:6], "targets": 3})[0], "6 coefficients")
    refused(ml_model("LinearRegressor", [X32], {"coefficients": COEF3, "intercepts": [1.0], "targets": 3})[0],
            "1 intercepts")


# ---- LinearClassifier ----------------------------------------------------------------------

ZERO_ROW = COEF3[:3] + [0.0, 0.0, 0.0] + COEF3[6:]  # class 1 scores exactly 0 (SOFTMAX_ZERO's case)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("labels", [[0, 1, 2], [7, -3, 5]], ids=["range", "labels"])
def test_linear_classifier(post, labels):
    attrs = {"coefficients": ZERO_ROW if post == "SOFTMAX_ZERO" else COEF3, "classlabels_ints": labels,
             "intercepts": [0.1, 0.0 if post == "SOFTMAX_ZERO" else -0.2, 0.3], "post_transform": post,
             "multi_class": 1}
    model, feeds = ml_model("LinearClassifier", [X32], attrs, n_out=2)
    check_ml(model, feeds)


def test_linear_classifier_probit():
    """PROBIT through onnxruntime's approximate inverse erf, of scores in (0, 1)."""
    attrs = {"coefficients": [0.05] * 9, "intercepts": [0.5, 0.3, 0.7], "classlabels_ints": [0, 1, 2],
             "post_transform": "PROBIT"}
    check_ml(*ml_model("LinearClassifier", [X32], attrs, n_out=2))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_linear_classifier_two_rows(post):
    """skl2onnx's binary form: a row of coefficients per class."""
    attrs = {"coefficients": [-0.3, 0.2, -0.1, 0.3, -0.2, 0.1], "intercepts": [-0.4, 0.4],
             "classlabels_ints": [0, 1], "post_transform": post}
    check_ml(*ml_model("LinearClassifier", [X32], attrs, n_out=2))


@pytest.mark.parametrize("attrs", [
    {"classlabels_ints": [4, 9]},                   # onnxruntime's binary form: [1 - s, s]
    {},                                             # no labels: (N, 1) scores, labels 1 / 0
    {"post_transform": "PROBIT", "coefficients": [0.05] * 3, "intercepts": [0.5]}], ids=str)
def test_linear_classifier_one_row(attrs):
    attrs = {"coefficients": COEF3[:3], "intercepts": [0.05], **attrs}
    model, feeds = ml_model("LinearClassifier", [X32], attrs, n_out=2)
    fn = check_ml(model, feeds)
    assert fn(X32)[1].shape == (4, 2 if "classlabels_ints" in attrs else 1)


@pytest.mark.parametrize("x", [X32.astype(np.float64), (X32 * 4).astype(np.int64), (X32 * 4).astype(np.int32),
                               X32[2]], ids=["float64", "int64", "int32", "vector"])
def test_linear_classifier_inputs(x):
    """Any input type gives float32 scores (onnxruntime casts the input to float32)."""
    attrs = {"coefficients": COEF3, "intercepts": [0.1, -0.2, 0.3], "classlabels_ints": [3, 1, 2],
             "post_transform": "SOFTMAX"}
    fn = check_model(*ml_model("LinearClassifier", [x], attrs, n_out=2), grad=False)
    label, scores = fn(x)
    assert label.dtype == np.int64 and scores.dtype == np.float32


def test_linear_classifier_refused():
    base = {"coefficients": COEF3, "intercepts": [0.1, -0.2, 0.3]}
    strings = helper.make_attribute("classlabels_strings", [b"a", b"b", b"c"])
    model, _ = ml_model("LinearClassifier", [X32], base, n_out=2)
    model.graph.node[0].attribute.append(strings)
    refused(model, "string class labels")
    refused(ml_model("LinearClassifier", [X32], base, n_out=2)[0], "0 class labels for 3 classes")
    refused(ml_model("LinearClassifier", [X32], {**base, "classlabels_ints": [0, 1, 2], "coefficients": COEF3[:6]},
                     n_out=2)[0], "6 coefficients")
    one = {"coefficients": COEF3[:3], "intercepts": [0.1], "classlabels_ints": [0, 1]}
    for post in ("LOGISTIC", "SOFTMAX", "PROBIT"):
        refused(ml_model("LinearClassifier", [X32], {**one, "post_transform": post}, n_out=2)[0],
                f"{post} of one score with two classes")
    refused(ml_model("LinearClassifier", [X32], {**one, "classlabels_ints": [1, 2, 3]}, n_out=2)[0],
            "3 class labels for one row")


def test_coefficients_not_in_source():
    """Coefficients enter the namespace as an array, never the source."""
    attrs = {"coefficients": [0.123456789, 2.5, -7.75], "intercepts": [0.987654321], "classlabels_ints": [0, 1]}
    src = ionnx.to_source(ml_model("LinearClassifier", [X32], attrs, n_out=2)[0]).source
    assert "0.1234" not in src and "7.75" not in src and "0.9876" not in src, src


def test_attribute_types_checked():
    model, _ = ml_model("LinearRegressor", [X32], {"coefficients": [1, 2, 3]})  # INTS, not FLOATS
    with pytest.raises(ionnx.LoadError):
        ionnx.load_function(model)


def test_types_declared_for_later_nodes():
    """ONNX infers no type for Scaler's output, and a wrong (N, 0) shape for LinearClassifier's
    scores: the handlers declare both, which the nodes after them read (LinearRegressor the type,
    Softmax the rank)."""
    ml = {"domain": "ai.onnx.ml"}
    nodes = [helper.make_node("Scaler", ["x"], ["s"], offset=[0.5], scale=[2.0], **ml),
             helper.make_node("LinearRegressor", ["s"], ["y"], coefficients=COEF3, targets=3, **ml),
             helper.make_node("LinearClassifier", ["x"], ["label", "scores"], coefficients=COEF3,
                              intercepts=[0.1, -0.2, 0.3], classlabels_ints=[0, 1, 2], **ml),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", 1, X32.shape)],
                              [helper.make_value_info(o, onnx.TypeProto()) for o in ("y", "label", "p")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 10
    check_ml(model, {"x": X32})


# ---- Binarizer, Imputer, ZipMap ------------------------------------------------------------

@pytest.mark.parametrize("x", [X32, X32.astype(np.float64)], ids=["float32", "float64"])
def test_binarizer(x):
    check_model(*ml_model("Binarizer", [x], {"threshold": 0.25}), grad=x.dtype == np.float64)


def test_binarizer_refused():
    refused(ml_model("Binarizer", [X32])[0], "default 0 and onnxruntime's 1 differ")


NAN_X = np.array([[1.0, np.nan, 3.0], [np.nan, 0.0, -1.0], [2.0, 0.5, np.nan]], np.float32)


@pytest.mark.parametrize("replaced,values", [(math.nan, [9.0, -8.0, 7.0]), (math.nan, [4.5]),
                                             (0.0, [9.0, -8.0, 7.0]), (0.5, [-2.0])], ids=str)
def test_imputer(replaced, values):
    x = NAN_X if math.isnan(replaced) else np.where(np.isnan(NAN_X), np.float32(replaced), NAN_X)
    model, feeds = ml_model("Imputer", [x], {"imputed_value_floats": values, "replaced_value_float": replaced})
    check_ml(model, feeds, grad=math.isnan(replaced))  # a finite replaced value is a jump


def test_imputer_int64():
    x = np.array([[1, -1, 3], [-1, 5, -1]], np.int64)
    check_model(*ml_model("Imputer", [x], {"imputed_value_int64s": [10, 20, 30], "replaced_value_int64": -1}),
                grad=False)


def test_imputer_refused():
    refused(ml_model("Imputer", [NAN_X], {"imputed_value_floats": [1.0, 2.0], "replaced_value_float": 0.0})[0],
            "2 imputed values")
    refused(ml_model("Imputer", [NAN_X], {"imputed_value_floats": [1.0]})[0], "replaced_value_float missing")


def test_zipmap_refused():
    node = helper.make_node("ZipMap", ["p"], ["z"], domain="ai.onnx.ml", classlabels_int64s=[0, 1])
    seq = helper.make_sequence_type_proto(helper.make_map_type_proto(onnx.TensorProto.INT64,
                                                                     helper.make_tensor_type_proto(1, [])))
    graph = helper.make_graph([node], "zip", [helper.make_tensor_value_info("p", 1, [3, 2])],
                              [helper.make_value_info("z", seq)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 10
    refused(model, "ZipMap", "sequence of maps")


def test_unknown_ml_op_refused():
    model, _ = ml_model("SVMRegressor", [X32], {"coefficients": [1.0, 2.0, 3.0], "support_vectors": [1.0] * 3,
                                                "n_supports": 1, "rho": [0.0]})
    refused(model, "SVMRegressor", "no numpy mapping")


# ---- whole skl2onnx models -----------------------------------------------------------------

@pytest.fixture(scope="module")
def skl():
    """``convert(est, n, clf)``: skl2onnx's model of ``est`` for a float32 batch of ``n`` rows, the
    classifier ``clf`` (if any) without ZipMap."""
    pytest.importorskip("sklearn", reason="the skl2onnx models are built with scikit-learn")
    pytest.importorskip("skl2onnx", reason="the skl2onnx models are converted here (pip install skl2onnx)")
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    def convert(est, n, clf=None):
        options = None if clf is None else {id(clf): {"zipmap": False}}
        return convert_sklearn(est, initial_types=[("X", FloatTensorType([n, 4]))], options=options)
    return convert


def _data(k: int | None):
    rng = np.random.default_rng(k or 0)
    x = (rng.standard_normal((60, 4)) * [1, 3, 0.5, 2] + [0, 5, -1, 2]).astype(np.float32)
    y = rng.integers(0, k, 60) if k else x @ [1.0, -0.5, 2.0, 0.3] + 0.1 * rng.standard_normal(60)
    return x, y


@pytest.mark.parametrize("k,scaled", [(2, False), (3, False), (3, True), (2, True)])
def test_skl_logistic_regression(skl, k, scaled):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    x, y = _data(k)
    est = make_pipeline(StandardScaler(), LogisticRegression()) if scaled else LogisticRegression()
    est.fit(x, y)
    clf = est.steps[-1][1] if scaled else est
    model = skl(est, 5, clf)
    assert {n.domain for n in model.graph.node} >= {"ai.onnx.ml"}
    feeds = {"X": x[:5]}
    fn = check_ml(model, feeds)
    label, proba = fn(x[:5])
    np.testing.assert_array_equal(label, est.predict(x[:5]))
    np.testing.assert_allclose(proba, est.predict_proba(x[:5]), rtol=1e-5, atol=1e-6)


def test_skl_scaler_linear_regression(skl):
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    x, y = _data(None)
    est = make_pipeline(StandardScaler(), LinearRegression()).fit(x, y)
    model = skl(est, 6)
    assert {"Scaler", "LinearRegressor"} <= {n.op_type for n in model.graph.node}
    fn = check_ml(model, {"X": x[:6]})
    np.testing.assert_allclose(fn(x[:6])[:, 0], est.predict(x[:6]), rtol=1e-5, atol=1e-5)
