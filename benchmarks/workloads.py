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


WORKLOADS = [
    Workload("mlp", mlp_loss, mlp_hand, mlp_args, 0, "128x64 inputs, 128 hidden, 10 classes"),
    Workload("scalar_loop", scalar_loop, scalar_loop_hand,
             lambda rng: ([float(v) for v in rng.normal(size=100)],), 0, "100 Python floats"),
]
