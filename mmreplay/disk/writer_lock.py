"""The writer lock: one writer per store, held by this process alone (not by forked children), released
by the OS when the process dies.
"""

from __future__ import annotations

import fcntl
import os
import struct
import weakref
from typing import IO

from mmreplay.disk.store_directory import FileLocation, open_regular
from mmreplay.errors import StoreLockedError


def acquire_writer_lock(path: FileLocation) -> IO[bytes]:
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
    # Not through a link, and never a FIFO (whose open for writing would block until a reader came).
    lock = os.fdopen(open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")
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


def release_writer_lock(lock: IO[bytes]) -> None:
    """Let go of a writer lock: unlocked, then closed. The unlock releases the lock of the open file
    description, which a forked child that has not yet run ``_drop_inherited_locks`` (on a busy machine it
    may not have been scheduled since the fork) still shares: closing alone would leave the store locked
    until that child runs or exits."""
    try:
        if not lock.closed:
            _unlock(lock.fileno())
    finally:
        lock.close()


def _unlock(descriptor: int) -> None:
    """Release ``_lock_exclusive``'s lock for every descriptor of the open file description."""
    if hasattr(fcntl, "F_OFD_SETLK"):
        request = struct.pack("hhqqi4x", fcntl.F_UNLCK, os.SEEK_SET, 0, 0, 0)
        fcntl.fcntl(descriptor, fcntl.F_OFD_SETLK, request)
    else:
        fcntl.flock(descriptor, fcntl.LOCK_UN)


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
