"""Each env's episode in progress: what the next ``add`` compares its obs with, and where its frames are.

An env's episode continues only while it is *open* (its last transition neither terminated nor
truncated, and that transition is still stored) and the new obs equals the env's last next_obs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from mmreplay.transition_table import EPISODE_START, TERMINATED, TRUNCATED


@dataclass
class EnvEpisode:
    """The newest next_obs stack of one env, as ``sample`` rebuilds it: pixels and frame steps."""

    stack_size: int
    open: bool = False
    last_step: int = -1  # transition step of the env's newest transition
    frames: deque[bytes] = field(init=False)
    frame_steps: deque[int] = field(init=False)

    def __post_init__(self) -> None:
        self.frames = deque(maxlen=self.stack_size)
        self.frame_steps = deque(maxlen=self.stack_size)

    def continues_with(self, obs_bytes: bytes, stacked: bool, oldest_stored_step: int) -> bool:
        """Whether an obs (one frame, or a whole stack) continues this env's episode."""
        if not self.open or self.last_step < oldest_stored_step:
            return False
        return obs_bytes == (b"".join(self.frames) if stacked else self.frames[-1])

    def start(self, frames: list[bytes], frame_steps: list[int]) -> None:
        """A new episode whose obs stack is these frames (padded by repeating the first one)."""
        padding = self.stack_size - len(frames)
        self.frames.extend([frames[0]] * padding + frames)
        self.frame_steps.extend([frame_steps[0]] * padding + frame_steps)

    def advance(self, frame: bytes, frame_step: int, *, step: int, ended: bool) -> None:
        """Record a transition of this env whose next_obs ends with ``frame``."""
        self.frames.append(frame)
        self.frame_steps.append(frame_step)
        self.last_step = step
        self.open = not ended


@dataclass(frozen=True)
class Episode:
    """One episode's stored transitions, as listed by ``ReplayStore.episodes()``.

    ``ended_by`` is ``"terminated"``, ``"truncated"``, ``"cut"`` (the env's next obs did not continue it,
    without a flag) or ``"in progress"`` (its env may still continue it). ``complete`` is False when
    eviction removed its first transitions.
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
        bounds = np.flatnonzero(env_flags & EPISODE_START)
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
