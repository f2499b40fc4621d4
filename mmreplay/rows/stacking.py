"""Index arithmetic that rebuilds frame stacks from episode links; no I/O, no pixels.

A transition's frames are ``stack_size + 1`` frame steps: its obs stack (oldest first) followed by its
next_obs frame. The next_obs stack is the last ``stack_size`` of them. Walking back from the next_obs
frame, each step subtracts the frame's ``prev_delta``; at an episode's first frame the delta is 0, so the
walk stays there and the stack repeats that frame (gymnasium's FrameStackObservation padding; a store
created with ``stack_padding="zeros"`` zeroes those repeats, ``padding_columns``, as Dopamine pads).

A *detached* transition (flag ``transition_table.DETACHED``: it ended its episode with a next_obs stack
that is not obs shifted, such as the reset observation) stored all ``stack_size`` frames of next_obs,
the oldest linked to obs's newest frame O. Its ``stack_size + 1`` frames are then O followed by the
next_obs stack, and its obs is the stack ending at O: the first column's own stack (``obs_frames``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

PrevDeltas = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]
# (next_obs frame steps, stack_size) -> (B, stack_size + 1) frame steps: ``transition_frames`` over a ring.
Stacks = Callable[[npt.NDArray[np.int64], int], npt.NDArray[np.int64]]


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


def padding_columns(frames: npt.NDArray[np.int64], stack_size: int) -> npt.NDArray[np.bool_]:
    """Which columns of ``frames`` (B, stack_size + 1) or (B, 2 * stack_size) are padding: a walk back
    that stayed on an episode's first frame repeats it, so a column holding the same frame step as the
    next column of its stack is padding (a stack stored whole has distinct steps throughout)."""
    padding = np.zeros(frames.shape, np.bool_)
    if frames.shape[1] == stack_size + 1:
        padding[:, :stack_size] = frames[:, :stack_size] == frames[:, 1:]
    else:
        for first in (0, stack_size):
            stack = frames[:, first : first + stack_size]
            padding[:, first : first + stack_size - 1] = stack[:, :-1] == stack[:, 1:]
    return padding


def obs_columns(stack_size: int) -> slice:
    return slice(0, stack_size)


def next_obs_columns(stack_size: int) -> slice:
    return slice(1, stack_size + 1)


def obs_frames(
    frames: npt.NDArray[np.int64], detached: npt.NDArray[np.bool_], stacks: Stacks
) -> npt.NDArray[np.int64]:
    """The obs frame steps (B, stack_size) of transitions whose frames (B, stack_size + 1) are given:
    the first ``stack_size`` columns, but for a detached row the stack that ends at its first column."""
    stack_size = frames.shape[1] - 1
    obs = frames[:, obs_columns(stack_size)]
    if detached.any():
        obs = obs.copy()
        obs[detached] = stacks(frames[detached, 0], stack_size - 1)
    return obs


def separate_frames(
    frames: npt.NDArray[np.int64], detached: npt.NDArray[np.bool_], stacks: Stacks
) -> npt.NDArray[np.int64]:
    """Frame steps (B, 2 * stack_size): each transition's obs stack, then its next_obs stack, for a batch
    whose obs and next_obs cannot be two views of one (B, stack_size + 1) array (detached rows)."""
    stack_size = frames.shape[1] - 1
    return np.concatenate([obs_frames(frames, detached, stacks), frames[:, next_obs_columns(stack_size)]], axis=1)
