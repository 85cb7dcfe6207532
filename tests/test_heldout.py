"""Realistic plain-numpy programs irad has not seen: small models, losses, physics and finance
style code with loops, dict/list parameters, in-place updates, broadcasting, 0-d values, float32,
repeated arguments, methods, np.linalg and fancy indexing.  Every gradient is checked against
central finite differences (``check_grads``) or against a closed form."""
from __future__ import annotations

import math

import numpy as np
import pytest

import irad
from irad.testing import check_grads


def rs(seed=0):
    return np.random.RandomState(seed)


# ---- models and losses -----------------------------------------------------------------------

def mlp_loss(params, x, y):
    h = x
    for i, (W, b) in enumerate(params["layers"]):
        h = h @ W + b
        if i < len(params["layers"]) - 1:
            h = np.maximum(h, 0.0) + 0.01 * np.minimum(h, 0.0)  # leaky relu
    logits = h - h.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -np.mean(logp[np.arange(len(y)), y]) + 1e-3 * sum(np.sum(W ** 2) for W, _ in params["layers"])


def test_mlp_with_list_of_tuples_params():
    r = rs(1)
    params = {"layers": [(r.randn(4, 8) * 0.5, np.zeros(8)), (r.randn(8, 3) * 0.5, r.randn(3) * 0.1)]}
    x, y = r.randn(6, 4), np.array([0, 2, 1, 1, 0, 2])
    check_grads(mlp_loss, params, x, y, argnums=(0, 1))
    g = irad.grad(mlp_loss)(params, x, y)
    assert isinstance(g["layers"], list) and isinstance(g["layers"][0], tuple)


def test_rnn_loop_with_in_place_state_history():
    r = rs(2)
    Wx, Wh, Wo = r.randn(3, 5) * 0.4, r.randn(5, 5) * 0.4, r.randn(5, 1) * 0.4
    xs = r.randn(7, 3)

    def loss(Wx, Wh, Wo, xs):
        T = xs.shape[0]
        hs = np.zeros((T + 1, Wh.shape[0]))
        for t in range(T):
            hs[t + 1] = np.tanh(xs[t] @ Wx + hs[t] @ Wh)
        preds = hs[1:] @ Wo
        return 0.5 * np.sum((preds[:, 0] - np.sin(np.arange(T))) ** 2)

    check_grads(loss, Wx, Wh, Wo, xs, argnums=(0, 1, 2, 3))


def test_attention_block_with_softmax_and_transposes():
    r = rs(3)
    X = r.randn(5, 4)
    Wq, Wk, Wv = r.randn(4, 4), r.randn(4, 4), r.randn(4, 4)

    def attn(Wq, Wk, Wv, X):
        Q, K, V = X.dot(Wq), X.dot(Wk), X.dot(Wv)
        s = Q @ K.T / math.sqrt(Q.shape[-1])
        s = s - s.max(axis=-1, keepdims=True)
        A = np.exp(s)
        A /= A.sum(axis=-1, keepdims=True)
        out = A @ V
        mu = out.mean(axis=-1, keepdims=True)
        var = out.var(axis=-1, keepdims=True)
        return ((out - mu) / np.sqrt(var + 1e-5)).sum(axis=0).dot(np.arange(4.0))

    check_grads(attn, Wq, Wk, Wv, X, argnums=(0, 1, 2, 3), order=2)


def test_logistic_regression_float32():
    r = rs(4)
    X = r.randn(20, 3).astype(np.float32)
    y = (r.rand(20) > 0.5).astype(np.float32)
    w = np.zeros(3, dtype=np.float32)

    def nll(w, X, y):
        z = X @ w
        return np.mean(np.logaddexp(0.0, z) - y * z)

    g = irad.grad(nll)(w, X, y)
    assert g.dtype == np.float32
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    np.testing.assert_allclose(g, X.T @ (p - y) / len(y), rtol=1e-5)
    check_grads(nll, w.astype(np.float64) + 0.1, X.astype(np.float64), y.astype(np.float64))


