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
from mmreplay.frames.reference_codec import CorruptFrameError, ReferenceScheme
from mmreplay.frames.ring import FrameChecksumError, FrameRing, frame_seed


class ReferenceFrameRing(FrameRing):
    """A ``FrameRing`` of reference-encoded frames: ``append`` takes ``ref_deltas``, reads decode chains."""

    def __init__(self, directory: StoreDirectory | Path, *, scheme: ReferenceScheme, **ring: Any) -> None:
        """``ring``: ``FrameRing``'s keyword arguments (its counts and sizes), less ``references``."""
        super().__init__(directory, references=True, **ring)
        self.scheme = scheme

    def ref_deltas(self, frame_steps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The ``ref_delta`` link of each frame (0 for a key frame)."""
        # Indexing, not take(mode="wrap"): numpy's take of a strided field view is ~25x slower.
        return self._table["ref_delta"][frame_steps % self.frame_slots].astype(np.int64)

    def keep_from(self, oldest_frame: int) -> int:
        """The oldest frame step to keep so that every frame from ``oldest_frame`` on still decodes."""
        return reference_codec.reference_tail(
            oldest_frame, self.frames_written, ref_deltas_of=self.ref_deltas, scheme=self.scheme
        )

    def decode_into(
        self, frame_steps: npt.NDArray[np.int64], out: npt.NDArray[np.generic], *, limit: int
    ) -> None:
        """Decode each frame into ``out[i]`` with the frames it depends on, checking every CRC. On the
        calling thread whatever ``limit`` allows: a chain decodes in order (sharing a batch's levels with
        the pool's helpers is issue 28's, with ``threads.batch_threads`` as the plain ring's).

        Raises ``FrameChecksumError`` for the first requested frame that cannot be decoded, naming the
        frame at fault (it, or a frame it is compressed against) and the files that may be corrupt.
        """
        n = len(frame_steps)
        if n == 0:
            return
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
        positions, lengths = entries["position"], entries["length"]
        if (positions + lengths).max() > self.bytes_written:
            self._raise_outside(steps, positions, lengths)
        segments = positions.view(np.int64) // self.segment_bytes
        offsets = positions.view(np.int64) - segments * self.segment_bytes
        first, last = int(segments.min()), int(segments.max())
        if first < 0:  # a position of 2**63 or more: beyond anything written
            self._raise_outside(steps, positions, lengths)
        base, views = self._views_covering(first, last, segments, steps)
        bad = reference_codec.decode_batch(
            np.subtract(segments, base, out=segments),
            offsets,
            lengths.astype(np.int64),
            entries["checksum"],
            frame_seed(steps, entries["prev_delta"], entries["ref_delta"]),
            plan.refs,
            plan.rows,
            out.reshape(n, -1).view(np.uint8),  # uint8 frames (create refuses other dtypes here)
            views=views,
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
