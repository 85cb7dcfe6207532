"""Lowering targets beside the numpy program, and the setting that chooses among them.

The numpy program (``irad.lower``) is the reference and the first tier: every program starts
there.  ``irad.backends.numba`` is the compiled tier, swapped in by ``irad.tiers`` once a program
is hot.  Which tiers may run is ``CONFIG.backend``:

- ``"numpy"``: the numpy program only;
- ``"numba"``: the compiled tier when hot (numba must be installed: ``pip install 'irad[fast]'``);
- ``"auto"`` (the default): ``"numba"`` where numba is installed, else ``"numpy"``.

Set it with ``irad.config(backend=...)`` or the ``IRAD_BACKEND`` environment variable (read once,
when irad is imported).  Programs read it when they are compiled.
"""
from __future__ import annotations

import importlib.util
import os
import warnings
from dataclasses import dataclass

from ..errors import ConfigError

BACKENDS = ("numpy", "numba", "auto")


def parse_backend(spec: str | None) -> str:
    """A backend's name, checked: ``numba`` needs numba installed."""
    name = (spec or "auto").strip().lower()
    if name not in BACKENDS:
        raise ConfigError(f"unknown irad backend {spec!r}; the backends are {', '.join(BACKENDS)} "
                          "(e.g. IRAD_BACKEND=numpy)")
    if name == "numba" and not numba_installed():
        raise ConfigError("irad backend 'numba' needs numba: pip install 'irad[fast]' (or choose 'auto' or 'numpy')")
    return name


_INSTALLED: list[bool] = []  # numba_installed()'s answer, once asked


def numba_installed() -> bool:
    """Is numba importable?  (Found without importing it: its import costs ~0.3 s.)"""
    if not _INSTALLED:
        _INSTALLED.append(importlib.util.find_spec("numba") is not None)
    return _INSTALLED[0]


@dataclass
class Config:
    """``backend``: one of ``BACKENDS``."""

    backend: str = "auto"

    def compiled_tier(self) -> bool:
        """Do hot programs get the compiled tier?"""
        return self.backend == "numba" or (self.backend == "auto" and numba_installed())


def _from_env() -> Config:
    try:
        return Config(parse_backend(os.environ.get("IRAD_BACKEND")))
    except ConfigError as e:  # NOTE: a bad variable must not make `import irad` fail; say so, run on numpy
        warnings.warn(f"IRAD_BACKEND ignored: {e}", stacklevel=2)
        return Config("numpy")


#: owned by this module; ``irad.config(backend=...)`` changes it
CONFIG = _from_env()
