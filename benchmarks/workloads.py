"""Benchmark workloads: plain numpy losses, each with a hand-written numpy gradient (the limit).

Every workload is ``(name, loss, hand_value_and_grad, make_args, argnums)``; the hand-written
gradient is what a careful person would write, and the harness checks every contender against
it before timing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Workload:
    name: str
    loss: Callable[..., Any]
    hand: Callable[..., tuple[Any, Any]]  # (value, grad w.r.t. argnums[0])
    make_args: Callable[[np.random.Generator], tuple[Any, ...]]
    argnums: int = 0
    note: str = ""


# ---- 2-layer MLP with softmax cross-entropy, params as a dict ----------------------------------

def mlp_loss(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> Any:
    h = np.tanh(x @ params["W1"] + params["b1"])
    logits = h @ params["W2"] + params["b2"]
    logits = logits - np.max(logits, axis=1, keepdims=True)
    logp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.mean(np.sum(y * logp, axis=1))


def mlp_hand(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    n = x.shape[0]
    h = np.tanh(x @ params["W1"] + params["b1"])
    logits = h @ params["W2"] + params["b2"]
    logits = logits - np.max(logits, axis=1, keepdims=True)
    e = np.exp(logits)
    s = np.sum(e, axis=1, keepdims=True)
    logp = logits - np.log(s)
    value = -np.mean(np.sum(y * logp, axis=1))
    dlogits = (e / s * y.sum(axis=1, keepdims=True) - y) / n
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(axis=0)
    dh = dlogits @ params["W2"].T * (1 - h * h)
    return value, {"W1": x.T @ dh, "b1": dh.sum(axis=0), "W2": dW2, "b2": db2}


def mlp_args(rng: np.random.Generator, n: int = 128, d: int = 64, hdim: int = 128, k: int = 10) -> tuple[Any, ...]:
    params = {"W1": rng.normal(scale=0.1, size=(d, hdim)), "b1": np.zeros(hdim),
              "W2": rng.normal(scale=0.1, size=(hdim, k)), "b2": np.zeros(k)}
    return params, rng.normal(size=(n, d)), np.eye(k)[rng.integers(0, k, n)]


# ---- a Python loop over a list of floats (pure scalar code) -----------------------------------

def scalar_loop(xs: list[float]) -> float:
    total = 0.0
    for i, v in enumerate(xs):
        total = total + v * v * 0.5 + 0.1 * i * v
    return total


def scalar_loop_hand(xs: list[float]) -> tuple[float, list[float]]:
    total = 0.0
    grads = []
    for i, v in enumerate(xs):
        total = total + v * v * 0.5 + 0.1 * i * v
        grads.append(v + 0.1 * i)
    return total, grads


def rosenbrock(xs: list[float]) -> float:
    total = 0.0
    for i in range(len(xs) - 1):
        total = total + 100.0 * (xs[i + 1] - xs[i] ** 2) ** 2 + (1.0 - xs[i]) ** 2
    return total


def rosenbrock_hand(xs: list[float]) -> tuple[float, list[float]]:
    total = 0.0
    grads = [0.0] * len(xs)
    for i in range(len(xs) - 1):
        x = xs[i]
        a = xs[i + 1] - x * x
        b = 1.0 - x
        total += 100.0 * a * a + b * b
        grads[i] += -400.0 * a * x - 2.0 * b
        grads[i + 1] += 200.0 * a
    return total, grads


# ---- a small vanilla RNN unrolled in a Python loop (overhead-bound) ---------------------------

def rnn_loss(params: dict[str, np.ndarray], xs: np.ndarray, y: np.ndarray) -> Any:
    h = np.zeros((xs.shape[1], params["Wh"].shape[0]))
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ params["Wx"] + h @ params["Wh"] + params["b"])
    err = h @ params["Wo"] - y
    return np.mean(err * err)


def rnn_hand(params: dict[str, np.ndarray], xs: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    Wx, Wh, b, Wo = params["Wx"], params["Wh"], params["b"], params["Wo"]
    hs = [np.zeros((xs.shape[1], Wh.shape[0]))]
    for t in range(xs.shape[0]):
        hs.append(np.tanh(xs[t] @ Wx + hs[-1] @ Wh + b))
    err = hs[-1] @ Wo - y
    value = np.mean(err * err)
    derr = 2.0 * err / err.size
    dWo = hs[-1].T @ derr
    dh = derr @ Wo.T
    dWx, dWh, db = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)
    for t in range(xs.shape[0] - 1, -1, -1):
        dz = dh * (1.0 - hs[t + 1] * hs[t + 1])
        dWx += xs[t].T @ dz
        dWh += hs[t].T @ dz
        db += dz.sum(axis=0)
        dh = dz @ Wh.T
    return value, {"Wx": dWx, "Wh": dWh, "b": db, "Wo": dWo}


def rnn_args(rng: np.random.Generator, steps: int = 30, batch: int = 8, d: int = 8, hdim: int = 16) -> tuple[Any, ...]:
    params = {"Wx": rng.normal(scale=0.3, size=(d, hdim)), "Wh": rng.normal(scale=0.3, size=(hdim, hdim)),
              "b": np.zeros(hdim), "Wo": rng.normal(scale=0.3, size=(hdim, 1))}
    return params, rng.normal(size=(steps, batch, d)), rng.normal(size=(batch, 1))


# ---- logistic regression on 10^5 rows (kernel-bound) ------------------------------------------

def logreg_loss(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
    z = X @ w
    return np.mean(np.logaddexp(0.0, z) - y * z)


def logreg_hand(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    z = X @ w
    value = np.mean(np.logaddexp(0.0, z) - y * z)
    return value, X.T @ ((1.0 / (1.0 + np.exp(-z)) - y) / z.shape[0])


def logreg_args(rng: np.random.Generator, n: int = 100_000, d: int = 20) -> tuple[Any, ...]:
    X = rng.normal(size=(n, d))
    w_true = rng.normal(size=d)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ w_true))).astype(np.float64)
    return 0.1 * rng.normal(size=d), X, y


# ---- Gaussian-process negative log marginal likelihood (cholesky + solves) --------------------

def gp_nll(theta: dict[str, float], X: np.ndarray, y: np.ndarray) -> Any:
    sq = np.sum(X * X, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (X @ X.T), 0.0)
    K = np.exp(2.0 * theta["log_sf"]) * np.exp(-0.5 * d2 / np.exp(2.0 * theta["log_ell"])) \
        + np.exp(2.0 * theta["log_noise"]) * np.eye(X.shape[0])
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return 0.5 * np.dot(y, alpha) + np.sum(np.log(np.diag(L))) + 0.5 * X.shape[0] * np.log(2.0 * np.pi)


def gp_hand(theta: dict[str, float], X: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    n = X.shape[0]
    sq = np.sum(X * X, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (X @ X.T), 0.0)
    sf2, ell2, s2 = np.exp(2.0 * theta["log_sf"]), np.exp(2.0 * theta["log_ell"]), np.exp(2.0 * theta["log_noise"])
    E = sf2 * np.exp(-0.5 * d2 / ell2)
    L = np.linalg.cholesky(E + s2 * np.eye(n))
    Linv = np.linalg.solve(L, np.eye(n))
    alpha = Linv.T @ (Linv @ y)
    value = 0.5 * np.dot(y, alpha) + np.sum(np.log(np.diag(L))) + 0.5 * n * np.log(2.0 * np.pi)
    W = Linv.T @ Linv - np.outer(alpha, alpha)  # 2 dNLL/dK
    WE = W * E
    return value, {"log_sf": float(np.sum(WE)), "log_ell": float(0.5 * np.sum(WE * d2) / ell2),
                   "log_noise": float(s2 * np.trace(W))}


def gp_args(rng: np.random.Generator, n: int = 200) -> tuple[Any, ...]:
    X = rng.uniform(-3.0, 3.0, size=(n, 2))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.normal(size=n)
    return {"log_sf": 0.1, "log_ell": 0.2, "log_noise": -1.5}, X, y


# ---- a long elementwise chain on mid-sized arrays (30 ufunc ops) ------------------------------

def chain_loss(x: np.ndarray) -> Any:
    y = x
    for _ in range(6):
        y = np.sin(y) * y * 0.5 + y * 0.9  # 5 elementwise ops
    return np.sum(y)


def chain_hand(x: np.ndarray) -> tuple[Any, Any]:
    ys, ss = [], []
    y = x
    for _ in range(6):
        s = np.sin(y)
        ys.append(y)
        ss.append(s)
        y = s * y * 0.5 + y * 0.9
    value = np.sum(y)
    g = np.ones_like(x)
    for yk, s in zip(reversed(ys), reversed(ss)):
        g = g * (0.5 * (np.cos(yk) * yk + s) + 0.9)
    return value, g


WORKLOADS = [
    Workload("mlp", mlp_loss, mlp_hand, mlp_args, 0, "128x64 inputs, 128 hidden, 10 classes"),
    Workload("rnn", rnn_loss, rnn_hand, rnn_args, 0, "vanilla RNN, hidden 16, batch 8, 30 steps unrolled"),
    Workload("logreg", logreg_loss, logreg_hand, logreg_args, 0, "logistic regression, 10^5 x 20"),
    Workload("gp", gp_nll, gp_hand, gp_args, 0, "GP NLL, n=200, RBF, cholesky + solves"),
    Workload("scalar_loop", scalar_loop, scalar_loop_hand,
             lambda rng: ([float(v) for v in rng.normal(size=100)],), 0, "100 Python floats"),
    Workload("rosenbrock", rosenbrock, rosenbrock_hand,
             lambda rng: ([float(v) for v in rng.normal(size=64)],), 0, "Rosenbrock over 64 Python floats"),
    Workload("chain", chain_loss, chain_hand, lambda rng: (rng.normal(size=50_000),), 0,
             "30 elementwise ops on 5x10^4 elements"),
]
