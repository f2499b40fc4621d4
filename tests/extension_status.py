"""Why a compiled extension is not in use, in the words of the tests that skip for it.

The pure-Python pass of scripts/test.sh hides built extensions on purpose (MMREPLAY_PURE_PYTHON=1); a
checkout without a compiler or liblz4 lacks them. The two need different actions, so skips name which.
"""

from __future__ import annotations

import os


def hidden() -> bool:
    """MMREPLAY_PURE_PYTHON hides the extensions, as mmreplay.extensions reads it."""
    return os.environ.get("MMREPLAY_PURE_PYTHON", "") not in ("", "0")


def absent_reason(name: str) -> str:
    """The skip reason for a test that needs ``mmreplay.<name>`` when that module is not loaded."""
    if hidden():
        return f"mmreplay.{name} is hidden by MMREPLAY_PURE_PYTHON (the pure-Python pass)"
    return f"mmreplay.{name} is not built (run `python setup.py build_ext --inplace`)"
