"""All-or-nothing creation of a store, file or dataset directory: build it beside its target, rename it in.

An import or export builds its result inside a hidden sibling directory of the target
(``.NAME.PURPOSE-XXXXXXXX``, ``files.make_sibling_directory``; PURPOSE is ``exporting`` or
``importing``) and renames the finished result to the target in one ``rename``: a process killed at any
moment leaves either nothing at the target or the complete result.

The builder holds its directory locked (``flock`` on the directory itself, taken right after making it:
the OS releases it when the process dies). The leftovers of killed builds are exactly those names
(``files.sibling_names``: never a user's ``.pong.h5.backup-2024``), directories and not links, whose
lock is free; the next build for the same target removes them, once its arguments are accepted (a
refused call removes nothing), while a build still running elsewhere is left alone. A cleaner removes a
leftover while holding its lock, and a builder checks after locking that its directory is still the one
at its name, so a directory made just before a cleaner looked is never lost from under its builder: it
is either locked in time or taken for a leftover, and then its builder makes another.

Paths are refused where ``cp`` would refuse them: the target must not exist and its parent directory
must; nothing is created on the way. A build that replaces what is at its target (``replace=True``: a
load into a buffer's own store) exchanges the finished result with it in one step
(``directory_swap.exchange``), so a process killed at any moment leaves the old target or the complete
result there, never neither; the old one, then inside the build directory, goes with it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from mmreplay.disk import directory_swap
from mmreplay.disk.files import fsync_directory, make_sibling_directory, remove_tree, sibling_names

PURPOSES = ("exporting", "importing", "converting", "salvaging", "loading")
_OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ATTEMPTS = 100


def check_new_path(target: Path, what: str) -> None:
    """Refuse ``target`` as ``cp`` would: it must not exist, and its parent directory must. Only checks."""
    if target.exists() or target.is_symlink():
        raise FileExistsError(f"cannot create {what} at {str(target)!r}: the path already exists")
    check_parent(target, what)


def check_parent(target: Path, what: str) -> None:
    """Refuse ``target`` unless its parent is an existing directory. Only checks."""
    parent = target.parent
    if parent.exists() and not parent.is_dir():
        raise NotADirectoryError(f"cannot create {what} at {str(target)!r}: {str(parent)!r} is a file, not a "
                                 "directory")
    if not parent.is_dir():
        raise FileNotFoundError(f"cannot create {what} at {str(target)!r}: the directory {str(parent)!r} does "
                                "not exist (it is not created for you)")


def leftovers(target: Path) -> list[Path]:
    """The build directories beside ``target`` left by killed builds (named by this library, their lock free)."""
    found = []
    for candidate in _candidates(target):
        descriptor = _open_directory(candidate)
        if descriptor is not None:
            try:
                if _lock(descriptor, wait=False) and _is_at(descriptor, candidate):
                    found.append(candidate)
            finally:
                os.close(descriptor)  # and with it the lock
    return sorted(found)


def remove_leftovers(target: Path) -> None:
    """Remove the leftovers of killed builds for ``target``, each while holding its lock."""
    for candidate in _candidates(target):
        descriptor = _open_directory(candidate)
        if descriptor is None:
            continue
        try:
            if _lock(descriptor, wait=False) and _is_at(descriptor, candidate):
                remove_tree(candidate)  # what stays is removed by the next build
        finally:
            os.close(descriptor)


def _candidates(target: Path) -> list[Path]:
    names = sibling_names(target, PURPOSES)
    try:
        entries = os.listdir(target.parent)
    except OSError:
        return []
    return [target.parent / name for name in entries if names.fullmatch(name)]


def _open_directory(path: Path) -> int | None:
    """A descriptor of the directory at ``path`` (never through a link); None if there is none."""
    try:
        return os.open(path, _OPEN_DIRECTORY)
    except OSError:  # gone, a link, or not a directory: not a build directory of this library
        return None


def _lock(descriptor: int, *, wait: bool) -> bool:
    """Take the exclusive lock of a directory's descriptor; False if another holds it (``wait=False``)."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _is_at(descriptor: int, path: Path) -> bool:
    """Whether ``path`` still names the directory that ``descriptor`` is open on."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(descriptor)
    return (status.st_dev, status.st_ino) == (mine.st_dev, mine.st_ino)


def _locked_directory(target: Path, purpose: str) -> tuple[Path, int]:
    """A new build directory beside ``target``, locked: its path and the descriptor that holds the lock."""
    for _ in range(_ATTEMPTS):
        directory = make_sibling_directory(target, purpose)
        descriptor = _open_directory(directory)
        if descriptor is None:
            continue  # taken for a leftover before it could be opened
        _lock(descriptor, wait=True)  # waits only for a cleaner that found it unlocked, while it removes it
        if _is_at(descriptor, directory):
            return directory, descriptor
        os.close(descriptor)
    raise FileExistsError(f"could not make a build directory beside {str(target)!r} (each was removed at once)")


class SiblingBuild:
    """A hidden, locked directory beside ``target`` to build in; ``commit(built)`` renames ``built`` to
    ``target`` (or, with ``replace=True``, exchanges it with the directory there).

    Use it with ``with``: leaving the block removes the directory (and whatever was not committed).
    Creating it checks ``target`` (``check_new_path``; with ``replace``, only its parent), then removes
    the leftovers of killed builds for the same target.
    """

    def __init__(self, target: Path, purpose: str, what: str, *, replace: bool = False) -> None:
        if purpose not in PURPOSES:
            raise ValueError(f"purpose must be one of {PURPOSES}; got {purpose!r}")
        check_parent(target, what) if replace else check_new_path(target, what)
        remove_leftovers(target)
        self.target, self.what, self.replace = target, what, replace
        self.directory, self._descriptor = _locked_directory(target, purpose)

    def commit(self, built: Path) -> None:
        """Put ``built`` (inside the build directory, complete and closed) at the target, durably, and
        remove the build directory: a rename, or where ``replace`` and the target is a directory, an
        atomic exchange, after which the old directory is removed with the build directory.

        Raises:
            FileExistsError: The target appeared while it was built (without ``replace``), or it is
                not a directory (with ``replace``).
            NotImplementedError: The system cannot exchange two directories atomically (the target is
                left as it was).
        """
        present = self.target.exists() or self.target.is_symlink()
        if present and not self.replace:
            raise FileExistsError(f"cannot create {self.what} at {str(self.target)!r}: the path appeared "
                                  "while it was being built")
        if present and (self.target.is_symlink() or not self.target.is_dir()):
            raise FileExistsError(f"cannot replace {str(self.target)!r} with {self.what}: it is not a directory")
        for entry in os.scandir(self.directory):  # all else first: after the rename, nothing is left to remove
            if entry.path != str(built):
                remove_tree(entry.path, ignore_errors=False)
        if present:
            directory_swap.exchange(built, self.target)  # ``built`` names the old directory from now on
            remove_tree(self.directory)  # what stays goes with the next build's leftovers
        else:
            os.rename(built, self.target)
            os.rmdir(self.directory)  # a kill just before leaves an empty leftover: the next build removes it
        fsync_directory(self.target.parent)

    def close(self) -> None:
        if self._descriptor < 0:
            return
        try:
            if _is_at(self._descriptor, self.directory):
                remove_tree(self.directory)
        finally:  # forgotten first: an interrupt just after the close must not lead to a second
            descriptor, self._descriptor = self._descriptor, -1
            os.close(descriptor)

    def __enter__(self) -> SiblingBuild:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
