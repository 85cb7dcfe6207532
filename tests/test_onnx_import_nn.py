"""ONNX import of convolutions, pooling and normalizations (``irad/onnx/load_nn.py``).

Each node is read back with ``irad.onnx.load_function`` and run against onnxruntime in float32,
and in float64 with irad's gradient checked against finite differences (tests/onnx_import_util.py).
Where onnxruntime has no float64 kernel and onnx's reference evaluator is wrong or missing
(ConvTranspose with groups or output_shape, GlobalLpPool), the float64 value comes from a direct
numpy formula here instead.  Near misses (training mode, the Indices output, the cases where
onnxruntime and ONNX's shape inference disagree) must raise ``LoadError`` naming the op.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("onnx", reason="ONNX import needs the onnx package (pip install irad[onnx])")
pytest.importorskip("onnxruntime", reason="checking imported models needs onnxruntime (pip install irad[onnx])")

import irad.onnx as ionnx  # noqa: E402
from onnx_import_util import Const, check_node, node_model  # noqa: E402  (after importorskip)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape)


def both(op, args, attrs=None, opset=21, n_out=1, want64=None):
    """float32 against onnxruntime, forward only; float64 with the gradient (against ``want64``
    where given)."""
    f32 = [Const(a.value.astype(np.float32)) if isinstance(a, Const) else
           None if a is None else a.astype(np.float32) for a in args]
    check_node(op, f32, attrs, n_out=n_out, opset=opset, grad=False)
    check_node(op, args, attrs, n_out=n_out, opset=opset, want=want64)


def refused(op, args, attrs, *words, n_out=1, opset=21):
    """Loading the node raises LoadError naming the op and ``words``."""
    model, _ = node_model(op, args, attrs, n_out=n_out, opset=opset)
    with pytest.raises(ionnx.LoadError) as e:
        ionnx.load_function(model)
    for w in (repr(op),) + words:
        assert w in str(e.value), str(e.value)


# ---- Conv ----------------------------------------------------------------------------------


@pytest.mark.parametrize("x, w, attrs", [
    ((1, 2, 7), (3, 2, 3), dict(strides=[2], pads=[1, 2], dilations=[2])),
    ((1, 4, 5, 4), (4, 2, 2, 2), dict(group=2, strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 2])),
    ((1, 3, 4, 4), (3, 1, 2, 2), dict(group=3, kernel_shape=[2, 2])),  # depthwise
    ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), dict(strides=[1, 2, 1], pads=[0, 1, 1, 1, 0, 0])),
], ids=["1d", "2d-groups", "depthwise", "3d"])
@pytest.mark.parametrize("bias", [False, True])
def test_conv(x, w, attrs, bias):
    both("Conv", [rand(*x), rand(*w), rand(w[0]) if bias else None], attrs)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad(auto_pad):
    both("Conv", [rand(2, 2, 5, 4), rand(2, 2, 3, 2), rand(2)], dict(auto_pad=auto_pad, strides=[2, 2]))


def test_conv_same_stride_past_kernel():
    """A 1x1 convolution of stride 2, SAME, on an even size: no padding (what onnxruntime does)."""
    both("Conv", [rand(1, 2, 6, 4), rand(3, 2, 1, 1)], dict(auto_pad="SAME_UPPER", strides=[2, 2]))


def test_conv_constant_weight_opset13():
    """Weights as initializers, as exported models hold them: the gradient is the input's."""
    both("Conv", [rand(1, 2, 5, 5), Const(rand(3, 2, 3, 3)), Const(rand(3))], dict(pads=[1, 1, 1, 1]), opset=13)


def test_conv_near_misses():
    refused("Conv", [rand(1, 2, 5, 5), rand(2, 2, 2, 2)], dict(auto_pad="SAME_UPPER", dilations=[2, 2]),
            "dilations")
    refused("Conv", [rand(1, 2, 5, 5), rand(2, 2, 2, 2)], dict(kernel_shape=[3, 3]), "kernel_shape")
    refused("Conv", [rand(1, 3, 5, 5), rand(2, 1, 2, 2)], dict(group=2), "group")


