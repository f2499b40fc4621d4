"""How an add's new frames are compressed and written on the fast path: on how many of the pool's threads,
which go ahead on a helper (``lz4_codec.compress_ahead`` for plain frames, ``ReferenceFrameRing.encode_ahead``
for reference frames, whose write takes a frame back from a helper that lost its core rather than wait for
it): a vector add's while the add is checked (``start_ahead``), one env's once it is, from the bytes the
add keeps (``start_frame_ahead``), left behind for the writer's next call to write (``ContinuingFrames``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.frames import lz4_codec
from mmreplay.frames.encodings import FrameEncoder
from mmreplay.frames.ring import FrameRing
from mmreplay.frames.threads import (
    AHEAD_MIN_FRAME_BYTES,
    COMPRESS_MIN_CORES,
    REFERENCE_COMPRESS_MIN_CORES,
    ahead_threads,
    compress_threads,
)
from mmreplay.rows.transitions import TransitionTable
from mmreplay.store.add_arguments import AddShapes
from mmreplay.store.committer import Committer

_lz4batch = extensions.load("_lz4batch")


@dataclass(frozen=True)
class CompressionPolicy:
    """``append_threads``: threads for a call's frames; ``ahead_threads``: threads for frames handed
    ahead (1: none); ``ahead_min_bytes``: the least an env's recent frames must take compressed for a
    plain frame to go ahead (reference frames: 0)."""

    append_threads: int
    ahead_threads: int
    ahead_min_bytes: int


def compression_policy(*, num_envs: int, frame_nbytes: int, limit: int, reference: bool, fast_add: bool) -> CompressionPolicy:
    """A call's frames on the pool's threads (vector envs: from 4 usable cores, and for reference frames,
    which cost up to twice as much, from 2: threads.REFERENCE_COMPRESS_MIN_CORES); the new frames handed to
    an awake helper before the add is checked (~10 us it overlaps): a reference frame against the reference
    its group will give it, taken where it does, any number of envs, from 2 cores, since an add takes it
    back from a helper that lost its core; a plain frame one env's only, from 4 cores
    (threads.ahead_threads), where the env's frames compress to at least threads.AHEAD_MIN_FRAME_BYTES."""
    min_cores = REFERENCE_COMPRESS_MIN_CORES if reference else COMPRESS_MIN_CORES
    append = compress_threads(num_envs, frame_nbytes, limit, min_cores=min_cores)
    if not fast_add:
        ahead = 1
    elif reference:
        ahead = ahead_threads(num_envs, frame_nbytes, limit, min_cores=min_cores)
    else:
        ahead = ahead_threads(1, frame_nbytes, limit) if num_envs == 1 else 1
    return CompressionPolicy(append, ahead, 0 if reference else AHEAD_MIN_FRAME_BYTES)


def start_ahead(
    next_obs: object, shapes: AddShapes, *, frames: Any, groups: object, frame_tail: int, threads: int
) -> object | None:
    """The add's new frames (``next_obs``, or each env's stack's newest) started on awake helpers: a
    handle the fast path's write takes; None where ``next_obs`` is not a contiguous array of the store's
    frames (the fast path, if it takes the add, then compresses in its call). ``frames``: the store's ring;
    ``groups``: a reference store's writer groups, or None for plain frames."""
    if type(next_obs) is not np.ndarray or next_obs.dtype is not shapes.frame_dtype or not next_obs.flags.c_contiguous:
        return None
    if next_obs.shape != shapes.stack and next_obs.shape != shapes.frame:
        return None
    if groups is not None:  # each env's frame: its stack's newest, or next_obs
        per_env = shapes.stack_size if next_obs.shape == shapes.stack else 1
        frame_nbytes = frames.frame_nbytes
        handle: object = frames.encode_ahead(
            groups, next_obs, frame_tail=frame_tail, threads=threads, count=shapes.num_envs,
            offset=(per_env - 1) * frame_nbytes, stride=per_env * frame_nbytes,
        )
        return handle
    return lz4_codec.compress_ahead(next_obs[-1:] if next_obs.shape == shapes.stack else next_obs[None], threads=threads)


