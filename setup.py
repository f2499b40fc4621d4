"""Build of the optional extensions mmreplay._lz4batch and _sumtree; all other metadata lives in pyproject.toml.

Their C sources lie in mmreplay/_c/, one source and header per job, in folders by family: _lz4batch builds
codec/, ring/, rows/ and pool/ (and links the system's liblz4 and zlib), _sumtree builds sampling/. Each is optional: without a compiler or without
liblz4 the build skips it, prints at the end what is slower and how to fix it, and mmreplay runs its
pure-Python code instead (and warns at import). Development build: ``python setup.py build_ext --inplace``.
"""

from __future__ import annotations

import ctypes.util
import os
import runpy
import subprocess
import sys
import warnings
from glob import glob
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# What is slower and how to fix it: the same words as the import-time warning (mmreplay/extensions.py,
# standard library only, read without importing the package and its dependencies).
EXTENSIONS = runpy.run_path(str(Path(__file__).resolve().parent / "mmreplay" / "extensions.py"))


class build_optional_ext(build_ext):
    """build_ext that, after building, says clearly which optional extensions failed and how to fix it.

    setuptools only mentions a failed optional extension in the middle of the compiler's output, which
    pip hides unless ``-v``. This says it last, as a ``UserWarning``: a recent pip (26.3 here) shows the
    build backend's warnings at the end of even a quiet install, and ``python setup.py`` prints it.
    """

    def finalize_options(self) -> None:
        super().finalize_options()
        # One extension at a time: the lz4 extensions share sources, and two compiles of one source at
        # once (build_ext --parallel) would write the same object file in build_temp.
        self.parallel = None

    def run(self) -> None:
        self.failed: list[str] = []
        super().run()
        if self.failed:
            warnings.warn(f"\nmmreplay: the compiled extension(s) {', '.join(self.failed)} could not be built. "
                          f"mmreplay works without them, with the same results, but {EXTENSIONS['SLOWER']}.\n"
                          f"{EXTENSIONS['FIX']}", UserWarning, stacklevel=1)

    def build_extension(self, ext: Extension) -> None:
        if self.compiler.compiler_type == "unix" and "-fvisibility=hidden" not in ext.extra_compile_args:
            # Only PyInit_* is exported (PyMODINIT_FUNC marks it visible): the jobs' functions, shared
            # between source files, are then resolved inside the extension, not through its symbol table.
            ext.extra_compile_args = [*ext.extra_compile_args, "-fvisibility=hidden"]
        try:
            super().build_extension(ext)
        except Exception:
            if ext.optional:
                self.failed.append(ext.name.rpartition(".")[2])
            raise


def lz4_link_args() -> dict[str, list[str]]:
    """How to link liblz4 when only its runtime library is installed (no liblz4.so dev symlink).

    ``-llz4`` needs the development symlink (Debian's liblz4-dev); without it, GNU ld, gold and lld
    accept ``-l:liblz4.so.1`` (the soname that ``find_library`` reports); on macOS Homebrew's lz4 is
    linked from ``brew --prefix lz4``, else ``find_library`` reports a full path, which links as an object.
    """
    if sys.platform == "darwin":
        # Homebrew on Apple silicon keeps its libraries in /opt/homebrew/lib, which the linker does not search.
        try:
            prefix = subprocess.run(["brew", "--prefix", "lz4"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            prefix = None
        if prefix is not None and prefix.returncode == 0 and os.path.isdir(f"{prefix.stdout.strip()}/lib"):
            return {"libraries": ["lz4"], "library_dirs": [f"{prefix.stdout.strip()}/lib"]}
    found = ctypes.util.find_library("lz4")
    if found is None or sys.platform == "win32":
        return {"libraries": ["lz4"]}  # the link fails and the optional extension is skipped
    if os.path.isabs(found):
        return {"extra_objects": [found]}
    if found in ("liblz4.so", "lz4"):
        return {"libraries": ["lz4"]}
    return {"extra_link_args": [f"-l:{found}"]}


def sources(*folders: str) -> list[str]:
    """The C files of these folders of mmreplay/_c (a folder's sources, or a file of the top folder)."""
    found: list[str] = []
    for folder in folders:
        found += sorted(glob(f"mmreplay/_c/{folder}/*.c")) if not folder.endswith(".c") else [f"mmreplay/_c/{folder}"]
    return found


HEADERS = sorted(glob("mmreplay/_c/*.h") + glob("mmreplay/_c/*/*.h"))  # a changed header rebuilds every extension
INCLUDE = ["mmreplay/_c"]  # sources include their headers by folder: "codec/crc32.h"


def lz4_extension(name: str, folders: tuple[str, ...], lz4: dict[str, list[str]]) -> Extension:
    """An optional extension of these folders that links liblz4 (``lz4``: ``lz4_link_args()``) and zlib.

    The libraries are merged: ``lz4`` may name liblz4 among ``libraries`` too (no liblz4 found, the
    development symlink, Homebrew), and passing that beside zlib's would be a TypeError of setup.py
    itself, not a skipped extension.
    """
    link = {key: list(values) for key, values in lz4.items()}
    libraries = [*link.pop("libraries", []), "z"]
    return Extension(
        name, sources=sources(*folders), depends=HEADERS, include_dirs=INCLUDE, libraries=libraries, optional=True,
        **link,  # type: ignore[arg-type]
    )


LZ4 = lz4_link_args()

setup(
    cmdclass={"build_ext": build_optional_ext},
    ext_modules=[
        lz4_extension("mmreplay._lz4batch", ("lz4batch_module.c", "argument_arrays.c", "codec", "ring", "rows", "pool"),
                      LZ4),
        # The samplers' hot loops (mmreplay.sampling.sum_tree, samplers); the C library's pow; optional like the above.
        Extension("mmreplay._sumtree", sources=sources("sampling"), depends=HEADERS, include_dirs=INCLUDE,
                  libraries=["m"], optional=True),
    ]
)
