"""ONNX export and import: ``irad.onnx.export(f, *args) -> onnx.ModelProto``, ``irad.onnx.load``.

Every op of the (optimised, pullback-inlined) graph maps through one table, ``OPS``
(``irad/onnx/ops.py``): primitive name -> a function emitting ONNX nodes.  A rule that stays a
call becomes an ONNX function named after it.  A graph that cannot be exported raises
``ExportError`` listing every op that blocks it, with its source line.  ``load(model) -> Graph``
and ``load_function(model, params=, shapes=)`` read models back (these, and those other tools
write in the standard operator set) as numpy code irad can differentiate.  See docs/onnx.md and
docs/onnx_import.md.

Inside this package ``import onnx`` is the real ``onnx`` package (imports are absolute).
"""
from __future__ import annotations

try:
    import onnx  # noqa: F401  (a presence check with a helpful message)
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(f"irad.onnx needs the onnx package: pip install 'irad[onnx]' ({e})") from e

from .export import blockers, export, export_graph
from .load import load, load_function, to_source
from .ops import OPS, OPSET, ExportError, LoadError

__all__ = ["ExportError", "LoadError", "OPS", "OPSET", "blockers", "export", "export_graph", "load",
           "load_function", "to_source"]
