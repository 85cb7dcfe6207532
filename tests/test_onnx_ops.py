"""The wider ONNX op table (``irad.onnx.OPS``): each mapping runs in onnxruntime and matches irad/numpy.

For every mapped primitive, a small plain-numpy function is exported as its gradient program and
run in onnxruntime against ``irad.compile``'s value and gradient (float64, atol 1e-10); its forward
model is read back with ``irad.onnx.load_function`` and must compute what the function computes.
Models exported at one input are also run at fresh inputs of the same shapes (other index values,
other ties), since a model is a program, not a snapshot of one call.

Skipped where ``onnx``/``onnxruntime`` are not installed (``pip install irad[onnx]``).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX export needs the onnx package (pip install irad[onnx])")
ort = pytest.importorskip("onnxruntime", reason="running exported models needs onnxruntime (pip install irad[onnx])")

import irad  # noqa: E402
import irad.onnx as ionnx  # noqa: E402
from onnx_run import expected, run_model  # noqa: E402  (after importorskip)

ATOL = 1e-10


def op_types(model):
    return {n.op_type for n in model.graph.node}


def _close(got, want, what):
    want = np.asarray(want)
    assert np.shape(got) == want.shape, what
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=what)


def check(f, *args, argnums=0, fresh=(), uses=()):
    """The gradient program of ``f`` in onnxruntime equals irad's value and gradient at ``args`` and
    at each argument tuple of ``fresh``; the value also equals ``f`` itself; the forward model read
    back with ``load_function`` computes ``f``.  ``uses``: ONNX ops the gradient model must contain."""
    model = ionnx.export(f, *args, argnums=argnums)
    onnx.checker.check_model(model, full_check=True)
    assert set(uses) <= op_types(model), op_types(model)
    prog = irad.compile(f, *args, argnums=argnums)
    forward = ionnx.export(f, *args, gradient=False)
    fn = ionnx.load_function(forward)
    for a in (args, *fresh):
        _, outs = run_model(model, prog, a)
        want = expected(prog, a)
        assert len(outs) == len(want)
        for k, (got, w) in enumerate(zip(outs, want)):
            _close(got, w, f"output {k} of {f.__name__}")
        _close(outs[0], f(*a), f"value of {f.__name__} against numpy")
        _close(fn(*a), f(*a), f"{f.__name__} read back from ONNX")
    return model


def forward(f, *args, fresh=(), uses=()):
    """The forward model of ``f`` (any dtype, several outputs) in onnxruntime equals numpy's ``f``
    at ``args`` and at ``fresh`` argument tuples, and so does the model read back from ONNX."""
    model = ionnx.export(f, *args, gradient=False)
    onnx.checker.check_model(model, full_check=True)
    assert set(uses) <= op_types(model), op_types(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fn = ionnx.load_function(model)
    for a in (args, *fresh):
        outs = sess.run(None, {i.name: np.asarray(x) for i, x in zip(sess.get_inputs(), a)})
        want = f(*a)
        want = list(want) if isinstance(want, tuple) else [want]
        back = fn(*a)
        back = list(back) if isinstance(back, tuple) else [back]
        assert len(outs) == len(want) == len(back)
        for k, (got, r, w) in enumerate(zip(outs, back, want)):
            _close(got, w, f"output {k} of {f.__name__}")
            _close(r, w, f"output {k} of {f.__name__} read back from ONNX")
    return model


rng = np.random.default_rng(0)


def weighted(a):
    """A sum that depends on where each element is (plain sums do not see a wrong layout)."""
    return np.sum(a * np.linspace(-1.0, 2.0, a.size).reshape(a.shape))


def normal(*shape):
    return rng.standard_normal(shape)


# ---- bincount -------------------------------------------------------------------------------

def test_bincount_traced_index_with_weights_and_minlength():
    def f(w, idx):
        return weighted(np.bincount(idx, weights=w, minlength=7) ** 2)

    idx = np.array([0, 3, 3, 1, 6, 3])
    check(f, normal(6), idx, fresh=[(normal(6), np.array([6, 6, 0, 2, 2, 2]))], uses={"ScatterElements"})


def test_bincount_counts_and_constant_index():
    labels = np.array([2, 0, 2, 4, 2])

    def counts(x, idx):
        return weighted(x * np.bincount(idx, minlength=5))  # integer counts (no weights)

    def const_index(w):
        return np.sum(np.bincount(labels, w) * np.arange(5.0))  # weights positional, length max + 1

    check(counts, normal(5), np.array([1, 1, 4, 0, 1]), fresh=[(normal(5), np.array([4, 4, 4, 4, 3]))])
    check(const_index, normal(5))


# ---- traced integer indices: getitem, setitem, add_at ---------------------------------------

GETITEMS = {
    "rows": (lambda x, i, j: x[i], (5, 4)),
    "rows_and_arange": (lambda x, i, j: x[i, np.arange(3)], (5, 4)),
    "columns": (lambda x, i, j: x[:, i], (4, 5)),
    "two_arrays_adjacent": (lambda x, i, j: x[:, i, j], (2, 5, 5)),
    "separated_by_slice": (lambda x, i, j: x[i, :, j], (5, 2, 5)),
    "int_and_array_separated": (lambda x, i, j: x[1, :, i], (3, 2, 5)),
    "ellipsis": (lambda x, i, j: x[..., i], (2, 3, 5)),
    "newaxis_and_slices": (lambda x, i, j: x[None, 1:, i], (4, 5)),
    "broadcast_2d_index": (lambda x, i, j: x[i[:, None], j[None, :]], (5, 5)),
    "step_slice_then_array": (lambda x, i, j: x[::-1, i], (3, 5)),
    "constant_mask_and_array": (lambda x, i, j: x[np.array([True, False, True, True]), i], (4, 5)),
}


@pytest.mark.parametrize("name", list(GETITEMS))
def test_getitem_traced_integer_index(name):
    pick, shape = GETITEMS[name]

    def f(x, i, j):
        return weighted(pick(x, i, j) ** 2) + weighted(np.sin(pick(x, i, j)))

    f.__name__ = name
    i, j = np.array([0, -1, 3]), np.array([2, 2, -5])
    check(f, normal(*shape), i, j, uses={"Gather"},
          fresh=[(normal(*shape), np.array([-5, 4, 4]), np.array([0, -1, 1]))])


def test_getitem_traced_scalar_and_2d_index():
    def f(x, k, rows):
        return weighted(x[k]) * 2.0 + weighted(x[rows] * x[rows])  # rows: a 2-D index array

    check(f, normal(4, 3), np.int64(2), np.array([[0, 1], [3, -1]]),
          fresh=[(normal(4, 3), np.int64(-4), np.array([[3, 3], [-2, 0]]))])


def test_softmax_cross_entropy_with_traced_labels():
    def f(logits, labels):
        z = logits - logits.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return -logp[np.arange(len(labels)), labels].mean()

    check(f, normal(5, 4), np.array([0, 3, 1, 1, 2]), fresh=[(normal(5, 4), np.array([3, 3, 3, 0, -1]))],
          uses={"ScatterND", "Gather"})


def test_add_at_traced_index_repeats_accumulate():
    def f(x, idx):
        a = np.zeros((4, 3))
        np.add.at(a, idx, x)  # rows idx of a, repeated rows accumulate
        return weighted(a ** 2) + np.sum(a[:, 0])

    check(f, normal(5, 3), np.array([0, 2, 2, -1, 2]), fresh=[(normal(5, 3), np.array([1, 1, 1, 1, -4]))],
          uses={"ScatterND"})


def test_setitem_traced_index_last_write_wins():
    def f(x, y, idx):
        a = x.copy()
        a[idx] = y  # repeated positions: numpy keeps the last value
        return weighted(a * x) + np.sum(a ** 2)

    check(f, normal(6), normal(4), np.array([1, 4, 1, -2]), argnums=(0, 1),
          fresh=[(normal(6), normal(4), np.array([5, 5, 5, 0])), (normal(6), normal(4), np.array([0, 1, 2, 3]))],
          uses={"ScatterND", "Where"})


def test_setitem_traced_2d_index_broadcast_value():
    def f(x, v, idx):
        a = x * 1.0
        a[idx, 1:] = v  # v broadcast over the selected rows
        return weighted(a ** 2)

    check(f, normal(4, 3), normal(2), np.array([3, -4]), argnums=(0, 1),
          fresh=[(normal(4, 3), normal(2), np.array([0, 0]))])


def test_setitem_traced_boolean_mask_scalar():
    def f(x):
        a = x.copy()
        a[x > 0.5] = 0.5  # a Where: no data-dependent shape
        return weighted(a * x)

    check(f, normal(3, 4), fresh=[(normal(3, 4),)], uses={"Where"})


def test_boolean_mask_getitem_and_its_shape_guard():
    """``x[mask]`` is a ``Compress`` whose ``Reshape`` to the traced length guards it (``guard_shape``)."""
    def f(x):
        return weighted(x[x > 0] ** 2), x[x > 0]

    x = np.array([0.5, -1.0, 2.0, -0.1, 3.0])
    model = forward(f, x, fresh=[(np.array([-0.5, 1.0, 2.0, -0.1, 3.0]),)], uses={"Compress"})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="(?i)reshape|shape"):  # 4 positives where the trace had 3
        sess.run(None, {sess.get_inputs()[0].name: np.array([0.5, 1.0, 2.0, -0.1, 3.0])})


# ---- cumulative products, splitting, padding, tiling, repeating, triangles -------------------

def test_cumprod_with_zeros_and_signs():
    def f(x):
        return weighted(np.cumprod(x)) + weighted(np.cumprod(x.reshape(2, 3), axis=1) ** 2) + \
            weighted(np.cumprod(x.reshape(3, 2), axis=-2))

    x = np.array([0.5, -2.0, 0.0, 1.5, -0.7, 3.0])
    check(f, x, fresh=[(np.array([-1.0, 0.0, 0.0, 2.0, -1.0, 0.5]),), (normal(6),)], uses={"CumProd"})


def test_cumprod_of_integers_and_method():
    def f(x, k):
        return weighted(x * np.cumprod(k)) + weighted(x.cumprod())

    check(f, normal(4), np.array([2, -1, 3, 0]))


def test_split_and_array_split():
    def f(x):
        a, b, c = np.split(x, [1, 3], axis=1)
        p, q = np.array_split(x, 2)
        e, g = np.split(x, [0], axis=1)  # an empty first piece
        return weighted(a) * weighted(b ** 2) + weighted(c * 3.0) + weighted(p) - weighted(q ** 2) + \
            weighted(g) + e.size

    check(f, normal(3, 5), uses={"Slice"})


@pytest.mark.parametrize("mode,width,kw", [
    ("constant", ((1, 0), (0, 2)), {}),
    ("constant", 2, {"constant_values": 1.5}),
    ("edge", ((2, 1), (0, 3)), {}),
    ("reflect", ((1, 2), (3, 0)), {}),
    ("wrap", (1, 4), {}),
])
def test_pad(mode, width, kw):
    def f(x):
        p = np.pad(x, width, mode=mode, **kw)
        return weighted(p ** 2) + np.sum(p[0] * 3.0)

    check(f, normal(4, 4), fresh=[(normal(4, 4),)], uses={"Pad"})


def test_pad_traced_constant_value():
    def f(x, c):
        return weighted(np.pad(x, 1, constant_values=c) ** 2)

    check(f, normal(2, 3), np.float64(0.5), fresh=[(normal(2, 3), np.float64(-2.0))])


def test_pad_symmetric_is_not_mapped():
    with pytest.raises(ionnx.ExportError, match="numpy.pad"):
        ionnx.export(lambda x: np.pad(x, 1, mode="symmetric").sum(), normal(3))


@pytest.mark.parametrize("reps", [2, (2, 1), (3, 1, 2), (2,)])
def test_tile(reps):
    def f(x):
        return np.sum(np.tile(x, reps) * np.arange(np.tile(x, reps).size).reshape(np.tile(x, reps).shape))

    check(f, normal(2, 3), uses={"Tile"})


@pytest.mark.parametrize("repeats,axis", [(2, 1), (3, None), ([1, 0, 2], 0), (2, -1)])
def test_repeat(repeats, axis):
    def f(x):
        r = np.repeat(x, repeats, axis=axis)
        return np.sum(r ** 2 * np.arange(r.size).reshape(r.shape))

    check(f, normal(3, 2), uses={"Gather"})


def test_repeat_method_and_1d():
    def f(x):
        return np.sum(x.repeat(3) * np.arange(12.0))

    check(f, normal(4))


@pytest.mark.parametrize("k", [0, 1, -1])
def test_tril_triu(k):
    def f(x):
        return weighted(np.tril(x, k) ** 2) + weighted(np.triu(x, k) * 3.0) + weighted(np.tril(x[0], k))

    check(f, normal(2, 3, 4), uses={"Trilu"})


def test_convolve_modes_and_traced_kernel():
    def f(x, k):
        return sum(weighted(np.convolve(x, k, mode) ** 2) for mode in ("full", "same", "valid")) + \
            weighted(np.convolve(k, x)) + weighted(np.convolve(x, np.array([0.25, 0.5, 0.25]), "valid"))

    check(f, normal(8), normal(4), argnums=(0, 1), uses={"MatMul", "Gather"})


@pytest.mark.parametrize("n,m", [(3, 5), (2, 6), (4, 4), (5, 2), (1, 3)])
def test_convolve_correlate_all_lengths(n, m):
    def f(x, k):
        return sum(weighted(np.convolve(x, k, mode) ** 2) + weighted(np.correlate(x, k, mode) * 3.0)
                   for mode in ("full", "same", "valid")) + weighted(np.correlate(x, k) ** 2)

    check(f, normal(n), normal(m), argnums=(0, 1), fresh=[(normal(n), normal(m))])


@pytest.mark.parametrize("window,axis", [(3, None), ((2, 2), (0, 1)), (2, -1), ((3, 1), (1, 2))])
def test_sliding_window_view(window, axis):
    """The windows of an imported convolution or pool: a Gather of flat positions."""
    sw = np.lib.stride_tricks.sliding_window_view
    shape = (6,) if axis is None else (3, 4, 5)

    def f(x):
        w = sw(x, window) if axis is None else sw(x, window, axis=axis)
        return weighted(w[..., ::2] ** 2) + weighted(np.sum(w, axis=-1))

    check(f, normal(*shape), fresh=[(normal(*shape),)], uses={"Gather"})


def test_erf_exports_as_erf():
    """``scipy.special.erf`` is ONNX's ``Erf``; onnxruntime runs it in float32 only."""
    special = pytest.importorskip("scipy.special", reason="erf comes from SciPy")
    x = normal(7).astype(np.float32)
    model = ionnx.export(lambda x: special.erf(x) * 2.0, x, gradient=False)
    onnx.checker.check_model(model, full_check=True)
    assert "Erf" in op_types(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, special.erf(x) * 2.0, rtol=1e-6, atol=1e-6)


