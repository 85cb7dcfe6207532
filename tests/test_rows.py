"""``irad.rows.check_rows``: which traced losses may be evaluated chunk by chunk of rows.

Accepted losses are also checked numerically: their value on all the data equals the chunks'
values combined as ``irad.dask`` combines them (a sum, or a mean weighted by chunk sizes).
Refused ones must say which op (its prim) or which line of the loss mixes rows.
"""
from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import irad
from irad.errors import RowsError
from irad.rows import check_rows

#: row counts of the traced chunks (with 1 or 2 rows only two traces tell the powers of n apart)
NS = (1, 2, 5, 7)


def _data(n: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    X = rng.standard_normal((n, d)) if d else rng.standard_normal(n)
    y = (rng.random(n) > 0.5).astype(float)
    return X, y


def _combined(f, params, X, y, reduce: str) -> float:
    """The chunks' values combined: chunks of 2 rows and a remainder."""
    n, total = len(X), 0.0
    for s in range(0, n, 2):
        part = f(params, X[s:s + 2], y[s:s + 2])
        total += part if reduce == "sum" else part * len(X[s:s + 2]) / n
    return total


def _traces(f, params, X, y):
    """The trace of ``f`` and its trace on the data stacked with itself (``2n`` rows), the
    parameters unchanged, as ``irad.dask`` makes them for ``check_rows(..., g2=...)``."""
    with np.errstate(all="ignore"):  # (a loss divided by len(X) - 1, traced on one row)
        return irad.trace(f, params, X, y), irad.trace(f, params, np.concatenate([X, X]), np.concatenate([y, y]))


def _one_trace_tells(X, one: bool | None) -> bool:
    """Is ``check_rows`` with one trace expected to decide as with two?  It guesses the powers of
    ``n`` by value: with 1 or 2 rows, the numbers 1, 2 and 0.5 in these losses look like them."""
    return len(X) > 2 if one is None else one


def accepts(f, params, X, y, reduce: str, *, one: bool | None = None) -> None:
    """Accepted with two traces (and, if ``one``, with one), and right numerically."""
    one = _one_trace_tells(X, one)
    g, g2 = _traces(f, params, X, y)
    assert check_rows(g, data=(1, 2), reduce=reduce, fname=f.__name__, g2=g2) == len(X)
    if one:
        assert check_rows(g, data=(1, 2), reduce=reduce, fname=f.__name__) == len(X)
    np.testing.assert_allclose(_combined(f, params, X, y, reduce), f(params, X, y), rtol=1e-10, atol=1e-12)


def refuses(f, params, X, y, reduce: str, *, prim: str | None = None, marker: str | None = None,
            one: bool | None = None) -> str:
    """Refused with two traces (and, if ``one``, with one), the message naming ``prim`` and the
    line of ``marker``; returns the two traces' message."""
    one = _one_trace_tells(X, one)
    g, g2 = _traces(f, params, X, y)
    msgs = []
    for second in ((g2, None) if one else (g2,)):
        with pytest.raises(RowsError) as info:
            check_rows(g, data=(1, 2), reduce=reduce, fname=f.__name__, g2=second)
        msg = str(info.value)
        assert f.__name__ in msg
        if prim is not None:
            assert prim in msg, msg
        if marker is not None:
            assert f"{os.path.basename(__file__)}:{_line_of(f, marker)}" in msg, msg
        msgs.append(msg)
    return msgs[0]


def _line_of(f, marker: str) -> int:
    lines, start = inspect.getsourcelines(f)
    (i,) = [i for i, ln in enumerate(lines) if marker in ln]
    return start + i


# ---- accepted -------------------------------------------------------------------------------


def least_squares(w, X, y):
    return np.sum((X @ w - y) ** 2)


def mse_np_mean(w, X, y):
    return np.mean((X @ w - y) ** 2)


def mse_len(w, X, y):
    return np.sum((X @ w - y) ** 2) / len(X)


def mse_shape(w, X, y):
    return 0.5 * np.sum((X @ w - y) ** 2) / X.shape[0]


def mse_half(w, X, y):
    return np.sum((X @ w - y) ** 2) / (2 * len(X))


def logistic_l2(w, X, y):
    z = X @ w
    p = 1 / (1 + np.exp(-z))
    return -np.sum(y * np.log(p) + (1 - y) * np.log(1 - p)) / len(X) + 0.01 * np.sum(w ** 2)


def labels_where(w, X, y):
    z = X @ w
    labels = (y > 0.5).astype(int)
    return np.mean(np.where(labels == 1, np.logaddexp(0, -z), np.logaddexp(0, z)))


def hinge_mean(w, X, y):
    return np.mean(np.maximum(0, 1 - (2 * y - 1) * (X @ w))) + 0.5 * w @ w


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("f, reduce", [
    (least_squares, "sum"), (mse_np_mean, "mean"), (mse_len, "mean"), (mse_shape, "mean"),
    (mse_half, "mean"), (logistic_l2, "mean"), (labels_where, "mean"), (hinge_mean, "mean"),
])
def test_linear_models(f, reduce, n):
    rng = np.random.default_rng(n)
    X, y = _data(n, 3, rng)
    accepts(f, rng.standard_normal(3), X, y, reduce)


def row_sums(W, X, y):
    return np.sum((np.sum(X @ W, axis=1) - y) ** 2)


def row_sums_keepdims(W, X, y):
    h = np.tanh(X @ W)
    return np.mean((h.sum(axis=-1, keepdims=True) - y.reshape(-1, 1)) ** 2)


def softmax_ce(W, X, y):
    z = X @ W
    z = z - np.max(z, axis=1, keepdims=True)
    lse = np.log(np.sum(np.exp(z), axis=1))
    return np.mean(lse - z[np.arange(len(X)), y.astype(int)])


def softmax_ce_onehot(W, X, y):
    z = X @ W
    m = np.max(z, axis=1, keepdims=True)
    logp = z - m - np.log(np.sum(np.exp(z - m), axis=1, keepdims=True))
    onehot = np.stack([1 - y, y], axis=1)
    return -np.sum(onehot * logp[:, :2]) / len(X) + 1e-3 * np.sum(W * W)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("f, reduce", [
    (row_sums, "sum"), (row_sums_keepdims, "mean"), (softmax_ce, "mean"), (softmax_ce_onehot, "mean"),
])
def test_per_row_reductions(f, reduce, n):
    rng = np.random.default_rng(n)
    X, y = _data(n, 3, rng)
    accepts(f, rng.standard_normal((3, 4)), X, y, reduce)


def columns(w, X, y):
    return np.sum((X[:, 0] * w[0] + X[:, 1:] @ w[1:] - y) ** 2)


def dict_params(w, X, y):
    h = np.tanh(X @ w["a"] + w["b"])
    return np.mean((h @ w["c"] - y) ** 2) + 0.1 * np.sum(w["a"] ** 2)


def gram(w, X, y):
    r = X @ w - y
    g = X.T @ r  # a sum over rows, then a linear combination of it
    return np.sum(g * w) / len(X) - 0.5 * np.mean(r)


def ones_weights(w, X, y):
    r = (X @ w - y) ** 2
    return np.ones(len(X)) @ r


def transposed(w, X, y):
    Z = np.transpose(X)
    return np.sum(np.sum(Z * w[:, None], axis=0) * y)


def bias_column(w, X, y):
    Xb = np.hstack([X, np.ones((len(X), 1))])
    return np.sum((Xb @ np.concatenate([w, [0.5]]) - y) ** 2)


def label_table(w, X, y):
    return np.sum((X @ w - w[y.astype(int)]) ** 2)


def take_label(w, X, y):
    picked = np.take_along_axis(X, y.astype(int)[:, None], axis=1)
    return np.mean(picked[:, 0] * w[0]) + np.mean(X[..., 2])


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("f, reduce", [
    (columns, "sum"), (gram, "mean"), (ones_weights, "sum"), (transposed, "sum"), (bias_column, "sum"),
    (label_table, "sum"), (take_label, "mean"),
])
def test_layouts(f, reduce, n):
    rng = np.random.default_rng(n)
    X, y = _data(n, 3, rng)
    accepts(f, rng.standard_normal(3), X, y, reduce)


@pytest.mark.parametrize("n", NS)
def test_dict_params(n):
    rng = np.random.default_rng(n)
    X, y = _data(n, 3, rng)
    w = {"a": rng.standard_normal((3, 4)), "b": rng.standard_normal(4), "c": rng.standard_normal(4)}
    accepts(dict_params, w, X, y, "mean")


def one_d_sum(w, X, y):
    return np.sum((w[0] * X + w[1] - y) ** 2)


def one_d_mean(w, X, y):
    return np.mean(np.logaddexp(0, -(2 * y - 1) * (w[0] * X + w[1]))) + 0.5 * np.sum(w ** 2)


def one_d_column(w, X, y):
    return np.sum((X.reshape(-1, 1) @ w[None, :1] - y[:, None]).ravel() ** 2)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("f, reduce", [(one_d_sum, "sum"), (one_d_mean, "mean"), (one_d_column, "sum")])
def test_one_dimensional_data(f, reduce, n):
    rng = np.random.default_rng(n)
    X, y = _data(n, 0, rng)
    accepts(f, rng.standard_normal(2), X, y, reduce)


def test_returns_the_row_count():
    g = irad.trace(least_squares, np.zeros(3), np.zeros((7, 3)), np.zeros(7))
    assert check_rows(g, data=(1, 2), reduce="sum") == 7
    with pytest.raises(RowsError, match="differs from row to row"):  # y left whole: not chunked with X
        check_rows(g, data=(1,), reduce="sum")


# ---- refused --------------------------------------------------------------------------------


def sorted_rows(w, X, y):
    return np.sum(np.sort(X @ w, axis=0)[:2])  # <- sort


def median_rows(w, X, y):
    return np.sum(np.median(X, axis=0) * w)  # <- median


def max_rows(w, X, y):
    return np.max(X @ w - y) + np.sum(y)  # <- max


def standardised(w, X, y):
    Z = (X - X.mean(0))  # <- standardise
    return np.sum((Z @ w - y) ** 2)


def squared_sum(w, X, y):
    return (np.sum(X @ w - y)) ** 2  # <- square


def log_sum(w, X, y):
    return np.log(np.sum(np.exp(X @ w)))  # <- log


def cumsum_rows(w, X, y):
    return np.sum(np.cumsum(X @ w) * y)  # <- cumsum


def first_row(w, X, y):
    return np.sum(X[0] * w) + np.sum(y)  # <- first row


def every_other(w, X, y):
    return np.sum((X[::2] @ w) ** 2)  # <- every other


def some_rows(w, X, y):
    return np.sum((X[[0, 2, 1]] @ w) ** 2)  # <- some rows


def position_weights(w, X, y):
    return np.arange(len(X)) @ (X @ w - y) ** 2  # <- arange


def position_weights_mul(w, X, y):
    return np.sum(np.arange(len(X)) * (X @ w - y) ** 2)  # <- arange


def norm_squared(w, X, y):
    return np.linalg.norm(X @ w - y) ** 2  # <- norm


def gram_squared(w, X, y):
    g = X.T @ (X @ w - y)
    return np.sum(g ** 2)  # <- square


def outer_rows(w, X, y):
    K = X @ X.T  # <- kernel
    return np.sum(K * np.outer(y, y))


def flattened(w, X, y):
    return np.sum(X.ravel()[:3])  # <- ravel


def doubled(w, X, y):
    return np.sum(np.concatenate([X, X]) @ w)  # <- concatenate


def unknown_op(w, X, y):
    return np.sum(np.einsum("ij,j->i", X, w) - y)  # <- einsum


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("f, prim", [
    (outer_rows, "operator.matmul"), (flattened, "numpy.ndarray.ravel"), (doubled, "numpy.concatenate"),
    (unknown_op, "numpy.einsum"),
    (sorted_rows, "numpy.sort"), (median_rows, "numpy.median"), (max_rows, "numpy.max"),
    (standardised, "operator.sub"), (squared_sum, "operator.pow"), (log_sum, "numpy.log"),
    (cumsum_rows, "numpy.cumsum"), (first_row, "operator.getitem"), (every_other, "operator.getitem"),
    (some_rows, "operator.getitem"), (position_weights, "operator.matmul"), (position_weights_mul, "operator.mul"),
    (norm_squared, "numpy.linalg.norm"), (gram_squared, "operator.pow"),
])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_mixing_rows(f, prim, n, reduce):
    if f is some_rows and n < 3:
        pytest.skip("some_rows picks rows 0 to 2")
    rng = np.random.default_rng(n)
    X, y = _data(n, 3, rng)
    marker = next(ln.split("# <- ")[1].strip() for ln in inspect.getsource(f).splitlines() if "# <- " in ln)
    refuses(f, rng.standard_normal(3), X, y, reduce, prim=prim, marker=f"# <- {marker}")


def one_d_sorted(w, X, y):
    return np.sum(np.sort(w[0] * X - y)[-2:])  # <- sort


def one_d_centred(w, X, y):
    return np.sum((w[0] * (X - np.mean(X)) - y) ** 2)  # <- centre


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("f, prim", [(one_d_sorted, "numpy.sort"), (one_d_centred, "operator.sub")])
def test_mixing_rows_one_dimensional(f, prim, n):
    rng = np.random.default_rng(n)
    X, y = _data(n, 0, rng)
    refuses(f, rng.standard_normal(2), X, y, "sum", prim=prim, marker="# <-")


def regularised_sum(w, X, y):
    return np.sum((X @ w - y) ** 2) + 0.01 * np.sum(w ** 2)  # <- reg


@pytest.mark.parametrize("n", NS)
def test_reduce_mismatch(n):
    rng = np.random.default_rng(n)
    X, y = _data(n, 3, rng)
    w = rng.standard_normal(3)
    msg = refuses(least_squares, w, X, y, "mean", marker="return")
    assert "reduce='sum'" in msg
    for f in (mse_np_mean, mse_len, mse_shape, mse_half):
        msg = refuses(f, w, X, y, "sum", marker="return")
        assert "reduce='mean'" in msg
    msg = refuses(regularised_sum, w, X, y, "sum", prim="operator.add", marker="# <- reg")
    assert "outside" in msg and "once per chunk" in msg
    refuses(regularised_sum, w, X, y, "mean", marker="# <- reg")
    refuses(logistic_l2, w, X, y, "sum", prim="operator.add")


def mixed_scaling(w, X, y):
    r = X @ w - y
    return np.sum(r ** 2) + np.mean(r)  # <- mixed


def scaled_regulariser(w, X, y):
    return np.mean((X @ w - y) ** 2) + np.sum(w ** 2) / len(X)  # <- reg


def mean_over_n(w, X, y):
    return np.mean(X @ w - y) / len(X)


def test_scaled_terms():
    rng = np.random.default_rng(0)
    X, y = _data(5, 3, rng)
    w = rng.standard_normal(3)
    for reduce in ("sum", "mean"):
        msg = refuses(mixed_scaling, w, X, y, reduce, marker="# <- mixed")
        assert "n**-1, n**0" in msg
    msg = refuses(mean_over_n, w, X, y, "mean", marker="return")
    assert "n**-2" in msg
    refuses(scaled_regulariser, w, X, y, "mean", prim="operator.add", marker="# <- reg")


def branches(w, X, y):
    if X.sum() > 0:  # <- branch
        return np.sum((X @ w - y) ** 2)
    return np.sum((X @ w + y) ** 2)


def masked(w, X, y):
    return np.sum(X[y > 0.5] @ w)  # <- mask


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("f", [branches, masked])
def test_guards(f, n):
    rng = np.random.default_rng(n)
    X, y = _data(n, 3, rng)
    msg = refuses(f, rng.standard_normal(3), X, y, "sum", prim="irad.primitives.guard", marker="# <-")
    assert "branch" in msg


def no_data(w, X, y):
    return np.sum(w ** 2)


def per_row(w, X, y):
    return X @ w - y


def test_output_must_be_a_scalar_from_the_data():
    rng = np.random.default_rng(1)
    X, y = _data(5, 3, rng)
    w = rng.standard_normal(3)
    assert "does not depend on the data" in refuses(no_data, w, X, y, "sum")
    assert "not a scalar" in refuses(per_row, w, X, y, "sum", marker="return")


def test_data_arguments():
    w = np.zeros(3)
    g = irad.trace(least_squares, w, np.zeros((5, 3)), np.zeros(5))
    assert check_rows(g, data=(1, 2), reduce="sum") == 5
    g = irad.trace(lambda w, X, y: np.sum(X @ w) + np.sum(y), w, np.zeros((5, 3)), np.zeros(7))
    with pytest.raises(RowsError, match="different numbers of rows"):
        check_rows(g, data=(1, 2), reduce="sum")
    g = irad.trace(lambda w, X, s: np.sum(X @ w) * s, w, np.zeros((5, 3)), 2.0)
    with pytest.raises(RowsError, match="not an array with rows"):
        check_rows(g, data=(1, 2), reduce="sum")
    with pytest.raises(RowsError, match="not one of"):
        check_rows(g, data=(3,), reduce="sum")
    with pytest.raises(RowsError, match="reduce"):
        check_rows(g, data=(1,), reduce="max")


def test_data_in_a_container():
    def f(w, batch):
        X, y = batch["X"], batch["y"]
        return np.sum((X @ w - y) ** 2)
    g = irad.trace(f, np.zeros(3), {"X": np.zeros((5, 3)), "y": np.zeros(5)})
    assert check_rows(g, data=(1,), reduce="sum") == 5
    g = irad.trace(lambda w, b: np.sum(b["X"] @ w) + np.sum(b["y"]), np.zeros(3),
                   {"X": np.zeros((5, 3)), "y": np.zeros(6)})
    with pytest.raises(RowsError, match="different numbers of rows"):
        check_rows(g, data=(1,), reduce="sum")


# ---- two traces: the powers of the row count from how constants change -------------------------

LAM = 0.3  # a module constant: lam / (2 * len(X)) is one number in the trace
N_TOTAL = 10  # the total row count, hard-coded


def _rows(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X, y = _data(n, 3, rng)
    return rng.standard_normal(3), X, y


def folded_reg_arg(params, X, y):
    w, lam = params
    return np.mean((X @ w - y) ** 2) + lam * (1.0 / len(X)) * (w @ w)  # <- reg


def folded_reg_module(w, X, y):
    return np.mean((X @ w - y) ** 2) + LAM / (2 * len(X)) * np.sum(w ** 2)  # <- reg


def box_penalty(w, X, y):
    return np.mean((X @ w - y) ** 2) + (1 / len(X)) * np.sum(np.maximum(np.abs(w) - 10, 0) ** 2)  # <- reg


def over_sqrt_n(w, X, y):
    return np.sum((X @ w - y) ** 2) / np.sqrt(len(X))  # <- n


def over_n_plus_one(w, X, y):
    return np.sum((X @ w - y) ** 2) / (len(X) + 1)  # <- n


def over_n_minus_one(w, X, y):
    return np.sum((X @ w - y) ** 2) / (len(X) - 1)  # <- n


def clipped_by_n(w, X, y):
    return np.sum(np.clip(X @ w - y, -len(X), len(X)))  # <- n


def first_five(w, X, y):
    return np.sum((X[:5] @ w - y[:5]) ** 2)  # <- rows


def filled_by_n(w, X, y):
    return np.mean((X @ w - y) ** 2) + np.sum(np.full(len(X), w[0]))  # <- fill


def spread_over_n(w, X, y):
    return np.sum((X @ w - y)[:, None] * np.ones(len(X)))  # <- spread: n times the sum


def spread_over_zeros(w, X, y):
    return np.sum((X @ w - y)[:, None] + np.zeros((1, len(X))))  # <- spread: n times the sum


def test_regularisers_divided_by_the_row_count_are_refused():
    """One trace folds ``lam / len(X)`` into one number, which it took for a plain constant; the
    second trace shows it halve with twice the rows, whatever ``lam`` (0.0 too)."""
    w, X, y = _rows(5)
    for lam in (0.3, 0.0):  # (lam an argument: an input of the trace, its value unknown to the proof)
        msg = refuses(folded_reg_arg, (w, lam), X, y, "mean", prim="operator.add", marker="# <- reg", one=False)
        assert "scaled by the row count" in msg
    for f in (folded_reg_module, box_penalty):
        msg = refuses(f, w, X, y, "mean", prim="operator.add", marker="# <- reg", one=False)
        assert "scaled by the row count" in msg


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("f", [over_sqrt_n, over_n_plus_one, over_n_minus_one])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_other_functions_of_the_row_count_are_refused(f, n, reduce):
    w, X, y = _rows(n)
    msg = refuses(f, w, X, y, reduce, prim="operator.truediv", marker="# <- n", one=False)
    assert "neither n nor 1/n" in msg


@pytest.mark.parametrize("f, prim", [(clipped_by_n, "numpy.clip"), (first_five, "operator.getitem"),
                                     (filled_by_n, "numpy.full"), (spread_over_n, "operator.mul"),
                                     (spread_over_zeros, "operator.add")])
def test_the_row_count_where_no_rule_follows_it(f, prim):
    """The row count as a clip bound, a slice bound equal to it (``X[:5]`` of 5 rows), a size, or
    the length of an axis other than the rows'."""
    w, X, y = _rows(5)
    refuses(f, w, X, y, "sum" if f is not filled_by_n else "mean", prim=prim, marker="# <-", one=False)


def mean_plus_scaled(w, X, y):
    return np.mean((X @ w - y) ** 2) + np.sum(w ** 2) / len(X)  # <- reg


def test_one_row_chunks():
    """With one row, n**k is 1 for every k: one trace cannot tell a sum from a mean; two can."""
    w, X, y = _rows(1)
    refuses(mean_plus_scaled, w, X, y, "mean", prim="operator.add", marker="# <- reg", one=False)
    assert "not a mean" in refuses(least_squares, w, X, y, "mean", marker="return", one=False)
    assert "not a sum" in refuses(mse_len, w, X, y, "sum", marker="return", one=False)
    refuses(over_n_plus_one, w, X, y, "sum", prim="operator.truediv", marker="# <- n", one=False)
    for f, reduce in ((mse_len, "mean"), (logistic_l2, "mean"), (hinge_mean, "mean"), (least_squares, "sum")):
        accepts(f, w, X, y, reduce)
    big_w, big_X, big_y = _rows(6)  # (the loss of 6 rows is the mean of its one-row chunks')
    whole = logistic_l2(big_w, big_X, big_y)
    np.testing.assert_allclose(np.mean([logistic_l2(big_w, big_X[i:i + 1], big_y[i:i + 1]) for i in range(6)]),
                               whole, rtol=1e-12)


def sum_over_ten(w, X, y):
    return np.sum((X @ w - y) ** 2) / 10  # 10: a plain number, even with 10 rows


def tempered(w, X, y):
    z = (X @ w) / 10  # a temperature
    return np.sum(np.logaddexp(0, -(2 * y - 1) * z))


def tempered_mean(w, X, y):
    return np.mean(np.logaddexp(0, -(2 * y - 1) * (X @ w) / 10))


def signs(w, X, y):
    return np.sum(np.logaddexp(0, -(2 * y - 1) * (X @ w)))  # 2 and 1: numbers, even with 2 rows


def halved(w, X, y):
    return 0.5 * np.sum((X @ w - y) ** 2)  # 0.5: a number, even with 2 rows


def halved_reg(w, X, y):
    return np.mean((X @ w - y) ** 2) + 0.5 * np.sum(w ** 2)


def over_total(w, X, y):
    return np.sum((X @ w - y) ** 2) / N_TOTAL


@pytest.mark.parametrize("f, reduce, n", [
    (sum_over_ten, "sum", 10), (tempered, "sum", 10), (tempered, "sum", 5), (tempered_mean, "mean", 10),
    (tempered_mean, "mean", 5), (signs, "sum", 2), (halved, "sum", 2), (over_total, "sum", N_TOTAL),
])
def test_constants_equal_to_the_row_count_are_numbers(f, reduce, n):
    """One trace took these constants for the row count (and refused the loss); the second trace
    shows they do not change with it."""
    w, X, y = _rows(n)
    accepts(f, w, X, y, reduce, one=False)
    with pytest.raises(RowsError):
        check_rows(irad.trace(f, w, X, y), (1, 2), reduce)


def test_a_number_equal_to_one_over_the_row_count():
    w, X, y = _rows(2)
    accepts(halved_reg, w, X, y, "mean")


def uniform_weights(w, X, y):
    return np.full(len(X), 1 / len(X)) @ (X @ w - y) ** 2  # a mean, written as weights


def whole_slice(w, X, y):
    return np.sum((X[:len(X)] @ w - y[:, None][:len(X), 0]) ** 2)


def reshaped(w, X, y):
    return np.sum((X.reshape(len(X), -1) @ w - y.reshape(len(X))) ** 2)


def test_sizes_of_the_row_count():
    """Arrays and slices sized by the row count: their sizes grow with it, their values tell."""
    w, X, y = _rows(5)
    accepts(uniform_weights, w, X, y, "mean", one=False)
    assert "not a sum" in refuses(uniform_weights, w, X, y, "sum", one=False)
    for f in (whole_slice, reshaped, bias_column, ones_weights):
        accepts(f, w, X, y, "sum")
    accepts(softmax_ce, np.random.default_rng(0).standard_normal((3, 4)), X, y, "mean")


def looped(w, X, y):
    total = 0.0
    for i in range(len(X)):
        total = total + (X[i] @ w - y[i]) ** 2  # <- loop
    return total


def branch_on_n(w, X, y):
    if len(X) > 6:
        return np.sum((X @ w - y) ** 2)
    return np.sum(np.abs(X @ w - y))  # <- branch


@pytest.mark.parametrize("f", [looped, branch_on_n])
def test_structure_depends_on_the_row_count(f):
    w, X, y = _rows(5)
    msg = refuses(f, w, X, y, "sum", marker="# <-", one=False)
    assert "structure depends on the number of rows" in msg


def test_second_trace_must_stack_the_data():
    w, X, y = _rows(5)
    g = irad.trace(least_squares, w, X, y)
    with pytest.raises(RowsError, match="second trace"):
        check_rows(g, (1, 2), "sum", g2=g)
    with pytest.raises(RowsError, match="second trace"):
        check_rows(g, (1, 2), "sum", g2=irad.trace(lambda w, X, y: np.sum(X @ w) + np.sum(y), w,
                                                   np.concatenate([X, X]), y))
    with pytest.raises(RowsError, match="second trace"):
        check_rows(g, (1, 2), "sum", g2=irad.trace(least_squares, np.zeros(4), np.zeros((10, 4)), np.zeros(10)))
    g, g2 = _traces(least_squares, w, X, y)
    assert check_rows(g, (1, 2), "sum", g2=g2) == 5


def test_data_in_a_container_two_traces():
    def f(w, batch):
        return np.sum((batch["X"] @ w - batch["y"]) ** 2) / len(batch["y"])
    w, X, y = _rows(5)
    g = irad.trace(f, w, {"X": X, "y": y})
    g2 = irad.trace(f, w, {"X": np.concatenate([X, X]), "y": np.concatenate([y, y])})
    assert check_rows(g, (1,), "mean", g2=g2) == 5
    with pytest.raises(RowsError, match="not a sum"):
        check_rows(g, (1,), "sum", g2=g2)


# ---- the numerical probe: what the proof cannot see --------------------------------------------

from irad.rows import probe_rows  # noqa: E402


def _reg_folded(w, X, y):
    lam = 0.3
    return np.mean((X @ w - y) ** 2) + (lam / (2 * len(X))) * np.sum(w ** 2)  # one constant in the trace


def _sqrt_n(w, X, y):
    return np.sum((X @ w - y) ** 2) / np.sqrt(len(X))


def _n_minus_one(w, X, y):
    return np.sum((X @ w - y) ** 2) / (len(X) - 1)


@pytest.mark.parametrize("f, reduce", [(_reg_folded, "mean"), (_sqrt_n, "mean"), (_sqrt_n, "sum"),
                                       (_n_minus_one, "mean"), (_n_minus_one, "sum")])
def test_probe_refuses_what_the_row_count_hides_in(f, reduce):
    """The proof takes these constants for plain numbers; the probe's values show the loss of all
    rows is not the combination of its halves'."""
    r = np.random.default_rng(0)
    w, X, y = np.zeros(3), r.standard_normal((40, 3)), r.standard_normal(40)
    try:
        check_rows(irad.trace(f, w, X, y), (1, 2), reduce)
    except RowsError:
        pass  # (the proof with one trace may refuse some of them too; the probe must refuse them all)
    g, g2 = _traces(f, w, X, y)
    with pytest.raises(RowsError):  # (with two traces, the proof refuses them all)
        check_rows(g, (1, 2), reduce, g2=g2)
    with pytest.raises(RowsError, match="two halves"):
        probe_rows(f, (w, X, y), (1, 2), reduce, (0,))


@pytest.mark.parametrize("f, reduce", [
    (lambda w, X, y: np.mean((X @ w - y) ** 2) + 0.1 * np.sum(w ** 2), "mean"),
    (lambda w, X, y: np.sum(np.logaddexp(0.0, -(2 * y - 1) * (X @ w))), "sum"),
    (lambda w, X, y: np.sum((X @ w - y) ** 2) / len(X), "mean")])
def test_probe_accepts_decomposable_losses(f, reduce):
    r = np.random.default_rng(1)
    w, X, y = r.standard_normal(3), r.standard_normal((41, 3)), (r.random(41) > 0.5).astype(float)
    probe_rows(f, (w, X, y), (1, 2), reduce, (0,))


def test_probe_accepts_float32_losses():
    """float32 rounds at ~1e-7: the halves' combination differs from the whole by that much."""
    r = np.random.default_rng(2)
    w = r.standard_normal(8).astype(np.float32)
    X = r.standard_normal((2048, 8)).astype(np.float32)
    y = (r.random(2048) > 0.5).astype(np.float32)
    for reduce, f in (("mean", lambda w, X, y: np.mean(np.logaddexp(0, X @ w) - y * (X @ w))),
                      ("sum", lambda w, X, y: np.sum((X @ w - y) ** 2))):
        probe_rows(f, (w, X, y), (1, 2), reduce, (0,))
