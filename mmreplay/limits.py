"""What this machine can give a store, checked before a size from its header is allocated or reserved.

A header's sizes (capacity, ring slots, stack size) are checked against the files' sizes, but a file can
be sparse: a 68 KiB download may declare 2^40 slots in files whose blocks were never written. What bounds
a store is therefore the machine: the memory this process can still get (the machine's available memory,
and the room ``RLIMIT_AS`` and ``RLIMIT_DATA`` leave above what it already uses), the address space left
for memory maps, and the free space of the file system a reservation (``posix_fallocate``) would take.
A size beyond them raises ``StoreLimitError`` (an ``OSError``: ENOMEM or ENOSPC) naming what needed it,
before anything is allocated, mapped or reserved.
"""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

from mmreplay.errors import StoreLimitError


def _status_bytes(name: str) -> int | None:
    """A ``/proc/self/status`` line's value (``VmSize``, ``VmData``) in bytes; None where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _machine_memory() -> int:
    """The machine's memory available to a new allocation: Linux's MemAvailable, else the free pages."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return 1 << 62  # nothing to go by: the allocation itself will tell


def _room(limit: int, used: str) -> int | None:
    """What the soft limit ``limit`` leaves above the process's current ``used`` (a status field)."""
    soft, _ = resource.getrlimit(limit)
    if soft == resource.RLIM_INFINITY:
        return None
    current = _status_bytes(used)
    return max(0, soft - (current or 0))


def available_memory() -> int:
    """Bytes of memory this process can still allocate: the least of the machine's and its limits'."""
    candidates = [_machine_memory(), _room(resource.RLIMIT_AS, "VmSize"), _room(resource.RLIMIT_DATA, "VmData")]
    return min(value for value in candidates if value is not None)


def available_address_space() -> int | None:
    """Bytes of address space left for memory maps under ``RLIMIT_AS`` (None: no limit)."""
    return _room(resource.RLIMIT_AS, "VmSize")


def check_memory(nbytes: int, what: str) -> None:
    """Refuse to allocate ``nbytes`` of memory for ``what`` (which names the header's size behind it) when
    this process cannot get them."""
    available = available_memory()
    if nbytes > available:
        raise StoreLimitError(errno.ENOMEM, f"{what} needs {nbytes:,} bytes of memory; this process can get "
                                            f"{available:,} more")


def check_mapping(nbytes: int, what: str) -> None:
    """Refuse to map ``nbytes`` of a file for ``what`` when the address space left (``RLIMIT_AS``) is less."""
    available = available_address_space()
    if available is not None and nbytes > available:
        raise StoreLimitError(errno.ENOMEM, f"{what} needs {nbytes:,} bytes of address space to be mapped; "
                                            f"this process has {available:,} more (RLIMIT_AS)")


def check_disk(path: Path, nbytes: int, what: str) -> None:
    """Refuse to reserve ``nbytes`` more of disk for ``what`` in the file system of ``path`` (a file or a
    directory that exists) when it has less free space."""
    status = os.statvfs(path)
    free = status.f_bavail * status.f_frsize
    if nbytes > free:
        raise StoreLimitError(errno.ENOSPC, f"{what} needs {nbytes:,} bytes of disk reserved; the file system of "
                                            f"{str(path)!r} has {free:,} free")