# ---- tests of values: isnan/isinf/isfinite, any/all, argmax/argmin ---------------------------

def test_isnan_isinf_isfinite():
    def f(x, k):
        return np.isnan(x), np.isinf(x), np.isfinite(x), np.isnan(k), np.isfinite(k)

    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0])
    forward(f, x, np.array([1, 2]), fresh=[(np.array([np.nan] * 5), np.array([0, 0]))], uses={"IsNaN", "IsInf"})


def test_isnan_in_a_gradient():
    def f(x, y):
        return np.maximum(x, y).sum() + np.fmax(x, y).mean() + np.sum(np.where(np.isfinite(x), x, 0.0))

    check(f, normal(5), normal(5), argnums=(0, 1))


def test_any_all():
    def f(x):
        return (np.any(x > 1.0), (x < -1).all(), np.any(x > 0, axis=0), np.all(x > -2, axis=1, keepdims=True),
                x.any(), np.all(x[:, :0] > 0, axis=1), np.any(x[:0]))

    forward(f, normal(3, 4), fresh=[(normal(3, 4) + 2.0,), (np.zeros((3, 4)),)], uses={"ReduceMax", "ReduceMin"})


def test_argmax_argmin():
    def f(x, k):
        return (np.argmax(x), np.argmax(x, axis=1), np.argmin(x, axis=0), np.argmin(x, axis=-1, keepdims=True),
                x.argmax(axis=0), np.argmax(k), np.argmin(x > 0, axis=1))

    ties = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])  # the first of equal values, as numpy
    forward(f, normal(2, 3), np.array([1, 5, 5]), fresh=[(ties, np.array([0, 0, 0]))], uses={"ArgMax", "ArgMin"})