# ---- ConvTranspose ---------------------------------------------------------------------------


def conv_transpose_ref(x, w, b=None, strides=None, pads=None, dilations=None, output_padding=None, group=1):
    """ConvTranspose by its definition: each input element times the kernel, added into the output
    at ``i * stride + k * dilation - pad_begin``."""
    d = x.ndim - 2
    s, dl = strides or [1] * d, dilations or [1] * d
    pads, adj = pads or [0] * (2 * d), output_padding or [0] * d
    (n, c), size, kernel = x.shape[:2], x.shape[2:], w.shape[2:]
    cg, mg = c // group, w.shape[1]
    full = [(i - 1) * st + a + dd * (k - 1) + 1 for i, st, a, dd, k in zip(size, s, adj, dl, kernel)]
    y = np.zeros((n, mg * group, *(f + max(0, -e) for f, e in zip(full, pads[d:]))))  # pads < 0: zeros
    for g in range(group):
        xg, wg = x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg]
        for tap in itertools.product(*(range(k) for k in kernel)):
            at = tuple(slice(t * dd, t * dd + (i - 1) * st + 1, st) for t, dd, i, st in zip(tap, dl, size, s))
            y[(slice(None), slice(g * mg, (g + 1) * mg)) + at] += np.einsum("nc...,cm->nm...", xg, wg[(...,) + tap])
    y = y[(slice(None), slice(None)) + tuple(slice(p, f - e) for p, e, f in zip(pads[:d], pads[d:], full))]
    return y if b is None else y + b.reshape((-1,) + (1,) * d)


@pytest.mark.parametrize("x, w, attrs", [
    ((1, 2, 4), (2, 3, 3), {}),
    ((2, 2, 4), (2, 3, 3), dict(strides=[2], pads=[1, 2], output_padding=[1])),
    ((1, 4, 3, 3), (4, 1, 2, 2), dict(strides=[2, 3], group=2, dilations=[2, 1], pads=[3, 0, 0, 1])),
    ((1, 1, 2, 2, 2), (1, 2, 2, 1, 2), dict(strides=[2, 1, 2], pads=[0, 0, 1, 1, 0, 0])),
], ids=["1d", "1d-stride-pads", "2d-groups-crop", "3d"])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(x, w, attrs, bias):
    args = [rand(*x), rand(*w), rand(w[1] * attrs.get("group", 1)) if bias else None]
    both("ConvTranspose", args, attrs, want64=[conv_transpose_ref(*args, **attrs)])


@pytest.mark.parametrize("attrs, pads", [
    (dict(auto_pad="SAME_UPPER"), [0, 0, 1, 0]),  # the odd pad after
    (dict(auto_pad="SAME_LOWER"), [1, 0, 0, 0]),
    (dict(auto_pad="VALID"), [0, 0, 0, 0]),
    (dict(output_shape=[6, 5]), [1, 1, 0, 0]),
    (dict(output_shape=[6, 5], auto_pad="SAME_UPPER"), [0, 0, 1, 1]),
    (dict(output_shape=[6, 5], auto_pad="SAME_LOWER"), [1, 1, 0, 0]),
])
def test_conv_transpose_output_shape(attrs, pads):
    """auto_pad and output_shape choose the pads (onnxruntime's choice, the spec's formulas)."""
    args = [rand(1, 2, 3, 3), rand(2, 1, 3, 2), rand(1)]
    both("ConvTranspose", args, dict(strides=[2, 2], **attrs),
         want64=[conv_transpose_ref(*args, strides=[2, 2], pads=pads)])


@pytest.mark.parametrize("attrs, pads", [(dict(auto_pad="SAME_UPPER"), [0, 0]), (dict(output_shape=[10]), [0, -2])])
def test_conv_transpose_past_full_output(attrs, pads):
    """SAME asks for 9 > 8, the full output: onnxruntime gives the 8; output_shape 10: zeros after."""
    args = [rand(1, 2, 3), rand(2, 1, 2)]
    both("ConvTranspose", args, dict(strides=[3], **attrs), want64=[conv_transpose_ref(*args, strides=[3], pads=pads)])


