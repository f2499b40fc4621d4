"""What the benchmarks read about the machine they run on: this process's anonymous memory, the memory
available, the file system a directory is on, the load, how to push a file out of the page cache, and what
the calling thread spent a window on (its CPU time and context switches).

Linux only (``/proc``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def proc_field(path: str, field: str) -> int:
    """A ``kB`` field of a ``/proc`` file (``RssAnon:`` of ``/proc/self/status``), in bytes."""
    with open(path) as lines:
        for line in lines:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not found in {path}")


def rss_anon() -> int:
    """This process's anonymous resident memory in bytes (``RssAnon`` in /proc/self/status).

    Memory-mapped files (mmreplay's frames and tables) are file-backed: they count in the page cache,
    not here. In-RAM buffers (numpy arrays, C++ vectors) count here in full.
    """
    return proc_field("/proc/self/status", "RssAnon:")


def mem_available() -> int:
    return proc_field("/proc/meminfo", "MemAvailable:")


def load_average() -> float:
    """The one-minute load average: above ~1 on this 2-core machine, timings are shared with others."""
    return os.getloadavg()[0]


class ThreadWindow:
    """What the calling thread did between ``start()`` and ``stop()``: wall and CPU seconds, and its
    voluntary and involuntary context switches (``/proc/thread-self/status``; 0 where it cannot be read).

    Where a learner's thread keeps less of its rate beside a feed, these say why: a wait for the GIL (or any
    lock) is a voluntary switch with no CPU time; another thread taking its core is an involuntary one; a
    slower core (a lower clock while every core decodes, memory shared) is more CPU time an update with
    neither."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self.voluntary = self.involuntary = 0
        self._started: tuple[float, float, int, int] | None = None

    @staticmethod
    def _switches() -> tuple[int, int]:
        try:
            with open("/proc/thread-self/status") as lines:
                found = dict(line.split(":", 1) for line in lines if "ctxt_switches" in line)
            return int(found["voluntary_ctxt_switches"]), int(found["nonvoluntary_ctxt_switches"])
        except (OSError, KeyError, ValueError):
            return 0, 0

    def start(self) -> None:
        self._started = (time.perf_counter(), time.thread_time(), *self._switches())

    def stop(self) -> None:
        assert self._started is not None, "stop() before start()"
        wall, cpu, voluntary, involuntary = self._started
        now_voluntary, now_involuntary = self._switches()
        self.wall += time.perf_counter() - wall
        self.cpu += time.thread_time() - cpu
        self.voluntary += now_voluntary - voluntary
        self.involuntary += now_involuntary - involuntary
        self._started = None

    def per_call(self, calls: int) -> dict[str, float]:
        """Per call of the window: CPU microseconds, voluntary and involuntary switches; and the CPU's
        share of the wall time."""
        calls = max(calls, 1)
        return {"cpu_us": round(1e6 * self.cpu / calls, 1), "voluntary": round(self.voluntary / calls, 3),
                "involuntary": round(self.involuntary / calls, 3),
                "cpu_share": round(self.cpu / self.wall, 3) if self.wall > 0 else 0.0}


def on_tmpfs(path: str) -> bool:
    """Whether ``path`` is on a RAM file system, where "on disk" figures would mean nothing."""
    path = os.path.realpath(path)
    best, fstype = "", ""
    with open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if (path == fields[1] or path.startswith(fields[1].rstrip("/") + "/")) and len(fields[1]) > len(best):
                best, fstype = fields[1], fields[2]
    return fstype in ("tmpfs", "ramfs")


def evict_from_page_cache(directory: Path) -> tuple[int, int]:
    """Ask the kernel to drop every file under ``directory`` from the page cache; (files, bytes) asked.

    ``posix_fadvise(POSIX_FADV_DONTNEED)`` after ``fsync``: the kernel drops the clean cached pages of
    each file (what ``vmtouch -e`` does), no root needed. Pages a process still has mapped and has
    touched may stay resident (the kernel does not unmap them), so callers should close their maps first
    or accept that only unmapped pages go. Dirty pages are written first by the ``fsync``.
    """
    files, total = 0, 0
    for path in sorted(directory.rglob("*")):
        if not path.is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                os.fsync(fd)
            except OSError:
                pass  # read-only file systems refuse fsync; nothing is dirty there
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
            files += 1
        finally:
            os.close(fd)
    return files, total


def resident_bytes(directory: Path) -> int:
    """Bytes of the files under ``directory`` that are in the page cache now (``mincore``, as ``vmtouch``).

    Maps each file copy-on-write (never written, so its pages stay the file's) and asks ``mincore``
    which pages are resident. -1 where ``mincore`` cannot be called.
    """
    import ctypes
    import mmap

    import numpy as np

    try:
        mincore = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, AttributeError):
        return -1
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    page = mmap.PAGESIZE
    resident = 0
    for path in directory.rglob("*"):
        if not path.is_file() or path.stat().st_size == 0:
            continue
        size = path.stat().st_size
        pages = np.zeros((size + page - 1) // page, np.uint8)
        with open(path, "rb") as file, mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
            view = ctypes.c_char.from_buffer(mapped)
            try:
                failed = mincore(ctypes.addressof(view), size, pages.ctypes.data) != 0
            finally:
                del view  # the map cannot close while a ctypes view exports its buffer
        if failed:
            return -1
        resident += int(np.count_nonzero(pages & 1)) * page
    return resident


def read_into_page_cache(directory: Path) -> int:
    """Read every file under ``directory`` once (as ``vmtouch -t`` does) so its pages are cached; bytes read."""
    total = 0
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            with open(path, "rb", buffering=0) as file:
                while chunk := file.read(1 << 24):
                    total += len(chunk)
    return total


def read_ahead_kb(path: Path) -> int | None:
    """The read-ahead (KiB) of the block device holding ``path``, or None where /sys does not say.

    A page fault on a memory-mapped file reads around the faulting page up to about this much, so with a
    large read-ahead a few random faults on a cold file pull in most of it.
    """
    device = os.stat(path).st_dev
    base = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}")
    for queue in (base / "queue", base / ".." / "queue"):  # a disk, or a partition of one
        try:
            return int((queue / "read_ahead_kb").read_text())
        except (OSError, ValueError):
            continue
    return None