def test_gaussian_mixture_loglik_with_logsumexp_by_hand():
    r = rs(5)
    x = r.randn(30)
    params = {"logits": r.randn(3), "mu": r.randn(3), "log_sigma": r.randn(3) * 0.2}

    def loglik(p, x):
        w = np.exp(p["logits"] - np.max(p["logits"]))
        w = w / w.sum()
        sig = np.exp(p["log_sigma"])
        comp = -0.5 * ((x[:, None] - p["mu"][None, :]) / sig) ** 2 - np.log(sig) - 0.5 * np.log(2 * np.pi)
        a = comp + np.log(w)
        m = a.max(axis=1)
        return np.sum(m + np.log(np.sum(np.exp(a - m[:, None]), axis=1)))

    check_grads(loglik, params, x, argnums=0, order=2)


def test_ridge_regression_closed_form_with_solve_and_slogdet():
    r = rs(6)
    X, y = r.randn(12, 4), r.randn(12)

    def evidence(log_alpha, X, y):
        alpha = np.exp(log_alpha)
        A = X.T @ X + alpha * np.eye(X.shape[1])
        w = np.linalg.solve(A, X.T @ y)
        sign, logdet = np.linalg.slogdet(A)
        return np.sum((y - X @ w) ** 2) + alpha * w @ w + logdet

    check_grads(evidence, 0.3, X, y, argnums=(0, 1, 2), order=2)


def test_gaussian_process_marginal_likelihood_cholesky():
    r = rs(7)
    x, y = np.sort(r.rand(8)), r.randn(8)

    def nlml(theta, x, y):
        ell, sf, sn = np.exp(theta)
        d = x[:, None] - x[None, :]
        K = sf ** 2 * np.exp(-0.5 * d ** 2 / ell ** 2) + (sn ** 2 + 1e-6) * np.eye(len(x))
        L = np.linalg.cholesky(K)
        alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
        return 0.5 * y @ alpha + np.sum(np.log(np.diag(L)))

    check_grads(nlml, np.array([-0.5, 0.1, -1.0]), x, y, argnums=(0, 1, 2))


def test_pca_reconstruction_via_svd_and_eigh():
    r = rs(8)
    X = r.randn(10, 4) @ np.diag([3.0, 2.0, 1.0, 0.5])

    def recon(X):
        Xc = X - X.mean(axis=0)
        U, s, Vt = np.linalg.svd(Xc, full_matrices=False)
        P = Vt[:2].T @ Vt[:2]
        return np.sum((Xc - Xc @ P) ** 2)

    def top_eig(X):
        C = np.cov(X, rowvar=False)
        w, V = np.linalg.eigh(C)
        return w[-1] + np.sum(V[:, -1] ** 4)

    check_grads(recon, X)
    check_grads(top_eig, X)


def test_conv1d_by_loops_and_slices():
    r = rs(9)
    x, k = r.randn(12), r.randn(3)

    def conv(x, k):
        n = len(x) - len(k) + 1
        out = np.empty(n)
        for i in range(n):
            out[i] = np.dot(x[i:i + len(k)], k[::-1])
        return np.sum(np.tanh(out) ** 2) + np.sum(np.convolve(x, k, mode="valid") * out)

    check_grads(conv, x, k, argnums=(0, 1))


def test_kmeans_soft_assignments():
    r = rs(10)
    X, C = r.randn(15, 2), r.randn(3, 2)

    def soft_kmeans(C, X, beta=5.0):
        d2 = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1)
        w = np.exp(-beta * (d2 - d2.min(axis=1, keepdims=True)))
        w /= w.sum(axis=1, keepdims=True)
        return np.sum(w * d2)

    check_grads(soft_kmeans, C, X, argnums=(0, 1))
    check_grads(soft_kmeans, C, X, argnums=0, beta=2.0)


# ---- physics ---------------------------------------------------------------------------------

def test_nbody_leapfrog_energy():
    r = rs(11)
    pos, vel, m = r.randn(3, 3), r.randn(3, 3) * 0.1, np.abs(r.randn(3)) + 0.5

    def energy_after(pos, vel, m, dt=0.01, steps=3):
        pos = pos.copy()
        vel = vel.copy()
        n = len(m)
        for _ in range(steps):
            acc = np.zeros_like(pos)
            for i in range(n):
                for j in range(n):
                    if i != j:
                        d = pos[j] - pos[i]
                        acc[i] += m[j] * d / (np.sum(d ** 2) + 0.1) ** 1.5
            vel += dt * acc
            pos += dt * vel
        ke = 0.5 * np.sum(m[:, None] * vel ** 2)
        iu = np.triu_indices(n, 1)
        dist = np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)[iu]
        pe = -np.sum((m[:, None] * m[None, :])[iu] / np.sqrt(dist ** 2 + 0.1))
        return ke + pe

    check_grads(energy_after, pos, vel, m, argnums=(0, 1, 2))


