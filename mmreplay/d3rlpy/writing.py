"""d3rlpy's episodes and steps written into a store, so that reading them back gives d3rlpy's episodes
exactly: every step of an episode of N observations becomes one stored transition.

Transition i of an episode is ``(o_i, a_i, r_i, o_{i+1})``; the last one, whose next observation d3rlpy
never had, gets an all-zero one and the episode's flag: terminated, or truncated when the episode did
not terminate. A terminated episode thus holds its N transitions (the last terminal, its next
observation zeros, as d3rlpy's pickers give it); a truncated one its N - 1 transitions plus the stored
last step, which d3rlpy does not count but whose action and reward it reads (``next_action``, returns
to go). Online, ``append(o_t, a_t, r_t)`` keeps the step until the next ``append`` brings ``o_{t+1}``
(then the transition is added) or ``clip_episode`` ends the episode (then it is added with zeros).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay import ReplayStore
from mmreplay.d3rlpy.layout import ObservationLayout
from mmreplay.d3rlpy.transition_index import OPEN, TERMINATED, TRUNCATED

# Called after each add: (step, starts_episode, ending).
AddHook = Callable[[int, bool, int], None]


def check_episode(episode: Any, layout: ObservationLayout, number: int) -> None:
    """Refuse, before anything is written, an episode the store cannot hold in ``layout``.

    Args:
        episode: A d3rlpy episode (``observations``, ``actions``, ``rewards``, ``terminated``).
        layout: The store's layout.
        number: The episode's position in its sequence (for the messages).

    Raises:
        TypeError: tuple observations, or observations of another dtype than the store's frames.
        ValueError: shapes or lengths that do not match.
    """
    observations = episode.observations
    name = f"episodes[{number}]"
    if isinstance(observations, (list, tuple)):
        raise TypeError(
            f"{name} has tuple observations ({len(observations)} arrays); a store keeps one observation "
            f"array per step"
        )
    observations = np.asarray(observations)
    if observations.shape[1:] != layout.step_shape:
        raise ValueError(f"{name}.observations has shape {observations.shape}; expected (N, *{layout.step_shape})")
    if observations.dtype != layout.frame_dtype:
        raise TypeError(f"{name}.observations has dtype {observations.dtype}; expected {layout.frame_dtype}")
    steps = len(observations)
    actions, rewards = np.asarray(episode.actions), np.asarray(episode.rewards)
    if steps == 0:
        raise ValueError(f"{name} is empty; an episode has at least one step")
    if actions.shape != (steps, *layout.action_row):
        raise ValueError(f"{name}.actions has shape {actions.shape}; expected {(steps, *layout.action_row)}")
    if rewards.reshape(steps, -1).shape != (steps, 1):
        raise ValueError(f"{name}.rewards has shape {rewards.shape}; expected ({steps}, 1)")


def write_episode(store: ReplayStore, episode: Any, layout: ObservationLayout, on_add: AddHook) -> None:
    """Add one d3rlpy episode's steps to ``store``, one transition a step (see the module).

    Args:
        store: The store, open for appending (one env).
        episode: A d3rlpy episode already checked by ``check_episode``.
        layout: The store's layout.
        on_add: Told of each add.
    """
    frames = np.asarray(episode.observations).reshape(-1, *layout.frame_shape)
    actions = np.asarray(episode.actions).reshape(len(frames), *layout.action_shape)
    rewards = np.asarray(episode.rewards, dtype=np.float64).reshape(-1)
    terminated = bool(episode.terminated)
    final = np.zeros(layout.frame_shape, dtype=layout.frame_dtype)
    last = len(frames) - 1
    for i in range(len(frames)):
        ending = OPEN if i < last else (TERMINATED if terminated else TRUNCATED)
        store.add(frames[i], actions[i], float(rewards[i]), frames[i + 1] if i < last else final,
                  ending == TERMINATED, ending == TRUNCATED)
        on_add(store.transitions_added - 1, i == 0, ending)


class OnlineWriter:
    """``append`` and ``clip_episode`` for a store: each step held until its next observation arrives.

    Args:
        store: The store, open for appending (one env).
        layout: Its layout.
        on_add: Told of each add.
    """

    def __init__(self, store: ReplayStore, layout: ObservationLayout, on_add: AddHook) -> None:
        self._store = store
        self._layout = layout
        self._on_add = on_add
        self._pending: tuple[npt.NDArray[np.generic], npt.NDArray[np.generic], float] | None = None
        self._episode_started = False

    def append(self, observation: object, action: object, reward: object) -> None:
        """Take step ``(o_t, a_t, r_t)``: add the held step's transition, then hold this one.

        Raises:
            TypeError: an observation of another dtype, a tuple observation, a reward that is no number.
            ValueError: an observation or action of another shape.
        """
        stored = self._layout.stored_observation(observation)
        taken = self._action(action)
        value = _reward(reward)
        if self._pending is not None:
            self._add(stored, OPEN)
        self._pending = (stored, taken, value)

    def clip_episode(self, terminated: bool) -> None:
        """End the episode: add the held step with zeros as its next observation and the episode's flag."""
        if self._pending is None:
            return
        held = self._pending[0]
        self._add(np.zeros(held.shape, dtype=held.dtype), TERMINATED if terminated else TRUNCATED)
        self._episode_started = False

    def _add(self, following: npt.NDArray[np.generic], ending: int) -> None:
        assert self._pending is not None
        observation, action, reward = self._pending
        if observation.ndim > len(self._layout.frame_shape) and following.ndim == len(self._layout.frame_shape):
            following = np.concatenate([observation[1:], following[None]])
        self._store.add(observation, action, reward, following, ending == TERMINATED, ending == TRUNCATED)
        self._pending = None
        self._on_add(self._store.transitions_added - 1, not self._episode_started, ending)
        self._episode_started = True

    def _action(self, action: object) -> npt.NDArray[np.generic]:
        array = np.asarray(action)
        shape = self._layout.action_shape
        if array.shape != shape and array.shape != self._layout.action_row and array.size != max(1, int(np.prod(shape))):
            raise ValueError(f"action has shape {array.shape}; expected {shape or '()'} or {self._layout.action_row}")
        return array.reshape(shape)


def _reward(reward: object) -> float:
    array = np.asarray(reward)
    if array.size != 1 or not np.issubdtype(array.dtype, np.number):
        raise TypeError(f"reward must be one number; got {reward!r}")
    return float(array.reshape(()))
