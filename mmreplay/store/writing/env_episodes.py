"""Each env's episode in progress: what the next ``add`` compares its obs with, and where its frames are.

An env's episode continues only while it is *open* (its last transition neither terminated nor
truncated) and the new obs equals the env's last next_obs. When other envs' adds evicted the env's
last transition, its frames may be gone too: the episode still continues, and the new transition
stores its obs stack again (kept in memory for this) instead of linking to the evicted transition.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from mmreplay.rows.transitions import TERMINATED, TRUNCATED, TransitionTable, row_envs, row_flags
from mmreplay.store.reading.transition_reader import TransitionReader


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

    def continues_with(self, obs_bytes: bytes, stacked: bool, offset: int = 0) -> bool:
        """Whether an obs (one frame, or a whole stack), at ``offset`` in ``obs_bytes`` (which the caller
        sized to hold exactly that), continues this env's episode."""
        if not self.open:
            return False
        # startswith at an offset compares in place: slicing several envs' obs would copy each part first.
        if not stacked:
            return obs_bytes.startswith(self.frames[-1], offset)
        # Frame by frame, not the stack joined first: the join's copy of a 4-stack cost 4-5% of an add.
        for frame in self.frames:
            if not obs_bytes.startswith(frame, offset):
                return False
            offset += len(frame)
        return True

    def continued_by(self, obs_bytes: bytes, stacked: bool, *, oldest_stored_step: int, offset: int = 0) -> bool:
        """Whether an obs continues this episode from its newest transition, which is still stored: the
        new transition then links to it and writes one new frame (``continues_with``'s arguments)."""
        return self.last_step >= oldest_stored_step and self.continues_with(obs_bytes, stacked, offset)

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

    def record(self, frames: list[bytes], newest_frame_step: int, *, step: int, ended: bool) -> None:
        """Record a transition of this env whose new next_obs frames are ``frames``, the newest at
        ``newest_frame_step``: its newest frame (``advance``), or a detached transition's whole stack."""
        self.frames.extend(frames)
        self.frame_steps.extend(range(newest_frame_step - len(frames) + 1, newest_frame_step + 1))
        self.last_step = step
        self.open = not ended


# An env's episode as it was before an add, to put back if the add is interrupted before it counts.
SavedEpisode = tuple[EnvEpisode, bool, int, "deque[bytes]", "deque[int]"]


def save_episodes(episodes: list[EnvEpisode], envs: list[int] | None = None) -> list[SavedEpisode]:
    """The episodes of ``envs`` (None: every env) as they are, their stacks copied, for ``restore_episodes``.

    Args:
        episodes: each env's episode in progress.
        envs: the envs an add records (None: all of them, as add's fast path).

    Returns:
        What ``restore_episodes`` puts back.
    """
    chosen = episodes if envs is None else [episodes[env] for env in envs]
    return [(e, e.open, e.last_step, e.frames.copy(), e.frame_steps.copy()) for e in chosen]


def restore_episodes(saved: list[SavedEpisode]) -> None:
    """Put back the episodes ``save_episodes`` saved (an add interrupted before it counted: not happened).

    Args:
        saved: what ``save_episodes`` returned.
    """
    for episode, is_open, last_step, frames, frame_steps in saved:
        episode.open, episode.last_step, episode.frames, episode.frame_steps = is_open, last_step, frames, frame_steps


def load_env_episodes(
    table: TransitionTable, reader: TransitionReader, stored: range, *, num_envs: int, stack_size: int
) -> tuple[list[EnvEpisode], npt.NDArray[np.int64] | None]:
    """Each env's episode in progress, rebuilt from its newest stored transition's row, and those
    transitions' steps (None when no env has one), whose next_obs pixels (what the next ``add`` compares
    obs with) ``load_env_frames`` decodes at the first add: opening decodes no frame, a reader never
    needs them, and a corrupt newest frame fails the call that needs it instead of ``open``."""
    episodes = [EnvEpisode(stack_size) for _ in range(num_envs)]
    newest = table.newest_of_each_env(stored.start, stored.stop, num_envs)
    if not newest:
        return episodes, None
    steps = np.array(sorted(newest.values()), dtype=np.int64)
    rows = table.read(steps)
    envs, flags = row_envs(rows), row_flags(rows)
    frame_steps = reader.transition_frames(steps)
    for i, step in enumerate(steps.tolist()):
        episode = episodes[int(envs[i])]
        episode.frame_steps.extend(frame_steps[i, 1:].tolist())
        episode.last_step = step
        episode.open = not flags[i] & (TERMINATED | TRUNCATED)
    return episodes, steps


def load_env_frames(reader: TransitionReader, episodes: list[EnvEpisode], steps: npt.NDArray[np.int64]) -> None:
    """Decode the newest next_obs of each env that has one (the ``steps`` of ``load_env_episodes``)."""
    ones = np.ones(len(steps), np.float32)
    batch = reader.transitions(steps, weight=ones, discount=ones.copy(), padded=False)
    for i in range(len(steps)):
        episodes[int(batch.env_index[i])].frames.extend(frame.tobytes() for frame in batch.next_obs[i])


def continuations(
    episodes: list[EnvEpisode], obs: bytes, *, stacked: bool, first_frame: int, oldest_stored_step: int
) -> tuple[list[int], list[int]] | None:
    """When every env's obs (``obs``: one frame or stack per env, back to back) continues its open
    episode, whose newest transition is still stored: each env's newest transition step and the
    prev_delta of its new frame, numbered from ``first_frame`` in env order; else None (``add``'s fast
    path)."""
    previous_steps, prev_deltas = [], []
    size = len(obs) // len(episodes)
    for env, episode in enumerate(episodes):
        if not episode.continued_by(obs, stacked, oldest_stored_step=oldest_stored_step, offset=env * size):
            return None
        previous_steps.append(episode.last_step)
        prev_deltas.append(first_frame + env - episode.frame_steps[-1])
    return previous_steps, prev_deltas


def advance_all(episodes: list[EnvEpisode], frames: list[bytes], flags: list[int], *, first_frame: int, first_step: int) -> None:
    """``EnvEpisode.advance`` for every env, whose transitions are ``first_step + env`` with next_obs frames
    ``frames[env]`` at frame steps ``first_frame + env`` (``add``'s fast path)."""
    for env, episode in enumerate(episodes):
        episode.advance(frames[env], first_frame + env, step=first_step + env, ended=bool(flags[env]))
