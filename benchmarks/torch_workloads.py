"""PyTorch (eager, CPU, float64) translations of the workloads, written by hand line for line.

``TORCH[name](*numpy_args) -> call``; ``call()`` runs the forward pass and
``torch.autograd.grad`` and returns ``(value, grad)`` with the workload's gradient structure.
Inputs are converted to tensors once, outside the timed call.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch


def _t(a: Any, grad: bool = False) -> torch.Tensor:
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


def mlp(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> Callable[[], Any]:
    p = {k: _t(v, True) for k, v in params.items()}
    xt, yt = _t(x), _t(y)
    keys = list(p)

    def call() -> Any:
        h = torch.tanh(xt @ p["W1"] + p["b1"])
        logits = h @ p["W2"] + p["b2"]
        logits = logits - logits.max(dim=1, keepdim=True).values
        logp = logits - torch.log(torch.exp(logits).sum(dim=1, keepdim=True))
        loss = -(yt * logp).sum(dim=1).mean()
        gs = torch.autograd.grad(loss, [p[k] for k in keys])
        return loss, dict(zip(keys, gs))
    return call


def rnn(params: dict[str, np.ndarray], xs: np.ndarray, y: np.ndarray) -> Callable[[], Any]:
    p = {k: _t(v, True) for k, v in params.items()}
    xst, yt = _t(xs), _t(y)
    keys = list(p)

    def call() -> Any:
        h = torch.zeros((xst.shape[1], p["Wh"].shape[0]), dtype=torch.float64)
        for t in range(xst.shape[0]):
            h = torch.tanh(xst[t] @ p["Wx"] + h @ p["Wh"] + p["b"])
        err = h @ p["Wo"] - yt
        loss = (err * err).mean()
        gs = torch.autograd.grad(loss, [p[k] for k in keys])
        return loss, dict(zip(keys, gs))
    return call


def logreg(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Callable[[], Any]:
    wt, Xt, yt = _t(w, True), _t(X), _t(y)

    def call() -> Any:
        z = Xt @ wt
        loss = (torch.logaddexp(torch.zeros((), dtype=torch.float64), z) - yt * z).mean()
        return loss, torch.autograd.grad(loss, [wt])[0]
    return call


def gp(theta: dict[str, float], X: np.ndarray, y: np.ndarray) -> Callable[[], Any]:
    th = {k: _t(v, True) for k, v in theta.items()}
    Xt, yt = _t(X), _t(y)
    keys = list(th)
    n = X.shape[0]

    def call() -> Any:
        sq = (Xt * Xt).sum(dim=1)
        d2 = torch.clamp(sq[:, None] + sq[None, :] - 2.0 * (Xt @ Xt.T), min=0.0)
        K = torch.exp(2.0 * th["log_sf"]) * torch.exp(-0.5 * d2 / torch.exp(2.0 * th["log_ell"])) \
            + torch.exp(2.0 * th["log_noise"]) * torch.eye(n, dtype=torch.float64)
        L = torch.linalg.cholesky(K)
        alpha = torch.linalg.solve(L.T, torch.linalg.solve(L, yt))
        loss = 0.5 * torch.dot(yt, alpha) + torch.log(torch.diagonal(L)).sum() + 0.5 * n * math.log(2.0 * math.pi)
        gs = torch.autograd.grad(loss, [th[k] for k in keys])
        return loss, dict(zip(keys, gs))
    return call


def scalar_loop(xs: list[float]) -> Callable[[], Any]:
    xt = [_t(v, True) for v in xs]

    def call() -> Any:
        total = torch.zeros((), dtype=torch.float64)
        for i, v in enumerate(xt):
            total = total + v * v * 0.5 + 0.1 * i * v
        return total, list(torch.autograd.grad(total, xt))
    return call


def rosenbrock(xs: list[float]) -> Callable[[], Any]:
    xt = [_t(v, True) for v in xs]

    def call() -> Any:
        total = torch.zeros((), dtype=torch.float64)
        for i in range(len(xt) - 1):
            total = total + 100.0 * (xt[i + 1] - xt[i] ** 2) ** 2 + (1.0 - xt[i]) ** 2
        return total, list(torch.autograd.grad(total, xt))
    return call


def chain(x: np.ndarray) -> Callable[[], Any]:
    xt = _t(x, True)

    def call() -> Any:
        y = xt
        for _ in range(6):
            y = torch.sin(y) * y * 0.5 + y * 0.9
        loss = y.sum()
        return loss, torch.autograd.grad(loss, [xt])[0]
    return call


TORCH: dict[str, Callable[..., Callable[[], Any]]] = {
    "mlp": mlp, "rnn": rnn, "logreg": logreg, "gp": gp, "scalar_loop": scalar_loop,
    "rosenbrock": rosenbrock, "chain": chain}
