"""How ``MmreplayDictBuffer`` keeps a ``Dict`` observation space in one store.

*Frame keys* (by default the images: ``uint8`` ``Box`` keys of two or more axes) are one frame stream:
the store's frame is every frame key's frame, flattened and laid end to end (frame i of the stack is
frame i of each key), so each image is stored once, lz4-compressed, and an observation stack is
rebuilt from its frames as for ``MmreplayBuffer``. Every other key (a proprioceptive vector, a goal,
a ``Discrete`` state) is a pair of user fields of the store, ``obs_<key>`` and ``next_obs_<key>``,
stored as given with each transition. A dict with no frame key stores a one-byte placeholder frame.

One store rather than one per image key: one commit covers every key of a transition (a crash can
never leave the keys of a transition in different stores at different counts), one writer lock, and
one read per batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from mmreplay.batch import Batch
from mmreplay.sb3.observations import FrameLayout, StackingCheck, frame_layout

PLACEHOLDER_FRAME = (1,)  # the frame of a dict with no frame key: one zero byte per observation


@dataclass(frozen=True)
class DictLayout:
    """A ``Dict`` space as frame keys (each ``frames[key]``: its stack split into frames) and field
    keys (each with SB3's observation shape, ``obs_shapes[key]``, and its two field names)."""

    frames: dict[str, FrameLayout]
    field_names: dict[str, tuple[str, str]]  # key -> (obs field, next_obs field)
    obs_shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, np.dtype[Any]]
    stack_size: int
    frame_dtype: np.dtype[Any]

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """The store's frame: every frame key's frame, flattened, end to end."""
        if not self.frames:
            return PLACEHOLDER_FRAME
        return (sum(math.prod(layout.frame_shape) for layout in self.frames.values()),)

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        """The store's user fields: each field key's observation and next observation."""
        specs = {}
        for key, (obs_name, next_name) in self.field_names.items():
            specs[obs_name] = specs[next_name] = (self.obs_shapes[key], self.dtypes[key])
        return specs

    def stacking_checks(self) -> dict[str, StackingCheck] | None:
        """Checks of an inferred stack against the data, one per frame key; None with nothing to check."""
        if self.stack_size == 1 or not any(layout.inferred for layout in self.frames.values()):
            return None
        return {key: StackingCheck(layout) for key, layout in self.frames.items()}

    def to_frames(self, obs: dict[str, npt.NDArray[Any]], n_envs: int) -> npt.NDArray[Any]:
        """The frame keys' observations of ``n_envs`` envs as the store's stacks, (n_envs, stack_size,
        *frame_shape)."""
        if not self.frames:
            return np.zeros((n_envs, 1, *PLACEHOLDER_FRAME), dtype=self.frame_dtype)
        parts = [obs[key].reshape(n_envs, self.stack_size, -1) for key in self.frames]
        return np.concatenate(parts, axis=2) if len(parts) > 1 else parts[0]

    def key_of(self, batch: Batch, key: str, *, next_obs: bool) -> npt.NDArray[Any]:
        """One key's observations (or next observations), (B, *obs_shape), from a batch of the store."""
        names = self.field_names.get(key)
        if names is not None:
            return batch.fields[names[next_obs]]
        stacks = batch.next_obs if next_obs else batch.obs
        start = 0
        for frame_key, layout in self.frames.items():
            width = math.prod(layout.frame_shape)
            if frame_key == key:
                part = stacks.reshape(len(stacks), self.stack_size, -1)[:, :, start : start + width]
                return part.reshape(len(stacks), *self.obs_shapes[key])
            start += width
        raise KeyError(f"observation_space has no key {key!r}; its keys: {list(self.obs_shapes)}")