def test_heat_equation_explicit_stencil_in_place():
    r = rs(12)
    u0 = np.sin(np.linspace(0, np.pi, 10)) + 0.1 * r.randn(10)

    def heat(u0, kappa):
        u = u0.copy()
        for _ in range(6):
            lap = np.zeros_like(u)
            lap[1:-1] = u[2:] - 2 * u[1:-1] + u[:-2]
            u[1:-1] += kappa * lap[1:-1]
            u[0] = u[-1] = 0.0
        return np.sum(u ** 2) + u[len(u) // 2]

    check_grads(heat, u0, 0.2, argnums=(0, 1), order=2)


def test_spring_chain_with_np_diff_and_gradient():
    x = np.cumsum(np.full(6, 1.1)) + rs(13).randn(6) * 0.05

    def energy(x, k, L0):
        ext = np.diff(x) - L0
        return 0.5 * k * np.sum(ext ** 2) + np.sum(np.gradient(x) ** 2) * 1e-2

    check_grads(energy, x, 2.0, 1.0, argnums=(0, 1, 2))


def test_pendulum_rk4_with_python_floats():
    def simulate(theta0, omega0, g=9.81, L=1.0, dt=0.02, steps=10):
        def f(th, om):
            return om, -g / L * math.sin(th)
        th, om = theta0, omega0
        for _ in range(steps):
            k1 = f(th, om)
            k2 = f(th + dt / 2 * k1[0], om + dt / 2 * k1[1])
            k3 = f(th + dt / 2 * k2[0], om + dt / 2 * k2[1])
            k4 = f(th + dt * k3[0], om + dt * k3[1])
            th = th + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
            om = om + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        return th * th + 0.1 * om

    check_grads(simulate, 0.3, 0.1, argnums=(0, 1))
    check_grads(simulate, 0.3, 0.1, argnums=(0, 1), g=3.7, L=0.5)


def test_ising_like_energy_with_roll_and_where():
    r = rs(14)
    s = r.randn(5, 5)

    def energy(s, J, h):
        m = np.tanh(s)
        nb = np.roll(m, 1, axis=0) + np.roll(m, -1, axis=0) + np.roll(m, 1, axis=1) + np.roll(m, -1, axis=1)
        e = -J * np.sum(m * nb) / 2 - h * np.sum(m)
        return e + np.sum(np.where(np.abs(m) > 0.9, (np.abs(m) - 0.9) ** 2, 0.0))

    check_grads(energy, s, 1.0, 0.3, argnums=(0, 1, 2))


# ---- finance ---------------------------------------------------------------------------------

def _norm_cdf(x):
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0))) if False else \
        0.5 * (1.0 + _erf(x / np.sqrt(2.0)))


def _erf(x):
    # Abramowitz-Stegun 7.1.26 (smooth, plain numpy)
    sgn = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * \
        np.exp(-x * x)
    return sgn * y


def test_black_scholes_greeks_vectorised():
    S = np.array([90.0, 100.0, 110.0])
    K, T, r_, sigma = 100.0, 0.5, 0.02, 0.25

    def price(S, K, T, r, sigma):
        d1 = (np.log(S / K) + (r + 0.5 * sigma ** 2) * T) / (sigma * np.sqrt(T))
        d2 = d1 - sigma * np.sqrt(T)
        return np.sum(S * _norm_cdf(d1) - K * np.exp(-r * T) * _norm_cdf(d2))

    check_grads(price, S, K, T, r_, sigma, argnums=(0, 1, 2, 3, 4), rtol=1e-4)


def test_monte_carlo_option_with_fixed_draws_and_cumprod():
    z = rs(15).randn(200, 12)

    def mc_price(S0, sigma, r=0.01, dt=1 / 12, K=1.0):
        growth = np.exp((r - 0.5 * sigma ** 2) * dt + sigma * np.sqrt(dt) * z)
        paths = S0 * np.cumprod(growth, axis=1)
        avg = paths.mean(axis=1)
        payoff = np.log1p(np.exp(20 * (avg - K))) / 20  # softplus instead of max
        return np.exp(-r * 1.0) * payoff.mean()

    check_grads(mc_price, 1.0, 0.2, argnums=(0, 1))


