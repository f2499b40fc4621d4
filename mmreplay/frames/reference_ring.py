"""A frame ring whose frames are compressed against earlier frames of their env (``reference_codec``).

Its frame table entries are a plain entry plus ``ref_delta``, the frame's step minus its reference's
step (0 for a key frame, compressed alone), bound into the frame's CRC seed like ``prev_delta``. Reading
a frame also rebuilds the frames it depends on (at most ``scheme.depth``) in the same call. A commit
keeps every frame that a kept frame depends on (``keep_from``), so the references of stored frames are
never released. A ring written in format version 4 or 5 decodes in pure Python (``legacy_frames``),
read-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.frames import legacy_frames, lz4_codec, reference_codec
from mmreplay.frames.frame_entries import frame_seed
from mmreplay.frames.reference_scheme import ReferenceScheme
from mmreplay.frames.ring import FrameChecksumError, FrameRing, _lz4batch

# The first format version whose dependent frames are reference_codec's changed units.
UNITS_VERSION = 6


class ReferenceFrameRing(FrameRing):
    """A ``FrameRing`` of reference-encoded frames: ``append`` takes ``ref_deltas``, reads rebuild chains."""

    def __init__(self, directory: StoreDirectory | Path, *, scheme: ReferenceScheme, **ring: Any) -> None:
        """``ring``: ``FrameRing``'s keyword arguments (its counts, sizes and format version), less
        ``max_distance``."""
        super().__init__(directory, max_distance=scheme.max_distance, **ring)
        self.scheme = scheme
        self._segments_read: set[int] = set()  # by the frame-by-frame read of one batch
        self._units = self.version >= UNITS_VERSION
        self._apply = (
            (lambda payload, reference: reference_codec.apply(payload, reference, self.frame_shape))
            if self._units else legacy_frames.apply_for(self.version, self.frame_shape)
        )

    def _geometry_references(self) -> dict[str, int]:
        return {"depth": self.scheme.depth, "row_nbytes": reference_codec.row_nbytes(self.frame_shape),
                "unit": reference_codec.unit_nbytes(self.frame_shape)}

    def ref_deltas(self, frame_steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The ``ref_delta`` link of each frame (0 for a key frame)."""
        # Indexing, not take(mode="wrap"): numpy's take of a strided field view is ~25x slower.
        return self._format.ref_deltas(self._table[frame_steps % self.frame_slots])

    def closure(self, frame_steps: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """The frames ``frame_steps`` and every frame their chains of references reach, in step order (a
        reference before the frames that need it), and each one's reference's index among them (-1: a key
        frame), read through the table in one compiled call.

        Args:
            frame_steps: distinct frame steps.

        Returns:
            (every, references), or None without the extension, or where a chain leads before step 0 or
            deeper than the scheme allows (the caller's general path then names the frame).
        """
        if _lz4batch is None:
            return None
        steps = np.ascontiguousarray(frame_steps, np.int64)
        capacity = len(steps) * (self.scheme.depth + 1)
        every, references = np.empty(capacity, np.int64), np.empty(capacity, np.int64)
        m = _lz4batch.reference_closure((self.geometry(), self._table, self.bytes_written, (), 0), steps, every,
                                        references)
        return None if m < 0 else (every[:m], references[:m])

    def keep_from(self, oldest_frame: int) -> int:
        """The oldest frame step to keep so that every frame from ``oldest_frame`` on still decodes."""
        return reference_codec.reference_tail(
            oldest_frame, self.frames_written, ref_deltas_of=self.ref_deltas, scheme=self.scheme
        )

    def decode_compiled(self, frame_steps: npt.NDArray[np.int64], out: npt.NDArray[np.generic], *, limit: int) -> bool:
        """``FrameRing.decode_compiled``, for the format version 6 frames the compiled read rebuilds."""
        return self._units and super().decode_compiled(frame_steps, out, limit=limit)

    def compiled_ring(self) -> tuple[object, ...] | None:
        """``FrameRing.compiled_ring``; None for a ring of format version 4 or 5 (pure Python)."""
        return super().compiled_ring() if self._units else None

    def decode_into(
        self, frame_steps: npt.NDArray[np.int64], out: npt.NDArray[np.generic], *, limit: int
    ) -> None:
        """Decode each frame into ``out[i]``, rebuilt from the frames it depends on, checking every CRC, on
        at most ``limit`` threads: in one compiled call where the extension is built and the segments are
        mapped, else frame by frame here (``reference_codec.rebuild``).

        Raises ``FrameChecksumError`` for the first requested frame that cannot be decoded, naming the
        frame at fault (it, or a frame it is compressed against) and the files that may be corrupt.
        """
        n = len(frame_steps)
        if n == 0 or self.decode_compiled(frame_steps, out, limit=limit):
            return
        steps = np.asarray(frame_steps, np.int64).tolist()
        self._segments_read = set()
        failed = reference_codec.rebuild(steps, out.reshape(n, -1).view(np.uint8), locate=self._locate,
                                         apply_block=self._apply, depth=self.scheme.depth)
        if failed is None:
            # The segments read, kept for the compiled read of the next batch (FrameRing.compiled_ring).
            read = np.array(sorted(self._segments_read), np.int64)
            self._maps.covering(int(read[0]), int(read[-1]), read, read)
            return
        row, fault, deep = failed
        requested = steps[row]
        if deep or self._too_deep(requested):  # a damaged link, whatever checksum fails on the way
            raise FrameChecksumError(
                f"frame {requested}: its chain of references is longer than the {self.scheme.depth} the scheme allows "
                f"(its depth): {self._table_path()} is corrupt, or the frame was overwritten since it was located",
                frame_step=requested,
            )
        if fault < 0 or fault >= self.frames_written:  # a damaged link led outside the frames written
            raise FrameChecksumError(
                f"frame {requested}: a reference link leads to frame step {fault}, outside the "
                f"{self.frames_written} frames written: {self._table_path()} is corrupt",
                frame_step=requested,
            )
        entries = self._table[fault % self.frame_slots : fault % self.frame_slots + 1]
        positions, lengths = self._format.positions(entries, self.bytes_written), entries["length"]
        if int(positions[0]) + int(lengths[0]) > self.bytes_written:
            self._raise_outside(np.array([fault]), positions, lengths)
        role = "" if fault == requested else " (a frame that a requested frame is compressed against)"
        position = int(positions[0])
        raise FrameChecksumError(
            f"frame {fault}{role} fails its checksum or does not decode: "
            f"{self._segment_path(position // self.segment_bytes)} or {self._table_path()} is corrupt, or the "
            "frame was overwritten since it was located",
            frame_step=requested,
        )

    def _too_deep(self, step: int) -> bool:
        """Whether the frame at ``step``'s chain of references, as the table links it, is longer than the
        scheme allows (followed no further than that, and never outside the frames written)."""
        for _ in range(self.scheme.depth + 1):
            if not 0 <= step < self.frames_written:
                return False
            ref_delta = int(self.ref_deltas(np.array([step]))[0])
            if ref_delta == 0:
                return False
            step -= ref_delta
        return 0 <= step < self.frames_written

    def _locate(self, step: int) -> tuple[memoryview, int] | None:
        """The block of the frame at ``step``, checked against its CRC, and its reference's step (-1: a key
        frame); None when it lies outside the frames or bytes written, or fails its CRC."""
        if step < 0 or step >= self.frames_written:
            return None
        entries = self._table[step % self.frame_slots : step % self.frame_slots + 1]
        position = int(self._format.positions(entries, self.bytes_written)[0])
        length = int(entries["length"][0])
        if position + length > self.bytes_written:
            return None
        segment, offset = divmod(position, self.segment_bytes)
        payload = self._maps.view(segment, step)[offset : offset + length]
        self._segments_read.add(segment)
        prev_delta, ref_delta = int(self._format.prev_deltas(entries)[0]), int(self._format.ref_deltas(entries)[0])
        seed = int(frame_seed(step, prev_delta, ref_delta))
        if len(payload) != length or lz4_codec.checksum(payload, seed) != int(entries["checksum"][0]):
            return None
        return payload, (step - ref_delta if ref_delta else -1)
