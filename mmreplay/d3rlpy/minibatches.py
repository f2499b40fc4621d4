"""d3rlpy's records built from the store's batches: ``Transition`` and ``TransitionMiniBatch`` for the
Q-learning algorithms, ``PartialTrajectory`` and ``TrajectoryMiniBatch`` for Decision Transformer.

Each mini-batch comes from one ``ReplayStore.read`` of its rows, cast to float32 as d3rlpy's own
``from_transitions`` casts them. d3rlpy's semantics: a terminal transition's ``next_observation`` and
``next_action`` are zeros (``zero_final``; ``final_observation="stored"`` hands the stored final frame
over instead), ``interval`` is 1, and ``rewards_to_go`` is the episode's rewards from the transition on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from d3rlpy.dataset import PartialTrajectory, TrajectoryMiniBatch, Transition, TransitionMiniBatch

from mmreplay import Batch
from mmreplay.d3rlpy.layout import ObservationLayout

RewardsToGo = Callable[[int], npt.NDArray[np.float32]]


def next_observations(
    layout: ObservationLayout, rows: Batch, terminal: npt.NDArray[np.bool_], *, zero_final: bool
) -> npt.NDArray[np.generic]:
    """The rows' next observations, zeros at terminal rows when ``zero_final`` (a new array)."""
    following = layout.observations(rows.next_obs)
    if not zero_final or not terminal.any():
        return following.copy()
    mask = terminal.reshape(-1, *([1] * (following.ndim - 1)))
    return np.where(mask, np.zeros((), following.dtype), following)


def next_action_rows(
    layout: ObservationLayout, next_rows: Batch, has_next: npt.NDArray[np.bool_]
) -> npt.NDArray[np.generic]:
    """d3rlpy's ``next_action`` of each row: the next stored transition's action, zeros where none."""
    actions = np.zeros((len(has_next), *layout.action_row), dtype=layout.action_dtype)
    actions[has_next] = layout.actions(next_rows.action)
    return actions


class LazyTransitions(Sequence[Transition]):
    """A mini-batch's ``transitions``, each built when it is read (d3rlpy reads them only to compute
    returns to go, as Cal-QL does): the pixels stay in the mini-batch's arrays until then.

    Args:
        observations: The rows' observations, of the stored dtype.
        actions: Their actions as d3rlpy's rows.
        rewards: ``(B, 1)`` float32.
        following: Their next observations (zeros at termination, as d3rlpy gives them).
        next_actions: Their next actions.
        terminal: Whether each row is terminal.
        rewards_to_go: Row ``i``'s episode rewards from its transition on, ``(L, 1)`` float32.
    """

    def __init__(
        self,
        observations: npt.NDArray[np.generic],
        actions: npt.NDArray[np.generic],
        rewards: npt.NDArray[np.float32],
        following: npt.NDArray[np.generic],
        next_actions: npt.NDArray[np.generic],
        terminal: npt.NDArray[np.bool_],
        rewards_to_go: RewardsToGo,
    ) -> None:
        self._arrays = (observations, actions, rewards, following, next_actions, terminal)
        self._rewards_to_go = rewards_to_go

    def __len__(self) -> int:
        return len(self._arrays[0])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        observations, actions, rewards, following, next_actions, terminal = self._arrays
        i = range(len(self))[i]
        return Transition(
            observation=observations[i],
            action=actions[i],
            reward=rewards[i],
            next_observation=following[i],
            next_action=next_actions[i],
            terminal=float(terminal[i]),
            interval=1,
            rewards_to_go=self._rewards_to_go(i),
        )

    def __iter__(self) -> Iterator[Transition]:
        return (self[i] for i in range(len(self)))


