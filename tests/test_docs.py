"""Every example in docs/*.md is executed, and the output it shows is what it prints.

Within one doc, the ```python blocks run in order in one namespace, compiled as one file named
after the doc (``docs/ir.md`` -> ``ir_md.py``, module ``ir_md``) whose lines are the blocks one
after another, so the ``file:line`` comments of printed graphs only move when an earlier example
changes.  A ```text block right after a python block (a blank line between them is allowed) must
be exactly what that block printed; a block that prints must be followed by one.  A python block
whose first line is ``# not run`` is skipped.

``IRAD_UPDATE_DOCS=1 python -m pytest tests/test_docs.py`` rewrites the text blocks from the real
output; read the diff before committing it.
"""
from __future__ import annotations

import contextlib
import io
import linecache
import os
import random
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
# a python block, then optionally (after at most one blank line) the text block that shows its output
BLOCK = re.compile(r"```python\n(?P<code>.*?)```\n(?:(?P<gap>\n?)```text\n(?P<text>.*?)```\n)?", re.S)
SKIP = "# not run"
# docs of optional extras (pip install irad[onnx], irad[arrays], irad[dask], irad[fast])
NEEDS = {"onnx_import.md": ("onnx", "onnxruntime", "scipy"), "arrays.md": ("array_api_strict",),
         "loops.md": ("onnx", "onnxruntime"),
         "dask.md": ("dask",), "compiled.md": ("numba",)}


def run_doc(path: Path) -> list[tuple[re.Match[str], str]]:
    """Run the python blocks of one doc; (match, what it printed) for each block that ran."""
    module = path.stem + "_md"
    filename = module + ".py"
    mod = types.ModuleType(module)  # NOTE: a real module: dataclasses look theirs up in sys.modules
    sys.modules[module] = mod
    ns: dict[str, object] = mod.__dict__
    np.random.seed(0)
    random.seed(0)
    source = ""
    results = []
    for m in BLOCK.finditer(path.read_text()):
        code = m.group("code")
        if code.startswith(SKIP):
            continue
        offset = source.count("\n")
        source += code
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile("\n" * offset + code, filename, "exec", dont_inherit=True), ns)
        except Exception as e:
            raise AssertionError(f"{path.name}: example raised {type(e).__name__}: {e}\n{code}\n"
                                 f"printed so far:\n{buf.getvalue()}") from e
        out = buf.getvalue()
        results.append((m, out if not out or out.endswith("\n") else out + "\n"))  # a text block ends in a newline
    return results


def update(path: Path, results: list[tuple[re.Match[str], str]]) -> None:
    """Rewrite the text blocks of ``path`` from the real output."""
    text = path.read_text()
    parts, pos = [], 0
    for m, out in results:
        parts.append(text[pos:m.start()])
        parts.append(f"```python\n{m.group('code')}```\n")
        if out:
            gap = "\n" if m.group("gap") is None else m.group("gap")
            parts.append(f"{gap}```text\n{out}```\n")
        pos = m.end()
    parts.append(text[pos:])
    path.write_text("".join(parts))


@pytest.mark.parametrize("path", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_doc_examples_print_what_they_show(path: Path) -> None:
    for module in NEEDS.get(path.name, ()):
        pytest.importorskip(module, reason=f"docs/{path.name} shows an optional extra that needs {module}")
    results = run_doc(path)
    if os.environ.get("IRAD_UPDATE_DOCS"):
        update(path, results)
        return
    for m, out in results:
        shown = m.group("text")
        if shown is None:
            assert not out, f"{path.name}: this example prints but shows no ```text block:\n{m.group('code')}"
        else:
            assert shown == out, f"{path.name}: shown output differs from what this example prints:\n{m.group('code')}"


def test_ir_grammar_is_the_docstring() -> None:
    """docs/ir.md quotes the grammar from irad/ir.py's docstring: the two stay the same."""
    import irad.ir

    shown = (DOCS / "ir.md").read_text().split("From the docstring of `irad/ir.py`:\n\n```text\n")[1].split("```")[0]
    grammar = irad.ir.__doc__.split("::\n\n")[1].split("\n\n")[0]
    assert shown == "".join(line[4:] + "\n" for line in grammar.splitlines())
