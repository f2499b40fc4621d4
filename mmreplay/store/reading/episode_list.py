"""The stored episodes, as ``ReplayStore.episodes()`` lists them: one ``Episode`` record each, split from
the transition table's env, flag and reward columns, and found again by id (``EpisodeList.by_id``).

An episode's *id* is the step of its first stored transition: the API (``Episode.id``, ``by_id``) and the
command line (``mmreplay episodes``, ``mmreplay show``) name an episode by it, and nothing else.
"""

from __future__ import annotations

import bisect
import operator
import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mmreplay.errors import EpisodeNotFoundError
from mmreplay.rows.transitions import EPISODE_START, FRAGMENT_START, TERMINATED, TRUNCATED

SHOWN_IDS = 8  # an error lists every stored id up to this many, else the first and last few


@dataclass(frozen=True)
class Episode:
    """One episode's stored transitions, as listed by ``ReplayStore.episodes()``.

    ``id`` names the episode: the step of its first stored transition. Steps never wrap, so the id never
    changes while that transition is stored, whatever is added or evicted before it; ``by_id`` and
    ``mmreplay show`` take it. When eviction removes an episode's first transitions, what remains is an
    incomplete episode whose id is its oldest remaining step (the old id is then answered as evicted,
    never with another episode).

    Attributes:
        position: The episode's place in the list that gave it (0: the oldest stored episode). Not a
            name: it shifts whenever eviction removes an older episode.
        env_index: The env whose transitions these are.
        steps: The steps of its stored transitions, in order.
        total_reward: The sum of their rewards.
        ended_by: ``"terminated"``, ``"truncated"``, ``"cut"`` (the env's next obs did not continue it,
            without a flag) or ``"in progress"`` (its env may still continue it).
        complete: False when eviction removed its first transitions, or when it is a fragment whose start
            was never recorded (``add(..., fragment=True)``, as imports of sources that lost an episode's
            start do).
    """

    position: int
    env_index: int
    steps: npt.NDArray[np.int64]
    total_reward: float
    ended_by: str
    complete: bool

    @property
    def id(self) -> int:
        """The episode's id: the step of its first stored transition."""
        return int(self.steps[0])

    @property
    def first_step(self) -> int:
        """The step of its first stored transition (the number its ``id`` is)."""
        return int(self.steps[0])

    @property
    def length(self) -> int:
        """How many of its transitions are stored."""
        return len(self.steps)

    @property
    def episode_id(self) -> int:
        """Deprecated: ``position`` (the list position, not a name); name an episode by ``id``."""
        warnings.warn(
            "Episode.episode_id is the episode's position in the list that gave it, which shifts as the ring "
            "evicts older episodes: name an episode by Episode.id (by_id takes it), or use Episode.position",
            DeprecationWarning, stacklevel=2,
        )
        return self.position

    def __repr__(self) -> str:
        return (
            f"Episode(id={self.id}, env_index={self.env_index}, length={self.length}, "
            f"total_reward={self.total_reward:g}, ended_by={self.ended_by!r}, complete={self.complete})"
        )


class EpisodeList(list[Episode]):
    """The stored episodes, oldest first (so in the order of their ids), as ``ReplayStore.episodes()``
    returns them: a plain list of ``Episode`` records that also finds one by its id. Its errors read the
    list as the whole store (every stored step in one of its episodes); a slice is a plain list."""

    def by_id(self, id: int) -> Episode:
        """The episode whose id (the step of its first stored transition, ``Episode.id``) is ``id``.

        Raises ``EpisodeNotFoundError`` (a ``LookupError``) when no stored episode has that id: the step
        is inside another episode, was evicted, was not added yet, or is negative. The message says
        which, and which ids are stored.
        """
        expected = "id must be an int (an episode's first step, as Episode.id gives it)"
        if isinstance(id, (bool, np.bool_)):
            raise TypeError(f"{expected}; got {type(id).__name__}")
        try:
            wanted = operator.index(id)
        except TypeError:
            raise TypeError(f"{expected}; got {type(id).__name__}") from None
        # Episodes are kept in the order of their ids: a binary search finds one.
        at = bisect.bisect_left(self, wanted, key=lambda episode: episode.id)
        if at < len(self) and self[at].id == wanted:
            return self[at]
        raise EpisodeNotFoundError(f"no episode has id {wanted}: {self._why_not(wanted)}")

    def _why_not(self, wanted: int) -> str:
        if not self:
            return "the store holds no episodes (it is empty)"
        ids = self._stored_ids()
        oldest = self[0].id
        newest = max(int(episode.steps[-1]) for episode in self)
        if wanted < 0:
            return f"ids are steps, which start at 0; {ids}"
        if wanted < oldest:
            # Every stored step belongs to an episode, so the oldest stored step is the oldest id, and it
            # is above 0 only when eviction removed the steps before it.
            return f"step {wanted} was evicted (the oldest stored step is {oldest}); {ids}"
        if wanted > newest:
            return f"step {wanted} was not added yet (the newest stored step is {newest}); {ids}"
        holder = next((episode for episode in self if episode.id <= wanted and wanted in episode.steps), None)
        if holder is None:  # a list filtered by hand: the step is another env's
            return f"no episode of this list starts at step {wanted}; {ids}"
        return f"step {wanted} is inside episode {holder.id} (env {holder.env_index}), and ids are first steps; {ids}"

    def _stored_ids(self) -> str:
        ids = [episode.id for episode in self]
        if len(ids) == 1:
            return f"the stored episode's id is {ids[0]}"
        if len(ids) <= SHOWN_IDS:
            return f"the stored episodes' ids are {', '.join(map(str, ids))}"
        few = SHOWN_IDS // 2 - 1
        return (f"the {len(ids):,} stored episodes' ids are {', '.join(map(str, ids[:few]))}, ..., "
                f"{', '.join(map(str, ids[-few:]))}")


def split_episodes(
    steps: npt.NDArray[np.int64],
    envs: npt.NDArray[np.integer],
    flags: npt.NDArray[np.integer],
    rewards: npt.NDArray[np.floating],
    *,
    open_envs: set[int],
) -> EpisodeList:
    """Group stored transitions (columns in step order) into episodes, in the order of their ids (their
    first steps).

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
    return EpisodeList(
        Episode(i, env, ep_steps, total, ended, complete) for i, (_, env, ep_steps, total, ended, complete) in enumerate(found)
    )
