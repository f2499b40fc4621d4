"""How a store's segment files are read through the page cache: with the kernel's read-around, or with
``MADV_RANDOM`` once they outgrow half of the memory the process may use (``process_memory``).

Sampling reads frames at random. A page fault on a mapped file normally reads the disk's whole
read-ahead window around the page: a store that fits in memory is then cached after a few seconds of
sampling, but in one that does not, each fault reads megabytes to use one frame and evicts what the next
faults need. Such a store's segments are mapped with ``MADV_RANDOM``, which reads just the pages a frame
lies on. The memory that counts is what the process may really use: inside a memory cgroup (a container,
a batch job) that is the cgroup's room, which the machine's ``MemAvailable`` does not see. The
measurements behind the rule are on the manual's Benchmarks page.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

from mmreplay.process_memory import UsableMemory

RANDOM = "random"  # MADV_RANDOM: a fault reads the pages it needs
READ_AROUND = "read-around"  # the kernel's default (MADV_NORMAL): a fault reads the window around it


@dataclass(frozen=True)
class ReadAdvice:
    """The advice a store's segment maps get (``policy``: ``"random"`` or ``"read-around"``) and why:
    the segment files' bytes against the memory the process may use (``memory``)."""

    policy: str
    segment_files_bytes: int
    memory: UsableMemory
    reason: str

    @property
    def random(self) -> bool:
        return self.policy == RANDOM


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.0f} MiB"


def read_advice(segment_files_bytes: int, memory: UsableMemory, *, madvise: bool = hasattr(mmap, "MADV_RANDOM")
                ) -> ReadAdvice:
    """The page-cache policy for segment files of ``segment_files_bytes`` bytes in all.

    Args:
        segment_files_bytes: The size of the store's segment files together.
        memory: The memory the process may use (``process_memory.usable_memory()``).
        madvise: Whether this platform has ``MADV_RANDOM``.

    Returns:
        ``"random"`` when the files take more than half of the memory, ``"read-around"`` otherwise
        (and wherever the memory is unknown or ``MADV_RANDOM`` is missing), with the reason in words.
    """
    files = f"segment files {_mib(segment_files_bytes)}"
    if not madvise:
        return ReadAdvice(READ_AROUND, segment_files_bytes, memory, f"{files}; this platform has no MADV_RANDOM")
    if memory.bytes is None:
        return ReadAdvice(READ_AROUND, segment_files_bytes, memory,
                          f"{files}; the memory this process may use is unknown")
    half = memory.bytes // 2
    if segment_files_bytes > half:
        return ReadAdvice(RANDOM, segment_files_bytes, memory,
                          f"{files} > half of {_mib(memory.bytes)} usable ({memory.source})")
    return ReadAdvice(READ_AROUND, segment_files_bytes, memory,
                      f"{files} <= half of {_mib(memory.bytes)} usable ({memory.source})")
