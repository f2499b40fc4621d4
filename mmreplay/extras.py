"""The optional parts of mmreplay and the extra that installs each one's dependencies: importing
``mmreplay.sb3``, ``mmreplay.recorder``, ``mmreplay.ray``, ``mmreplay.rllib``, ``mmreplay.torchrl`` or ``mmreplay.jax``
without them raises a ``ModuleNotFoundError`` that names the extra to install, rather than a bare
missing module."""

from __future__ import annotations

import importlib.util

# Said where torch is missing: pip's default torch on Linux is the CUDA build (GBs of NVIDIA libraries).
CPU_TORCH = (
    "; for the CPU-only torch wheel, install torch first: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu"
)


def require(feature: str, *, extra: str, modules: tuple[str, ...]) -> None:
    """Raise ``ModuleNotFoundError`` naming ``extra`` when any of ``modules`` (top-level packages that
    ``feature`` imports) is not installed. A module that is installed but fails to import raises its
    own error at the import that follows."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ModuleNotFoundError(
            f"{feature} needs {' and '.join(missing)}, not installed here: pip install 'mmreplay[{extra}]' "
            f"(in a clone: pip install '.[{extra}]')" + (CPU_TORCH if "torch" in missing else ""),
            name=missing[0],
        )
