"""The stored episodes, as ``ReplayStore.episodes()`` lists them: one ``Episode`` record each, split from
the transition table's env, flag and reward columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mmreplay.rows.transitions import EPISODE_START, FRAGMENT_START, TERMINATED, TRUNCATED


@dataclass(frozen=True)
class Episode:
    """One episode's stored transitions, as listed by ``ReplayStore.episodes()``.

    ``ended_by`` is ``"terminated"``, ``"truncated"``, ``"cut"`` (the env's next obs did not continue it,
    without a flag) or ``"in progress"`` (its env may still continue it). ``complete`` is False when
    eviction removed its first transitions, or when it is a fragment whose start was never recorded
    (``add(..., fragment=True)``, as imports of sources that lost an episode's start do).
    """

    episode_id: int
    env_index: int
    steps: npt.NDArray[np.int64]
    total_reward: float
    ended_by: str
    complete: bool

    @property
    def first_step(self) -> int:
        return int(self.steps[0])

    @property
    def length(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        return (
            f"Episode(episode_id={self.episode_id}, env_index={self.env_index}, first_step={self.first_step}, "
            f"length={self.length}, total_reward={self.total_reward:g}, ended_by={self.ended_by!r}, "
            f"complete={self.complete})"
        )


def split_episodes(
    steps: npt.NDArray[np.int64],
    envs: npt.NDArray[np.integer],
    flags: npt.NDArray[np.integer],
    rewards: npt.NDArray[np.floating],
    *,
    open_envs: set[int],
) -> list[Episode]:
    """Group stored transitions (columns in step order) into episodes, numbered by their first step.

    ``open_envs`` are the envs whose newest episode has not ended (a later add may continue it).
    """
    found: list[tuple[int, int, npt.NDArray[np.int64], float, str, bool]] = []
    for env in np.unique(envs).tolist():
        where = np.flatnonzero(envs == env)
        env_flags = flags[where]
        bounds = np.flatnonzero(env_flags & (EPISODE_START | FRAGMENT_START))
        if len(bounds) == 0 or bounds[0] != 0:
            bounds = np.concatenate([[0], bounds])
        ends = np.append(bounds[1:], len(where))
        totals = np.add.reduceat(rewards[where].astype(np.float64), bounds)
        for i, (start, end) in enumerate(zip(bounds.tolist(), ends.tolist())):
            last = int(env_flags[end - 1])
            if last & TERMINATED:
                ended_by = "terminated"
            elif last & TRUNCATED:
                ended_by = "truncated"
            elif end == len(where) and env in open_envs:
                ended_by = "in progress"
            else:
                ended_by = "cut"
            complete = bool(env_flags[start] & EPISODE_START)
            found.append((int(steps[where[start]]), env, steps[where[start:end]], float(totals[i]), ended_by, complete))
    found.sort(key=lambda episode: episode[0])
    return [Episode(i, env, ep_steps, total, ended, complete) for i, (_, env, ep_steps, total, ended, complete) in enumerate(found)]
