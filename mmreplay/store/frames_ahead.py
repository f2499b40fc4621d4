"""How an add's new frames are compressed on the fast path: on how many of the pool's threads, and which
go ahead on a helper (``lz4_codec.compress_ahead`` for plain frames, ``ReferenceFrameRing.encode_ahead``
for reference frames, whose write takes a frame back from a helper that lost its core rather than wait for
it): a vector add's while the add is checked (``start_ahead``), one env's once it is, from the bytes the
add keeps, written by the writer's next call (``start_frame_ahead``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mmreplay.frames import lz4_codec
from mmreplay.frames.threads import (
    AHEAD_MIN_FRAME_BYTES,
    COMPRESS_MIN_CORES,
    REFERENCE_COMPRESS_MIN_CORES,
    ahead_threads,
    compress_threads,
)
from mmreplay.store.add_arguments import AddShapes


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


def start_frame_ahead(frame: bytes, *, frames: Any, groups: object, frame_tail: int, threads: int) -> object | None:
    """One env's new frame (the bytes its add keeps, which no caller can change) started on an awake
    helper: a handle its write takes, or None. ``frames``, ``groups``: as ``start_ahead``'s."""
    if groups is not None:
        handle: object = frames.encode_ahead(groups, frame, frame_tail=frame_tail, threads=threads)
        return handle
    return lz4_codec.compress_ahead(frame, threads=threads, count=1)


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
