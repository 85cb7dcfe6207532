"""ONNX import of the ai.onnx.ml ops that converters such as skl2onnx write for linear models and
their preprocessing (``node.ML_NODES``, looked up for nodes of domain "ai.onnx.ml").

Each handler computes what onnxruntime, the reference implementation of the domain, computes:
its kernels work in float32 (a float64 or integer input is cast first, or its result cast, as the
kernel does), so the score outputs are float32 whatever the input.  Where onnxruntime's result
contradicts the spec's (an attribute it ignores, a default it changes) the node is refused rather
than given either meaning.  For input types the spec allows and onnxruntime has no kernel for
(a float64 Binarizer, Imputer or LinearRegressor) the handler computes the spec's definition, in
float32 where onnxruntime's float32 kernel does (LinearRegressor), else in the input's type.  Coefficient lists enter the namespace as float32 arrays
(``Node.constant``); only ints, finite floats and tuples of ints computed from checked attributes
and static shapes are spelled into the source.
"""
from __future__ import annotations

import math
from typing import cast

import numpy as np
from onnx import AttributeProto

from .node import ML_NODES, Node, on
from .ops import _Unsupported

_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
_NORMS = ("MAX", "L1", "L2")


def _typed(n: Node, name: str, kind: int, what: str) -> AttributeProto | None:
    """Attribute ``name`` marked read, or ``_Unsupported`` if it is not of ONNX type ``kind``
    (checked here: ``Node._attr`` has no message for the list types)."""
    a = n._attrs.get(name)
    if a is not None and a.type != kind:
        raise _Unsupported(f"attribute {name} must be {what}")
    return n._attr(name, kind)


def _floats(n: Node, name: str) -> list[float] | None:
    """A FLOATS attribute, every value finite (None: absent or empty, as onnxruntime reads it)."""
    a = _typed(n, name, AttributeProto.FLOATS, "a list of floats")
    if a is None or not a.floats:
        return None
    vals = [float(v) for v in a.floats]
    if not all(math.isfinite(v) for v in vals):
        raise _Unsupported(f"attribute {name} holds a value that is not finite")
    return vals


def _strings_given(n: Node, name: str) -> bool:
    """Whether a (non-empty) STRINGS attribute is present; its text is never read."""
    a = _typed(n, name, AttributeProto.STRINGS, "a list of strings")
    return a is not None and len(a.strings) > 0


def _declare(n: Node, k: int, dtype: type | np.dtype, shape: tuple[int, ...]) -> None:
    """Output ``k``'s type and shape as onnxruntime computes them, for the nodes after it: ONNX's
    inference gives most of these ops none, and LinearClassifier's scores a wrong (N, 0), so the
    shape computed here replaces an inferred one; a declared type that differs is refused."""
    if len(n.node.output) <= k or not n.node.output[k]:
        return
    out, dt = n.node.output[k], np.dtype(dtype)
    if n._dtypes.get(out, dt) != dt:
        raise _Unsupported(f"output {k} is declared {n._dtypes[out]}, but {n.op} computes {dt}")
    n._dtypes[out], n._shapes[out] = dt, tuple(int(v) for v in shape)


def _coef(n: Node, vals: list[float], shape: tuple[int, ...], hint: str) -> str:
    return n.constant(np.array(vals, np.float32).reshape(shape), hint)


def _float_input(n: Node, ok: str = "fdi") -> str:
    """Input 0 as float32 where onnxruntime's kernel casts it (float64, int32, int64 inputs);
    a float32 input as it is (fed float64, the function then computes in float64)."""
    dt = n.dtype()
    if dt.kind not in ok or dt.itemsize not in (4, 8):
        raise _Unsupported(f"{n.op} of a {dt} input")
    return n.x() if dt == np.float32 else f"np.asarray({n.x()}).astype(np.float32)"


def _batch(n: Node, x: str) -> tuple[str, int, int]:
    """A rank-1 or rank-2 input as (N, F) (a vector is one row, as onnxruntime reads it)."""
    shape = n.shape()
    if n.rank() not in (1, 2):
        raise _Unsupported(f"a rank-{len(shape)} input (onnxruntime reads rank 1 or 2)")
    if len(shape) == 1:
        return f"np.reshape({x}, {(1, shape[0])})", 1, shape[0]
    return x, shape[0], shape[1]


