"""The optional compiled extensions: imported when they were built, hidden when MMREPLAY_PURE_PYTHON=1.

Each has a pure-Python fallback with identical results; hiding them lets the test suite check that path.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def load(name: str) -> ModuleType | None:
    """``mmreplay.<name>``, or None when it is hidden or not built (its caller then runs Python code)."""
    if os.environ.get("MMREPLAY_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(f"mmreplay.{name}")
    except ImportError:  # not built (no compiler, or no liblz4 at build time), or liblz4.so.1 missing now
        return None
