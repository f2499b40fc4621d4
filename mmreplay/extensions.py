"""The optional compiled extensions: imported when they were built, hidden when MMREPLAY_PURE_PYTHON=1.

Each has a pure-Python fallback with identical results; hiding them lets the test suite check that path.
An extension that is missing for another reason (no C compiler or no liblz4 when mmreplay was installed,
or liblz4 gone since) makes mmreplay slower without changing a result, so ``warn_if_not_built`` tells the
user once, when the package is imported, what is slower and how to build them.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

# Every compiled extension of the package (setup.py builds them; each is optional).
NAMES = ("_lz4batch", "_sumtree")
# The interface each extension's functions must have, its module file's INTERFACE (mmreplay/_c/*_module.c;
# bump both together when a function is added or its arguments change). A build from older sources, left
# in place by an update that did not rebuild, is refused like a missing one: its fallback runs and the
# warning says to rebuild.
INTERFACES = {"_lz4batch": 14, "_sumtree": 3}
HIDE_VARIABLE = "MMREPLAY_PURE_PYTHON"

# Measured on this project's machine (2 vCPUs shared with other jobs), compiled against
# MMREPLAY_PURE_PYTHON=1 on real Pong frames, one env: benchmarks/bench_core.py at capacity 30,000 on a
# quiet machine, add 76,005 against 19,283 transitions/s (3.9x), sample(32) 4,578 against 1,597
# batches/s (2.9x); in alternating fresh processes on a loaded one, medians of 4 rounds, add 1.8x,
# sample 2.6x (the compiled code's threads gain less when the cores are busy).
SLOWER = "adding transitions is about 2-4x slower and sampling about 2-3x slower"

FIX = """\
To build them, install a C compiler and the lz4 and zlib libraries' development packages, then reinstall mmreplay:
  Debian/Ubuntu:  sudo apt-get install build-essential liblz4-dev zlib1g-dev
  Fedora:         sudo dnf install gcc lz4-devel zlib-devel
  macOS:          xcode-select --install && brew install lz4
  then, in the clone:  pip install --force-reinstall --no-deps -e .   (or: bash scripts/setup.sh --force)
'python -m mmreplay --version' says whether compiled code is in use."""


class PerformanceWarning(UserWarning):
    """mmreplay runs its pure-Python code because a compiled extension could not be imported.

    Results are the same; only speed differs. Issued once, when ``mmreplay`` is first imported.
    """


def hidden() -> bool:
    """Whether MMREPLAY_PURE_PYTHON hides the extensions (any value but empty or ``0``)."""
    return os.environ.get(HIDE_VARIABLE, "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    """``mmreplay.<name>``, or None when it is hidden or not built (its caller then runs Python code)."""
    if hidden():
        return None
    try:
        return _import(name)
    except ImportError:  # not built (no compiler, or no liblz4 at build time), liblz4.so.1 missing now, or stale
        return None


def _import(name: str) -> ModuleType:
    """``mmreplay.<name>``; ``ImportError`` when it was built from sources with another interface."""
    module = importlib.import_module(f"mmreplay.{name}")
    built = getattr(module, "INTERFACE", None)
    if built != INTERFACES[name]:
        raise ImportError(f"built from other sources than this mmreplay's (interface {built}, expected "
                          f"{INTERFACES[name]}): rebuild it")
    return module


def import_errors() -> dict[str, str]:
    """Each extension that cannot be imported (hidden ones aside), with why: ``not built`` or the loader's error.

    A failed import is not cached by Python, so this tries again; call it rarely (at package import,
    from the command line), not on a hot path.
    """
    if hidden():
        return {}
    errors = {}
    for name in NAMES:
        try:
            _import(name)
        except ModuleNotFoundError as error:
            errors[name] = "not built" if error.name == f"mmreplay.{name}" else str(error)
        except ImportError as error:  # built, but stale, or a library it links cannot be loaded (liblz4.so.1)
            errors[name] = str(error)
    return errors


def summary() -> str:
    """One line on whether compiled code is in use, for ``mmreplay --version`` and ``mmreplay info``."""
    if hidden():
        return f"pure Python (the compiled extensions are hidden by {HIDE_VARIABLE}=1)"
    errors = import_errors()
    if not errors:
        return f"compiled extensions in use ({', '.join(NAMES)})"
    return f"pure Python for {', '.join(errors)} ({_reasons(errors)}): {SLOWER}"


def warn_if_not_built() -> None:
    """Issue one ``PerformanceWarning`` naming what is slower and how to fix it, if an extension is missing.

    ``mmreplay/__init__.py`` calls this once per process; a hidden extension is not missing.
    """
    errors = import_errors()
    if not errors:
        return
    message = (f"mmreplay is using its pure-Python code: the compiled extension(s) {', '.join(errors)} "
               f"could not be imported ({_reasons(errors)}). Results are identical, but {SLOWER}.\n{FIX}\n"
               f"(Setting {HIDE_VARIABLE}=1 hides the extensions on purpose, and this warning with them.)")
    warnings.warn(message, PerformanceWarning, stacklevel=3)


def _reasons(errors: dict[str, str]) -> str:
    reasons = sorted(set(errors.values()))
    return reasons[0] if len(reasons) == 1 else "; ".join(f"{name}: {why}" for name, why in errors.items())
