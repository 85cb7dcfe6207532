"""Running exported models in onnxruntime, for tests/test_onnx*.py (imported after their
``pytest.importorskip("onnxruntime")``)."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort

from irad.pytree import flatten


def run_model(model: Any, prog: Any, args: tuple[Any, ...]) -> tuple[Any, list[Any]]:
    """onnxruntime's outputs for ``model`` at ``args`` (dynamic leaves, in order)."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    statics = {i for i, _ in prog.forward.statics}
    leaves = [x for i, x in enumerate(flatten((args, {}))[0]) if i not in statics]
    feed = {i.name: np.asarray(x) for i, x in zip(sess.get_inputs(), leaves)}
    return sess, sess.run(None, feed)


def expected(prog: Any, args: tuple[Any, ...]) -> list[Any]:
    """irad's value, then its gradient leaves: what an exported gradient program outputs."""
    v, g = prog(*args)
    return [v] + [x for x in flatten(g)[0] if x is not None]