def transition_minibatch(
    layout: ObservationLayout,
    rows: Batch,
    next_actions: npt.NDArray[np.generic],
    terminal: npt.NDArray[np.bool_],
    rewards_to_go: RewardsToGo,
    *,
    zero_final: bool,
) -> TransitionMiniBatch:
    """A ``TransitionMiniBatch`` of the stored ``rows``.

    Args:
        layout: The store's layout.
        rows: The rows, as ``ReplayStore.read`` gives them.
        next_actions: Each row's next action (``next_action_rows``).
        terminal: Whether each row is terminal as d3rlpy counts it.
        rewards_to_go: For the lazy ``transitions``.
        zero_final: Zeros as the next observation of terminal rows.

    Returns:
        The mini-batch, every array float32 as d3rlpy's own.
    """
    observations = layout.observations(rows.obs)
    following = next_observations(layout, rows, terminal, zero_final=zero_final)
    actions = layout.actions(rows.action)
    rewards = rows.reward.reshape(-1, 1).astype(np.float32)
    column = terminal.astype(np.float32).reshape(-1, 1)
    return TransitionMiniBatch(
        observations=observations.astype(np.float32),
        actions=actions.astype(np.float32),
        rewards=rewards,
        next_observations=following.astype(np.float32),
        next_actions=next_actions.astype(np.float32),
        terminals=column,
        intervals=np.ones((len(rows.reward), 1), dtype=np.float32),
        transitions=LazyTransitions(observations, actions, rewards, following, next_actions, terminal, rewards_to_go),
    )


def trajectory_arrays(
    layout: ObservationLayout,
    rows: Batch,
    positions: npt.NDArray[np.int64],
    valid: npt.NDArray[np.bool_],
    returns_to_go: npt.NDArray[np.float32],
    terminal: npt.NDArray[np.bool_],
) -> dict[str, npt.NDArray[np.generic]]:
    """Windows of d3rlpy's trajectory slicers, ``(B, L, ...)``, left-padded with zeros.

    Args:
        layout: The store's layout.
        rows: The stored rows of the valid window entries, in row-major order of ``valid``.
        positions: ``(B, L)`` positions of each window's entries in their episode.
        valid: ``(B, L)``: False for the padding before an episode's first transition.
        returns_to_go: ``(B, L)`` the rewards from each entry to its episode's end.
        terminal: ``(B,)`` whether each window ends on its episode's terminal transition.

    Returns:
        The arrays of a ``PartialTrajectory`` (observations of the stored dtype, the rest float32 or
        int32 as d3rlpy's slicers give them), each with the leading ``(B, L)`` axes.
    """
    batch, length = valid.shape
    observations = np.zeros((batch, length, *layout.observation_shape), dtype=layout.frame_dtype)
    observations[valid] = layout.observations(rows.obs)
    actions = np.zeros((batch, length, *layout.action_row), dtype=layout.action_dtype)
    actions[valid] = layout.actions(rows.action)
    rewards = np.zeros((batch, length, 1), dtype=np.float32)
    rewards[valid, 0] = rows.reward
    terminals = np.zeros((batch, length, 1), dtype=np.float32)
    terminals[:, -1, 0] = terminal
    return {
        "observations": observations,
        "actions": actions,
        "rewards": rewards,
        "returns_to_go": np.where(valid, returns_to_go, 0).astype(np.float32)[..., None],
        "terminals": terminals,
        "timesteps": np.where(valid, positions + 1, 0).astype(np.int32),
        "masks": valid.astype(np.float32),
    }


def partial_trajectory(arrays: dict[str, npt.NDArray[np.generic]], i: int) -> PartialTrajectory:
    """Window ``i`` of ``trajectory_arrays`` as d3rlpy's ``PartialTrajectory``."""
    parts = {name: array[i] for name, array in arrays.items()}
    return PartialTrajectory(length=len(parts["masks"]), **parts)


def trajectory_minibatch(arrays: dict[str, npt.NDArray[np.generic]]) -> TrajectoryMiniBatch:
    """The windows of ``trajectory_arrays`` as d3rlpy's ``TrajectoryMiniBatch`` (float32 throughout)."""
    cast = {name: array.astype(np.float32) for name, array in arrays.items()}
    return TrajectoryMiniBatch(length=cast["masks"].shape[1], **cast)
