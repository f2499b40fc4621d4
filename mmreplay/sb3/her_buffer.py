"""Hindsight Experience Replay over a ``ReplayStore``: SB3's own ``HerReplayBuffer`` (goal relabelling,
its episode bookkeeping, its draws) on ``MmreplayDictBuffer``'s storage.

    from mmreplay.sb3 import MmreplayHerBuffer
    model = SAC("MultiInputPolicy", env, replay_buffer_class=MmreplayHerBuffer,
                replay_buffer_kwargs=dict(path="/data/her.mmr", n_sampled_goal=4, goal_selection_strategy="future"))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.her.goal_selection_strategy import GoalSelectionStrategy
from stable_baselines3.her.her_replay_buffer import HerReplayBuffer

from mmreplay.sb3.dict_buffer import MmreplayDictBuffer, StoreArguments


# HER's add takes dict[str, ndarray] and MmreplayDictBuffer's any Mapping: the same calls.
class MmreplayHerBuffer(HerReplayBuffer, MmreplayDictBuffer):  # type: ignore[misc]
    """SB3's ``HerReplayBuffer`` whose transitions live in a store (``MmreplayDictBuffer``).

    Every HER method runs as SB3 wrote it and reads and writes the transitions through the storage class
    after it in the MRO (``HerReplayBuffer`` -> ``MmreplayDictBuffer`` -> SB3's ``DictReplayBuffer``):
    its ``add``, and SB3's arrays as views of the store. HER's own bookkeeping (episode starts and
    lengths, the infos kept with ``copy_info_dict``) stays in memory as SB3 keeps it and is pickled with
    the buffer. Over a reopened store (``DQN.load``, ``if_exists="reopen"``) the episode starts and
    lengths are rebuilt from the store's ended flags, leaving out an oldest episode whose start the
    store evicted.

    Args:
        buffer_size: the capacity in transitions, as in ``MmreplayBuffer``.
        observation_space: a gymnasium ``Dict`` space with the goal keys HER needs.
        action_space: the env's action space.
        env: the VecEnv whose ``compute_reward`` relabels goals, as in SB3's ``HerReplayBuffer``.
        device: where sampled tensors go, as in SB3.
        n_envs: envs per row.
        optimize_memory_usage: as in ``MmreplayDictBuffer``.
        handle_timeout_termination: as in ``MmreplayBuffer``.
        n_sampled_goal: virtual transitions per real one, as in SB3's ``HerReplayBuffer``.
        goal_selection_strategy: ``"future"``, ``"final"`` or ``"episode"``, as in SB3.
        copy_info_dict: keep each transition's info dict for ``compute_reward``, as in SB3.
        path: the store's directory, as in ``MmreplayBuffer``.
        if_exists: ``"error"``, ``"replace"`` or ``"reopen"``, as in ``MmreplayBuffer``.
        frame_keys: the keys kept as frames, as in ``MmreplayDictBuffer``.
        stack_size: frames per observation of each frame key, as in ``MmreplayDictBuffer``.

    Raises:
        TypeError: as ``MmreplayDictBuffer`` raises it.
        ValueError: as ``MmreplayDictBuffer`` and SB3's ``HerReplayBuffer`` raise it.
        StoreExistsError: a store is at ``path`` and ``if_exists="error"``.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Dict,
        action_space: spaces.Space[Any],
        env: VecEnv,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        n_sampled_goal: int = 4,
        goal_selection_strategy: GoalSelectionStrategy | str = "future",
        copy_info_dict: bool = False,
        *,
        path: str | os.PathLike[str],
        if_exists: str = "error",
        frame_keys: Sequence[str] | None = None,
        stack_size: int | None = None,
    ) -> None:
        keys = None if frame_keys is None else (frame_keys,) if isinstance(frame_keys, str) else tuple(frame_keys)
        # HerReplayBuffer.__init__ builds MmreplayDictBuffer with SB3's arguments only; it takes its own here.
        self._store_arguments = StoreArguments(path, if_exists, keys, stack_size)
        HerReplayBuffer.__init__(
            self, buffer_size, observation_space, action_space, env, device, n_envs, optimize_memory_usage,
            handle_timeout_termination, n_sampled_goal, goal_selection_strategy, copy_info_dict,
        )
        if self.size():
            self._rebuild_episodes()

    def _rebuild_episodes(self) -> None:
        """HER's ``ep_start``, ``ep_length`` and ``_current_ep_start`` for the transitions the store holds,
        as HER's ``add`` would have left them: each env's episodes end at its ended flags (``dones``)."""
        rows = self.size()
        positions = (self.pos - rows + np.arange(rows)) % self.buffer_size  # the oldest row first
        ended = np.asarray(self.dones)[positions] > 0
        # Whether each env's oldest held transition starts its episode: the store knows what it evicted.
        oldest = set(self._rows.steps_at(np.repeat(positions[0], self.n_envs), np.arange(self.n_envs)).tolist())
        starts_whole = {episode.env_index for episode in self.store.episodes() if episode.complete and episode.first_step in oldest}
        for env in range(self.n_envs):
            ends = np.flatnonzero(ended[:, env])
            starts = np.concatenate([[0], ends + 1])  # chronological indices; the last may be rows
            for start, stop in zip(starts[:-1], ends + 1, strict=True):
                span = positions[start:stop]
                self.ep_start[span, env] = positions[start]
                # An oldest episode whose start was overwritten: HER samples none of it.
                complete = start > 0 or env in starts_whole
                self.ep_length[span, env] = stop - start if complete else 0
            last = int(starts[-1])
            self.ep_start[positions[last:], env] = positions[last] if last < rows else 0
            self._current_ep_start[env] = positions[last] if last < rows else self.pos

    def __getstate__(self) -> dict[str, Any]:
        """HER's state (without the env, which it leaves out) and the store's path and counts."""
        return HerReplayBuffer.__getstate__(self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Reopen the store as ``MmreplayDictBuffer`` does; the env is set again by ``set_env`` (SB3's
        ``load_replay_buffer`` does it), as for SB3's ``HerReplayBuffer``."""
        MmreplayDictBuffer.__setstate__(self, state)
        self.env = None
