"""How a store's frames and actions look to d3rlpy: the per-step observation of a d3rlpy episode, the
observation an algorithm samples (a stack laid along the channel axis), and actions as d3rlpy's
``(N, action_size)`` rows.

d3rlpy stacks Atari frames at sampling time (``FrameStackTransitionPicker``): an episode holds one
``(1, 84, 84)`` frame per step and a sampled observation is ``(4, 84, 84)``, the last four frames along
the channel axis, zero-padded before the episode's first frame. A store created with ``stack_size=4``
and ``stack_padding="zeros"`` holds ``(84, 84)`` frames and samples ``(4, 84, 84)`` stacks: the same
arrays. A frame of two axes is one channel of an image (its per-step observation gains a leading axis
of 1); a frame of other rank is stacked along its first axis, as d3rlpy's picker stacks it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class ObservationLayout:
    """The shapes of one store's observations as d3rlpy sees them.

    Attributes:
        frame_shape: One stored frame (``ReplayStore.frame_shape``).
        stack_size: Frames per sampled observation (``ReplayStore.stack_size``).
        frame_dtype: The stored frames' dtype.
        action_shape: One stored action (``()`` for a discrete action).
        action_dtype: The stored actions' dtype.
    """

    frame_shape: tuple[int, ...]
    stack_size: int
    frame_dtype: np.dtype
    action_shape: tuple[int, ...]
    action_dtype: np.dtype

    @property
    def step_shape(self) -> tuple[int, ...]:
        """One step's observation in a d3rlpy episode: ``(1, H, W)`` for stacked two-axis frames."""
        if self.stack_size > 1 and len(self.frame_shape) == 2:
            return (1, *self.frame_shape)
        return self.frame_shape

    @property
    def observation_shape(self) -> tuple[int, ...]:
        """A sampled observation: the frame itself, or ``stack_size`` steps along the channel axis."""
        if self.stack_size == 1:
            return self.frame_shape
        channels, *rest = self.step_shape
        return (self.stack_size * channels, *rest)

    @property
    def action_row(self) -> tuple[int, ...]:
        """One action as a d3rlpy episode holds it: ``(1,)`` for a discrete (scalar) action."""
        return self.action_shape if self.action_shape else (1,)

    def observations(self, stacks: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
        """``(B, stack_size, *frame_shape)`` stacks as ``(B, *observation_shape)`` (a view)."""
        return stacks.reshape(len(stacks), *self.observation_shape)

    def step_frames(self, stacks: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
        """Each stack's newest frame as a d3rlpy episode's per-step observation, ``(B, *step_shape)``."""
        return stacks[:, -1].reshape(len(stacks), *self.step_shape)

    def actions(self, actions: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
        """Stored actions ``(B, *action_shape)`` as d3rlpy's rows ``(B, *action_row)`` (a view)."""
        return actions.reshape(len(actions), *self.action_row)

    def stored_observation(self, observation: object) -> npt.NDArray[np.generic]:
        """An observation from d3rlpy (``append``) as ``ReplayStore.add`` takes it: a stack or one frame.

        Args:
            observation: A sampled-shape observation (``observation_shape``: every frame of the stack) or
                one step's (``step_shape`` or ``frame_shape``: the newest frame only).

        Returns:
            ``(stack_size, *frame_shape)`` or ``frame_shape``, of the store's frame dtype.

        Raises:
            TypeError: ``observation`` is a tuple or list of arrays, or not of the store's frame dtype.
            ValueError: its shape is none of those.
        """
        if isinstance(observation, (list, tuple)):
            raise TypeError(
                f"observation is a {type(observation).__name__} of {len(observation)} arrays; a store keeps "
                f"one observation array per step, {self.observation_shape}"
            )
        array = np.asarray(observation)
        if array.dtype != self.frame_dtype:
            raise TypeError(f"observation has dtype {array.dtype}; expected {self.frame_dtype}, the store's frame dtype")
        if array.shape == self.observation_shape and self.stack_size > 1:
            return array.reshape(self.stack_size, *self.frame_shape)
        if array.shape in (self.step_shape, self.frame_shape):
            return array.reshape(self.frame_shape)
        expected = sorted({self.observation_shape, self.step_shape, self.frame_shape})
        raise ValueError(f"observation has shape {array.shape}; expected one of {expected}")


def layout_of(store: object) -> ObservationLayout:
    """The layout of a ``ReplayStore`` (read from its public properties)."""
    return ObservationLayout(
        frame_shape=tuple(getattr(store, "frame_shape")),
        stack_size=int(getattr(store, "stack_size")),
        frame_dtype=np.dtype(getattr(store, "frame_dtype")),
        action_shape=tuple(getattr(store, "action_shape")),
        action_dtype=np.dtype(getattr(store, "action_dtype")),
    )


def frame_shape_for(step_shape: tuple[int, ...], frame_stack: int) -> tuple[int, ...]:
    """The store frame for d3rlpy per-step observations of ``step_shape`` stacked ``frame_stack`` at a time.

    Args:
        step_shape: One step's observation in the episodes (``(1, 84, 84)`` for Atari frames).
        frame_stack: The ``n_frames`` of d3rlpy's ``FrameStackTransitionPicker`` (1: no stacking).

    Returns:
        ``(84, 84)`` for ``(1, 84, 84)`` steps stacked; the step shape itself otherwise.

    Raises:
        ValueError: stacked steps of two axes (d3rlpy would stack them along their rows), or of no axis.
    """
    if frame_stack == 1:
        return step_shape
    if len(step_shape) == 0:
        raise ValueError(f"stacked observations need an axis to stack along; got per-step shape {step_shape}")
    if len(step_shape) == 3 and step_shape[0] == 1:
        return step_shape[1:]
    if len(step_shape) == 2:
        raise ValueError(
            f"stacked observations of per-step shape {step_shape} need a channel axis: (1, *shape) per step, "
            f"as d3rlpy's FrameStackTransitionPicker stacks along it"
        )
    return step_shape
