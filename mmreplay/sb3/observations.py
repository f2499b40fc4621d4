"""How ``MmreplayBuffer`` maps SB3's observations onto a store: frames and stacks of an observation
space, the check of an inferred stack against the data, and the layout a reopened store must have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from mmreplay.store import ReplayStore

RGB = 3  # channels of a colour frame


@dataclass(frozen=True)
class FrameLayout:
    """An observation as ``stack_size`` frames of ``frame_shape`` along its first axis; ``inferred``
    when the split came from the observation space's shape rather than a given ``stack_size``."""

    frame_shape: tuple[int, ...]
    stack_size: int
    inferred: bool
    first_axis: int  # the observation's first axis (frames times each frame's channels)


def frame_layout(space: spaces.Space[Any], stack_size: int | None) -> FrameLayout:
    """The frames of an observation space. ``Discrete``, ``MultiDiscrete`` and ``MultiBinary`` are one
    frame each, of SB3's shape and the space's dtype. A ``Box`` of any numeric or bool dtype (the store's ``frame_dtype``;
    a vector such as CartPole's is one frame): ``stack_size`` along the first axis when given,
    else inferred (see ``MmreplayBuffer``: channel-first images are RGB frames when 3 divides the
    channels, else grayscale frames; a 4-d space is a stack along its first axis; else one frame).
    A scalar space (shape ``()``) is one frame of shape ``(1,)``: a store's frames have at least one
    axis, and the buffer reshapes them back to ``()`` as SB3's own buffer gives them."""
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return _integer_layout(space, stack_size)
    if not isinstance(space, spaces.Box):
        raise TypeError(f"observation_space must be a gymnasium Box, Discrete, MultiDiscrete or MultiBinary; got {space}")
    if space.dtype is None or space.dtype.kind not in "biuf":
        raise TypeError(f"observation_space must have a numeric or bool dtype; got {space.dtype}")
    shape = tuple(int(n) for n in space.shape)
    inferred = stack_size is None
    if stack_size is None:
        stack_size = _inferred_stack_size(shape)
    if isinstance(stack_size, bool) or not isinstance(stack_size, int) or stack_size < 1:
        raise ValueError(f"stack_size must be a positive int; got {stack_size!r}")
    first_axis = shape[0] if shape else 1
    if stack_size == 1:
        return FrameLayout(shape or (1,), 1, inferred, first_axis)
    if not shape or shape[0] % stack_size:
        raise ValueError(
            f"stack_size={stack_size} must divide the observation's first axis; observation_space has shape {shape}"
        )
    return FrameLayout(_frame_shape(shape, shape[0] // stack_size), stack_size, inferred, first_axis)


def _integer_layout(
    space: spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary, stack_size: int | None
) -> FrameLayout:
    """One frame of SB3's shape for these spaces (``get_obs_shape``): (1,) for ``Discrete``, (n,) for
    ``MultiDiscrete``'s n values, ``MultiBinary``'s own shape; in the space's dtype (int64, or int8)."""
    if stack_size not in (None, 1):
        raise ValueError(f"stack_size must be 1 for a {type(space).__name__} observation space; got {stack_size!r}")
    if isinstance(space, spaces.Discrete):
        shape: tuple[int, ...] = (1,)
    elif isinstance(space, spaces.MultiDiscrete):
        shape = (int(np.prod(space.nvec.shape)),)
    else:
        shape = tuple(int(n) for n in space.shape)
    return FrameLayout(shape, 1, stack_size is None, shape[0])


def _inferred_stack_size(shape: tuple[int, ...]) -> int:
    if len(shape) == 4:
        return shape[0]
    if len(shape) != 3 or shape[0] >= min(shape[1:]):  # not channel-first: one frame (HWC, or no image)
        return 1
    channels = shape[0]
    return channels // RGB if channels % RGB == 0 else channels


def _frame_shape(shape: tuple[int, ...], channels: int) -> tuple[int, ...]:
    """One frame of an observation whose first axis holds frames of ``channels`` each."""
    if len(shape) == 3:
        return (channels, *shape[1:]) if channels > 1 else shape[1:]
    if channels > 1:
        raise ValueError(f"observation_space has shape {shape}; cannot split its first axis into frames of {channels}")
    if math.prod(shape[1:]) == 0 or len(shape) < 2:
        raise ValueError(f"observation_space has shape {shape}; cannot split it into {shape[0]} frames")
    return shape[1:]


class StackMismatch(ValueError):
    """The observations added refute an inferred stack; ``fits`` are the stack sizes they fit, largest
    first (1, whole observations, always fits)."""

    def __init__(self, fits: list[int], message: str) -> None:
        super().__init__(message)
        self.fits = fits


class StackingCheck:
    """Checks an inferred stack against the observations added: within a transition, next_obs is obs
    shifted by one frame (SB3's ``VecFrameStack`` makes every next_obs so, the terminal one included).

    ``check`` raises ``StackMismatch`` when the data refute the inferred split, naming the
    ``stack_size`` values they fit, and returns True once a transition confirms it (no other split fits it), after which the
    buffer stops checking: real frames confirm at the first or second add.
    """

    def __init__(self, layout: FrameLayout) -> None:
        self.layout = layout

    def check(self, obs: npt.NDArray[np.uint8], next_obs: npt.NDArray[np.uint8]) -> bool:
        """``obs`` and ``next_obs`` shaped (n_envs, stack_size, *frame_shape). True when confirmed."""
        stack_size = self.layout.stack_size
        if stack_size == 1:
            return True
        observations = self.layout.first_axis
        flat_obs = obs.reshape(len(obs), observations, -1)
        flat_next = next_obs.reshape(len(obs), observations, -1)
        fits = [c for c in _divisors(observations) if _shifted(flat_obs, flat_next, c)]
        channels = observations // stack_size
        if channels not in fits:
            options = ", ".join(f"stack_size={observations // c}" for c in fits)
            raise StackMismatch([observations // c for c in fits], 
                f"MmreplayBuffer inferred stack_size={stack_size} (frames of shape {self.layout.frame_shape}) "
                f"from the observation space, but next_obs is not obs shifted by one such frame; pass "
                f"stack_size= to MmreplayBuffer: the data fit {options}"
            )
        return fits == [channels, observations]  # stack_size=1 (whole observations) always fits


def _divisors(n: int) -> list[int]:
    return [c for c in range(1, n + 1) if n % c == 0]


def _shifted(obs: npt.NDArray[np.uint8], next_obs: npt.NDArray[np.uint8], channels: int) -> bool:
    """Whether next_obs is obs shifted by ``channels`` along axis 1."""
    return bool(np.array_equal(next_obs[:, :-channels], obs[:, channels:]))


@dataclass(frozen=True)
class StoreLayout:
    """What a buffer's arguments make of its store: ``ReplayStore.create``'s arguments, and what a store
    it reopens must have."""

    frame_shape: tuple[int, ...]
    stack_size: int
    num_envs: int
    action_shape: tuple[int, ...]
    action_dtype: np.dtype[Any]
    capacity: int
    frame_dtype: np.dtype[Any] = np.dtype(np.uint8)  # the observation space's, little-endian
    # User fields, name -> (shape, dtype): a Dict space's keys other than its frame keys.
    fields: dict[str, tuple[tuple[int, ...], np.dtype[Any]]] = field(default_factory=dict)

    def create(self, path: Path) -> ReplayStore:
        return ReplayStore.create(
            path, frame_shape=self.frame_shape, stack_size=self.stack_size, num_envs=self.num_envs,
            action_shape=self.action_shape, action_dtype=self.action_dtype, capacity=self.capacity,
            frame_dtype=self.frame_dtype, fields=dict(self.fields) or None,
        )

    def with_frames(self, frames: FrameLayout) -> StoreLayout:
        return replace(self, frame_shape=frames.frame_shape, stack_size=frames.stack_size)


def check_layout(
    store: ReplayStore,
    layout: StoreLayout,
    *,
    observation_space: spaces.Space[Any],
    inferred: bool,
    owner: str = "MmreplayBuffer",
) -> StoreLayout:
    """The layout of a store a buffer reopens: the buffer's, else a ``ValueError`` naming the field that
    differs. With an inferred stack, the store may split the observation space another way (chosen
    from the data by the buffer that created it; see ``MmreplayBuffer``)."""
    if inferred and (store.frame_shape, store.stack_size) != (layout.frame_shape, layout.stack_size):
        try:
            split: FrameLayout | None = frame_layout(observation_space, store.stack_size)
        except ValueError:
            split = None
        if split is not None and split.frame_shape == store.frame_shape:
            layout = layout.with_frames(split)
    for item in fields(layout):
        name, expected = item.name, getattr(layout, item.name)
        actual = getattr(store, name)
        if actual != expected:
            raise ValueError(
                f"the store at {str(store.path)!r} has {name}={actual!r}; this {owner} needs "
                f"{name}={expected!r} (from observation_space {observation_space}, buffer_size, n_envs, "
                "action_space and stack_size): pass the arguments it was made with, or another path"
            )
    return layout