# ---- pooling ---------------------------------------------------------------------------------

POOLS = [  # (input shape, attributes): padding, ceil mode with an overhang, dilations, SAME
    ((1, 2, 7), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((1, 2, 6, 5), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 0], ceil_mode=1)),
    ((1, 2, 5, 5), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 6, 5), dict(kernel_shape=[2, 3], pads=[1, 1, 1, 0], dilations=[2, 1])),
    ((1, 2, 7, 5), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[2, 1, 1, 0], ceil_mode=1, dilations=[2, 2])),
    ((1, 2, 5, 5), dict(kernel_shape=[2, 3], strides=[2, 1], auto_pad="SAME_UPPER")),
    ((1, 2, 5, 5), dict(kernel_shape=[2, 3], strides=[2, 1], auto_pad="SAME_LOWER")),
    ((1, 2, 5, 4), dict(kernel_shape=[2, 3], strides=[2, 1], auto_pad="VALID")),
    ((1, 1, 4, 3, 4), dict(kernel_shape=[2, 2, 2], strides=[2, 1, 2], pads=[1, 0, 0, 0, 1, 1])),
]
POOL_IDS = ["1d", "ceil-pads", "ceil", "dilations", "ceil-dilations", "same-upper", "same-lower", "valid", "3d"]


@pytest.mark.parametrize("x, attrs", POOLS, ids=POOL_IDS)
def test_max_pool(x, attrs):
    both("MaxPool", [rand(*x)], attrs)


def test_max_pool_opset13_storage_order():
    both("MaxPool", [rand(1, 2, 5, 5)], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], storage_order=0), opset=13)


@pytest.mark.parametrize("x, attrs", POOLS, ids=POOL_IDS)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(x, attrs, count_include_pad):
    both("AveragePool", [rand(*x)], dict(attrs, count_include_pad=count_include_pad))


def test_average_pool_opset13():
    both("AveragePool", [rand(1, 2, 6, 5)], dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 0],
                                                 ceil_mode=1, count_include_pad=1), opset=13)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p):
    both("LpPool", [rand(1, 2, 5, 5)], dict(kernel_shape=[2, 3], strides=[2, 1], pads=[1, 1, 0, 1], p=p))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("x", [(2, 3, 4), (1, 2, 3, 4), (1, 2, 2, 3, 2)], ids=["1d", "2d", "3d"])
def test_global_pool(op, x):
    """(onnx's reference evaluator, onnxruntime's float64 GlobalMaxPool, keeps one axis too many)"""
    x = rand(*x)
    both(op, [x], want64=[np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)] if op == "GlobalMaxPool" else None)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p):
    """No float64 GlobalLpPool in onnxruntime or the reference evaluator: numpy's norm instead."""
    x = rand(2, 3, 2, 3)
    want = np.sum(np.abs(x) ** p, axis=(2, 3), keepdims=True) ** (1 / p)
    both("GlobalLpPool", [x], dict(p=p), want64=[want])


def test_pool_near_misses():
    x = rand(1, 2, 6, 5)
    refused("MaxPool", [x], dict(kernel_shape=[2, 2]), "Indices", n_out=2)
    refused("AveragePool", [x], dict(kernel_shape=[2, 2], dilations=[2, 2]), "dilations", opset=13)
    refused("MaxPool", [x], dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER", dilations=[1, 2]), "dilations")
    # onnxruntime (and the reference evaluator) drop a last window that starts in the pads after;
    # ONNX's shape inference keeps it: the shapes later nodes see would be wrong
    refused("MaxPool", [x], dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), "inferred")
    refused("AveragePool", [x], dict(kernel_shape=[2, 2], pads=[0, 0, 3, 0]), "only padding")
    refused("AveragePool", [x], dict(kernel_shape=[1, 1], strides=[2, 2], auto_pad="SAME_UPPER"), "strides")


# ---- normalizations --------------------------------------------------------------------------


def positive(*shape: int) -> np.ndarray:
    return np.abs(rand(*shape, seed=7)) + 0.5