def test_portfolio_mean_variance_with_dict_and_einsum():
    r = rs(16)
    R = r.randn(50, 4) * 0.02 + 0.001
    p = {"w": np.array([0.3, 0.2, 0.4, 0.1]), "risk": 3.0}

    def utility(p, R):
        w = np.exp(p["w"]) / np.sum(np.exp(p["w"]))
        mu = R.mean(axis=0)
        C = np.einsum("ti,tj->ij", R - mu, R - mu) / (len(R) - 1)
        return w @ mu - 0.5 * p["risk"] * np.einsum("i,ij,j->", w, C, w)

    check_grads(utility, p, R, argnums=(0, 1), order=2)


def test_value_at_risk_style_sorting_and_percentile_index():
    losses = rs(17).randn(40)

    def cvar(w, losses, alpha=0.9):
        port = w * losses + 0.1 * losses ** 2
        srt = np.sort(port)
        k = int(alpha * len(port))
        return srt[k:].mean()

    check_grads(cvar, 1.3, losses, argnums=(0, 1))


def test_bond_price_loop_with_accumulator_and_pow():
    def price(y, coupon=0.05, n=10):
        total = 0.0
        for t in range(1, n + 1):
            total += coupon / (1 + y) ** t
        return total + 1.0 / (1 + y) ** n

    check_grads(price, 0.04)
    check_grads(price, np.float64(0.04), order=2)


# ---- numpy surface ---------------------------------------------------------------------------

def test_zero_d_arrays_and_numpy_scalars():
    a0 = np.array(1.3)
    f = lambda a, b: (a * b + np.sin(a)) ** 2
    check_grads(f, a0, np.float64(0.7))
    g = irad.grad(f, argnums=(0, 1))(a0, np.float64(0.7))
    assert np.shape(g[0]) == () and np.shape(g[1]) == ()


def test_repeated_argument_same_object():
    x = rs(18).randn(4)
    f = lambda a, b: np.sum(a * np.cos(b))
    ga, gb = irad.grad(f, argnums=(0, 1))(x, x)
    np.testing.assert_allclose(ga, np.cos(x))
    np.testing.assert_allclose(gb, -x * np.sin(x))


def test_fancy_and_negative_indexing_and_boolean_masks():
    x = rs(19).randn(6, 5)

    def f(x):
        a = x[[0, -1, 2, 2], [1, -2, 0, 0]]
        b = x[-2:, ::-2]
        c = x[x[:, 0] > 0]
        d = x[..., np.array([4, 0])]
        e = x[np.ix_([1, 3], [0, 2, 4])]
        return np.sum(a ** 2) + np.sum(b) + np.sum(c ** 3) + np.sum(d * 2) + np.sum(e * e)

    check_grads(f, x)


def test_in_place_ops_on_views_and_setitem_accumulation():
    x = rs(20).randn(4, 4)

    def f(x):
        y = x.copy()
        y[:, 0] *= 2.0
        y[1] += y[2]
        y[y < 0] = 0.0
        y.T[0] -= 1.0
        np.add.at(y, ([0, 0, 1], [1, 1, 2]), x[0, :3])
        z = y.reshape(-1)
        z[::3] = z[::3] ** 2
        return np.sum(y * x)

    check_grads(f, x)


def test_methods_and_axis_reductions():
    x = rs(21).randn(3, 4, 2)

    def f(x):
        return (x.sum(axis=(0, 2)).dot(x.mean(axis=(0, 2))) + x.max(axis=-1).min() + x.prod(axis=1).sum()
                + x.std(axis=0, ddof=1).sum() + x.cumsum(axis=1)[:, -1].var() + x.transpose(2, 0, 1).ravel()[3]
                + x.swapaxes(0, 1).reshape(4, -1).T[1].sum() + x.clip(-0.5, 0.5).sum()
                + x.trace(axis1=0, axis2=1).sum())

    check_grads(f, x, order=2)


def test_linalg_mix():
    r = rs(22)
    A = r.randn(4, 4) + 4 * np.eye(4)

    def f(A):
        return (np.linalg.det(A) + np.trace(np.linalg.inv(A)) + np.linalg.norm(A, "fro")
                + np.linalg.norm(A, 2) + np.linalg.norm(A @ A.T, "nuc") + np.sum(np.linalg.pinv(A[:, :3]))
                + np.sum(np.linalg.qr(A)[1] ** 2) + np.linalg.matrix_power(A / 5, 3).sum()
                + np.linalg.eigvalsh(A + A.T).sum() + np.sum(np.linalg.multi_dot([A, A.T, A])))

    check_grads(f, A)


