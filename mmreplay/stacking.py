"""Index arithmetic that rebuilds frame stacks from episode links; no I/O, no pixels.

A transition's frames are ``stack_size + 1`` frame steps: its obs stack (oldest first) followed by its
next_obs frame. The next_obs stack is the last ``stack_size`` of them. Walking back from the next_obs
frame, each step subtracts the frame's ``prev_delta``; at an episode's first frame the delta is 0, so the
walk stays there and the stack repeats that frame (gymnasium's FrameStackObservation padding).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

PrevDeltas = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]


def transition_frames(
    next_frames: npt.NDArray[np.int64], prev_deltas: PrevDeltas, stack_size: int
) -> npt.NDArray[np.int64]:
    """Frame steps (B, stack_size + 1) of each transition: obs oldest..newest, then next_obs's newest."""
    frames = np.empty((len(next_frames), stack_size + 1), dtype=np.int64)
    frames[:, stack_size] = next_frames
    for column in range(stack_size - 1, -1, -1):
        newer = frames[:, column + 1]
        frames[:, column] = newer - prev_deltas(newer)
    return frames


def obs_columns(stack_size: int) -> slice:
    return slice(0, stack_size)


def next_obs_columns(stack_size: int) -> slice:
    return slice(1, stack_size + 1)