def test_argmax_selects_in_a_gradient():
    def f(x):
        return weighted(x[np.arange(3), np.argmax(x, axis=1)] ** 2)

    check(f, normal(3, 4), fresh=[(normal(3, 4),)])


# ---- sorting ----------------------------------------------------------------------------------

def test_sort_gradient():
    def f(x):
        return weighted(np.sort(x)[-3:] ** 2) + weighted(np.sort(x.reshape(3, 3), axis=0) ** 2)

    check(f, normal(9), fresh=[(normal(9),), (np.array([1.0, 1.0, 2.0, 0.5, 2.0, 1.0, 3.0, 3.0, 0.0]),)],
          uses={"TopK"})


def test_sort_argsort_take_along_axis_forward():
    def f(x, k):
        order = np.argsort(x, axis=1, kind="stable")
        return (np.sort(x), np.sort(x, axis=None), np.sort(x, axis=0), order, np.argsort(k, kind="stable"),
                np.sort(k), np.take_along_axis(x, order, axis=1), np.argsort(x.reshape(-1), kind="stable"))

    ties = np.array([[2.0, 1.0, 2.0, 1.0], [0.0, 0.0, 0.0, -1.0], [5.0, 5.0, 5.0, 5.0]])
    forward(f, normal(3, 4), np.array([3, 1, 3, 0, 1]), fresh=[(ties, np.array([2, 2, 2, 2, 2]))],
            uses={"TopK", "GatherElements"})


