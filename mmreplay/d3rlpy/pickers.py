"""The buffer's ``transition_picker`` and ``trajectory_slicer``: d3rlpy's own classes, which read a
store's episode views (``StoreEpisode``) as the buffer samples them, and any other episode as d3rlpy does.

d3rlpy calls them on the buffer's ``episodes`` to fit scalers and in its evaluators; they are
subclasses of d3rlpy's frame-stacking or basic picker and slicer (by the store's ``stack_size``), so
that ``MixedReplayBuffer``, which checks that two buffers' pickers are of one type, mixes a store with
a d3rlpy buffer.
"""

from __future__ import annotations

from typing import Any

from d3rlpy.dataset import (
    BasicTrajectorySlicer,
    BasicTransitionPicker,
    FrameStackTrajectorySlicer,
    FrameStackTransitionPicker,
    PartialTrajectory,
    Transition,
)

from mmreplay.d3rlpy.episode_views import StoreEpisode


class StoreFrameStackPicker(FrameStackTransitionPicker):  # type: ignore[misc]
    """d3rlpy's ``FrameStackTransitionPicker`` that reads a store episode's stacks from the store."""

    def __call__(self, episode: Any, index: int) -> Transition:
        if isinstance(episode, StoreEpisode):
            return episode.transition(index)
        return super().__call__(episode, index)


class StoreBasicPicker(BasicTransitionPicker):  # type: ignore[misc]
    """d3rlpy's ``BasicTransitionPicker`` that reads a store episode's transitions from the store."""

    def __call__(self, episode: Any, index: int) -> Transition:
        if isinstance(episode, StoreEpisode):
            return episode.transition(index)
        return super().__call__(episode, index)


class StoreFrameStackSlicer(FrameStackTrajectorySlicer):  # type: ignore[misc]
    """d3rlpy's ``FrameStackTrajectorySlicer`` that reads a store episode's stacks from the store."""

    def __call__(self, episode: Any, end_index: int, size: int) -> PartialTrajectory:
        if isinstance(episode, StoreEpisode):
            return episode.trajectory(end_index, size)
        return super().__call__(episode, end_index, size)


class StoreBasicSlicer(BasicTrajectorySlicer):  # type: ignore[misc]
    """d3rlpy's ``BasicTrajectorySlicer`` that reads a store episode's transitions from the store."""

    def __call__(self, episode: Any, end_index: int, size: int) -> PartialTrajectory:
        if isinstance(episode, StoreEpisode):
            return episode.trajectory(end_index, size)
        return super().__call__(episode, end_index, size)


def picker_for(stack_size: int) -> StoreFrameStackPicker | StoreBasicPicker:
    """The picker of a store of ``stack_size`` frames per observation."""
    return StoreFrameStackPicker(stack_size) if stack_size > 1 else StoreBasicPicker()


def slicer_for(stack_size: int) -> StoreFrameStackSlicer | StoreBasicSlicer:
    """The slicer of a store of ``stack_size`` frames per observation."""
    return StoreFrameStackSlicer(stack_size) if stack_size > 1 else StoreBasicSlicer()