def _probit(n: Node, s: str) -> str:
    """onnxruntime's probit, ``sqrt(2) * erfinv(2s - 1)`` with its approximate erfinv (Winitzki's,
    a = 0.147), in float32 constants.  At s = 1/2 the sign, 0, multiplies a 0."""
    c1 = float(np.float32(2) / (np.float32(3.14159) * np.float32(0.147)))
    c2 = float(np.float32(1) / np.float32(0.147))
    sqrt2 = float(np.float32(math.sqrt(2)))
    x, t, v = n.tmp("centred"), n.tmp("log_term"), n.tmp("probit_v")
    n.line(f"{x} = 2 * {s} - 1")
    n.line(f"{t} = np.log((1 - {x}) * (1 + {x}))")
    n.line(f"{v} = {c1!r} + 0.5 * {t}")
    return f"{sqrt2!r} * np.sign({x}) * np.sqrt(np.sqrt({v} * {v} - {c2!r} * {t}) - {v})"


def _transform(n: Node, s: str, how: str) -> str:
    """``post_transform`` of scores (N, C), C > 1, per row for the softmaxes (as onnxruntime's
    ``batched_update_scores_inplace``)."""
    if how == "NONE":
        return s
    if how == "LOGISTIC":
        return f"np.exp(-np.logaddexp(0, -{s}))"
    if how == "PROBIT":
        return _probit(n, s)
    m = n.tmp("top")
    n.line(f"{m} = np.max({s}, axis=1, keepdims=True)")
    e = n.tmp("exp")
    if how == "SOFTMAX":
        n.line(f"{e} = np.exp({s} - {m})")
        return f"{e} / np.sum({e}, axis=1, keepdims=True)"
    # SOFTMAX_ZERO: scores within 1e-7 of 0 stay (nearly) 0 and are left out of the sum
    nz = n.tmp("nonzero")
    n.line(f"{nz} = np.abs({s}) > 1e-07")
    n.line(f"{e} = np.where({nz}, np.exp({s} - {m}), {s} * np.exp(-{m}))")
    return f"{e} / np.sum(np.where({nz}, {e}, 0), axis=1, keepdims=True)"


@on("LinearClassifier", table=ML_NODES)
def _linear_classifier(n: Node) -> list[str]:
    """Scores ``X @ W.T + b`` in float32, one row of W per intercept; the label is the class of
    the largest raw score.  One row and two class labels is onnxruntime's binary form: scores
    ``[1 - s, s]``, label ``labels[s > 0]`` (the spec's reference computes ``[-s, s]`` and
    transforms it, so only post_transform NONE, where onnxruntime's form is defined and tested,
    is read there)."""
    n.attr_int("multi_class", 0)  # onnxruntime does not read it either
    how = n.attr_str("post_transform", "NONE", _TRANSFORMS)
    if _strings_given(n, "classlabels_strings"):
        raise _Unsupported("string class labels (irad computes numeric tensors only)")
    labels = n.attr_ints("classlabels_ints") or ()
    coef, icpt = _floats(n, "coefficients"), _floats(n, "intercepts")
    if coef is None or icpt is None:
        raise _Unsupported("a LinearClassifier without coefficients or intercepts (onnxruntime refuses it)")
    x, batch, d = _batch(n, _float_input(n))
    rows = len(icpt)
    if len(coef) != rows * d:
        raise _Unsupported(f"{len(coef)} coefficients for {rows} classes of {d} features")
    w, b = _coef(n, coef, (rows, d), "coef"), _coef(n, icpt, (rows,), "intercept")
    s = n.tmp("scores")
    n.line(f"{s} = {x} @ {w}.T + {b}")
    if rows > 1:
        if len(labels) != rows:
            raise _Unsupported(f"{len(labels)} class labels for {rows} classes")
        if labels == tuple(range(rows)):
            label = f"np.argmax({s}, axis=1)"
        else:
            label = f"np.take({n.constant(np.array(labels, np.int64), 'classes')}, np.argmax({s}, axis=1))"
        _declare(n, 0, np.int64, (batch,))
        _declare(n, 1, np.float32, (batch, rows))
        return [label, _transform(n, s, how)]
    if len(labels) not in (0, 2):
        raise _Unsupported(f"{len(labels)} class labels for one row of coefficients (onnxruntime needs 0 or 2)")
    neg, pos = labels if labels else (0, 1)
    label = f"np.where({s}[:, 0] > 0, np.int64({int(pos)}), np.int64({int(neg)}))"
    if labels and how != "NONE":
        raise _Unsupported(f"post_transform {how} of one score with two classes (onnxruntime ignores it "
                           "and returns [1 - s, s]; the ONNX reference transforms [-s, s])")
    if how not in ("NONE", "PROBIT"):
        raise _Unsupported(f"post_transform {how} of one score (onnxruntime leaves it untransformed)")
    _declare(n, 0, np.int64, (batch,))
    _declare(n, 1, np.float32, (batch, 2 if labels else 1))
    return [label, f"np.concatenate([1 - {s}, {s}], axis=1)" if labels else _transform(n, s, how)]


