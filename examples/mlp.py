"""A two-layer MLP classifier loss, written in plain numpy (the example `irad demo` traces).

``loss(params, x, y)``: tanh hidden layer, softmax cross-entropy against one-hot labels ``y``,
averaged over the batch.  ``params`` is a dict ``{'W1', 'b1', 'W2', 'b2'}``.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def loss(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> Any:
    h = np.tanh(x @ params["W1"] + params["b1"])
    logits = h @ params["W2"] + params["b2"]
    logits = logits - np.max(logits, axis=1, keepdims=True)  # NOTE: keeps exp() from overflowing
    logp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.mean(np.sum(y * logp, axis=1))


def example_args(batch: int = 8, n_in: int = 4, n_hidden: int = 5, n_out: int = 3,
                 seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """``(params, x, y)`` with small random float64 values: x is 8x4, y one-hot 8x3."""
    rng = np.random.default_rng(seed)
    params = {
        "W1": rng.normal(scale=0.5, size=(n_in, n_hidden)),
        "b1": np.zeros(n_hidden),
        "W2": rng.normal(scale=0.5, size=(n_hidden, n_out)),
        "b2": np.zeros(n_out),
    }
    x = rng.normal(size=(batch, n_in))
    y = np.eye(n_out)[rng.integers(0, n_out, size=batch)]
    return params, x, y


if __name__ == "__main__":
    print(loss(*example_args()))
