"""The frame ring: compressed frames in segment files, located through a ring-shaped frame table.

Vocabulary: a *frame step* numbers every frame ever written (never wraps); a frame's *slot* in the
frame table is ``frame_step % frame_slots``; its *position* is a never-wrapping byte offset, so segment
``position // segment_bytes`` holds it at ``position % segment_bytes``. Frames never straddle segments.

Each frame-table entry records where the frame's bytes are, their CRC-32 (seeded with the frame step
and ``prev_delta``, so a frame read at the wrong step or through a damaged entry fails the check),
and ``prev_delta``: how many frame steps back the previous frame of the same episode is (0 for an
episode's first frame). That link is all that stacking needs; this module knows nothing of
transitions, sampling or commits. It never overwrites bytes at a position below ``bytes_written``,
and the store decides which table slots may be reused.

A ring of frames compressed against reference frames (``reference_ring``) has entries with one more
field, ``ref_delta``, also bound into the seed; a plain ring's entries and seeds are those of
``ref_delta == 0``. See ``frame_entry`` for the fields' widths.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import NoReturn

import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.disk.files import BlockReservation, create_sparse, fsync_directory
from mmreplay.disk.header import (
    FORMAT_VERSION,
    SEGMENTS_DIR,
    frame_table_name,
    segment_name,
)
from mmreplay.disk.store_directory import (
    FileLocation,
    StoreDirectory,
    map_array,
    open_regular,
    open_sized,
)
from mmreplay.errors import CorruptStoreError
from mmreplay.frames import lz4_codec
from mmreplay.frames.threads import batch_threads
from mmreplay.frames.frame_entries import (
    REF_SEED_MULTIPLIER,
    SEED_MULTIPLIER,
    EntryFormat,
    frame_entry,
    frame_seed,
)
from mmreplay.frames.page_cache import ReadAdvice
from mmreplay.frames.segment_maps import SegmentMaps
from mmreplay.frames.segment_writes import write_run
from mmreplay.limits import check_mapping
from mmreplay.rows import stacking


class FrameChecksumError(CorruptStoreError):
    """A frame's bytes or its table entry do not match its checksum, or the entry places the frame
    outside the bytes written."""

    def __init__(self, message: str, *, frame_step: int) -> None:
        super().__init__(message)
        self.frame_step = frame_step


_lz4batch = extensions.load("_lz4batch")  # this ring's compiled reads and add's compiled write


class FrameRing:
    """Appends compressed frames and decodes them back by frame step."""

    def __init__(
        self,
        directory: StoreDirectory | Path,
        *,
        frame_shape: tuple[int, ...],
        segment_bytes: int,
        frame_slots: int,
        generation: int,
        frames_written: int,
        bytes_written: int,
        writable: bool,
        version: int,
        max_distance: int | None = None,
        extra: int = 0,
        frame_dtype: np.dtype = np.dtype(np.uint8),
    ) -> None:
        """``version``: the store's format version, which lays out the entries (``frame_entry``);
        ``max_distance``: a ``ReferenceFrameRing``'s (its entries hold ``ref_delta`` too), None for a
        plain ring; ``extra``: a stored frame's bytes beyond lz4's worst case (``worst_block``).
        ``frame_dtype``: the frames' little-endian dtype; the ring itself deals in bytes (a frame is
        ``frame_nbytes`` bytes, and every length, bound and size below counts bytes, not elements)."""
        self.directory = directory
        self.frame_shape = frame_shape
        self.frame_dtype = frame_dtype
        self.frame_nbytes = int(np.prod(frame_shape)) * frame_dtype.itemsize
        self.version = version
        self._max_distance, self._extra = max_distance, extra
        self._with_refs = max_distance is not None
        self._format = self._entry_format(frame_slots)
        self.entry = self._format.dtype
        self._geometry: object | None = None  # the compiled calls' view of the table (geometry()), made on first use
        self.segment_bytes = segment_bytes
        self.frame_slots = frame_slots
        self.generation = generation
        self.frames_written = frames_written
        self.bytes_written = bytes_written
        self.writable = writable
        self._maps = SegmentMaps(directory, segment_bytes, table_path=self._table_path)  # the reads' maps
        self._segment_files: dict[int, int] = {}  # descriptors the writer writes through
        self._dirty_segments: set[int] = set()
        self._writing = (-1, -1)  # (segment, descriptor) that append wrote last; its segment is in _dirty_segments
        self._mapping = self._map_table(generation, frame_slots)
        self._table = self._mapping.view(np.ndarray)  # plain indexing, without memmap's per-call overhead
        self._reservation = BlockReservation(self._table_path()) if writable else None
        self._table_reserved = 0  # bytes of the table that _reservation has reserved
        self._entries = self._entry_view()

    def _entry_format(self, frame_slots: int) -> EntryFormat:
        """The entries of a table of ``frame_slots`` entries (format version 5 sizes them by it)."""
        return EntryFormat(self.frame_nbytes, frame_slots=frame_slots, version=self.version,
                           max_distance=self._max_distance, extra=self._extra)

    def _use_format(self, entry_format: EntryFormat) -> None:
        self._format, self.entry, self._geometry = entry_format, entry_format.dtype, None

    def geometry(self) -> object:
        """The table as the compiled calls take it (``_lz4batch.ring_geometry``: its entries, slots, seeds,
        segments and frames), made once per table generation."""
        if self._geometry is None:
            assert _lz4batch is not None
            self._geometry = _lz4batch.ring_geometry(
                self._format.layout, self.frame_slots, SEED_MULTIPLIER, self.segment_bytes, self.frame_nbytes,
                **self._geometry_references(),
            )
        return self._geometry

    def _geometry_references(self) -> dict[str, int]:
        """How the compiled reads follow this ring's references (a reference ring's depth, row and unit);
        none here."""
        return {}

    @staticmethod
    def create(
        directory: StoreDirectory | Path,
        *,
        frame_shape: tuple[int, ...],
        segment_bytes: int,
        frame_slots: int,
        version: int = FORMAT_VERSION,
        max_distance: int | None = None,
        extra: int = 0,
        frame_dtype: np.dtype = np.dtype(np.uint8),
    ) -> FrameRing:
        """Create the empty segments folder and frame table of a new store, and open them for writing.

        A table of a reference ring's entries (``max_distance``) is created here too, but read through
        ``ReferenceFrameRing`` (this class decodes every frame alone).
        """
        (directory / SEGMENTS_DIR).mkdir()
        entry = frame_entry(int(np.prod(frame_shape)) * frame_dtype.itemsize, frame_slots=frame_slots,
                            version=version, max_distance=max_distance, extra=extra)
        create_sparse(directory / frame_table_name(0), frame_slots * entry.itemsize)
        return FrameRing(
            directory,
            frame_shape=frame_shape,
            segment_bytes=segment_bytes,
            frame_slots=frame_slots,
            generation=0,
            frames_written=0,
            bytes_written=0,
            writable=True,
            version=version,
            max_distance=max_distance,
            extra=extra,
            frame_dtype=frame_dtype,
        )

    # -- writing ---------------------------------------------------------------------------------

    def append(self, payloads: list[bytes], prev_deltas: list[int], ref_deltas: list[int] | None = None) -> int:
        """Write compressed frames with their episode links; returns the first new frame step.

        ``ref_deltas`` (one per frame) are the reference links of a ring whose entries have
        ``ref_delta``, and must be None for a plain one. The caller guarantees that ``frames_written +
        len(payloads)`` stays within the table's window (no slot that a committed or stored transition
        needs is reused). Consecutive frames of one
        segment go out in one ``pwritev``.
        """
        first_step = step = self.frames_written
        position = self.bytes_written
        segment_bytes, frame_slots, entries = self.segment_bytes, self.frame_slots, self._entries
        assert entries is not None, "append needs a writable frame ring"
        with_refs = self._with_refs
        assert with_refs == (ref_deltas is not None), "ref_deltas are given exactly for a reference ring"
        entry_size, pack_into = self._format.size, self._format.pack_into
        self._reserve_entries(first_step + len(payloads))
        run: list[bytes] = []  # frames not written yet, consecutive from run_start in the current segment
        run_start = position
        for payload, prev_delta, ref_delta in zip(payloads, prev_deltas, ref_deltas or itertools.repeat(0)):
            length = len(payload)
            if position % segment_bytes + length > segment_bytes:  # frames never straddle segments
                position += segment_bytes - position % segment_bytes
            # A run stays inside one segment: a frame that opens the next one, also when the frames before
            # it filled theirs exactly, starts a new run (else it would be written past the old file's end).
            if position // segment_bytes != run_start // segment_bytes:
                self._write_run(run, run_start)
                run, run_start = [], position
            run.append(payload)
            # frame_seed, without numpy
            seed = (step * SEED_MULTIPLIER + prev_delta + ref_delta * REF_SEED_MULTIPLIER) & 0xFFFFFFFF
            pack_into(entries, (step % frame_slots) * entry_size, position, length,
                      lz4_codec.checksum(payload, seed), prev_delta, ref_delta)
            position += length
            step += 1
        self._write_run(run, run_start)
        self.frames_written, self.bytes_written = step, position  # one line: an interrupt sees both or neither
        return first_step

    def append_frames(
        self, frames: npt.NDArray[np.generic] | bytes, prev_deltas: list[int], *, threads: int = 1,
        groups: object | None = None, frame_tail: int = 0,
    ) -> None:
        """``append`` given the frames uncompressed (``len(prev_deltas)`` contiguous frames, frame i env
        i's, an array or their bytes): compressed and written in one compiled call, which costs less than a
        Python loop over them (on up to ``threads`` threads: ``threads.compress_threads``); the same bytes
        as compressing each for ``append``, which is what happens when they would run past the segment's
        end. A reference ring's frames take a writer's compiled ``groups`` (``encodings.ReferenceEncoder``),
        each continuing its env's group (``frame_tail``: the oldest frame step the store keeps)."""
        assert self._with_refs == (groups is not None), "groups are given exactly for a reference ring"
        first_step, position = self.frames_written, self.bytes_written
        if _lz4batch is not None:
            segment, offset = divmod(position, self.segment_bytes)
            self._reserve_entries(first_step + len(prev_deltas))
            target = (self.geometry(), self._entries, self._descriptor_of(segment), position - offset, offset)
            try:
                written = _lz4batch.append_frames(target, frames, prev_deltas, first_step, groups, frame_tail, threads)
            except OSError as error:  # ENOSPC or EFBIG from its pwrite: named by the segment, as the general path's
                raise OSError(error.errno, f"{self._segment_path(segment)}: {error.strerror} (writing "
                                           f"{len(prev_deltas)} frames at byte {offset})") from None
            if isinstance(written, int):
                self.frames_written, self.bytes_written = first_step + len(prev_deltas), position + written
                return
            # They would run past the segment's end: the general path writes them, from the next segment.
            payloads, ref_deltas = written
            self.append(payloads, prev_deltas, ref_deltas if groups is not None else None)
            return
        assert groups is None, "a reference ring's groups are compiled"
        frame_bytes = np.frombuffer(frames, np.uint8).reshape(len(prev_deltas), -1)
        self.append([lz4_codec.compress(frame) for frame in frame_bytes], prev_deltas)

    def _reserve_entries(self, frame_stop: int) -> None:
        """Reserve the frame table's blocks up to the entry of frame step ``frame_stop`` (exclusive)."""
        table_end = min(frame_stop, self.frame_slots) * self._format.size
        if table_end > self._table_reserved:  # slots fill in order on the first lap, then all are reserved
            self._reservation.ensure(table_end)  # type: ignore[union-attr]
            self._table_reserved = table_end

    def _descriptor_of(self, segment: int) -> int:
        """The descriptor to write a segment through (the one written last, usually)."""
        if segment != self._writing[0]:
            self._writing = (segment, self._segment_file(segment))
            self._dirty_segments.add(segment)
        return self._writing[1]

    def _write_run(self, run: list[bytes], position: int) -> None:
        """Write frames that lie back to back from ``position``, inside one segment."""
        if not run:
            return
        segment, offset = divmod(position, self.segment_bytes)
        write_run(self._descriptor_of(segment), run, offset, name=str(self._segment_path(segment)))

    def sync(self) -> None:
        """Make every frame and table entry written so far durable (msync), before a commit."""
        for segment in sorted(self._dirty_segments):
            if segment in self._segment_files:
                os.fdatasync(self._segment_files[segment])
        self._dirty_segments.clear()
        self._writing = (-1, -1)  # the next append marks its segment dirty again
        self._mapping.flush()

    def grow(self, frame_slots: int, frame_tail: int) -> None:
        """Move the frame table to a larger new generation, keeping frames ``[frame_tail, frames_written)``.

        The old generation stays on disk until the store has committed the new one and calls
        ``remove_generation``.
        """
        generation = self.generation + 1
        path = self.directory / frame_table_name(generation)
        path.unlink(missing_ok=True)  # left by a crash before the header named it
        grown = self._entry_format(frame_slots)  # version 5's links and positions: sized for frame_slots
        create_sparse(path, frame_slots * grown.size)
        reservation = BlockReservation(path)
        reservation.ensure(frame_slots * grown.size)
        table = map_array(path, grown.dtype, (frame_slots,), writable=True, what="frame table")
        steps = np.arange(frame_tail, self.frames_written)
        old = self._table[steps % self.frame_slots]
        if grown.dtype == self.entry and grown.prev_bits == self._format.prev_bits:
            table[steps % frame_slots] = old
        else:
            table[steps % frame_slots] = grown.pack(
                self._format.positions(old, self.bytes_written), old["length"].astype(np.int64), old["checksum"],
                self._format.prev_deltas(old), self._format.ref_deltas(old),
            )
        table.flush()
        fsync_directory(self.directory)
        if self._entries is not None:
            self._entries.release()
        self._mapping = table
        self._table = table.view(np.ndarray)
        self._entries = self._entry_view()
        self._reservation.close()  # type: ignore[union-attr]
        self._reservation = reservation
        self._use_format(grown)
        self._table_reserved = frame_slots * self.entry.itemsize
        self.generation = generation
        self.frame_slots = frame_slots

    def remove_generation(self, generation: int) -> None:
        (self.directory / frame_table_name(generation)).unlink(missing_ok=True)

    def release_segments_before(self, position: int) -> None:
        """Delete the segment files whose every byte lies below ``position`` (no stored frame needs them)."""
        first_live = position // self.segment_bytes
        for path in (self.directory / SEGMENTS_DIR).glob("*.seg"):
            segment = int(path.stem)
            if segment < first_live:
                self._unmap(segment)
                path.unlink()

    # -- reading ---------------------------------------------------------------------------------

    def location(self, frame_step: int) -> tuple[str, int, int]:
        """Where a written frame's block lies, as its table entry says (which damage may have changed): the
        segment file (relative to the store's directory, ``frames/K.seg``), its offset there and its length."""
        entry = self._table[frame_step % self.frame_slots : frame_step % self.frame_slots + 1]
        position = int(self._format.positions(entry, self.bytes_written)[0])
        segment, offset = divmod(position, self.segment_bytes)
        return f"{SEGMENTS_DIR}/{segment_name(segment)}", offset, int(entry["length"][0])

    def entry_location(self, frame_step: int) -> tuple[str, int]:
        """The frame table file (relative to the store's directory) and the byte offset of a frame's entry."""
        return frame_table_name(self.generation), (frame_step % self.frame_slots) * self._format.size

    def own_block_intact(self, frame_step: int) -> bool:
        """Whether a frame's own block lies inside the bytes written and matches its checksum (its
        references, if any, aside): what tells a damaged frame from one whose reference is damaged."""
        try:
            return self.blocks(np.array([frame_step], np.int64), verify=True)[4] < 0
        except CorruptStoreError:  # outside the bytes written, or its segment missing
            return False

    def prev_deltas(self, frame_steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The ``prev_delta`` link of each frame (0 at an episode's first frame)."""
        return self._format.prev_deltas(self._table[frame_steps % self.frame_slots])

    def stacks(self, next_frames: npt.NDArray[np.int64], stack_size: int) -> npt.NDArray[np.int64]:
        """``stacking.transition_frames`` through this ring's episode links: frame steps (B, stack_size + 1)."""
        if _lz4batch is None:
            return stacking.transition_frames(next_frames, self.prev_deltas, stack_size)
        frames = np.empty((len(next_frames), stack_size + 1), np.int64)
        next_frames = np.ascontiguousarray(next_frames, np.int64)
        _lz4batch.follow_links((self.geometry(), self._table, self.bytes_written, (), 0), next_frames, frames)
        return frames

    def keep_from(self, oldest_frame: int) -> int:
        """The oldest frame step to keep so that every frame from ``oldest_frame`` on still decodes:
        ``oldest_frame`` itself here, where each frame decodes alone (see ``ReferenceFrameRing``)."""
        return oldest_frame

    def reload(self, *, generation: int, frame_slots: int, frames_written: int, bytes_written: int) -> None:
        """Follow a writer's newer commit (readers): counts, and the frame table if it was replaced."""
        if generation != self.generation:
            entry_format = self._entry_format(frame_slots)
            mapping = self._map_table(generation, frame_slots, entry_format.dtype)
            self._mapping, self._table = mapping, mapping.view(np.ndarray)
            self._use_format(entry_format)
            self.generation, self.frame_slots = generation, frame_slots
        self.frames_written, self.bytes_written = frames_written, bytes_written

    def remove_other_generations(self) -> None:
        """Delete frame tables of other generations (a crash can leave one that no header named)."""
        for path in self.directory.glob("frames-*.idx"):
            if path.name != frame_table_name(self.generation):
                path.unlink()

    def position_of(self, frame_step: int) -> int:
        """The byte position of a written frame; ``bytes_written`` for the frame not yet written."""
        if frame_step >= self.frames_written:
            return self.bytes_written
        entry = self._table[frame_step % self.frame_slots : frame_step % self.frame_slots + 1]
        return int(self._format.positions(entry, self.bytes_written)[0])

    def decode_into(
        self, frame_steps: npt.NDArray[np.int64], out: npt.NDArray[np.generic], *, limit: int
    ) -> None:
        """Decode each frame into ``out[i]`` (a C-contiguous (n, *frame_shape) array of the ring's
        ``frame_dtype``), checking its CRC, on at most ``limit`` threads (``threads.batch_threads``).

        The whole batch is decoded by one ``codec.decode_batch`` call (the GIL released once). Before
        any segment is touched, every entry must place its frame inside the bytes written: a corrupt
        position would otherwise send the read to a segment that does not exist, and blame it.
        """
        if len(frame_steps) == 0:
            return
        assert out.dtype == self.frame_dtype and out.nbytes == len(frame_steps) * self.frame_nbytes
        if self.decode_compiled(frame_steps, out, limit=limit):
            return
        # The general path: also what finds and names the frame at fault when the fast path fails.
        # take(mode="wrap") is table[frame_steps % frame_slots] (the table has frame_slots entries),
        # several times cheaper than indexing a structured array.
        entries = self._table.take(frame_steps, mode="wrap")
        positions, lengths = self._format.positions(entries, self.bytes_written), entries["length"]
        if (positions + lengths).max() > self.bytes_written:
            self._raise_outside(frame_steps, positions, lengths)
        # A position of 2**64 - 2**32 or more can wrap the sum above: as int64 it is negative, and so
        # is its segment, which the check of the first segment catches.
        segments = positions.view(np.int64) // self.segment_bytes
        offsets = positions.view(np.int64) - segments * self.segment_bytes
        first, last = int(segments.min()), int(segments.max())
        if first < 0:
            self._raise_outside(frame_steps, positions, lengths)
        base, views = self._maps.covering(first, last, segments, frame_steps)
        bad = lz4_codec.decode_batch(
            np.subtract(segments, base, out=segments),  # each frame's index into views
            offsets,
            lengths.astype(np.int64),
            entries["checksum"],
            frame_seed(frame_steps, self._format.prev_deltas(entries)),
            out.reshape(len(frame_steps), -1).view(np.uint8),  # lz4 writes bytes
            views=views,
            limit=limit,
        )
        if bad >= 0:
            raise FrameChecksumError(
                f"frame {int(frame_steps[bad])} fails its checksum: {self._segment_path(base + int(segments[bad]))} or "
                f"{self._table_path()} is corrupt, or the frame was overwritten since it was located",
                frame_step=int(frame_steps[bad]),
            )

    def decode_compiled(self, frame_steps: npt.NDArray[np.int64], out: npt.NDArray[np.generic], *, limit: int) -> bool:
        """``decode_into``'s fast path: the frames located through the table and decoded in one compiled call
        (``_lz4batch.decode_entries``; out of any dtype: bytes are written), True where every frame was
        good; False where that path cannot run or a frame is not (the general path then names it)."""
        ring = self.compiled_ring()
        if ring is None:
            return False
        assert _lz4batch is not None
        steps = np.ascontiguousarray(frame_steps, np.int64)
        return bool(_lz4batch.decode_entries(ring, steps, out, batch_threads(out.nbytes, limit)))

    def compiled_ring(self) -> tuple[object, ...] | None:
        """The ``ring`` argument of the compiled reads (``_c/ring/frame_table.h``: the geometry, the table,
        bytes_written, the segment views kept and the first segment they hold); None where those reads
        cannot run (no extension, no segment views kept yet). A frame outside the views makes a read
        decline, and the general path of ``decode_into`` then maps its segment."""
        if self._maps.cached is None or _lz4batch is None:
            return None
        base, views = self._maps.cached
        return (self.geometry(), self._table, self.bytes_written, views, base)

    def blocks(
        self, frame_steps: npt.NDArray[np.int64], *, verify: bool = False
    ) -> tuple[bytes, npt.NDArray[np.int64], npt.NDArray[np.uint32], npt.NDArray[np.uint32], int]:
        """The stored blocks of these frames, for a reader that sends frames on still compressed: their
        bytes back to back, each one's length, checksum and CRC seed (``frame_seed``), and, with
        ``verify``, the index of the first block that fails its checksum (-1 when none does, or unchecked)."""
        steps = np.ascontiguousarray(frame_steps, np.int64)
        for attempt in range(2 if _lz4batch is not None and len(steps) else 0):
            ring = self.compiled_ring()
            if ring is not None:
                lengths = np.empty(len(steps), np.int64)
                checksums, seeds = np.empty(len(steps), np.uint32), np.empty(len(steps), np.uint32)
                assert _lz4batch is not None
                gathered = _lz4batch.gather_entries(ring, steps, lengths, checksums, seeds, verify)
                if isinstance(gathered, bytes):
                    return gathered, lengths, checksums, seeds, -1
                if gathered is not None:
                    return b"", lengths, checksums, seeds, int(gathered)
            if attempt == 0:  # map the segments of these frames (a writer that never read has none kept)
                entries = self._table.take(steps, mode="wrap")
                positions = self._format.positions(entries, self.bytes_written)
                if (positions + entries["length"]).max() > self.bytes_written:
                    break  # the general path names the frame
                segments = positions.view(np.int64) // self.segment_bytes
                if int(segments.min()) < 0:
                    break
                self._maps.covering(int(segments.min()), int(segments.max()), segments, steps)
        # The general path: no extension, or a frame outside the bytes written or the views kept.
        entries = self._table.take(steps, mode="wrap")
        positions, lengths = self._format.positions(entries, self.bytes_written), entries["length"].astype(np.int64)
        if len(steps) and ((positions + lengths.astype(np.uint64)).max() > self.bytes_written):
            self._raise_outside(steps, positions, entries["length"])
        segments = positions.view(np.int64) // self.segment_bytes
        offsets = positions.view(np.int64) - segments * self.segment_bytes
        data = b"".join(
            self._maps.view(segment, frame_step)[offset : offset + length]
            for segment, offset, length, frame_step in zip(
                segments.tolist(), offsets.tolist(), lengths.tolist(), steps.tolist()
            )
        )
        checksums = entries["checksum"].astype(np.uint32)
        seeds = frame_seed(steps, self._format.prev_deltas(entries), self._format.ref_deltas(entries)).astype(np.uint32)
        bad = -1
        if verify:
            ends = np.cumsum(lengths).tolist()
            for i, (start, stop) in enumerate(zip([0, *ends[:-1]], ends)):
                if lz4_codec.checksum(data[start:stop], int(seeds[i])) != int(checksums[i]):
                    bad = i
                    break
        return data, lengths, checksums, seeds, bad

    def _raise_outside(
        self, frame_steps: npt.NDArray[np.int64], positions: npt.NDArray[np.uint64], lengths: npt.NDArray[np.uint32]
    ) -> NoReturn:
        """Raise for the first frame whose entry places it beyond the bytes written."""
        ends = positions.astype(object) + lengths.astype(object)  # exact: no wrap-around near 2**64
        i = int(np.flatnonzero(ends > self.bytes_written)[0])
        raise FrameChecksumError(
            f"frame {int(frame_steps[i])}: its entry in {self._table_path()} places it at bytes "
            f"[{int(positions[i])}, {int(ends[i])}), beyond the {self.bytes_written} bytes written: the frame "
            "table is corrupt, or the frame was overwritten since it was located",
            frame_step=int(frame_steps[i]),
        )

    def read_advice(self) -> ReadAdvice:
        """The page-cache policy the segment maps are given now (``SegmentMaps.advice``)."""
        return self._maps.advice()

    def close(self) -> None:
        self._maps.close()
        while self._segment_files:  # each forgotten before its close (an interrupt between must not close it twice)
            _, descriptor = self._segment_files.popitem()
            os.close(descriptor)
        if self._reservation is not None:
            self._reservation.close()
        if self._entries is not None:
            self._entries.release()
        if self.writable:
            self._mapping.flush()
        del self._table, self._mapping, self._entries

    # -- files -----------------------------------------------------------------------------------

    def _map_table(self, generation: int, frame_slots: int, entry: np.dtype | None = None) -> np.memmap:
        path = self.directory / frame_table_name(generation)
        entry = self.entry if entry is None else entry
        expected = frame_slots * entry.itemsize
        # Opened once, not following a link, and refused unless a regular file (store_directory).
        descriptor = open_sized(path, expected, writable=self.writable, what="frame table")
        try:
            check_mapping(expected, f"{path}: the frame table of {frame_slots:,} slots (the header's frame_slots)")
            return map_array(path, entry, (frame_slots,), writable=self.writable, what="frame table",
                             descriptor=descriptor)
        finally:
            os.close(descriptor)

    def _table_path(self) -> FileLocation:
        return self.directory / frame_table_name(self.generation)

    def _segment_path(self, segment: int) -> FileLocation:
        return self._maps.path(segment)

    def _segment_file(self, segment: int) -> int:
        """The writer's descriptor of a segment, creating the (sparse) file on first use."""
        descriptor = self._segment_files.get(segment)
        if descriptor is None:
            path = self._segment_path(segment)
            if not path.exists():
                create_sparse(path, self.segment_bytes)
                fsync_directory(path.parent)
            descriptor = open_regular(path, os.O_RDWR)
            if os.fstat(descriptor).st_size < self.segment_bytes:
                # A writer killed between creating the file and sizing it left it short; no commit counts
                # anything in a segment that has never been written, so sizing it now loses nothing.
                os.ftruncate(descriptor, self.segment_bytes)
            self._segment_files[segment] = descriptor
        return descriptor

    def _entry_view(self) -> memoryview | None:
        """The writer's view of the table's bytes, which ``append`` packs entries into."""
        return self._table.view(np.uint8).data if self.writable else None

    def _unmap(self, segment: int) -> None:
        """Close a segment's map (``SegmentMaps.unmap``) and the writer's descriptor of it."""
        self._maps.unmap(segment)
        if segment == self._writing[0]:
            self._writing = (-1, -1)
        descriptor = self._segment_files.pop(segment, None)
        if descriptor is not None:
            os.close(descriptor)