def test_cross_with_axes_and_2d_vectors():
    r = rs(23)
    a, b = r.randn(3, 4), r.randn(4, 3)
    check_grads(lambda a, b: np.cross(a, b, axisa=0), a, b)
    check_grads(lambda a, b: np.cross(a, b, axis=0), r.randn(3, 5), r.randn(3, 5))
    check_grads(lambda a, b: np.cross(a, b, axisc=0), r.randn(5, 3), r.randn(5, 3))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            np.cross(np.ones(2), np.ones(2))
        except ValueError:
            return  # numpy 2.5 dropped 2-vectors
        check_grads(lambda a, b: np.cross(a, b), r.randn(4, 2), r.randn(4, 2))
        check_grads(lambda a, b: np.cross(a, b), r.randn(4, 2), r.randn(4, 3))


def test_numpy_python_functions_traced_through():
    r = rs(24)
    A = r.randn(3, 6)
    check_grads(lambda x: np.cov(x), A)
    check_grads(lambda x: np.corrcoef(x), A)
    check_grads(lambda x: np.gradient(x, 0.5, axis=1), A)
    check_grads(lambda x: np.meshgrid(x[0], x[1, :4]), A)
    check_grads(lambda x: np.block([[x[:, :2], x[:, 2:3]], [x[:1, :2], x[:1, 3:4]]]), A)
    check_grads(lambda x: np.nanstd(np.where(x > 1.5, np.nan, x), axis=1), A)
    check_grads(lambda x: np.nanvar(x) + np.nanprod(x[0]) + np.nancumsum(x).sum(), A)
    check_grads(lambda x: np.ediff1d(x[0], to_end=[1.0]), A)
    check_grads(lambda x: np.insert(x[0], 2, x[1, 0]), A)
    check_grads(lambda x: np.apply_along_axis(lambda row: np.sum(row ** 2), 1, x), A)
    check_grads(lambda x: np.polyval(x[0], 0.7) + np.polyval([1.0, 2.0], x[1]).sum(), A)
    check_grads(lambda x: np.vander(x[0, :3], 4), A)
    check_grads(lambda x: np.i0(x[0]), A)
    check_grads(lambda x: np.logspace(x[0, 0], 1.0, 4), A)
    check_grads(lambda x: np.r_[x[0], 0.0, x[1, :2]] + 0.0, A)
    check_grads(lambda x: np.c_[x[0], x[1]], A)
    check_grads(lambda x: np.fft.hfft(x[0]), A)


def test_positional_out_argument_is_seen():
    # np.multiply(a, b, out) writes out like out=out: the write must reach the gradient
    def f(x):
        out = np.zeros(3)
        np.multiply(x, 2.0, out)
        acc = np.zeros(())
        np.sum(out * x, 0, None, acc)
        return acc * 1.0

    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(irad.grad(f)(x), 4 * x)
    check_grads(f, x)


@pytest.mark.filterwarnings("ignore:Setting the shape:DeprecationWarning")  # (numpy 2.5)
def test_shape_assignment_is_a_reshape():
    def f(x):
        y = x * 2.0
        y.shape = (2, 3)
        z = y[1:]
        z.shape = (3,)
        return np.sum(y @ y.T) + np.sum(z * x[:3])

    check_grads(f, rs(25).randn(6))


def test_opaque_objects_do_not_silently_drop_gradients():
    c = np.array([1.0, 2.0, 3.0])
    with pytest.raises(irad.IradError, match="opaque poly1d"):
        irad.grad(lambda c: np.poly1d(c)(0.7))(c)
    with pytest.raises(irad.IradError, match="opaque memoryview"):
        irad.grad(lambda c: float(memoryview(c * 2.0)[1]))(c)


def test_sorted_dict_items_by_key():
    import operator
    d = {"w_long_name": rs(26).randn(3), "b_long_name": rs(27).randn(2)}

    def f(d):
        return sum(np.sum(v ** 2) * (i + 1) for i, (k, v) in enumerate(sorted(d.items(), key=operator.itemgetter(0))))

    check_grads(f, d)


