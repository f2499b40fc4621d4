"""File primitives the storage modules share: sparse creation, block reservation, durable renames."""

from __future__ import annotations

import fcntl
import os
import secrets
import weakref
from pathlib import Path
from typing import IO

from mmreplay.errors import StoreLockedError

RESERVE_STEP = 1 << 16  # bytes reserved at a time ahead of the writes into a memory map


def create_sparse(path: Path, nbytes: int) -> None:
    """Create a file of ``nbytes`` without allocating its blocks (disk use follows what is written)."""
    with open(path, "xb") as file:
        file.truncate(nbytes)
        os.fsync(file.fileno())


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new file inside ``directory`` durable."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def make_sibling_directory(target: Path, purpose: str) -> Path:
    """A new, uniquely named, hidden directory beside ``target`` (``.NAME.PURPOSE-XXXXXXXX``) in which a
    store or dataset is built before it is renamed to ``target``.

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

    def __init__(self, path: Path) -> None:
        self.path = path
        self._descriptor = os.open(path, os.O_RDWR)
        self._size = os.fstat(self._descriptor).st_size
        self._reserved = 0

    def ensure(self, end: int) -> None:
        """Make sure bytes ``[0, end)`` have blocks (an ``OSError`` such as ENOSPC if they cannot)."""
        if end <= self._reserved:
            return
        new_end = min(self._size, max(end, self._reserved + RESERVE_STEP))
        os.posix_fallocate(self._descriptor, self._reserved, new_end - self._reserved)
        self._reserved = new_end

    def close(self) -> None:
        os.close(self._descriptor)


def acquire_writer_lock(path: Path) -> IO[bytes]:
    """Hold an exclusive lock on ``path`` for the store's one writer; the OS releases it if the process dies.

    A refused lock says truthfully who holds it: flock also refuses a second open file of the same
    process, so the locks this process holds are remembered (``_HELD_HERE``) to tell "this process" from
    "another process".
    """
    lock = open(path, "ab")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        identity = _identity(lock)
        lock.close()
        holder = _HELD_HERE.get(identity)
        if holder is not None and not holder.closed:
            raise StoreLockedError(
                f"the store at {str(path.parent)!r} is already open for writing in this process "
                "(close that store first, or open this one with mode 'r' to read)"
            ) from None
        raise StoreLockedError(
            f"the store at {str(path.parent)!r} is already open for writing by another process "
            "(open it with mode 'r' to read)"
        ) from None
    _HELD_HERE[_identity(lock)] = lock
    return lock


def _identity(file: IO[bytes]) -> tuple[int, int]:
    status = os.fstat(file.fileno())
    return (status.st_dev, status.st_ino)


# The writer locks this process holds, by the lock file's (device, inode); an entry goes away with its
# file object (closed explicitly, or dropped with an unclosed store).
_HELD_HERE: weakref.WeakValueDictionary[tuple[int, int], IO[bytes]] = weakref.WeakValueDictionary()


def file_signature(path: Path) -> tuple[int, int, int]:
    """Identity and version of a file that is replaced by renames: changes with every replacement."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return (0, 0, 0)
    return (status.st_ino, status.st_mtime_ns, status.st_size)