def test_argsort_default_kind_without_ties():
    def f(x):
        return np.argsort(x), np.argsort(x, axis=0), x.argsort(axis=None)

    forward(f, normal(4, 5), fresh=[(normal(4, 5),)])


def test_take_along_axis_broadcast_and_gradient():
    def f(x, idx):
        return weighted(np.take_along_axis(x, idx, axis=1) ** 2) + weighted(np.take_along_axis(x, idx[:1], 1))

    check(f, normal(3, 4), np.array([[0, -1], [3, 3], [1, 0]]),
          fresh=[(normal(3, 4), np.array([[2, 2], [-4, 0], [1, 1]]))], uses={"GatherElements"})


# ---- einsum, norms, complex parts of real arrays, copies, keywords, scalars --------------------

def test_einsum_gradient_with_scalar_operand_and_optimize():
    def f(a, b):
        c = np.einsum("ij,jk->ik", a, b)
        return np.einsum("ik,ik->", c, c) + np.einsum(",ij->", 2.0, a, optimize=True)

    check(f, normal(3, 4), normal(4, 5), argnums=(0, 1), uses={"Einsum"})


NORMS = {
    "default": lambda x: np.linalg.norm(x),
    "axis": lambda x: weighted(np.linalg.norm(x, axis=1)),
    "axis_keepdims": lambda x: weighted(np.linalg.norm(x, axis=0, keepdims=True) * x),
    "ord1": lambda x: weighted(np.linalg.norm(x, 1, axis=1)),
    "ord_inf": lambda x: weighted(np.linalg.norm(x, np.inf, axis=0)) + weighted(np.linalg.norm(x, -np.inf, axis=1)),
    "ord3": lambda x: weighted(np.linalg.norm(x, 3, axis=1)),
    "ord0": lambda x: np.linalg.norm(x, 0, axis=1) @ np.arange(4.0) + x.sum(),
    "fro": lambda x: np.linalg.norm(x, "fro"),
    "matrix_1": lambda x: np.linalg.norm(x, 1) + np.linalg.norm(x, -1),
    "matrix_inf": lambda x: np.linalg.norm(x, np.inf) + np.linalg.norm(x, -np.inf),
    "vector_ord2": lambda x: np.linalg.norm(x[0], 2) + np.linalg.norm(x[:, 1], 1),
    "matrix_axes_keepdims": lambda x: weighted(np.linalg.norm(x.reshape(2, 2, 3), axis=(0, 2), keepdims=True)),
}