def test_complex_intermediates_real_loss():
    x = rs(28).randn(8)

    def f(x):
        z = np.fft.fft(x) * np.exp(1j * np.linspace(0, 1, 8))
        return np.sum(np.abs(z) ** 2) + np.real(np.vdot(z, z)) + np.angle(z[1] + 2.0)

    check_grads(f, x)


def test_complex_inputs_check_grads():
    r = rs(29)
    z = r.randn(3) + 1j * r.randn(3)
    check_grads(lambda z: np.abs(z * z + 1.0) ** 2, z)
    check_grads(lambda z, w: np.real(np.sum(z * np.conj(w))), z, r.randn(3) + 0.5j, order=2)


def test_drawdown_with_ufunc_accumulate_and_reduce():
    rets = rs(30).randn(12) * 0.02

    def max_drawdown(w, rets):
        wealth = np.cumprod(1.0 + w * rets)
        peak = np.maximum.accumulate(wealth)
        return np.max(1.0 - wealth / peak) + np.logaddexp.reduce(rets * 10.0) / 10.0

    check_grads(max_drawdown, 1.5, rets, argnums=(0, 1))
    x = rs(31).randn(3, 4)
    check_grads(lambda x: np.minimum.accumulate(x, axis=1), x)
    check_grads(lambda x: np.add.reduceat(x, [0, 2, 1, 3], axis=1), x)
    check_grads(lambda x: np.maximum.outer(x[0], x[1]) + np.hypot.outer(x[2], x[1]), x)
    check_grads(lambda x: np.logaddexp.reduce(x, axis=0, keepdims=True), x, order=2)


def test_value_at_risk_with_percentile_and_quantile():
    pnl = rs(32).randn(50)

    def risk(w, pnl):
        port = w * pnl + 0.05 * pnl ** 2
        var95 = -np.percentile(port, 5)
        q = np.quantile(port, [0.25, 0.75])
        return var95 + (q[1] - q[0])

    check_grads(risk, 1.2, pnl, argnums=(0, 1))
    # q (n - 1) is not an integer there: no kink
    check_grads(lambda x, q: np.quantile(x, q, axis=1), rs(33).randn(3, 6), 0.37, argnums=(0, 1))


def test_interpolated_yield_curve():
    tenors = np.array([0.5, 1.0, 2.0, 5.0, 10.0])

    def pv(rates, times):
        r = np.interp(times, tenors, rates)
        return np.sum(np.exp(-r * times))

    rates = np.array([0.01, 0.015, 0.02, 0.025, 0.03])
    times = np.array([0.25, 0.75, 1.5, 3.0, 7.0, 12.0])
    check_grads(pv, rates, times, argnums=(0, 1), order=2)


def test_least_squares_fit_and_polyfit():
    r = rs(34)
    X, y = r.randn(10, 3), r.randn(10)

    def fit(X, y):
        beta, res, rank, sv = np.linalg.lstsq(X, y, rcond=None)
        return np.sum(beta ** 2) + res[0] + sv[0]

    check_grads(fit, X, y, argnums=(0, 1))
    check_grads(lambda y: np.polyval(np.polyfit(np.arange(10.0), y, 2), 4.5), y)


def test_spectral_radius_with_eigvals_and_eig():
    r = rs(35)
    A = r.randn(4, 4)
    check_grads(lambda A: np.max(np.abs(np.linalg.eigvals(A))), A)

    def f(A):
        w, V = np.linalg.eig(A)
        return np.sum(np.abs(w)) + np.sum(np.abs(V) ** 2 * np.arange(4.0))

    check_grads(f, A)
    check_grads(f, A + 1j * r.randn(4, 4))


def test_vectorize_runs_the_python_function_traced():
    x = rs(36).randn(6)
    step = np.vectorize(lambda t: t ** 2 if t > 0 else math.sin(t))
    check_grads(lambda x: step(x) * 2.0, x)
    check_grads(lambda x: np.vectorize(lambda a, b: a * b + 1.0)(x[:, None], x[None, :3]), x)
    check_grads(lambda x: np.vectorize(lambda t: (t * 2, t ** 3), otypes=[float, float])(x)[1], x)
    # frompyfunc's object arrays cannot carry a gradient: refused, not silently zero
    with pytest.raises(irad.IradError, match="opaque object"):
        irad.grad(lambda x: np.frompyfunc(lambda t: t * 2, 1, 1)(x).astype(float).sum())(x)


