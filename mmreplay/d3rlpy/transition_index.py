"""Which stored transitions d3rlpy sees, in d3rlpy's order, and where each one lies in the store.

d3rlpy numbers the transitions of its buffer ``0 .. transition_count - 1`` episode by episode, and an
episode of N observations holds N transitions when it terminated, N - 1 when it did not: d3rlpy never
keeps the final observation, so the last step of a truncated episode starts no transition. A store keeps
every transition with its true next observation. The index says, for each store episode (oldest first,
as ``ReplayStore.episodes()`` lists them), how many of its transitions d3rlpy counts:

* terminated: all M, the last one terminal;
* truncated: M - 1 (the last transition dropped), or all M when the final frame is handed over
  (``final_observation="stored"``);
* cut or in progress (no flag: the env's next obs did not continue it, or it may still go on): all M.

A transition's *flat* position is its step in a store of one env (episodes are then runs of consecutive
steps), or its place in the concatenation of the episodes' steps otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

TERMINATED, TRUNCATED, OPEN = 0, 1, 2
ENDINGS = {"terminated": TERMINATED, "truncated": TRUNCATED, "cut": OPEN, "in progress": OPEN}


@dataclass(frozen=True)
class Located:
    """Sampled transitions, one entry each: where they lie in their episode and in the store.

    Attributes:
        episode: The episode's position in the index (0: the oldest stored).
        position: The transition's position in its episode (0: its first stored transition).
        step: The transition's store step.
        next_step: The step of the episode's next stored transition (whose action is d3rlpy's
            ``next_action``), or -1 where there is none or the transition is terminal.
        terminal: The transition ended its episode by termination.
    """

    episode: npt.NDArray[np.int64]
    position: npt.NDArray[np.int64]
    step: npt.NDArray[np.int64]
    next_step: npt.NDArray[np.int64]
    terminal: npt.NDArray[np.bool_]


class TransitionIndex:
    """The episodes of a store as d3rlpy counts their transitions, kept up to date by the adapter's adds.

    Args:
        first: Each episode's first flat position.
        length: Each episode's stored transitions (M).
        ending: Each episode's ending (``TERMINATED``, ``TRUNCATED`` or ``OPEN``).
        flat_steps: The steps at each flat position, or None in a store of one env (a flat position is
            then the step itself).
        keep_final: Hand a truncated episode's last transition over (``final_observation="stored"``).
    """

    def __init__(
        self,
        first: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        ending: npt.NDArray[np.int64],
        flat_steps: npt.NDArray[np.int64] | None,
        *,
        keep_final: bool,
    ) -> None:
        self._first = first.astype(np.int64)
        self._length = length.astype(np.int64)
        self._ending = ending.astype(np.int64)
        self._flat_steps = flat_steps
        self._keep_final = keep_final
        self._offsets: npt.NDArray[np.int64] | None = None

    @classmethod
    def of_episodes(cls, episodes: list[object], *, num_envs: int, keep_final: bool) -> TransitionIndex:
        """The index of ``ReplayStore.episodes()``' records (their ``steps`` and ``ended_by``).

        Args:
            episodes: The store's episode records, oldest first.
            num_envs: The store's ``num_envs``: with one env, flat positions are steps.
            keep_final: As the class argument.

        Returns:
            The index.
        """
        steps = [np.asarray(getattr(episode, "steps"), dtype=np.int64) for episode in episodes]
        length = np.array([len(s) for s in steps], dtype=np.int64)
        ending = np.array([ENDINGS[getattr(episode, "ended_by")] for episode in episodes], dtype=np.int64)
        if num_envs == 1:
            first = np.array([s[0] for s in steps], dtype=np.int64)
            return cls(first, length, ending, None, keep_final=keep_final)
        first = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64) if len(steps) else length
        flat = np.concatenate(steps) if steps else np.zeros(0, np.int64)
        return cls(first, length, ending, flat, keep_final=keep_final)

    # -- what d3rlpy counts ----------------------------------------------------------------------

    @property
    def episode_count(self) -> int:
        """The episodes d3rlpy lists: those with a transition it counts (its buffer never sees the others,
        such as a truncated episode of one step)."""
        return len(self.listed())

    def listed(self) -> npt.NDArray[np.int64]:
        """The positions of the episodes d3rlpy lists, oldest first."""
        return np.flatnonzero(self.kept() > 0).astype(np.int64)

    def kept(self) -> npt.NDArray[np.int64]:
        """Each episode's transitions as d3rlpy counts them."""
        dropped = (self._ending == TRUNCATED) & (not self._keep_final)
        return self._length - dropped.astype(np.int64)

    def sizes(self) -> npt.NDArray[np.int64]:
        """Each episode's observations in its d3rlpy view: M, or M + 1 where the view ends on the next
        observation of its last transition (cut or in progress; truncated with the final frame kept)."""
        extra = (self._ending == OPEN) | ((self._ending == TRUNCATED) & self._keep_final)
        return self._length + extra.astype(np.int64)

    def _ends(self) -> npt.NDArray[np.int64]:
        if self._offsets is None:
            self._offsets = np.cumsum(self.kept())
        return self._offsets

    @property
    def transition_count(self) -> int:
        ends = self._ends()
        return int(ends[-1]) if len(ends) else 0

    def episode(self, e: int) -> tuple[npt.NDArray[np.int64], int, bool, int]:
        """Episode ``e``'s stored steps, its d3rlpy transition count, whether it terminated, its view size."""
        first, length = int(self._first[e]), int(self._length[e])
        steps = self.steps_at(np.arange(first, first + length, dtype=np.int64))
        return steps, int(self.kept()[e]), bool(self._ending[e] == TERMINATED), int(self.sizes()[e])

    def steps_at(self, flat: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The steps at flat positions."""
        return flat if self._flat_steps is None else self._flat_steps[flat]

    def locate(self, numbers: npt.NDArray[np.int64]) -> Located:
        """Where d3rlpy's transitions ``numbers`` (each in ``[0, transition_count)``) lie."""
        ends = self._ends()
        episode = np.searchsorted(ends, numbers, side="right").astype(np.int64)
        position = numbers - (ends[episode] - self.kept()[episode])
        flat = self._first[episode] + position
        terminal = (self._ending[episode] == TERMINATED) & (position == self._length[episode] - 1)
        has_next = (position + 1 < self._length[episode]) & ~terminal
        next_step = np.full(len(numbers), -1, dtype=np.int64)
        next_step[has_next] = self.steps_at(flat[has_next] + 1)
        return Located(episode, position, self.steps_at(flat), next_step, terminal)

    def window(self, episode: npt.NDArray[np.int64], position: npt.NDArray[np.int64], length: int) -> tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]
    ]:
        """The ``length`` positions ending at each ``position`` of its ``episode``, as d3rlpy's trajectory
        slicers take them: ``(positions, steps, valid)``, each ``(B, length)``; ``valid`` is False for the
        left padding before an episode's first stored transition (its steps and positions are 0 there)."""
        offsets = np.arange(length, dtype=np.int64) - (length - 1)
        positions = position[:, None] + offsets[None, :]
        valid = positions >= 0
        positions = np.where(valid, positions, 0)
        flat = self._first[episode][:, None] + positions
        steps = np.where(valid, self.steps_at(flat), 0)
        return positions, steps, valid

    # -- the adapter's own adds (a store of one env) ---------------------------------------------

    def note_add(self, step: int, *, starts_episode: bool, ending: int) -> None:
        """Take in a transition the adapter added at ``step``: a new episode's first or its episode's next.

        Args:
            step: The transition's step.
            starts_episode: The add started a new episode in the store.
            ending: ``TERMINATED``, ``TRUNCATED``, or ``OPEN`` when it did not end its episode.
        """
        assert self._flat_steps is None, "the adapter appends to stores of one env only"
        if starts_episode or not len(self._length):
            self._first = np.append(self._first, step)
            self._length = np.append(self._length, 1)
            self._ending = np.append(self._ending, ending)
        else:
            assert int(self._first[-1] + self._length[-1]) == step, "adds continue the newest episode"
            self._length[-1] += 1
            self._ending[-1] = ending
        self._offsets = None

    def evict_before(self, oldest: int) -> None:
        """Forget the steps below ``oldest`` (the store evicted them, oldest first)."""
        assert self._flat_steps is None, "the adapter appends to stores of one env only"
        while len(self._length) and self._first[0] < oldest:
            gone = min(int(oldest - self._first[0]), int(self._length[0]))
            if gone == self._length[0]:
                self._first, self._length, self._ending = self._first[1:], self._length[1:], self._ending[1:]
            else:
                self._first[0] += gone
                self._length[0] -= gone
            self._offsets = None

    def first_step(self, e: int) -> int:
        """Episode ``e``'s id: the step of its first stored transition."""
        return int(self.steps_at(self._first[e : e + 1])[0])
