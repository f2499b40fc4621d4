"""Frames written into a segment file with ``pwrite``/``pwritev``, never stored into its map: a full disk is
then an ``OSError`` (ENOSPC), not a SIGBUS."""

from __future__ import annotations

import errno
import os


def _iov_max() -> int:
    """The most buffers one pwritev takes (IOV_MAX: 1,024 on Linux; POSIX allows as few as 16)."""
    try:
        return max(16, os.sysconf("SC_IOV_MAX"))
    except (AttributeError, ValueError, OSError):
        return 16


IOV_MAX = _iov_max()


def write_rest(descriptor: int, data: memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset`` after a short write: each further ``pwrite`` writes more or raises
    (ENOSPC on a full disk, EFBIG past the file-size limit); one that writes nothing is ENOSPC, as the
    compiled writes' ``write_all`` takes it."""
    while len(data):
        written = os.pwrite(descriptor, data, offset)
        if written == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        data, offset = data[written:], offset + written


def write_run(descriptor: int, run: list[bytes], offset: int, *, name: str) -> None:
    """Write frames that lie back to back from ``offset`` of the segment open as ``descriptor`` (``name`` in
    the error), in parts of at most ``IOV_MAX`` buffers (an add of thousands of envs' frames)."""
    for start in range(0, len(run), IOV_MAX):
        part = run[start : start + IOV_MAX]
        length = sum(map(len, part))
        try:
            written = os.pwrite(descriptor, part[0], offset) if len(part) == 1 else os.pwritev(descriptor, part, offset)
            if written < length:  # a write that only partly fits: the rest then fails with the real cause
                write_rest(descriptor, memoryview(b"".join(part))[written:], offset + written)
        except OSError as error:
            raise OSError(error.errno, f"{name}: {error.strerror} (writing {length} bytes of frames at byte "
                                       f"{offset})") from None
        offset += length