class ContinuingFrames:
    """The writer's fast path's new frames (each env's, continuing its episode): ``append`` writes them in
    one compiled call; ``start_ahead`` and ``start_frame_ahead`` start them on a helper where
    ``ahead_wanted``; and one env's frame may be left behind (``continue_one``, which writes its row) for
    ``settle`` to write, which the writer calls before anything else reads or writes frames or commits, so
    that its encode overlaps the caller's env step instead of the add waiting for it. ``policy`` sets the
    threads; ``recent_frame_bytes``, the bytes the recent appends took compressed (a moving average), is a
    plain frame's gate against ``ahead_min_bytes``."""

    def __init__(
        self, frames: FrameRing, encoder: FrameEncoder, committer: Committer, table: TransitionTable,
        shapes: AddShapes, *, lock: threading.RLock, policy: CompressionPolicy,
    ) -> None:
        self._frames, self._encoder, self._committer, self._shapes, self._lock = frames, encoder, committer, shapes, lock
        self._table = table
        # One env's add in one compiled call (the frame left behind, the new one posted, the row) where a
        # reference ring's frames go ahead: ``_continue_compiled``.
        self._compiled = _lz4batch is not None and encoder.groups is not None
        self.append_threads, self.ahead_threads = policy.append_threads, policy.ahead_threads
        self.ahead_min_bytes = policy.ahead_min_bytes
        self.recent_frame_bytes = 0.0
        # The frame left behind: (its bytes, which the add kept; its prev_delta; its encode's handle, or None).
        self.behind: tuple[bytes, int, object | None] | None = None

    def ahead_wanted(self) -> bool:
        """Whether an add's new frames go to a helper: there is one, and a plain frame's gate lets them."""
        return self.ahead_threads > 1 and self.recent_frame_bytes >= self.ahead_min_bytes

    def start_ahead(self, next_obs: object) -> object | None:
        """The add's new frames started on awake helpers while the add is checked (``start_ahead``)."""
        return start_ahead(
            next_obs, self._shapes, frames=self._frames, groups=self._encoder.groups,
            frame_tail=self._committer.committed.frame_tail, threads=self.ahead_threads,
        )

    def start_frame_ahead(self, frame: bytes) -> object | None:
        """One env's new frame (the bytes its add keeps, which no caller can change) started on an awake
        helper: a handle its write takes, or None."""
        groups = self._encoder.groups
        if groups is not None:
            handle: object = self._frames.encode_ahead(  # type: ignore[attr-defined]
                groups, frame, frame_tail=self._committer.committed.frame_tail, threads=self.ahead_threads
            )
            return handle
        return lz4_codec.compress_ahead(frame, threads=self.ahead_threads, count=1)

    def fits(self, first_step: int, count: int, *, pending: int = 0) -> bool:
        """Whether ``count`` envs' continuing transitions from ``first_step`` fit before the next commit
        must make room, after ``pending`` frames not yet written (the frame left behind). The room the
        general path makes before such an add: a reference store's makes room for each env's largest add
        (2 * stack_size frames) before encoding, so that both paths commit at the same adds."""
        frames = count * 2 * self._shapes.stack_size if self._encoder.records_references else count
        return self._committer.fits(first_step, new_rows=count, new_frames=frames + pending)

    def append(self, new_frames: npt.NDArray[Any] | bytes, prev_deltas: list[int], ahead: object | None) -> None:
        """Append the new frames (one per env from env 0; one contiguous array, or its bytes) with their
        ``prev_deltas`` at the ring's next frame steps: a reference store's in one compiled call with its
        groups, rolled back if it fails (no frame may be encoded against one that was not written)."""
        groups, bytes_before = self._encoder.groups, self._frames.bytes_written
        if groups is None:
            self._frames.append_frames(new_frames, prev_deltas, threads=self.append_threads, ahead=ahead)
        else:
            try:
                self._frames.append_reference_frames(  # type: ignore[attr-defined]
                    groups, new_frames, prev_deltas, frame_tail=self._committer.committed.frame_tail,
                    threads=self.append_threads, ahead=ahead,
                )
            except BaseException:
                self._encoder.rollback()
                raise
        if self.ahead_threads > 1 and self.ahead_min_bytes:  # a plain frame's gate: the bytes they took
            self.recent_frame_bytes += (self._frames.bytes_written - bytes_before - self.recent_frame_bytes) / 8

    def continue_one(
        self, frame: bytes, prev_delta: int, step: int, reward: float, flags: int, action: bytes, previous_step: int
    ) -> None:
        """One env's add that continues its episode (its transition at ``previous_step``) with ``frame``,
        linked ``prev_delta`` back, as transition ``step`` (``Writer._add_one_env``, under the writer's lock,
        ``fits`` checked with the frame left behind pending): the frame left behind written first; then,
        where a helper encodes ``frame``, the row written and ``frame`` left behind (its add counted, for
        ``settle`` to write at the next frame step), else both written now, the frame before its row."""
        posted = False
        if self._compiled and self.ahead_wanted():
            left = self._continue_compiled(frame, prev_delta, step, reward, flags, action, previous_step)
            if left:
                return
            posted = left is False  # asked a helper (and none took it): not again
        self.settle()
        first_frame = self._frames.frames_written
        ahead = self.start_frame_ahead(frame) if not posted and self.ahead_wanted() else None
        if ahead is None:  # no helper encodes it: written now, before its row, as the other forms write
            self._table.reserve_rows(step, 1)  # a full disk refuses the add before any write
            self.append(frame, [prev_delta], None)
        self._table.write_continuations(
            step, frame_lead=first_frame - step, previous_steps=[previous_step], rewards=[reward], flags=[flags],
            actions=action,
        )
        if ahead is not None:
            self.behind = (frame, prev_delta, ahead)

    def _continue_compiled(
        self, frame: bytes, prev_delta: int, step: int, reward: float, flags: int, action: bytes, previous_step: int
    ) -> bool | None:
        """``continue_one`` in one compiled call (``_lz4batch.continue_one_env``): True where it wrote the
        frame left behind (if any) and the row, and left ``frame`` behind; False where it wrote the frame left
        behind but no helper took ``frame`` (nothing of this add written); None where the frame left behind
        runs past its segment's end (nothing written: the general way writes it)."""
        assert _lz4batch is not None
        behind, frames = self.behind, self._frames
        old, old_delta, old_ahead = behind if behind is not None else (None, 0, None)
        rows = self._table.continuation_arguments(step, frames.frames_written + (behind is not None) - step)
        try:
            result = _lz4batch.continue_one_env(
                self._encoder.groups, old, old_delta, old_ahead, self._committer.committed.frame_tail,
                self.append_threads, *frames.compiled_append(1), frame, self.ahead_threads, *rows, step, reward,
                flags, action, previous_step,
            )
        except BaseException:  # nothing written: as ``settle``'s failure leaves it
            if behind is not None:
                self._encoder.rollback()
                self.behind = (behind[0], old_delta, None)
            raise
        if result is None:
            return None
        written, ahead = result
        if behind is not None:
            frames.appended(1, written)
            self.behind = None
        if ahead is None:
            return False
        self.behind = (frame, prev_delta, ahead)
        return True

    def settle(self) -> None:
        """Write the frame left behind, if any. An error leaves it behind, to be written (encoded again) by
        the next call; the add that left it stays counted, as every add not yet committed, and a crash
        loses it with them."""
        if self.behind is None:
            return
        with self._lock:  # read again under it: a read in another thread may have written the frame meanwhile
            if self.behind is None:
                return
            frame, prev_delta, ahead = self.behind
            try:
                self.append(frame, [prev_delta], ahead)
            except BaseException:
                self.behind = (frame, prev_delta, None)
                raise
            self.behind = None