def dict_layout(space: spaces.Space[Any], *, frame_keys: tuple[str, ...] | None, stack_size: int | None) -> DictLayout:
    """The layout of a ``Dict`` observation space (see the module docstring). ``frame_keys`` names the
    frame keys (``Box`` keys of one dtype); ``stack_size`` splits each along its first axis, else the
    split is inferred per key as ``MmreplayBuffer`` infers it, and whole observations are frames when
    the keys' inferred stacks differ."""
    if not isinstance(space, spaces.Dict):
        raise TypeError(f"observation_space must be a gymnasium Dict for MmreplayDictBuffer; got {space}")
    for key, subspace in space.spaces.items():
        if not isinstance(key, str):
            raise TypeError(f"observation_space keys must be strings; got {key!r}")
        if not isinstance(subspace, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
            raise TypeError(
                f"observation_space[{key!r}] must be a Box, Discrete, MultiDiscrete or MultiBinary (SB3 takes no "
                f"nested Dict either); got {subspace}"
            )
    keys = _frame_keys(space, frame_keys)
    frames = {key: frame_layout(space[key], stack_size) for key in keys}
    stacks = {layout.stack_size for layout in frames.values()}
    if stack_size is None and len(stacks) > 1:
        frames = {key: frame_layout(space[key], 1) for key in keys}  # keys disagree: whole observations
    dtypes = {key: np.dtype(subspace.dtype).newbyteorder("=") for key, subspace in space.spaces.items()}
    obs_shapes = {key: _obs_shape(subspace) for key, subspace in space.spaces.items()}
    return DictLayout(
        frames=frames,
        field_names=_field_names([key for key in space.spaces if key not in frames]),
        obs_shapes=obs_shapes,
        dtypes=dtypes,
        stack_size=next(iter(frames.values())).stack_size if frames else 1,
        frame_dtype=dtypes[keys[0]].newbyteorder("<") if keys else np.dtype(np.uint8),
    )


def _frame_keys(space: spaces.Dict, given: tuple[str, ...] | None) -> tuple[str, ...]:
    if given is None:
        return tuple(key for key, subspace in space.spaces.items() if _is_image(subspace))
    if isinstance(given, str) or not all(isinstance(key, str) for key in given):
        raise TypeError(f"frame_keys must be a sequence of key names; got {given!r}")
    keys = tuple(given)
    unknown = [key for key in keys if key not in space.spaces]
    if unknown:
        raise ValueError(f"frame_keys names {unknown[0]!r}, which observation_space does not have; its keys: {list(space.spaces)}")
    not_boxes = [key for key in keys if not isinstance(space[key], spaces.Box)]
    if not_boxes:
        raise ValueError(f"frame_keys must name Box keys; observation_space[{not_boxes[0]!r}] is {space[not_boxes[0]]}")
    dtypes = {np.dtype(space[key].dtype) for key in keys}
    if len(dtypes) > 1:
        raise ValueError(f"frame_keys must share one dtype (one frame stream); got {sorted(str(d) for d in dtypes)}")
    return tuple(key for key in space.spaces if key in keys)  # in the space's order


def _is_image(space: spaces.Space[Any]) -> bool:
    """An image by default: a uint8 Box of two or more axes (with or without channels, stacked or not)."""
    return isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) >= 2


def _obs_shape(space: spaces.Space[Any]) -> tuple[int, ...]:
    """SB3's shape of one observation (``get_obs_shape``): (1,) for Discrete, (n,) for MultiDiscrete."""
    if isinstance(space, spaces.Discrete):
        return (1,)
    if isinstance(space, spaces.MultiDiscrete):
        return (int(np.prod(space.nvec.shape)),)
    return tuple(int(n) for n in space.shape)  # type: ignore[union-attr]


def _field_names(keys: list[str]) -> dict[str, tuple[str, str]]:
    """``obs_<key>`` and ``next_obs_<key>`` for each field key, or ``obs_<i>`` by the key's place when
    any key would not make a Python identifier (what a store's field name must be) or two would clash."""
    names = {key: (f"obs_{key}", f"next_obs_{key}") for key in keys}
    taken = [name for pair in names.values() for name in pair]
    if all(name.isidentifier() for name in taken) and len(set(taken)) == len(taken):
        return names
    return {key: (f"obs_{i}", f"next_obs_{i}") for i, key in enumerate(keys)}
