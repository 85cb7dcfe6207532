"""The README's quickstart is executed: every ```python block runs (in one namespace, as one file
``quickstart.py``) and the ```text block after it must be exactly what it printed.

``IRAD_UPDATE_README=1 python -m pytest tests/test_readme.py`` rewrites the text blocks; read the
diff before committing it.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```\n(?:\n```text\n(.*?)```\n)?", re.S)


def _quickstart() -> tuple[str, str, str]:
    text = README.read_text()
    start = text.index("<!-- quickstart -->")
    end = text.index("<!-- /quickstart -->")
    return text[:start], text[start:end], text[end:]


def run_blocks(section: str) -> list[tuple[str, str | None, str]]:
    ns: dict[str, object] = {"__name__": "quickstart"}
    results = []
    offset = 0
    for m in BLOCK.finditer(section):
        code = m.group(1)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile("\n" * offset + code, "quickstart.py", "exec"), ns)
        offset += code.count("\n")
        results.append((code, m.group(2), buf.getvalue()))
    return results


def test_readme_quickstart_output_is_real():
    head, section, tail = _quickstart()
    results = run_blocks(section)
    assert len(results) >= 3
    if os.environ.get("IRAD_UPDATE_README"):
        parts = ["<!-- quickstart -->\n"]
        for code, _, out in results:
            parts.append(f"```python\n{code}```\n")
            if out:
                parts.append(f"\n```text\n{out}```\n")
            parts.append("\n")
        README.write_text(head + "".join(parts) + tail)
        return
    for code, expected, out in results:
        assert (expected or "") == out, f"README output differs for block:\n{code}"