@pytest.mark.parametrize("name", list(NORMS))
def test_linalg_norm_forms(name):
    g = NORMS[name]

    def f(x):
        return g(x)

    f.__name__ = name
    check(f, normal(4, 3), fresh=[(normal(4, 3),)])


def test_linalg_norm_of_singular_values_is_not_mapped():
    with pytest.raises(ionnx.ExportError, match="singular values"):
        ionnx.export(lambda x: np.linalg.norm(x, 2), normal(3, 3))


def test_real_imag_of_real_arrays():
    def f(x):
        return weighted(np.real(x) ** 2) + np.sum(np.imag(x)) + weighted(np.conj(x * 2.0))

    check(f, normal(3, 2))


def test_copyto():
    def f(x, y):
        a = np.zeros_like(x)
        np.copyto(a, x)
        a[0] = y[0]
        b = np.ones((2, 3))
        np.copyto(b, y[1])  # broadcast along rows
        return weighted(a * y) + weighted(b ** 2)

    check(f, normal(2, 3), normal(2, 3), argnums=(0, 1))


def test_ufunc_keywords_that_leave_the_value_alone():
    def f(x, y):
        s = np.add(x, y, dtype=np.float64)
        p = np.multiply(s, 0.5, casting="same_kind")
        m = np.maximum(x, 0.0, out=None)
        q = np.subtract(x, y, where=True)
        return weighted(p * m) + weighted(q ** 2)

    check(f, normal(3, 4), normal(3, 4), argnums=(0, 1))


