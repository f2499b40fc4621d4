"""A store is one directory, held by its descriptor from open to close; its files are opened relative to it.

``StoreDirectory.open`` resolves the path once, to a real absolute path, and opens the directory; every
file of the store is then opened relative to that descriptor with ``O_NOFOLLOW`` and ``O_NONBLOCK`` and
refused unless ``fstat`` finds a regular file. So a ``chdir`` cannot move a store's files, a symbolic link
in a store that arrived as a tarball cannot send a write outside it (``fields.tbl -> ../victim.txt``), and
a FIFO in place of a segment or ``writer.lock`` cannot block an open or a read forever: each is refused
with a ``CorruptStoreError`` naming the file and what it is.

``directory / name`` is a ``StoreFile``: the storage modules use it as they would a ``Path`` (``name``,
``stem``, ``exists``, ``unlink``, ``glob``), but it has no ``__fspath__``: it opens only through
``open_regular`` and ``map_array``, relative to the directory's descriptor. Those two also take a plain
``Path`` (a single file outside a store, as tests use), opened the same way relative to its parent.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from mmreplay.errors import CorruptStoreError

_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (for the error that refuses it)."""
    for test, words in (
        (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return words
    return "not a file this library makes"


class StoreDirectory:
    """The open directory of one store: ``path`` (real and absolute, resolved at open) and ``descriptor``.

    ``moved()`` says whether the path no longer names the directory held (a writer's ``clear`` exchanged
    a new store into its place): a reader's identity check, made on what it holds, never on a name."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self.descriptor = descriptor
        status = os.fstat(descriptor)
        self.identity = (status.st_dev, status.st_ino)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> StoreDirectory:
        """Open the directory at ``path`` (links in it resolved once, here); ``FileNotFoundError`` or
        ``NotADirectoryError`` where there is none."""
        real = Path(os.path.realpath(os.fspath(path)))
        return cls(real, os.open(real, _DIRECTORY_FLAGS))

    @property
    def closed(self) -> bool:
        return self.descriptor < 0

    def __truediv__(self, name: str) -> StoreFile:
        return StoreFile(self, name)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"StoreDirectory({str(self.path)!r})"

    def glob(self, pattern: str) -> list[StoreFile]:
        """The entries of this directory whose names match ``pattern`` (as ``StoreFile.glob``)."""
        return StoreFile(self, "").glob(pattern)

    def moved(self) -> bool:
        """Whether the path names another directory (or none) than the one this object holds."""
        try:
            status = os.stat(self.path)
        except OSError:
            return True
        return (status.st_dev, status.st_ino) != self.identity

    def open_file(self, name: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
        """A descriptor of the regular file ``name`` (``/``-separated below this directory), opened without
        following a link and without blocking; ``CorruptStoreError`` naming it where it is anything but a
        regular file, ``FileNotFoundError`` where it is missing (and ``O_CREAT`` not given)."""
        *folders, last = name.split("/")
        parent = self._open_folders(folders)
        try:
            try:
                descriptor = os.open(last, flags | _OPEN_FLAGS, mode, dir_fd=parent)
            except OSError as error:
                # ELOOP: a link (O_NOFOLLOW); ENXIO: a FIFO opened for writing, or a socket.
                if error.errno in (errno.ELOOP, errno.ENXIO, errno.EMLINK, errno.EISDIR, errno.EOPNOTSUPP):
                    kind = kind_of(os.stat(last, dir_fd=parent, follow_symlinks=False).st_mode)
                    raise CorruptStoreError(f"{self.path / name} is {kind}, not a regular file") from None
                raise
        finally:
            if parent != self.descriptor:
                os.close(parent)
        try:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode):
                raise CorruptStoreError(f"{self.path / name} is {kind_of(status.st_mode)}, not a regular file")
            # A regular file ignores O_NONBLOCK; cleared all the same, for whoever inherits the descriptor.
            os.set_blocking(descriptor, True)
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor

    def open_folder(self, name: str) -> int:
        """A descriptor of the directory ``name`` below this one (not a link); the caller closes it."""
        return self._open_folders(name.split("/")) if name else os.dup(self.descriptor)

    def _open_folders(self, folders: list[str]) -> int:
        descriptor = self.descriptor
        walked: list[str] = []
        try:
            for folder in folders:
                walked.append(folder)
                try:
                    inner = os.open(folder, _DIRECTORY_FLAGS, dir_fd=descriptor)
                except OSError as error:
                    if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    kind = kind_of(os.stat(folder, dir_fd=descriptor, follow_symlinks=False).st_mode)
                    raise CorruptStoreError(
                        f"{self.path.joinpath(*walked)} is {kind}, not a directory"
                    ) from None
                # Moved on before the close: an interrupt just after it must not close it again below.
                outer, descriptor = descriptor, inner
                if outer != self.descriptor:
                    os.close(outer)
        except BaseException:
            if descriptor != self.descriptor:
                os.close(descriptor)
            raise
        return descriptor

    def lstat(self, name: str) -> os.stat_result:
        """``name``'s status, of the entry itself (a link is not followed)."""
        *folders, last = name.split("/")
        parent = self._open_folders(folders)
        try:
            return os.stat(last, dir_fd=parent, follow_symlinks=False)
        finally:
            if parent != self.descriptor:
                os.close(parent)

    def names(self, folder: str = "") -> list[str]:
        """The names in ``folder`` (this directory itself by default)."""
        descriptor = self.open_folder(folder)
        try:
            return os.listdir(descriptor)
        finally:
            os.close(descriptor)

    def unlink(self, name: str, *, missing_ok: bool = False) -> None:
        *folders, last = name.split("/")
        parent = self._open_folders(folders)
        try:
            os.unlink(last, dir_fd=parent)
        except FileNotFoundError:
            if not missing_ok:
                raise
        finally:
            if parent != self.descriptor:
                os.close(parent)

    def mkdir(self, name: str) -> None:
        os.mkdir(name, 0o777, dir_fd=self.descriptor)

    def replace(self, source: str, target: str) -> None:
        """Rename ``source`` over ``target``, both in this directory (atomic)."""
        os.replace(source, target, src_dir_fd=self.descriptor, dst_dir_fd=self.descriptor)

    def sync(self, folder: str = "") -> None:
        """Make renames and new files in ``folder`` (this directory by default) durable."""
        descriptor = self.open_folder(folder)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def close(self) -> None:
        if self.descriptor >= 0:
            descriptor, self.descriptor = self.descriptor, -1
            os.close(descriptor)


class StoreFile:
    """A name below a ``StoreDirectory``, used as the storage modules use a ``Path`` (``str`` is the real
    path, for messages) but opened only relative to the directory's descriptor."""

    def __init__(self, root: StoreDirectory, relative: str) -> None:
        self.root = root
        self.relative = relative

    def __truediv__(self, name: str) -> StoreFile:
        return StoreFile(self.root, f"{self.relative}/{name}" if self.relative else name)

    def __str__(self) -> str:
        return str(self.root.path / self.relative)

    def __repr__(self) -> str:
        return f"StoreFile({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoreFile) and (other.root, other.relative) == (self.root, self.relative)

    def __hash__(self) -> int:
        return hash((id(self.root), self.relative))

    @property
    def name(self) -> str:
        return self.relative.rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name.lstrip(".") else self.name

    @property
    def parent(self) -> StoreFile:
        return StoreFile(self.root, self.relative.rsplit("/", 1)[0] if "/" in self.relative else "")

    def lstat(self) -> os.stat_result:
        return self.root.lstat(self.relative)

    def exists(self) -> bool:
        try:
            self.lstat()
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def is_file(self) -> bool:
        try:
            return stat.S_ISREG(self.lstat().st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def unlink(self, missing_ok: bool = False) -> None:
        self.root.unlink(self.relative, missing_ok=missing_ok)

    def mkdir(self) -> None:
        *folders, last = self.relative.split("/")
        parent = self.root._open_folders(folders)
        try:
            os.mkdir(last, 0o777, dir_fd=parent)
        finally:
            if parent != self.root.descriptor:
                os.close(parent)

    def glob(self, pattern: str) -> list[StoreFile]:
        """The entries of this folder whose names match ``pattern`` (one level, as ``Path.glob``'s)."""
        return [self / name for name in sorted(self.root.names(self.relative)) if fnmatch.fnmatchcase(name, pattern)]

    def sync(self) -> None:
        """fsync this folder (a new file or a rename in it made durable)."""
        self.root.sync(self.relative)


FileLocation = Path | StoreFile


def open_regular(location: FileLocation, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of the regular file at ``location``, opened as ``StoreDirectory.open_file`` opens: a
    ``StoreFile`` relative to its store's descriptor, a plain ``Path`` relative to its parent's."""
    if isinstance(location, StoreFile):
        return location.root.open_file(location.relative, flags, mode)
    parent = StoreDirectory(location.parent, os.open(location.parent, _DIRECTORY_FLAGS & ~os.O_NOFOLLOW))
    try:
        return parent.open_file(location.name, flags, mode)
    finally:
        parent.close()


def file_blocks(location: FileLocation) -> int:
    """The 512-byte blocks allocated to the file at ``location`` (a link's own, never its target's)."""
    status = location.lstat() if isinstance(location, StoreFile) else os.stat(location, follow_symlinks=False)
    return int(status.st_blocks)


def sync_folder(location: FileLocation) -> None:
    """fsync the folder ``location`` (a ``StoreFile`` naming a folder, or a plain ``Path``)."""
    if isinstance(location, StoreFile):
        location.sync()
        return
    descriptor = os.open(location, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def open_sized(location: FileLocation, expected: int, *, writable: bool, what: str) -> int:
    """A descriptor of the regular file at ``location``, which must hold at least ``expected`` bytes: a
    missing or shorter file is a ``CorruptStoreError``, ``"{location}: {what} is missing or shorter than N
    bytes"``."""
    try:
        descriptor = open_regular(location, os.O_RDWR if writable else os.O_RDONLY)
    except FileNotFoundError:
        raise CorruptStoreError(f"{location}: {what} is missing or shorter than {expected} bytes") from None
    if os.fstat(descriptor).st_size < expected:
        os.close(descriptor)
        raise CorruptStoreError(f"{location}: {what} is missing or shorter than {expected} bytes")
    return descriptor


def map_array(
    location: FileLocation,
    dtype: Any,
    shape: tuple[int, ...],
    *,
    writable: bool,
    offset: int = 0,
    what: str,
    descriptor: int | None = None,
) -> np.memmap[Any, Any]:
    """Map ``shape`` items of ``dtype`` from ``offset`` of the regular file at ``location`` (or of the open
    ``descriptor`` of it, which stays open). A missing file or one shorter than the map is a
    ``CorruptStoreError``: ``"{location}: {what} is missing or shorter than N bytes"``."""
    expected = offset + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    own = descriptor is None
    if descriptor is None:
        try:
            descriptor = open_regular(location, os.O_RDWR if writable else os.O_RDONLY)
        except FileNotFoundError:
            raise CorruptStoreError(f"{location}: {what} is missing or shorter than {expected} bytes") from None
    try:
        if os.fstat(descriptor).st_size < expected:
            raise CorruptStoreError(f"{location}: {what} is missing or shorter than {expected} bytes")
        # numpy maps a file object by its descriptor (mmap dups it): closing ours after keeps the map.
        with os.fdopen(os.dup(descriptor), "r+b" if writable else "rb", buffering=0) as file:
            mapped = np.memmap(file, dtype=dtype, mode="r+" if writable else "r", offset=offset, shape=shape)
        mapped.filename = str(location)  # numpy names a map by its file's name: the real path, for messages
        return mapped
    finally:
        if own:
            os.close(descriptor)
