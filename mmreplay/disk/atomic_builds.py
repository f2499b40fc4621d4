"""All-or-nothing creation of a store, file or dataset directory: build it beside its target, rename it in.

An import or export builds its result inside a hidden sibling directory of the target
(``.NAME.PURPOSE-XXXXXXXX``, ``files.make_sibling_directory``) and renames the finished result to the
target in one ``rename``: a process killed at any moment leaves either nothing at the target or the
complete result. The sibling holds a lock file that its builder keeps locked (flock: the OS releases it
when the process dies), so the next build for the same target recognizes the leftovers of a killed run
(their lock is free) and removes them, while a build still running elsewhere is left alone.

Paths are refused where ``cp`` would refuse them: the target must not exist and its parent directory
must; nothing is created on the way.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path
from types import TracebackType

from mmreplay.disk.files import fsync_directory, make_sibling_directory

LOCK_NAME = ".building.lock"
# A sibling without a lock file is a build that has only just begun, or one killed before it could make
# the lock: it counts as a leftover once it is this old.
_UNLOCKED_GRACE_S = 60.0


def check_new_path(target: Path, what: str) -> None:
    """Refuse ``target`` as ``cp`` would: it must not exist, and its parent directory must. The leftovers
    of killed builds for ``target`` are removed first (also when ``target`` is then refused: a build
    killed after its rename leaves a sibling beside a complete result)."""
    if target.parent.is_dir():
        for stale in leftovers(target):
            shutil.rmtree(stale, ignore_errors=True)
    if target.exists() or target.is_symlink():
        raise FileExistsError(f"cannot create {what} at {str(target)!r}: the path already exists")
    parent = target.parent
    if parent.exists() and not parent.is_dir():
        raise NotADirectoryError(f"cannot create {what} at {str(target)!r}: {str(parent)!r} is a file, not a "
                                 "directory")
    if not parent.is_dir():
        raise FileNotFoundError(f"cannot create {what} at {str(target)!r}: the directory {str(parent)!r} does "
                                "not exist (it is not created for you)")


def leftovers(target: Path) -> list[Path]:
    """Siblings of ``target`` left by killed builds (their builder's lock is free)."""
    found = []
    for candidate in target.parent.glob(f".{target.name}.*-*"):
        if candidate.is_dir() and not _in_use(candidate):
            found.append(candidate)
    return sorted(found)


def _in_use(directory: Path) -> bool:
    lock = directory / LOCK_NAME
    try:
        handle = open(lock, "rb")
    except FileNotFoundError:
        try:
            return time.time() - directory.stat().st_mtime < _UNLOCKED_GRACE_S
        except FileNotFoundError:
            return True  # removed meanwhile: nothing to do
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


class SiblingBuild:
    """A hidden directory beside ``target`` to build in; ``commit(built)`` renames ``built`` to ``target``.

    Use it with ``with``: leaving the block removes the directory (and whatever was not committed).
    Creating it removes the leftovers of killed builds for the same target (``check_new_path``).
    """

    def __init__(self, target: Path, purpose: str, what: str) -> None:
        check_new_path(target, what)
        self.target, self.what = target, what
        self.directory = make_sibling_directory(target, purpose)
        self._lock = open(self.directory / LOCK_NAME, "ab")
        fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX)

    def commit(self, built: Path) -> None:
        """Rename ``built`` (inside the build directory, complete and closed) to the target, durably."""
        if self.target.exists() or self.target.is_symlink():
            raise FileExistsError(f"cannot create {self.what} at {str(self.target)!r}: the path appeared "
                                  "while it was being built")
        os.rename(built, self.target)
        fsync_directory(self.target.parent)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        self._lock.close()

    def __enter__(self) -> SiblingBuild:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