def test_itertools_pairs_and_windows():
    import itertools
    x = rs(37).randn(6)

    def pair_energy(x):
        e = sum((a - b) ** 2 for a, b in itertools.combinations(x[:4], 2))
        e = e + sum(a * b for a, b in itertools.pairwise(x)) if hasattr(itertools, "pairwise") else e
        return e + sum(itertools.islice(x, 1, 4)) + sum(a * b for a, b in itertools.product(x[:2], x[4:]))

    check_grads(pair_energy, x)


def test_sliding_window_convolution():
    from numpy.lib.stride_tricks import sliding_window_view
    r = rs(38)
    img, k = r.randn(6, 5), r.randn(3, 3)

    def conv2d(img, k):
        win = sliding_window_view(img, k.shape)
        out = np.einsum("ijkl,kl->ij", win, k)
        pooled = sliding_window_view(out, 2, axis=1).max(axis=-1)
        return np.sum(np.tanh(pooled))

    check_grads(conv2d, img, k, argnums=(0, 1))


def test_float_parameters_of_numpy_functions_get_gradients():
    # a float in a "parameter" position is still differentiated (never silently zero)
    y = rs(39).rand(6) + 0.3
    check_grads(lambda y, dx: np.trapezoid(y, None, dx), y, 0.3, argnums=(0, 1))
    check_grads(lambda x, p: np.linalg.norm(x, p), y, 0.7, argnums=(0, 1))
    check_grads(lambda x, p: np.linalg.norm(x, p, 1), rs(40).randn(3, 4), 3.0, argnums=(0, 1))
    check_grads(lambda h: np.heaviside(np.array([0.0, 1.0, -1.0]), h), 0.3)
    check_grads(lambda x, w: np.average(x, weights=w), y, y[::-1], argnums=(0, 1))  # keyword weights
    with pytest.raises(irad.IradError, match="positional argument 1"):
        irad.grad(lambda p: np.linalg.norm(np.eye(2) * 3.0, p))(2.0)  # matrix ords are discrete


def test_modf_frexp_unique_values():
    x = rs(41).rand(5) * 5 + 0.3
    check_grads(lambda x: np.modf(x)[0] * np.frexp(x)[0], x, order=2)
    check_grads(lambda x: np.unique_values(np.round(x) + x * 0.01), x)


def test_nested_transforms_see_closed_over_traced_values():
    # the inner grad's function reads x (and data) from its closure: the outer gradient must
    # flow through them (regression: they were compiled as constants, a silently wrong gradient)
    def outer(x):
        return x * irad.grad(lambda y: x * y)(2.0)

    assert irad.grad(outer)(1.5) == pytest.approx(3.0)
    check_grads(outer, 1.0)

    data = rs(42).randn(5, 3)

    def maml(w, data):
        inner = irad.grad(lambda v: np.sum((data @ v - 1.0) ** 2))
        w2 = w - 0.01 * inner(w)
        return np.sum((data @ w2 - 1.0) ** 2)

    check_grads(maml, rs(43).randn(3), data, argnums=(0, 1))

    def with_vjp(a):
        y, pb = irad.vjp(lambda b: np.sin(a * b), np.ones(3))
        return np.sum(pb(np.cos(a))[0] * y)

    check_grads(with_vjp, rs(44).randn(3))


def test_in_place_numpy_functions_put_place_putmask_put_along_axis():
    x = rs(45).randn(3, 4)

    def f(x):
        y = x.copy()
        np.put(y, [0, 5, -1], x[0, :3] ** 2)
        np.place(y, y > 0.5, x[1, :2] * 3.0)
        np.putmask(y, y < -0.5, x[2] ** 2)
        np.put_along_axis(y, np.argsort(x, axis=1)[:, :1], x[:, 1:2] * 2.0, axis=1)
        return y * x

    y, _ = irad.vjp(f, x)
    np.testing.assert_allclose(y, f(x))
    check_grads(f, x)


def test_tensorsolve_and_tensorinv_traced_through():
    a = rs(46).randn(4, 2, 2) + np.eye(4).reshape(4, 2, 2) * 3
    check_grads(lambda a, b: np.linalg.tensorsolve(a, b), a, np.arange(4.0), argnums=(0, 1))
    check_grads(lambda a: np.linalg.tensorinv(a, ind=1), a)
