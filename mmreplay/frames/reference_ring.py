"""A frame ring whose frames are compressed against earlier frames of their env (``reference_codec``).

Its frame table entries are a plain entry plus ``ref_delta``, the frame's step minus
its reference's step (0 for a key frame, compressed alone), bound into the frame's CRC seed like
``prev_delta``. Reading a frame also decodes the frames it depends on (at most ``scheme.depth``, each
once per batch, in the same compiled call). A commit keeps every frame that a kept frame depends on
(``keep_from``), so the references of stored frames are never released.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.frames import reference_codec
from mmreplay.frames.frame_entries import SEED_MULTIPLIER, frame_seed
from mmreplay.frames.reference_codec import CorruptFrameError
from mmreplay.frames.reference_scheme import ReferenceScheme
from mmreplay.frames.ring import FrameChecksumError, FrameRing, _lz4batch
from mmreplay.frames.threads import batch_threads

# A ring keeps its key frames decoded across batches (``_c/key_frames.h``), and the frames of its groups'
# first level from an eighth of a group on (places 32, 64 and 128 of 256, branching 2), where a batch's
# chains then stop: slots for twice the frames a full ring holds of those, in at most this many bytes
# (100,000 Pong frames: 4,096 slots, 29 MB at most; their pages are taken as frames are read).
KEY_FRAMES_BYTES = 64 << 20


class ReferenceFrameRing(FrameRing):
    """A ``FrameRing`` of reference-encoded frames: ``append`` takes ``ref_deltas``, reads decode chains."""

    def __init__(
        self, directory: StoreDirectory | Path, *, scheme: ReferenceScheme, changed_rows: bool, **ring: Any
    ) -> None:
        """``ring``: ``FrameRing``'s keyword arguments (its counts and sizes), less ``max_distance``;
        ``changed_rows``: dependent frames are stored as their changed rows (format version 5)."""
        super().__init__(directory, max_distance=scheme.max_distance, **ring)
        self.scheme = scheme
        self.changed_rows = changed_rows
        row_nbytes = reference_codec.mask_row_nbytes(self.frame_shape) if changed_rows else 0
        self._compiled_references = (scheme.depth, row_nbytes, self._key_frames() if changed_rows else None)

    def _key_frames(self) -> object:
        """Room for this ring's key frames decoded, and its groups' first level from an eighth of a group on
        (``_lz4batch.key_frames``); None without the extension."""
        if _lz4batch is None:
            return None
        size, branching, min_delta = self.scheme.group_size, self.scheme.branching, self.scheme.group_size // 8
        first_level = [d * branching**j for j in range(self.scheme.depth) for d in range(1, branching)]
        kept = 1 + sum(min_delta <= place < size for place in first_level) if min_delta > 0 else 1
        wanted = max(2, 2 * self.frame_slots * kept // size)
        most = max(2, KEY_FRAMES_BYTES // (self.frame_nbytes + 64))
        slots = 1 << (min(wanted, most) - 1).bit_length()
        return _lz4batch.key_frames(self.frame_nbytes, slots if slots <= most else slots // 2, min_delta,
                                    self.frame_slots)

    def encode_ahead(
        self, groups: object, frames: npt.NDArray[np.generic] | bytes, *, frame_tail: int, threads: int, count: int = 1,
        offset: int = 0, stride: int = 0,
    ) -> object:
        """Start encoding the next frame of each of ``count`` envs (env k's bytes at ``offset + k * stride``
        in ``frames``: one env's frame, a vector add's, or each env's stack's newest) on awake helpers
        (``_lz4batch.encode_ahead``) against the references their groups give them if the add continues
        them, the frames written next; a handle that ``append_reference_frames(..., ahead=)`` takes for each
        frame where it turns out the frame's (else it encodes that frame itself). None where the frames
        cannot be encoded ahead."""
        if _lz4batch is None:
            return None
        return _lz4batch.encode_ahead(groups, 0, self.frames_written, frames, frame_tail, threads, count, offset, stride)

    def append_reference_frames(
        self, groups: object, frames: npt.NDArray[np.generic] | bytes, prev_deltas: list[int], *, frame_tail: int,
        threads: int = 1, ahead: object = None,
    ) -> None:
        """``FrameRing.append_frames`` for this ring: one frame per env of a writer's compiled reference
        ``groups`` (``encodings.ReferenceEncoder``), each continuing its env's group, assigned, compressed
        (on up to ``threads`` threads) and written in one compiled call; the same bytes as encoding each
        with the groups and ``append``, which is what happens when they would run past the segment's end.
        ``frame_tail``: the oldest frame step the store keeps (no frame references one before it); ``ahead``:
        ``encode_ahead``'s handle for the add's frames, or None."""
        assert _lz4batch is not None and self._entries is not None
        first_step, position = self.frames_written, self.bytes_written
        segment, offset = divmod(position, self.segment_bytes)
        self._reserve_entries(first_step + len(prev_deltas))
        written = _lz4batch.append_reference_frames(
            groups, frames, prev_deltas, first_step, frame_tail, self._entries, self.frame_slots, self._layout,
            SEED_MULTIPLIER, self._descriptor_of(segment), position - offset, offset, self.segment_bytes, threads,
            ahead,
        )
        if written >= 0:
            self.frames_written = first_step + len(prev_deltas)
            self.bytes_written = position + written
            return
        frame_bytes = np.frombuffer(frames, np.uint8).reshape(len(prev_deltas), -1)
        encoded = [_lz4batch.encode_frame(groups, env, first_step + env, frame_bytes[env], False, frame_tail)
                   for env in range(len(prev_deltas))]
        self.append([payload for payload, _ in encoded], prev_deltas, [ref_delta for _, ref_delta in encoded])

    def ref_deltas(self, frame_steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The ``ref_delta`` link of each frame (0 for a key frame)."""
        # Indexing, not take(mode="wrap"): numpy's take of a strided field view is ~25x slower.
        return self._format.ref_deltas(self._table[frame_steps % self.frame_slots])

    def closure(
        self, frame_steps: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """The distinct frames ``frame_steps`` and every frame their chains of references reach, in step
        order (a reference before the frames that need it), and each one's reference's index among them
        (-1: a key frame), read through the table in one compiled call (``_lz4batch.reference_closure``).
        None without the extension, or where a chain leads before step 0 or deeper than the scheme
        allows (the caller's general path names the frame)."""
        if _lz4batch is None:
            return None
        capacity = max(1, len(frame_steps) * (self.scheme.depth + 1))
        every, references = np.empty(capacity, np.int64), np.empty(capacity, np.int64)
        m = _lz4batch.reference_closure(self._table, self.frame_slots, self._layout,
                                        np.ascontiguousarray(frame_steps, np.int64), self.scheme.depth, every,
                                        references)
        return None if m < 0 else (every[:m], references[:m])

    def compiled_references(self) -> tuple[int, int, object]:
        """(the scheme's depth, a changed-rows frame's row bytes or 0, the key frames kept decoded or None):
        the compiled reads' reference arguments (``_lz4batch.read_transitions``, ``reference_decode_entries``)."""
        return self._compiled_references

    def keep_from(self, oldest_frame: int) -> int:
        """The oldest frame step to keep so that every frame from ``oldest_frame`` on still decodes."""
        return reference_codec.reference_tail(
            oldest_frame, self.frames_written, ref_deltas_of=self.ref_deltas, scheme=self.scheme
        )

    def decode_into(
        self, frame_steps: npt.NDArray[np.int64], out: npt.NDArray[np.generic], *, limit: int
    ) -> None:
        """Decode each frame into ``out[i]`` with the frames it depends on, each once, checking every CRC,
        on at most ``limit`` threads (``threads.batch_threads``, as the plain ring's), each key frame and
        the frames that depend on it on one of them: in one compiled call (``reference_decode_entries``)
        where the extension is built and the segments are mapped, else in the steps below.

        Raises ``FrameChecksumError`` for the first requested frame that cannot be decoded, naming the
        frame at fault (it, or a frame it is compressed against) and the files that may be corrupt.
        """
        n = len(frame_steps)
        if n == 0:
            return
        compiled = self.compiled_frames()
        if compiled is not None:  # the fast path: chains, plan and decode in one call; it declines what fails
            table, frame_slots, layout, multiplier, segment_bytes, bytes_written, views, base, _ = compiled
            depth, row_nbytes, keys = self.compiled_references()
            assert _lz4batch is not None
            if _lz4batch.reference_decode_entries(
                views, base, table, frame_slots, layout, np.ascontiguousarray(frame_steps, np.int64), multiplier,
                segment_bytes, bytes_written, depth, row_nbytes, out, self.frame_nbytes,
                batch_threads(n * self.frame_nbytes, limit), keys,
            ):
                return
        # The general path: also what finds and names the frame at fault when the fast path declines.
        if int(np.min(frame_steps)) < 0:  # a damaged episode link (prev_delta) led before the first frame
            raise FrameChecksumError(
                f"a frame link leads to frame step {int(np.min(frame_steps))}, before the first frame: "
                f"{self._table_path()} is corrupt",
                frame_step=int(np.min(frame_steps)),
            )
        try:
            plan = reference_codec.plan_decode(frame_steps, ref_deltas_of=self.ref_deltas, depth=self.scheme.depth)
        except CorruptFrameError as error:
            raise FrameChecksumError(
                f"{error}: {self._table_path()} is corrupt, or the frame was overwritten since it was located",
                frame_step=self._requested_needing(frame_steps, error.frame_step),
            ) from None
        steps = plan.steps
        # take(mode="wrap") is table[steps % frame_slots], as in FrameRing.decode_into.
        entries = self._table.take(steps, mode="wrap")
        positions, lengths = self._format.positions(entries, self.bytes_written), entries["length"]
        if (positions + lengths).max() > self.bytes_written:
            self._raise_outside(steps, positions, lengths)
        segments = positions.view(np.int64) // self.segment_bytes
        offsets = positions.view(np.int64) - segments * self.segment_bytes
        first, last = int(segments.min()), int(segments.max())
        if first < 0:  # a position of 2**63 or more: beyond anything written
            self._raise_outside(steps, positions, lengths)
        base, views = self._maps.covering(first, last, segments, steps)
        bad = reference_codec.decode_batch(
            np.subtract(segments, base, out=segments),
            offsets,
            lengths.astype(np.int64),
            entries["checksum"],
            frame_seed(steps, self._format.prev_deltas(entries), self._format.ref_deltas(entries)),
            plan.refs,
            plan.rows,
            out.reshape(n, *self.frame_shape).view(np.uint8),  # uint8 frames (create refuses other dtypes here)
            views=views,
            changed_rows=self.changed_rows,
            threads=batch_threads(len(steps) * self.frame_nbytes, limit),
        )
        if bad >= 0:
            step = int(steps[bad])
            role = "" if plan.rows[bad] < n else " (a frame that a requested frame is compressed against)"
            raise FrameChecksumError(
                f"frame {step}{role} fails its checksum or does not decode: "
                f"{self._segment_path(base + int(segments[bad]))} or {self._table_path()} is corrupt, or the "
                "frame was overwritten since it was located",
                frame_step=self._requested_needing(frame_steps, step),
            )

    def _requested_needing(self, frame_steps: npt.NDArray[np.int64], frame_step: int) -> int:
        """A requested frame that is, or depends on, ``frame_step`` (for errors: the frame that failed)."""
        chain = np.asarray(frame_steps, np.int64).copy()
        for _ in range(self.scheme.depth + 2):  # a damaged chain can name one frame more than depth
            hit = np.flatnonzero(chain == frame_step)
            if hit.size:
                return int(frame_steps[hit[0]])
            chain = chain - self.ref_deltas(chain)
        return frame_step
