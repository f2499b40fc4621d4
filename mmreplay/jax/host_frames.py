"""The one contiguous array behind a batch's ``obs`` and ``next_obs``, which DLPack and ``jax.device_put``
take as it is.

A ``Batch``'s ``obs`` and ``next_obs`` are views of one array of frames, ``(B, columns, *frame_shape)``:
``stack_size + 1`` columns where they share ``stack_size - 1`` frames (obs the first ``stack_size``, next_obs
the last), ``2 * stack_size`` where they share none. Each view steps over a whole row of that array from
one transition to the next, so it is not compact, and DLPack refuses it ("Only DLPack tensors with trivial
(compact) striding are supported"); ``jax.device_put`` copies it into a compact array first. The array
itself is compact: it travels whole, the distinct frames once, and the stacks are cut from it on the
device.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt


class SharedFrames(NamedTuple):
    """``frames``, C-contiguous ``(B, columns, *frame_shape)``, with ``obs == frames[:, obs_column:obs_column
    + stack_size]`` and ``next_obs == frames[:, next_obs_column:next_obs_column + stack_size]``."""

    frames: npt.NDArray[np.generic]
    obs_column: int
    next_obs_column: int


def shared_frames(obs: npt.NDArray[np.generic], next_obs: npt.NDArray[np.generic]) -> SharedFrames | None:
    """The compact array that ``obs`` and ``next_obs`` (B, stack_size, *frame_shape) both view, found from
    their base, shape, strides and addresses (every one of them checked), or None when they view no such
    array (any other pair of arrays: they then travel as they are).

    Args:
        obs: a batch's obs.
        next_obs: the same batch's next_obs.

    Returns:
        The array and where each stack starts in it, or None.
    """
    frames = obs.base
    if not isinstance(frames, np.ndarray) or next_obs.base is not frames or obs.ndim < 2:
        return None
    if (
        not frames.flags.c_contiguous
        or frames.dtype != obs.dtype
        or frames.ndim != obs.ndim
        or obs.shape != next_obs.shape
        or frames.shape[0] != obs.shape[0]
        or frames.shape[2:] != obs.shape[2:]
        or obs.strides != frames.strides
        or next_obs.strides != frames.strides
    ):
        return None
    columns = [_column(view, frames) for view in (obs, next_obs)]
    if None in columns:
        return None
    obs_column, next_obs_column = columns
    assert obs_column is not None and next_obs_column is not None
    return SharedFrames(frames, obs_column, next_obs_column)


def _column(view: npt.NDArray[np.generic], frames: npt.NDArray[np.generic]) -> int | None:
    """The column of ``frames`` where ``view`` (same strides) starts, if its stack lies within each row."""
    offset = view.__array_interface__["data"][0] - frames.__array_interface__["data"][0]
    frame_bytes = frames.strides[1] if frames.shape[1] else 0
    if frame_bytes <= 0 or offset < 0 or offset % frame_bytes:
        return None
    column = offset // frame_bytes
    return column if column + view.shape[1] <= frames.shape[1] else None
