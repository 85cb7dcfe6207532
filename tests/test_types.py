"""``mypy --strict`` over irad as it is installed (``passes/`` is the package ``irad.passes``).

mypy reads a source tree, and ``passes/`` only becomes ``irad.passes`` when installed, so the check
copies both into one tree first.  ``python tests/test_types.py`` prints mypy's report; the settings
are ``[tool.mypy]`` in pyproject.toml.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_mypy(work: Path) -> tuple[str, int]:
    """mypy's report and exit status for irad, checked in a copy under ``work``."""
    from mypy import api

    tree = work / "irad"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "irad", tree, ignore=skip)
    shutil.copytree(ROOT / "passes", tree / "passes", ignore=skip)
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                "--cache-dir", str(work / "cache"), "--pretty",
                                str(tree)])
    report = (out + err).replace(str(work) + "/", "")
    return report, status


def test_mypy_strict_is_clean(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="the test extra installs mypy; without it the types are not checked")
    report, status = run_mypy(tmp_path)
    assert status == 0, report


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        text, code = run_mypy(Path(d))
    print(text)
    sys.exit(code)