@pytest.mark.parametrize("x", [(3, 2), (2, 2, 3), (1, 2, 3, 2), (1, 2, 2, 1, 3)], ids=["2d", "3d", "4d", "5d"])
@pytest.mark.parametrize("opset", [13, 15])
def test_batch_norm(x, opset):
    c = x[1]
    both("BatchNormalization", [rand(*x), rand(c), rand(c, seed=1), rand(c, seed=2), positive(c)],
         dict(epsilon=1e-3, momentum=0.8), opset=opset)


def test_batch_norm_constant_statistics():
    both("BatchNormalization", [rand(2, 3, 4), Const(rand(3)), Const(rand(3, seed=1)), Const(rand(3, seed=2)),
                                Const(positive(3))], {})


def test_batch_norm_training_refused():
    args = [rand(2, 3, 4), rand(3), rand(3), rand(3), positive(3)]
    refused("BatchNormalization", args, dict(training_mode=1), "training_mode", n_out=3)
    # three outputs at opset 13 mean training: the op's own schema refuses them (ONNX's inference)
    model, _ = node_model("BatchNormalization", args, {}, n_out=3, opset=13)
    with pytest.raises(ionnx.LoadError, match="BatchNormalization.*output size 3"):
        ionnx.load_function(model)


@pytest.mark.parametrize("axis, bias", [(-1, True), (1, False), (0, True)])
@pytest.mark.parametrize("opset", [17, 21])
def test_layer_norm(axis, bias, opset):
    x = rand(2, 3, 4)
    shape = x.shape[axis:]
    args = [x, rand(*shape, seed=1)] + [rand(*shape, seed=2)] * bias  # (a "" bias crashes onnxruntime)
    both("LayerNormalization", args, dict(axis=axis, epsilon=1e-3), opset=opset)


def test_layer_norm_statistics_outputs():
    """Mean and InvStdDev are float32 (stash_type 1) even for float64 input: values only, since
    a float32 output makes finite differences meaningless."""
    x = rand(2, 3, 4)
    for dt in (np.float32, np.float64):
        check_node("LayerNormalization", [x.astype(dt), rand(4).astype(dt)], dict(axis=-1, stash_type=1),
                   n_out=3, opset=17, grad=False)


def test_layer_norm_stash_type_refused():
    refused("LayerNormalization", [rand(2, 3), rand(3)], dict(stash_type=11), "stash_type", opset=17)


@pytest.mark.parametrize("x", [(2, 3, 4), (1, 2, 3, 3)], ids=["1d", "2d"])
def test_instance_norm(x):
    c = x[1]
    both("InstanceNormalization", [rand(*x), rand(c, seed=1), rand(c, seed=2)], dict(epsilon=1e-3))


def group_norm_ref(x, scale, bias, groups, eps=1e-5, per_channel=True):
    g = x.reshape(x.shape[0], groups, -1)
    y = (g - g.mean(axis=2, keepdims=True)) / np.sqrt(g.var(axis=2, keepdims=True) + eps)
    if not per_channel:
        return (y * scale.reshape(-1, 1) + bias.reshape(-1, 1)).reshape(x.shape)
    shape = (-1,) + (1,) * (x.ndim - 2)
    return y.reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(groups):
    """onnxruntime runs opset 21's GroupNormalization as its function, in float32 (stash_type 1)
    even for float64 input; irad keeps float64, checked against the formula."""
    args = [rand(2, 4, 3), rand(4, seed=1), rand(4, seed=2)]
    both("GroupNormalization", args, dict(num_groups=groups, epsilon=1e-3),
         want64=[group_norm_ref(*args, groups, eps=1e-3)])


def test_group_norm_opset18_per_group():
    args = [rand(2, 4, 3), rand(2, seed=1), rand(2, seed=2)]
    both("GroupNormalization", args, dict(num_groups=2), opset=18,
         want64=[group_norm_ref(*args, 2, per_channel=False)])
    refused("GroupNormalization", [rand(2, 4, 3), rand(4), rand(4)], dict(num_groups=2), "per group", opset=18)
