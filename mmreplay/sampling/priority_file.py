"""The prioritized sampler's file, ``priorities.tree``: committed priorities, an undo journal, and the scratch
space of the working sum tree.

Vocabulary: a *leaf* is a slot's ``(priority + epsilon)^alpha``. The *working* leaves change with every add,
eviction and ``update_priorities``; the *committed* leaves are those the store's last commit counts, and
only a commit writes them. Layout (little-endian; ``size`` is ``row_slots`` rounded up to a power of two)::

    [0, 16 size)          committed leaves: float64 entry ``size + slot`` (entries below ``size`` are unused:
                          leaves keep the heap position they have in the working tree)
    [16 size, 48 size)    scratch: the working sum tree and min tree, 2 * size float64 each; rebuilt from
                          the committed leaves at every open, never trusted
    [48 size, ...)        the undo journal: a header of four u64 (the sequence and checksum of the commit
                          it undoes back to, the entry count, a CRC-32 of the rest) and up to ``row_slots``
                          entries (slot u64, committed leaf float64)

A commit (``commit``) (1) writes into the journal the committed leaves it is about to overwrite, and makes
the journal durable; (2) writes the working leaves of the stored slots that changed into the committed
leaves, and makes them durable; (3) returns the new sequence number and the CRC-32 of the stored slots'
committed leaves in step order, which the store puts in its header. Opening checks the committed leaves
against the header's checksum: a crash after (1) and before the header leaves a journal that undoes
back to the header's commit; a journal of a later commit than the header's means the leaves are newer
than the header that was read (a reader that the writer overtook), not damaged; anything else that does
not match is corruption. Evicting never writes the committed leaves, so what a commit counts keeps its
priorities until the next commit.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import astuple, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from mmreplay.disk.store_directory import (
    FileLocation,
    file_blocks,
    map_array,
    open_regular,
)
from mmreplay.errors import CorruptStoreError
from mmreplay.limits import check_disk, check_mapping, check_memory
from mmreplay.sampling.sum_tree import SumTree, tree_size

JOURNAL_HEADER = struct.Struct("<QQQQ")  # sequence, checksum, entry count, CRC-32 of the other fields and entries
JOURNAL_ENTRY = np.dtype([("slot", "<u8"), ("leaf", "<f8")])
_READ_ATTEMPTS = 4  # a reader that races the writer's commit looks again this often


@dataclass(frozen=True)
class Committed:
    """What the header commits about the priorities: ``sequence`` counts the commits that wrote leaves, and
    ``checksum`` is the CRC-32 of the stored slots' committed leaves in step order (None: nothing was
    committed yet, or a store written before priorities had checksums, whose leaves are trusted as they
    are)."""

    sequence: int
    checksum: int | None


@dataclass(frozen=True)
class _Journal:
    sequence: int
    checksum: int
    entries: npt.NDArray[np.void]


def slot_ranges(steps: range, slots: int) -> list[tuple[int, int]]:
    """The slots of contiguous ``steps`` as at most two ranges ``[start, stop)`` (the ring wraps once)."""
    if not steps:
        return []
    start = steps.start % slots
    stop = start + len(steps)
    return [(start, stop)] if stop <= slots else [(start, slots), (0, stop - slots)]


def leaf_checksum(*parts: npt.NDArray[np.float64]) -> int:
    """CRC-32 of the little-endian bytes of the leaves, the parts one after the other."""
    crc = 0
    for part in parts:
        crc = zlib.crc32(np.ascontiguousarray(part, "<f8").data, crc)
    return crc


class PriorityFile:
    """``priorities.tree`` of one store, opened by the writer (``writable``) or by a reader.

    The writer's working tree lives in the file's scratch space (memory does not grow with capacity); a
    reader builds its own in memory and never writes the file.
    """

    def __init__(self, path: FileLocation, *, slots: int, stored: range, writable: bool, committed: Committed) -> None:
        self.path = path
        self.slots = slots
        self.size = tree_size(slots)
        self.committed = committed
        self._stored = stored  # the steps the last commit counts
        self.writable = writable
        self._journal_offset = self._scratch_end = 48 * self.size  # bytes: the journal follows the scratch
        self._length = self._journal_offset + JOURNAL_HEADER.size + slots * JOURNAL_ENTRY.itemsize
        self._leaves: np.memmap | None = None
        self._scratch: np.memmap | None = None
        # A commit not yet in the header: (the header's Committed and stored steps, the slots that commit
        # overwrote and their leaves before), for ``settle``.
        self._pending: tuple[Committed, range, npt.NDArray[np.int64], npt.NDArray[np.float64]] | None = None
        self._descriptor = -1
        self._check_limits()
        self._descriptor = self._open_descriptor()
        try:
            self.tree = self._load()
        except BaseException:
            self.close()
            raise

    def _check_limits(self) -> None:
        """What this file's size (from the header's row_slots) takes of the machine, checked before the
        file is opened: a reader builds its tree in memory (two float64 arrays of ``2 * size``, 32 bytes a
        slot); a writer maps the committed leaves and the scratch and reserves their blocks on disk (40
        bytes a slot). Both read the stored slots' committed leaves (the bytes, joined, as float64)."""
        what = f"{self.path}: the priorities of {self.slots:,} row slots (the header's row_slots)"
        leaves = 3 * 8 * len(self._stored)
        if not self.writable:
            check_memory(32 * self.size + leaves, what)
            return
        check_memory(leaves, what)
        check_mapping(self._scratch_end - 8 * self.size, what)  # committed leaves and scratch, mapped
        try:
            allocated = file_blocks(self.path) * 512
        except FileNotFoundError:
            allocated = 0
        check_disk(Path(str(self.path)).parent, max(0, self._scratch_end - 8 * self.size - allocated), what)

    def _open_descriptor(self) -> int:
        if not self.writable:
            if not self._stored and not self.path.exists():
                return -1  # nothing is stored (and the writer has not made the file yet): nothing to read
            try:
                return open_regular(self.path, os.O_RDONLY)
            except FileNotFoundError:
                raise CorruptStoreError(f"{self.path}: missing; the store's priorities are lost") from None
        if self.committed.checksum is None:
            # Nothing committed yet, or a file of the first layout (no journal): size it for this layout.
            descriptor = open_regular(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(descriptor, max(self._length, os.fstat(descriptor).st_size))
            return descriptor
        try:
            return open_regular(self.path, os.O_RDWR)
        except FileNotFoundError:
            raise CorruptStoreError(f"{self.path}: missing; the store's priorities are lost") from None

    def _load(self) -> SumTree:
        """Read and check the committed leaves of the stored slots, and build the working tree from them."""
        leaves = self._read_committed()
        if not np.all(np.isfinite(leaves) & (leaves >= 0)):
            raise CorruptStoreError(f"{self.path}: priorities of stored transitions are not finite and >= 0")
        if self.writable:
            length = 2 * self.size * 8
            # Scratch and committed leaves are written through memory maps: reserve their blocks first, so a
            # full disk is an OSError here and not a SIGBUS later.
            os.posix_fallocate(self._descriptor, self.size * 8, self._scratch_end - self.size * 8)
            self._leaves = map_array(self.path, "<f8", (self.size,), writable=True, offset=self.size * 8,
                                     what="priorities file", descriptor=self._descriptor)
            self._scratch = map_array(self.path, "<f8", (2, 2 * self.size), writable=True, offset=length,
                                      what="priorities file", descriptor=self._descriptor)
            sums, minimums = self._scratch.view(np.ndarray)  # plain arrays: no memmap overhead per call
            sums.fill(0.0)
        else:
            sums, minimums = np.zeros(2 * self.size), np.empty(2 * self.size)
        position = 0
        for start, stop in slot_ranges(self._stored, self.slots):
            sums[self.size + start : self.size + stop] = leaves[position : position + stop - start]
            position += stop - start
        return SumTree(sums, minimums)

    def _read_committed(self) -> npt.NDArray[np.float64]:
        """The stored slots' committed leaves in step order, checked against the commit (or journal-undone)."""
        if not self._stored:
            return np.zeros(0)
        self._check_length()
        expected = self.committed.checksum
        raced = False
        for _ in range(1 if self.writable else _READ_ATTEMPTS):
            before = self._read_journal_header()
            leaves = self._read_leaves()
            if expected is None or leaf_checksum(leaves) == expected:
                return leaves
            raced = self._read_journal_header() != before
            if raced:
                continue  # a reader raced the writer's next commit: look again
            journal = self._read_journal(before)
            # The writer may have rewritten the journal between the check above and the read of its body
            # (a torn journal, or another commit's): only a journal whose header still reads the same was
            # read whole.
            raced = self._read_journal_header() != before
            if raced:
                continue
            undone = self._undo(leaves, journal)
            if undone is not None:
                return undone
            if journal is not None and self._is_later(journal):
                return self._adopt(leaves)
            break
        if raced:  # the writer commits faster than a reader can read: its newest leaves will do
            return self._adopt(leaves)
        raise CorruptStoreError(
            f"{self.path}: the priorities of stored transitions do not match their checksum "
            f"(the file was modified or damaged)"
        )

    def _undo(self, leaves: npt.NDArray[np.float64], journal: _Journal | None) -> npt.NDArray[np.float64] | None:
        """The leaves as of the header's commit, when a commit that did not reach the header left them
        half written and its journal undoes it; None when that is not what happened."""
        if journal is None or (journal.sequence, journal.checksum) != astuple(self.committed):
            return None
        steps = self._stored
        positions = (journal.entries["slot"].astype(np.int64) - steps.start) % self.slots
        inside = positions < len(steps)
        restored = leaves.copy()
        restored[positions[inside]] = journal.entries["leaf"][inside]
        if leaf_checksum(restored) != self.committed.checksum:
            return None
        if self.writable:
            committed = map_array(self.path, "<f8", (self.size,), writable=True, offset=self.size * 8,
                                  what="priorities file", descriptor=self._descriptor)
            committed[journal.entries["slot"].astype(np.int64)] = journal.entries["leaf"]
            committed.flush()
            del committed
        return restored

    def _is_later(self, journal: _Journal) -> bool:
        """Whether the journal belongs to a commit after the header's: for a reader, the writer has committed
        again since the reader read the header; for a writer, a commit after one whose header was never
        written. The leaves are then newer than the checksum, not damaged."""
        sequence, checksum = astuple(self.committed)
        return bool(journal.sequence > sequence or (journal.sequence == sequence and journal.checksum != checksum))

    def _adopt(self, leaves: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Take leaves newer than the commit as they are; the writer's next commit then undoes back to them."""
        self.committed = Committed(self.committed.sequence, leaf_checksum(leaves))
        return leaves

    def _check_length(self) -> None:
        actual = os.fstat(self._descriptor).st_size
        expected = self._length if self.committed.checksum is not None else 32 * self.size
        if actual < expected:
            raise CorruptStoreError(
                f"{self.path}: {actual} bytes; expected {expected} for {self.slots} row slots (the file is truncated)"
            )

    def _read_leaves(self) -> npt.NDArray[np.float64]:
        parts = []
        for start, stop in slot_ranges(self._stored, self.slots):
            data = os.pread(self._descriptor, (stop - start) * 8, (self.size + start) * 8)
            parts.append(np.frombuffer(data, "<f8"))
        return np.concatenate(parts).astype(np.float64)

    def _read_journal_header(self) -> bytes:
        if self.committed.checksum is None:
            return b""
        return os.pread(self._descriptor, JOURNAL_HEADER.size, self._journal_offset)

    def _read_journal(self, header: bytes) -> _Journal | None:
        """The journal, or None when it is torn, damaged or was never written."""
        if len(header) != JOURNAL_HEADER.size:
            return None
        sequence, checksum, count, crc = JOURNAL_HEADER.unpack(header)
        if count > self.slots:
            return None
        body = os.pread(self._descriptor, count * JOURNAL_ENTRY.itemsize, self._journal_offset + JOURNAL_HEADER.size)
        if zlib.crc32(body, zlib.crc32(header[:24])) != crc:
            return None
        entries = np.frombuffer(body, JOURNAL_ENTRY)
        if np.any(entries["slot"] >= self.slots):
            return None
        return _Journal(sequence, checksum, entries)

    def commit(self, stored: range) -> Committed:
        """Make the working leaves of ``stored`` the committed ones (see the module docstring); returns what
        the header must commit. The caller commits it: until then the previous commit stays whole."""
        assert self.writable and self._leaves is not None
        self.settle(False)  # a commit whose header failed: back to the header's leaves first
        committed_leaves, working = self._leaves, self.tree.leaf_values
        changed = [
            np.flatnonzero(working[start:stop] != committed_leaves[start:stop]) + start
            for start, stop in slot_ranges(stored, self.slots)
        ]
        dirty = np.concatenate(changed) if changed else np.zeros(0, np.int64)
        sequence = self.committed.sequence
        counted, previous = np.zeros(0, np.int64), np.zeros(0)
        if len(dirty):
            # Only slots that the last commit counts need undoing; new slots it does not count.
            counted = dirty[(dirty - self._stored.start) % self.slots < len(self._stored)]
            previous = np.array(committed_leaves[counted])
            self._write_journal(counted, previous)
            try:
                committed_leaves[dirty] = working[dirty]
                committed_leaves.flush()
            except BaseException:
                # The commit fails (an I/O error): put back what the last commit counts, so that the next
                # commit's journal again undoes back to it.
                committed_leaves[counted] = previous
                raise
            sequence += 1
        parts = [committed_leaves[start:stop] for start, stop in slot_ranges(stored, self.slots)]
        self._pending = (self.committed, self._stored, counted, previous)
        self.committed = Committed(sequence, leaf_checksum(*parts))
        self._stored = stored
        return self.committed

    def settle(self, committed: bool) -> None:
        """After ``commit``: whether the header took it. If not, the committed leaves go back to the
        header's (the journal of the next commit must undo back to the header's commit, not to one that
        never happened); an error doing so leaves that for the next ``commit`` to retry first."""
        if self._pending is None:
            return
        header_committed, header_stored, counted, previous = self._pending
        if not committed:
            assert self._leaves is not None
            self.committed, self._stored = header_committed, header_stored
            self._leaves[counted] = previous
            self._leaves.flush()
        self._pending = None

    def _write_journal(self, slots: npt.NDArray[np.int64], leaves: npt.NDArray[np.float64]) -> None:
        """Write the journal; durable before any committed leaf changes when it has entries to undo. Its
        header is rewritten even when empty, so a reader sees that the writer moved past its commit."""
        entries = np.empty(len(slots), JOURNAL_ENTRY)
        entries["slot"], entries["leaf"] = slots, leaves
        body = entries.tobytes()
        # A store with nothing committed, or of the first layout, has no checksum to undo back to.
        fields = struct.pack("<QQQ", self.committed.sequence, self.committed.checksum or 0, len(slots))
        header = fields + struct.pack("<Q", zlib.crc32(body, zlib.crc32(fields)))
        data = memoryview(header + body)
        while data:
            written = os.pwrite(self._descriptor, data, self._journal_offset + len(header) + len(body) - len(data))
            data = data[written:]
        if len(slots):
            os.fdatasync(self._descriptor)

    def close(self) -> None:
        self._leaves = None
        self._scratch = None
        if self._descriptor >= 0:  # forgotten first: an interrupt just after the close must not lead to a second
            descriptor, self._descriptor = self._descriptor, -1
            os.close(descriptor)
