"""Build of the optional extensions mmreplay._lz4batch and mmreplay._lz4ref; all other metadata lives in pyproject.toml.

The extension links the system's liblz4 and zlib. It is optional: without a compiler or without
liblz4 the build prints a warning, skips it, and mmreplay.codec decodes through python-lz4 instead.
Development build: ``python setup.py build_ext --inplace``.
"""

from __future__ import annotations

import ctypes.util
import os
import sys

from setuptools import Extension, setup


def lz4_link_args() -> dict[str, list[str]]:
    """How to link liblz4 when only its runtime library is installed (no liblz4.so dev symlink).

    ``-llz4`` needs the development symlink (Debian's liblz4-dev); without it, GNU ld, gold and lld
    accept ``-l:liblz4.so.1`` (the soname that ``find_library`` reports); on macOS ``find_library``
    reports a full path, which links as an object.
    """
    found = ctypes.util.find_library("lz4")
    if found is None or sys.platform == "win32":
        return {"libraries": ["lz4"]}  # the link fails and the optional extension is skipped
    if os.path.isabs(found):
        return {"extra_objects": [found]}
    if found in ("liblz4.so", "lz4"):
        return {"libraries": ["lz4"]}
    return {"extra_link_args": [f"-l:{found}"]}


setup(
    ext_modules=[
        Extension(
            "mmreplay._lz4batch",
            sources=["mmreplay/_lz4batch.c"],
            depends=["mmreplay/_frames_common.h"],
            libraries=["z"],
            **lz4_link_args(),  # type: ignore[arg-type]
            optional=True,
        ),
        # Frames compressed against a reference frame (mmreplay.reference_codec); optional like the above.
        Extension(
            "mmreplay._lz4ref",
            sources=["mmreplay/_lz4ref.c"],
            depends=["mmreplay/_frames_common.h"],
            libraries=["z"],
            **lz4_link_args(),  # type: ignore[arg-type]
            optional=True,
        ),
        # The sum tree's hot loops (mmreplay.sum_tree); no libraries; optional like the above.
        Extension("mmreplay._sumtree", sources=["mmreplay/_sumtree.c"], optional=True),
    ]
)
