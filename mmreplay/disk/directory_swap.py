"""Swapping two directories in one atomic step, for ``ReplayStore.clear``.

A store is a directory whose header commits its files; an empty store is a different set of files.
Replacing one by the other with two renames leaves no store at the path between them, so a crash there
would lose both. The kernel can exchange two paths in one step: Linux's ``renameat2`` with
``RENAME_EXCHANGE`` (3.15+, glibc 2.28+) and macOS's ``renamex_np`` with ``RENAME_SWAP``. After the
exchange the path holds the new directory and the other name the old one; a crash leaves one or the
other at the path, never neither.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from pathlib import Path

from mmreplay.disk.files import fsync_directory

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2  # linux/fs.h
_RENAME_SWAP = 2  # macOS sys/stdio.h


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library's symbols, looked up once in the running process (``dlopen(NULL)``: the interpreter
    links libc already). Never ``ctypes.util.find_library``: it runs ``ldconfig -p`` in a child process,
    and ``exchange`` runs under the writer lock, whose open file description a forked child shares until
    it execs (a writer restarted meanwhile found its store locked)."""
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def exchange(first: Path, second: Path) -> None:
    """Atomically exchange two directories (of the same file system), then make it durable.

    ``NotImplementedError`` where the system has no atomic exchange; ``OSError`` if it fails (then nothing
    changed)."""
    libc = _libc()
    if libc is not None and sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        result = libc.renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    elif libc is not None and sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        result = libc.renamex_np(os.fsencode(first), os.fsencode(second), _RENAME_SWAP)
    else:
        raise NotImplementedError(
            f"this system ({sys.platform}) has no atomic exchange of two directories (renameat2 or renamex_np)"
        )
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"cannot exchange {first} and {second}: {os.strerror(error)}")
    fsync_directory(first.parent)
    if second.parent != first.parent:
        fsync_directory(second.parent)