@on("LinearRegressor", table=ML_NODES)
def _linear_regressor(n: Node) -> str:
    """``X @ W.T + b``, (N, targets), in float32 (onnxruntime's kernel is float32 only; a float64
    input, which it has no kernel for, is cast, the spec's output type being float32).  ``post_transform`` as for the classifier,
    which onnxruntime applies to one target only for PROBIT: others are refused there."""
    targets = n.attr_int("targets", 1)
    how = n.attr_str("post_transform", "NONE", _TRANSFORMS)
    coef, icpt = _floats(n, "coefficients"), _floats(n, "intercepts")
    if targets < 1 or coef is None:
        raise _Unsupported(f"targets = {targets} or no coefficients")
    x, batch, d = _batch(n, _float_input(n))
    if len(coef) != targets * d:
        raise _Unsupported(f"{len(coef)} coefficients for {targets} targets of {d} features")
    if icpt is not None and len(icpt) != targets:  # onnxruntime would silently drop them
        raise _Unsupported(f"{len(icpt)} intercepts for {targets} targets")
    if targets == 1 and how not in ("NONE", "PROBIT"):
        raise _Unsupported(f"post_transform {how} of one target (onnxruntime leaves it untransformed)")
    _declare(n, 0, np.float32, (batch, targets))
    out = f"{x} @ {_coef(n, coef, (targets, d), 'coef')}.T"
    if icpt is not None:
        out += f" + {_coef(n, icpt, (targets,), 'intercept')}"
    if how == "NONE":
        return out
    s = n.tmp("scores")
    n.line(f"{s} = {out}")
    return _transform(n, s, how)


@on("Normalizer", table=ML_NODES)
def _normalizer(n: Node) -> str:
    """Each row divided by its maximum (not the largest magnitude: onnxruntime's MAX), its L1 or
    its L2 norm; a row whose divisor is 0 is left as it is.  Computed in float32."""
    how = n.attr_str("norm", "MAX", _NORMS)
    if n.rank() not in (1, 2):
        raise _Unsupported(f"a rank-{n.rank()} input (onnxruntime reads rank 1 or 2)")
    x = _float_input(n)
    if x != n.x():  # cast once, used three times
        cast = n.tmp("as_float32")
        n.line(f"{cast} = {x}")
        x = cast
    _declare(n, 0, np.float32, n.shape())
    by = n.tmp("norm")
    red = {"MAX": f"np.max({x}, axis=-1, keepdims=True)",
           "L1": f"np.sum(np.abs({x}), axis=-1, keepdims=True)",
           "L2": f"np.sum({x} * {x}, axis=-1, keepdims=True)"}[how]
    n.line(f"{by} = {red}")
    safe = f"np.where({by} != 0, {by}, 1)"
    return f"{x} / np.sqrt({safe})" if how == "L2" else f"{x} / {safe}"


def _per_feature(n: Node, k: int, what: str) -> tuple[int, ...]:
    """The broadcast shape of ``k`` per-feature values (or one for all) over input 0, the features
    being its last axis (onnxruntime strides by axis 1 of a matrix, so rank > 2 takes one value)."""
    r, shape = n.rank(), n.shape()
    if r == 0:
        raise _Unsupported("a scalar input (onnxruntime needs rank >= 1)")
    if k == 1:
        return ()
    if r > 2 or k != shape[-1]:
        raise _Unsupported(f"{k} {what} for a {shape} input (one, or one per feature of a vector or matrix)")
    return (k,)


@on("Scaler", table=ML_NODES)
def _scaler(n: Node) -> str:
    """``(X - offset) * scale`` as float32: float64 computed in float64, then cast (as
    onnxruntime); integers cast to float32 first (C++'s int - float)."""
    scale, offset = _floats(n, "scale"), _floats(n, "offset")
    if scale is None or offset is None or len(scale) != len(offset):
        raise _Unsupported("scale and offset must be given, of one length (onnxruntime)")
    dt = n.dtype()
    if dt.kind not in "fi" or dt.itemsize not in (4, 8):
        raise _Unsupported(f"Scaler of a {dt} input")
    shape = _per_feature(n, len(scale), "scales")
    _declare(n, 0, np.float32, n.shape())
    x = n.x() if dt.kind == "f" else f"np.asarray({n.x()}).astype(np.float32)"
    out = f"({x} - {_coef(n, offset, shape, 'offset')}) * {_coef(n, scale, shape, 'scale')}"
    return f"({out}).astype(np.float32)" if dt == np.float64 else out