def test_ufunc_out_where_and_cast():
    def f(x):
        out = np.full(4, 0.25)
        np.exp(x, out=out, where=x > 0)
        low = np.zeros(4, dtype=np.float32)
        np.multiply(x, 2.0, out=low)
        return np.sum(out * x) + float(low.astype(np.float64) @ np.ones(4)) * 0.0 + \
            np.sum(np.maximum(x, 0.0, out=None))

    check(f, normal(4), fresh=[(normal(4),)])


def test_std_math_pow_builtin_max_min():
    def f(x, a, b):
        return np.std(x) + weighted(x.std(axis=0)) + np.std(x, ddof=1) + math.pow(a, 2.5) + \
            max(a, b + 2.0) * min(a, b, 0.3) + max([a, b * 2.0])

    check(f, normal(4, 3), 1.5, 0.25, argnums=(0, 1, 2), fresh=[(normal(4, 3), 0.7, 1.25)])


def test_reshape_in_fortran_order_is_not_mapped():
    with pytest.raises(ionnx.ExportError, match="order='F'"):
        ionnx.export(lambda x: np.sum(np.reshape(x, (3, 2), order="F")[0]), normal(2, 3))


def test_det_is_not_mapped():
    """onnxruntime has no float64 kernel for ``Det``."""
    with pytest.raises(ionnx.ExportError, match="numpy.linalg.det"):
        ionnx.export(lambda x: np.linalg.det(x), normal(3, 3))


# ---- imported models are numpy code irad differentiates ----------------------------------------

def test_imported_models_differentiate():
    def f(x, idx):
        s = np.sort(x)
        p = np.pad(s, 1, mode="edge")
        return weighted(np.convolve(p, np.array([1.0, -2.0, 0.5])) ** 2) + weighted(np.cumprod(x[idx]))

    x, idx = normal(5), np.array([4, 0, -1])
    fn = ionnx.load_function(ionnx.export(f, x, idx, gradient=False))
    irad.testing.check_grads(fn, x, idx, argnums=0)
    g = ionnx.load(ionnx.export(f, x, idx))  # the gradient program, read back and traced
    irad.verify(g)
    prog = irad.compile(f, x, idx)
    for got, w in zip(g(x, idx), expected(prog, (x, idx))):
        np.testing.assert_allclose(got, w, rtol=0, atol=ATOL)
