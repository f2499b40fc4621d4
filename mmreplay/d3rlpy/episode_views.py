"""A store's episodes as d3rlpy episodes (``EpisodeBase``): lazy views that read their transitions from
the store when first asked for pixels, actions or rewards, and never before.

A view of a store episode of M transitions holds M observations when the episode terminated (its last
transition is terminal) or was truncated (d3rlpy never keeps the final observation, so its last step
starts no transition), and M + 1 when it goes on past its last transition: cut or in progress (the
extra observation is that transition's next one) or truncated with ``final_observation="stored"``. The
step after the last transition has no action or reward: zeros there, as d3rlpy pads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from d3rlpy.dataset import Episode, PartialTrajectory, Signature, Transition

from mmreplay import Batch
from mmreplay.d3rlpy.layout import ObservationLayout
from mmreplay.d3rlpy.minibatches import next_observations, partial_trajectory, trajectory_arrays

Reader = Callable[[npt.NDArray[np.int64]], Batch]


class StoreEpisode:
    """One stored episode as a d3rlpy episode (``d3rlpy.dataset.EpisodeBase``), read when first needed.

    Args:
        read: Reads stored transitions by step (``ReplayStore.read``).
        layout: The store's layout.
        steps: The episode's stored steps, in order.
        transition_count: Its transitions as d3rlpy counts them.
        terminated: It ended by termination.
        size: Its observations (M or M + 1, see the module).
        zero_final: Zeros as a terminal transition's next observation (d3rlpy's), else the stored one.
    """

    def __init__(
        self,
        read: Reader,
        layout: ObservationLayout,
        steps: npt.NDArray[np.int64],
        *,
        transition_count: int,
        terminated: bool,
        size: int,
        zero_final: bool,
    ) -> None:
        self._read = read
        self._layout = layout
        self.steps = steps
        self._transition_count = transition_count
        self._terminated = terminated
        self._size = size
        self._zero_final = zero_final
        self._rows: Batch | None = None

    @property
    def id(self) -> int:
        """The store's id of the episode: the step of its first stored transition."""
        return int(self.steps[0])

    def rows(self) -> Batch:
        """The episode's stored transitions (one read, kept while the view lives)."""
        if self._rows is None:
            self._rows = self._read(self.steps)
        return self._rows

    def _padded(self, array: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
        if self._size == len(self.steps):
            return array
        return np.concatenate([array, np.zeros((1, *array.shape[1:]), array.dtype)])

    @property
    def observations(self) -> npt.NDArray[np.generic]:
        """``(size, *step_shape)``: each step's newest frame (d3rlpy stacks them when it samples)."""
        rows = self.rows()
        frames = self._layout.step_frames(rows.obs)
        if self._size == len(self.steps):
            return frames
        return np.concatenate([frames, self._layout.step_frames(rows.next_obs[-1:])])

    @property
    def actions(self) -> npt.NDArray[np.generic]:
        return self._padded(self._layout.actions(self.rows().action))

    @property
    def rewards(self) -> npt.NDArray[np.float32]:
        rewards: npt.NDArray[np.float32] = self._padded(self.rows().reward.reshape(-1, 1).astype(np.float32))
        return rewards

    @property
    def terminated(self) -> bool:
        return self._terminated

    @property
    def observation_signature(self) -> Signature:
        return Signature(dtype=[self._layout.frame_dtype], shape=[self._layout.step_shape])

    @property
    def action_signature(self) -> Signature:
        return Signature(dtype=[self._layout.action_dtype], shape=[self._layout.action_row])

    @property
    def reward_signature(self) -> Signature:
        return Signature(dtype=[np.dtype(np.float32)], shape=[(1,)])

    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return self._size

    @property
    def transition_count(self) -> int:
        return self._transition_count

    def compute_return(self) -> float:
        return float(np.sum(self.rewards))

    def serialize(self) -> dict[str, Any]:
        return {"observations": self.observations, "actions": self.actions, "rewards": self.rewards,
                "terminated": self.terminated}

    @classmethod
    def deserialize(cls, serializedData: dict[str, Any]) -> Episode:  # noqa: N803 (d3rlpy's name)
        """A plain d3rlpy ``Episode`` of serialized data (a view cannot be rebuilt without its store)."""
        return Episode.deserialize(serializedData)

    def __repr__(self) -> str:
        return (f"StoreEpisode(id={self.id}, size={self._size}, transition_count={self._transition_count}, "
                f"terminated={self._terminated})")

    # -- what the adapter's pickers and slicers return for a view --------------------------------

    def transition(self, index: int) -> Transition:
        """Transition ``index`` (``0 <= index < transition_count``), as the buffer samples it."""
        if not 0 <= index < self._transition_count:
            raise IndexError(f"transition {index} is not in this episode of {self._transition_count} transitions")
        rows = self.rows()
        terminal = np.array([self._terminated and index == len(self.steps) - 1])
        one = Batch(**{name: getattr(rows, name)[index : index + 1] for name in _BATCH_FIELDS})
        actions = self.actions
        next_action = np.zeros_like(actions[index]) if terminal[0] or index + 1 >= self._size else actions[index + 1]
        return Transition(
            observation=self._layout.observations(one.obs)[0],
            action=actions[index],
            reward=self.rewards[index],
            next_observation=next_observations(self._layout, one, terminal, zero_final=self._zero_final)[0],
            next_action=next_action,
            terminal=float(terminal[0]),
            interval=1,
            rewards_to_go=self.rewards[index:],
        )

    def trajectory(self, end_index: int, size: int) -> PartialTrajectory:
        """The ``size`` steps ending at ``end_index``, left-padded with zeros, as d3rlpy's slicers cut them."""
        positions = np.arange(end_index - size + 1, end_index + 1, dtype=np.int64)[None, :]
        valid = positions >= 0
        positions = np.where(valid, positions, 0)
        rows = self.rows()
        picked = Batch(**{name: getattr(rows, name)[positions[valid]] for name in _BATCH_FIELDS})
        suffix = suffix_sums(self.rewards[:, 0])
        terminal = np.array([self._terminated and end_index == len(self.steps) - 1])
        arrays = trajectory_arrays(self._layout, picked, positions, valid, suffix[positions], terminal)
        return partial_trajectory(arrays, 0)


_BATCH_FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "index", "env_index", "weight",
                 "discount")


def suffix_sums(rewards: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """The rewards from each step to the end, summed in float64: the returns to go of d3rlpy's slicers."""
    return np.cumsum(rewards[::-1].astype(np.float64))[::-1]


class EpisodeViews(Sequence[StoreEpisode]):
    """The buffer's ``episodes``: a sequence of ``StoreEpisode`` views, each made when it is indexed.

    Args:
        count: How many episodes.
        view: Makes the view of episode ``e``.
    """

    def __init__(self, count: int, view: Callable[[int], StoreEpisode]) -> None:
        self._count = count
        self._view = view

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, e: Any) -> Any:
        if isinstance(e, slice):
            return [self._view(i) for i in range(*e.indices(self._count))]
        return self._view(range(self._count)[e])

    def __iter__(self) -> Iterator[StoreEpisode]:
        return (self._view(e) for e in range(self._count))
