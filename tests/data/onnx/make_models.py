"""Writes the ONNX fixtures of tests/test_onnx_import_models.py: small models as other tools write
them (torch's legacy and dynamo exporters, skl2onnx), committed because CI has neither torch nor
skl2onnx.  Tiny layers and fixed seeds keep each file a few KB and the gradient checks (finite
differences, element by element) fast.  Run from anywhere: ``python tests/data/onnx/make_models.py``
(needs torch, onnxscript, skl2onnx, scikit-learn); it rewrites every ``*.onnx``, the ``*.npz``
of torch's outputs, and ``versions.txt`` (the versions used and each model's opset and ops).
"""
from __future__ import annotations

import io
import os
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LEGACY_OPSET = {"mlp": 13, "cnn": 17, "norm": 17}  # both legacy opsets; norm13 below has LN decomposed


def torch_models():
    """The torch modules, in eval mode (BatchNorm's running statistics, Dropout off), with the
    static input shape each is exported at."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 6),
                        nn.Sigmoid(), nn.Linear(6, 3), nn.LogSoftmax(dim=-1))
    cnn = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(4), nn.AvgPool2d(2),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    # NOTE: both exporters fold an eval-mode BatchNorm that follows a Conv into the Conv's weights;
    # the one after a ReLU (cnn[6]) stays a BatchNormalization node
    with torch.no_grad():  # running statistics other than 0 and 1, as a trained model has
        for bn in (cnn[1], cnn[6]):
            bn.running_mean.copy_(0.1 * torch.randn(4))
            bn.running_var.copy_(0.5 + torch.rand(4))
            bn.weight.copy_(1 + 0.2 * torch.randn(4))
            bn.bias.copy_(0.1 * torch.randn(4))
    norm = nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 8), nn.GELU(), nn.Dropout(0.3), nn.Linear(8, 8),
                         nn.GELU(approximate="tanh"), nn.Dropout(0.1), nn.Linear(8, 4))
    with torch.no_grad():
        norm[0].weight.copy_(1 + 0.2 * torch.randn(6))
        norm[0].bias.copy_(0.1 * torch.randn(6))
    shapes = {"mlp": (3, 4), "cnn": (2, 2, 8, 8), "norm": (2, 5, 6)}
    return {k: (m.eval(), shapes[k]) for k, m in [("mlp", mlp), ("cnn", cnn), ("norm", norm)]}


def export_torch(model, shape, dtype, dynamo, opset=None):
    """One export to ModelProto: the legacy TorchScript exporter at ``opset`` or the dynamo one at
    its default opset; float64 via ``model.double()`` on a copy."""
    import copy

    import onnx
    import torch

    m = copy.deepcopy(model)
    if dtype == "float64":
        m = m.double()
    x = torch.randn(*shape, dtype=getattr(torch, dtype), generator=torch.Generator().manual_seed(1))
    if dynamo:
        prog = torch.onnx.export(m, (x,), dynamo=True, input_names=["x"], output_names=["y"])
        return prog.model_proto
    buf = io.BytesIO()
    torch.onnx.export(m, (x,), buf, dynamo=False, opset_version=opset, input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buf.getvalue())


def save_torch_outputs(name, mp):
    """torch's own output at a fixed input, beside the model: evidence independent of onnxruntime,
    which has no float64 Conv or Erf kernel on CPU."""
    import torch

    key = name.split("_")[1]
    m, shape = torch_models()[key]
    dt = "float64" if name.endswith("float64") else "float32"
    m = m.double() if dt == "float64" else m
    x = np.random.default_rng(7).standard_normal(shape).astype(dt)
    with torch.no_grad():
        y = m(torch.from_numpy(x)).numpy()
    path = os.path.join(HERE, f"{name}.npz")
    if os.path.exists(path):  # an .npz records its write time: rewrite it only when it changes
        with np.load(path) as old:
            if set(old.files) == {"x", "y"} and np.array_equal(old["x"], x) and np.array_equal(old["y"], y) \
                    and old["y"].dtype == y.dtype:
                return
    np.savez(path, x=x, y=y)


def sklearn_models():
    """skl2onnx conversions: float64 ones use only standard ONNX ops (ai.onnx.ml has no double
    kernels), float32 ones the ai.onnx.ml ops (LinearClassifier, Scaler, ...) load_function refuses."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DoubleTensorType, FloatTensorType
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4))
    y_cls = np.argmax(X @ rng.standard_normal((4, 3)) + 0.3 * rng.standard_normal((40, 3)), axis=1)
    y_reg = X @ rng.standard_normal(4) + np.sin(X[:, 0]) + 0.1 * rng.standard_normal(40)
    lr = LogisticRegression(max_iter=500).fit(X, y_cls)
    pipe = make_pipeline(StandardScaler(), LinearRegression()).fit(3 * X + 1, y_reg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tiny MLP does not converge in 200 steps; any weights do
        mlp = MLPRegressor(hidden_layer_sizes=(6,), activation="tanh", max_iter=200, random_state=0).fit(X, y_reg)
    out = {}
    for dt, tt in [("float32", FloatTensorType), ("float64", DoubleTensorType)]:
        for name, est in [("logreg", lr), ("scaler_linreg", pipe), ("mlpreg", mlp)]:
            opts = {id(est): {"zipmap": False}} if name == "logreg" else None
            out[f"skl_{name}_{dt}"] = convert_sklearn(est, name, [("x", tt([3, 4]))], options=opts,
                                                      target_opset={"": 17, "ai.onnx.ml": 3})
    # the label output goes through ai.onnx.ml.ArrayFeatureExtractor (index -> class) even in
    # float64: the probabilities alone, cut out with onnx's own Extractor, are standard ONNX
    from onnx.utils import Extractor
    proba = Extractor(out["skl_logreg_float64"]).extract_model(["x"], ["probabilities"])
    proba.graph.name = "logreg_proba"
    out["skl_logreg_proba_float64"] = proba
    return out


def describe(model):
    doms = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    ops = sorted({(n.domain + "." if n.domain else "") + n.op_type for n in model.graph.node})
    return f"opset {doms}; ops {', '.join(ops)}"


def main():
    import onnx
    import onnxscript
    import skl2onnx
    import sklearn
    import torch

    lines = [f"python {sys.version.split()[0]}", f"torch {torch.__version__}", f"onnxscript {onnxscript.__version__}",
             f"skl2onnx {skl2onnx.__version__}", f"scikit-learn {sklearn.__version__}", f"onnx {onnx.__version__}",
             f"numpy {np.__version__}", ""]
    models = {}
    for key, (m, shape) in torch_models().items():
        for dt in ("float32", "float64"):
            models[f"torch_{key}_legacy_{dt}"] = lambda m=m, s=shape, dt=dt, k=key: \
                export_torch(m, s, dt, False, LEGACY_OPSET[k])
            models[f"torch_{key}_dynamo_{dt}"] = lambda m=m, s=shape, dt=dt: export_torch(m, s, dt, True)
        if key == "norm":  # opset 13: LayerNormalization decomposed into ReduceMean/Sub/Pow/Sqrt/Div
            models["torch_norm_legacy13_float64"] = lambda m=m, s=shape: export_torch(m, s, "float64", False, 13)
    for name, mp in sklearn_models().items():
        models[name] = lambda mp=mp: mp
    for name, make in models.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mp = make()
            onnx.checker.check_model(mp, full_check=True)
        except Exception as err:  # keep what works; versions.txt says why the rest is missing
            lines.append(f"{name}: NOT WRITTEN: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
            continue
        path = os.path.join(HERE, f"{name}.onnx")
        onnx.save(mp, path)
        if name.startswith("torch_"):
            save_torch_outputs(name, mp)
        lines.append(f"{name}.onnx ({os.path.getsize(path)} bytes): {describe(mp)}")
    with open(os.path.join(HERE, "versions.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
