"""The stores behind a buffer: made for d3rlpy episodes or an env's spaces, and the buffer's other
settings parsed (its random generator, its ``final_observation``, d3rlpy's ``DatasetInfo``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np
import numpy.typing as npt
from d3rlpy.constants import ActionSpace
from d3rlpy.dataset import DatasetInfo, Signature

from mmreplay import ReplayStore
from mmreplay.d3rlpy.layout import ObservationLayout, frame_shape_for
from mmreplay.validation import parse_positive_int

Rng = Union[np.random.Generator, np.random.RandomState, None]
FINAL_OBSERVATIONS = ("zeros", "stored")


def parse_final_observation(value: object) -> bool:
    """Whether ``final_observation`` keeps the stored final frames (``"stored"``) or zeros (``"zeros"``)."""
    if value not in FINAL_OBSERVATIONS:
        raise ValueError(f"final_observation must be 'zeros' (d3rlpy's) or 'stored'; got {value!r}")
    return value == "stored"


def parse_buffer_rng(rng: object) -> Rng:
    """The generator a buffer draws with: None (numpy's global one, which ``d3rlpy.seed`` seeds, as
    d3rlpy's own buffer draws), a ``RandomState`` or ``Generator`` as given, an int a new ``Generator``."""
    if rng is None or isinstance(rng, (np.random.Generator, np.random.RandomState)):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, (bool, np.bool_)):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy Generator, RandomState, int or None; got {type(rng).__name__}")


def draw(rng: Rng, count: int, size: int) -> npt.NDArray[np.int64]:
    """``size`` transition numbers in ``[0, count)``, drawn as d3rlpy's buffer draws them (one
    ``randint(count)`` each: a vectorized ``randint`` gives the same numbers)."""
    if count == 0:
        raise ValueError("cannot sample from a buffer without transitions: add episodes or steps first")
    if rng is None:
        return np.random.randint(count, size=size).astype(np.int64)
    if isinstance(rng, np.random.RandomState):
        return rng.randint(count, size=size).astype(np.int64)
    return rng.integers(count, size=size, dtype=np.int64)


def episodes_layout(episodes: Sequence[Any], frame_stack: int) -> ObservationLayout:
    """The store layout that holds d3rlpy ``episodes`` stacked ``frame_stack`` frames at a time.

    Raises:
        ValueError: no episode, or per-step observations that cannot be stacked.
        TypeError: tuple observations.
    """
    if not len(episodes):
        raise ValueError("episodes is empty; give at least one episode (the store's shapes come from it)")
    first = episodes[0]
    if isinstance(first.observations, (list, tuple)):
        raise TypeError(f"episodes[0] has tuple observations ({len(first.observations)} arrays); a store keeps "
                        f"one observation array per step")
    observations, actions = np.asarray(first.observations), np.asarray(first.actions)
    frame_shape = frame_shape_for(tuple(observations.shape[1:]), frame_stack)
    discrete = np.issubdtype(actions.dtype, np.integer) and actions.shape[1:] == (1,)
    return ObservationLayout(
        frame_shape=frame_shape, stack_size=frame_stack, frame_dtype=observations.dtype,
        action_shape=() if discrete else tuple(actions.shape[1:]), action_dtype=actions.dtype,
    )


def create_store(path: object, layout: ObservationLayout, capacity: int, **store_options: Any) -> ReplayStore:
    """A new store for ``layout`` (zero-padded stacks, as d3rlpy's pickers pad them)."""
    return ReplayStore.create(
        path, frame_shape=layout.frame_shape, capacity=parse_positive_int(capacity, "capacity"),
        stack_size=layout.stack_size, action_shape=layout.action_shape, action_dtype=layout.action_dtype,
        frame_dtype=layout.frame_dtype, stack_padding="zeros", **store_options,
    )


def env_layout(env: Any, frame_stack: int) -> tuple[ObservationLayout, int]:
    """The store layout and action size for a gymnasium-style env (``observation_space``'s shape and
    dtype: what the agent sees, stacks included; ``action_space`` a ``Discrete`` or a ``Box``)."""
    observation_shape = tuple(env.observation_space.shape)
    stack = parse_positive_int(frame_stack, "frame_stack")
    if stack > 1 and (not observation_shape or observation_shape[0] % stack):
        raise ValueError(f"an observation of shape {observation_shape} is no stack of {stack} along its first axis")
    step_shape = (observation_shape[0] // stack, *observation_shape[1:]) if stack > 1 else observation_shape
    space = env.action_space
    discrete = hasattr(space, "n")
    layout = ObservationLayout(
        frame_shape=frame_shape_for(step_shape, stack), stack_size=stack,
        frame_dtype=np.dtype(env.observation_space.dtype),
        action_shape=() if discrete else tuple(space.shape),
        action_dtype=np.dtype(np.int64) if discrete else np.dtype(space.dtype),
    )
    return layout, int(space.n) if discrete else int(np.prod(space.shape))


def action_space_of(layout: ObservationLayout, action_space: object) -> ActionSpace:
    """The given ``ActionSpace``, else discrete for scalar integer actions and continuous otherwise."""
    if action_space is not None:
        if not isinstance(action_space, ActionSpace):
            raise TypeError(f"action_space must be a d3rlpy ActionSpace or None; got {type(action_space).__name__}")
        return action_space
    scalar_integer = layout.action_shape == () and np.issubdtype(layout.action_dtype, np.integer)
    return ActionSpace.DISCRETE if scalar_integer else ActionSpace.CONTINUOUS


def dataset_info(layout: ObservationLayout, action_space: ActionSpace, action_size: int) -> DatasetInfo:
    """d3rlpy's ``DatasetInfo`` of a store: per-step signatures, as d3rlpy's episodes give them."""
    return DatasetInfo(
        observation_signature=Signature(dtype=[layout.frame_dtype], shape=[layout.step_shape]),
        action_signature=Signature(dtype=[layout.action_dtype], shape=[layout.action_row]),
        reward_signature=Signature(dtype=[np.dtype(np.float32)], shape=[(1,)]),
        action_space=action_space,
        action_size=action_size,
    )
