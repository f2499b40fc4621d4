"""File primitives the storage modules share: sparse creation, block reservation, durable renames."""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from mmreplay.disk.store_directory import (
    FileLocation,
    StoreDirectory,
    StoreFile,
    open_regular,
    sync_folder,
)

RESERVE_STEP = 1 << 16  # bytes reserved at a time ahead of the writes into a memory map


RESERVE_WINDOW = 1 << 24  # at most this many bytes before a write are reserved with it


def create_sparse(path: FileLocation, nbytes: int) -> None:
    """Create a file of ``nbytes`` without allocating its blocks (disk use follows what is written); it
    must not exist (nor a link in its place: ``O_EXCL`` with ``O_NOFOLLOW``)."""
    descriptor = open_regular(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    try:
        os.ftruncate(descriptor, nbytes)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_tree(path: Path | str, *, ignore_errors: bool = True) -> None:
    """Delete the directory ``path`` and everything in it.

    Unlike ``shutil.rmtree``, it holds no directory descriptor of its own between two calls, so an
    interrupt (a ``KeyboardInterrupt`` from a signal handler) at any moment leaves it as a plain
    ``KeyboardInterrupt``: Python 3.11's ``rmtree`` can close the same descriptor twice when a signal
    lands just after its ``os.close`` and then raises ``OSError: [Errno 9] Bad file descriptor`` in place
    of the interrupt (and may close a descriptor another thread has just been given). Links are removed,
    never followed. What an interrupt leaves is removed by the next call for the same path.

    Args:
        path: The directory to delete (a link or a file there is unlinked).
        ignore_errors: Whether what cannot be removed (nothing at ``path`` included) is left silently.

    Raises:
        OSError: Something could not be removed, when ``ignore_errors`` is false.
    """
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):  # a file, or a link (to a directory too)
            os.unlink(path)
            return
        with os.scandir(path) as entries:
            for entry in entries:  # each on its own: what cannot be removed does not stop the rest
                remove_tree(entry.path, ignore_errors=ignore_errors)
        os.rmdir(path)
    except OSError:
        if not ignore_errors:
            raise


def fsync_directory(directory: FileLocation | StoreDirectory) -> None:
    """Make a rename or a new file inside ``directory`` durable."""
    if isinstance(directory, StoreDirectory):
        directory.sync()
        return
    sync_folder(directory)


def sibling_names(target: Path, purposes: Sequence[str]) -> re.Pattern[str]:
    """The names ``make_sibling_directory`` gives beside ``target`` for these purposes, and no other:
    ``.NAME.PURPOSE-`` and 8 lowercase hex digits (a user's ``.NAME.backup-2024`` does not match)."""
    alternatives = "|".join(re.escape(purpose) for purpose in purposes)
    return re.compile(rf"\.{re.escape(target.name)}\.(?:{alternatives})-[0-9a-f]{{8}}")


def make_sibling_directory(target: Path, purpose: str) -> Path:
    """A new, uniquely named, hidden directory beside ``target`` (``.NAME.PURPOSE-XXXXXXXX``, see
    ``sibling_names``) in which a store or dataset is built before it is renamed to ``target``.

    Its mode follows the process umask, like any directory a tool creates (``tempfile.mkdtemp`` would
    make it 0700, and the renamed store unreadable to the other users it may be meant for).
    """
    for _ in range(100):
        candidate = target.parent / f".{target.name}.{purpose}-{secrets.token_hex(4)}"
        try:
            os.mkdir(candidate, 0o777)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"could not find a free name beside {str(target)!r} to build it in")


class BlockReservation:
    """Reserves a memory-mapped file's blocks just ahead of the bytes written into it.

    A store into a memory map whose block cannot be allocated (a full disk) kills the process with
    SIGBUS; reserving with ``posix_fallocate`` first turns that into an ``OSError`` raised before anything
    is written, while the file stays sparse beyond what is used.
    """

    def __init__(self, path: FileLocation, *, descriptor: int | None = None) -> None:
        """``descriptor``: the file already open for writing (this object owns it from now on)."""
        self.path = path
        self._descriptor = open_regular(path, os.O_RDWR) if descriptor is None else descriptor
        self._size = os.fstat(self._descriptor).st_size
        self._reserved = 0

    def ensure(self, end: int) -> None:
        """Make sure bytes ``[0, end)`` have blocks (an ``OSError`` such as ENOSPC if they cannot)."""
        if end <= self._reserved:
            return
        new_end = min(self._size, max(end, self._reserved + RESERVE_STEP))
        # Bytes before the window were written before this process opened the file (a writer resumes
        # where the last commit ended): only the window is reserved, never a span a header could make
        # as large as a sparse file (a crafted header must not allocate terabytes of disk).
        start = max(self._reserved, end - RESERVE_WINDOW)
        if new_end > start:
            os.posix_fallocate(self._descriptor, start, new_end - start)
        self._reserved = new_end

    def close(self) -> None:
        if self._descriptor >= 0:  # forgotten first: an interrupt just after the close must not lead to a second
            descriptor, self._descriptor = self._descriptor, -1
            os.close(descriptor)



def file_signature(path: FileLocation) -> tuple[int, int, int]:
    """Identity and version of a file that is replaced by renames: changes with every replacement."""
    try:
        status = path.lstat() if isinstance(path, StoreFile) else os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # no such file, or a file where its directory should be
        return (0, 0, 0)
    return (status.st_ino, status.st_mtime_ns, status.st_size)