@on("ArrayFeatureExtractor", table=ML_NODES)
def _array_feature_extractor(n: Node) -> str:
    """``X[..., Y]`` for the flattened indices Y; a vector X gives one row (onnxruntime).  Constant
    indices are checked here; a negative index fed at run time counts from the end (onnxruntime
    does not check it)."""
    n.rank(1)  # the indices' shape must be known
    r, shape, k = n.rank(0), n.shape(0), math.prod(n.shape(1))
    if r == 0 or k == 0 or n.dtype(1) != np.int64:
        raise _Unsupported("a scalar X, no indices or indices that are not int64")
    if n.has(1) and n.ins[1] in n._consts:
        idx = n.ints(1)
        if not all(0 <= i < shape[-1] for i in idx):
            raise _Unsupported(f"indices {idx[:8]} out of range for an axis of length {shape[-1]}")
    _declare(n, 0, n.dtype(0), (1, k) if r == 1 else shape[:-1] + (k,))
    y = n.x(1) if n.rank(1) == 1 else f"np.reshape({n.x(1)}, {(k,)})"
    out = f"np.take({n.x(0)}, {y}, axis=-1)"
    return f"np.reshape({out}, {(1, k)})" if r == 1 else out


@on("Binarizer", table=ML_NODES)
def _binarizer(n: Node) -> str:
    """1 where X > threshold, else 0, in X's type (the gradient is 0).  A Binarizer without a
    threshold is refused: the spec's default is 0, onnxruntime's 1."""
    if not n.given("threshold"):
        raise _Unsupported("Binarizer without a threshold (the spec's default 0 and onnxruntime's 1 differ)")
    t = n.attr_float("threshold")
    dt, _ = n.dtype(), n.rank()  # the shape must be known: it is declared below
    if dt not in (np.float32, np.float64):
        raise _Unsupported(f"Binarizer of a {dt} input (onnxruntime reads float32)")
    _declare(n, 0, dt, n.shape())
    return f"({n.x()} > {t!r}).astype(np.{dt.name})"


@on("Imputer", table=ML_NODES)
def _imputer(n: Node) -> str:
    """Entries equal to the replaced value (NaN: entries that are NaN) become the imputed value of
    their feature (or the one value for all): float values for float inputs, int64 values for
    int64 inputs, the replaced value required (onnxruntime)."""
    floats = _floats(n, "imputed_value_floats")
    ints = n.attr_ints("imputed_value_int64s") or None
    if (floats is None) == (ints is None):
        raise _Unsupported("exactly one of imputed_value_floats and imputed_value_int64s must be given")
    dt = n.dtype()
    x = n.x()
    if floats is not None:
        if dt not in (np.float32, np.float64):
            raise _Unsupported(f"imputed_value_floats for a {dt} input")
        a = _typed(n, "replaced_value_float", AttributeProto.FLOAT, "a float")
        n.attr_int("replaced_value_int64", 0)
        if a is None or math.isinf(a.f):
            raise _Unsupported("replaced_value_float missing or infinite")
        mask = f"np.isnan({x})" if math.isnan(a.f) else f"{x} == {float(a.f)!r}"
        vals = _coef(n, floats, _per_feature(n, len(floats), "imputed values"), "imputed")
    else:
        if dt != np.int64:
            raise _Unsupported(f"imputed_value_int64s for a {dt} input (onnxruntime reads int64)")
        if not n.given("replaced_value_int64"):
            raise _Unsupported("replaced_value_int64 missing")
        mask = f"{x} == np.int64({n.attr_int('replaced_value_int64')})"
        _typed(n, "replaced_value_float", AttributeProto.FLOAT, "a float")  # of float imputation only
        int_vals = cast("list[int]", ints)  # (not None: exactly one of floats and ints is)
        vals = n.constant(np.array(int_vals, np.int64).reshape(_per_feature(n, len(int_vals), "imputed values")),
                          "imputed")
    _declare(n, 0, dt, n.shape())
    return f"np.where({mask}, {vals}, {x})"


@on("ZipMap", table=ML_NODES)
def _zipmap(n: Node) -> str:
    raise _Unsupported("its output is a sequence of maps, not a tensor (skl2onnx: convert with "
                       "options={id(model): {'zipmap': False}})")
