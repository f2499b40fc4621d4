"""File primitives the storage modules share: sparse creation, block reservation, durable renames."""

from __future__ import annotations

import fcntl
import os
import secrets
import struct
import weakref
from pathlib import Path
from typing import IO

from mmreplay.errors import StoreLockedError

RESERVE_STEP = 1 << 16  # bytes reserved at a time ahead of the writes into a memory map
RESERVE_WINDOW = 1 << 24  # at most this many bytes before a write are reserved with it


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
        # Bytes before the window were written before this process opened the file (a writer resumes
        # where the last commit ended): only the window is reserved, never a span a header could make
        # as large as a sparse file (a crafted header must not allocate terabytes of disk).
        start = max(self._reserved, end - RESERVE_WINDOW)
        if new_end > start:
            os.posix_fallocate(self._descriptor, start, new_end - start)
        self._reserved = new_end

    def close(self) -> None:
        os.close(self._descriptor)


def acquire_writer_lock(path: Path) -> IO[bytes]:
    """Hold an exclusive lock on ``path`` for the store's one writer; the OS releases it if the process dies.

    The lock belongs to this process only: an open file description's lock (OFD lock, or flock where
    there are none) is shared by every descriptor of it, and a forked child (a ``multiprocessing`` env
    worker, a data loader) inherits one, so the lock would outlive the writer for as long as the child
    lives. After a fork the child's copy of each held lock's descriptor is pointed at /dev/null
    (``_drop_inherited_locks``): only the writer holds it. (Close-on-exec covers exec, not fork.)

    A refused lock says truthfully who holds it: the lock also refuses a second open file of the same
    process, so the locks this process holds are remembered (``_HELD_HERE``) to tell "this process" from
    "another process".
    """
    lock = open(path, "ab")
    try:
        _lock_exclusive(lock.fileno())
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


def _lock_exclusive(descriptor: int) -> None:
    """An exclusive, non-blocking lock of the whole file; ``BlockingIOError`` if it is held elsewhere."""
    if hasattr(fcntl, "F_OFD_SETLK"):
        # struct flock: l_type, l_whence (short), l_start, l_len (off_t), l_pid (0 for OFD locks), padding.
        request = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        try:
            fcntl.fcntl(descriptor, fcntl.F_OFD_SETLK, request)
        except OSError as error:
            if error.errno in (11, 13):  # EAGAIN, EACCES: held by another open file description
                raise BlockingIOError(error.errno, error.strerror) from None
            raise
    else:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _identity(file: IO[bytes]) -> tuple[int, int]:
    status = os.fstat(file.fileno())
    return (status.st_dev, status.st_ino)


# The writer locks this process holds, by the lock file's (device, inode); an entry goes away with its
# file object (closed explicitly, or dropped with an unclosed store). A forked child lets go of them.
_HELD_HERE: weakref.WeakValueDictionary[tuple[int, int], IO[bytes]] = weakref.WeakValueDictionary()


def _drop_inherited_locks() -> None:
    for lock in list(_HELD_HERE.values()):
        if not lock.closed:
            # dup2 keeps the descriptor number valid (the child's file object may close it later) while
            # dropping the child's reference to the locked open file description.
            null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            os.dup2(null, lock.fileno())
            os.close(null)
    _HELD_HERE.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


def file_signature(path: Path) -> tuple[int, int, int]:
    """Identity and version of a file that is replaced by renames: changes with every replacement."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return (0, 0, 0)
    return (status.st_ino, status.st_mtime_ns, status.st_size)
