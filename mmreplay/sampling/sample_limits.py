"""``max_times_sampled`` as Reverb defines it: a transition leaves the sampling set once it has been drawn
that many times.

``SampleCounts`` keeps one draw count per slot beside the sampler's index, in this process's memory. A draw
of a batch is exact over the transitions not yet exhausted, as Reverb's one-at-a-time draws are: the batch
is drawn i.i.d. from the sampler's mass, and the first draw that picks a transition the draws before it in
the batch exhausted is drawn again, with every exhausted transition's mass removed first (drawing again
after a rejection is drawing from the remaining set). The sampler removes a transition's mass through
``exclude``: the uniform sampler's 1/0 weight tree, the prioritized sampler's leaf set to 0.

What survives a reopen: the counts do not (they are not written to disk); a reader's refresh keeps the
counts of the steps still stored. The prioritized sampler's zeroed leaves are committed with its priorities,
so an exhausted transition of a prioritized store stays out of the sampling set when the store is opened
again; a uniform store's transitions are all drawable again, each up to ``max_times_sampled`` times.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt


def parse_max_times_sampled(value: object) -> int | None:
    """``max_times_sampled``: None or 0 (unlimited), else an int >= 1.

    Args:
        value: the argument as given.

    Returns:
        None for unlimited, else the count.

    Raises:
        TypeError: not None or an int.
        ValueError: a negative int.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"max_times_sampled must be None or an int; got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"max_times_sampled must be >= 0 (0 or None: unlimited); got {value}")
    return int(value) or None


def exhausted_message(limit: int) -> str:
    """The error of a draw from a store whose every stored transition is exhausted (as an empty store's).

    Args:
        limit: the store's ``max_times_sampled``.

    Returns:
        The message.
    """
    return (f"cannot sample: every stored transition has been sampled max_times_sampled ({limit}) times; "
            "add transitions first")


class SampleCounts:
    """Each slot's draws since its transition was added, and the draw that keeps to ``limit``.

    Args:
        limit: ``max_times_sampled`` (>= 1).
        slots: the store's transition slots.
    """

    def __init__(self, limit: int, slots: int) -> None:
        self.limit = limit
        self.slots = slots
        self.counts = np.zeros(slots, np.int64)
        self.stored = range(0)
        self.budget = 0  # the draws the stored transitions have left, in all

    def reopen(self, stored: range) -> None:
        """The store's steps are now ``stored``: counts of steps no longer stored, or not seen before, go to 0.

        Args:
            stored: the steps stored now.
        """
        kept = range(max(stored.start, self.stored.start), min(stored.stop, self.stored.stop))
        keep = np.zeros(self.slots, bool)
        if kept:
            keep[np.arange(kept.start, kept.stop) % self.slots] = True
        self.counts[~keep] = 0
        self.stored = stored
        held = self.counts[np.arange(stored.start, stored.stop) % self.slots] if stored else self.counts[:0]
        self.budget = int(np.maximum(self.limit - held, 0).sum())

    def added(self, steps: range) -> None:
        """New steps, none drawn yet.

        Args:
            steps: the added steps, right after the newest stored one.
        """
        self._reset(steps)
        self.budget += self.limit * len(steps)
        self.stored = range(self.stored.start if self.stored else steps.start, steps.stop)

    def evicted(self, steps: range) -> None:
        """Evicted steps: the draws they had left go with them.

        Args:
            steps: the evicted steps, the oldest stored ones.
        """
        gone = range(max(steps.start, self.stored.start), min(steps.stop, self.stored.stop))
        if gone:
            held = self.counts[np.arange(gone.start, gone.stop) % self.slots]
            self.budget -= int(np.maximum(self.limit - held, 0).sum())
        self._reset(steps)
        self.stored = range(max(steps.stop, self.stored.start), self.stored.stop)

    def _reset(self, steps: range) -> None:
        if len(steps) >= self.slots:
            self.counts.fill(0)
        elif steps:
            self.counts[np.arange(steps.start, steps.stop) % self.slots] = 0

    def exhausted(self, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Whether each step's transition has been drawn ``limit`` times.

        Args:
            steps: stored steps.

        Returns:
            One bool per step.
        """
        return self.counts[np.asarray(steps) % self.slots] >= self.limit

    def exhausted_slots(self) -> npt.NDArray[np.int64]:
        """The slots whose transitions are exhausted.

        Returns:
            int64 slots.
        """
        return np.flatnonzero(self.counts >= self.limit)

    def draw(
        self, batch_size: int, draw: Callable[[int], npt.NDArray[np.int64]],
        exclude: Callable[[npt.NDArray[np.int64]], None],
    ) -> npt.NDArray[np.int64]:
        """``batch_size`` steps, each drawn from the transitions not yet exhausted, counted.

        Args:
            batch_size: how many steps.
            draw: ``n`` i.i.d. steps from the sampler's mass (which excludes exhausted transitions).
            exclude: remove these newly exhausted slots' mass.

        Returns:
            (batch_size,) int64 steps.

        Raises:
            ValueError: the stored transitions have fewer than ``batch_size`` draws left (nothing counted).
        """
        if self.budget < batch_size:
            raise ValueError(exhausted_message(self.limit) if self.budget == 0 else (
                f"cannot sample {batch_size}: the stored transitions have {self.budget} draws left under "
                f"max_times_sampled ({self.limit})"))
        out = np.empty(batch_size, np.int64)
        filled = 0
        while filled < batch_size:
            steps = draw(batch_size - filled)
            slots = steps % self.slots
            # Each draw's rank among the draws of its slot before it in this batch.
            order = np.argsort(slots, kind="stable")
            ordered = slots[order]
            starts = np.r_[True, ordered[1:] != ordered[:-1]]
            group_start = np.maximum.accumulate(np.where(starts, np.arange(len(ordered)), 0))
            rank = np.empty(len(slots), np.int64)
            rank[order] = np.arange(len(ordered)) - group_start
            over = np.flatnonzero(self.counts[slots] + rank >= self.limit)
            take = len(slots) if not over.size else int(over[0])
            assert take > 0, "an exhausted transition keeps no mass, so a fresh draw's first step is never one"
            accepted = slots[:take]
            np.add.at(self.counts, accepted, 1)
            self.budget -= take
            out[filled : filled + take] = steps[:take]
            filled += take
            distinct = np.unique(accepted)
            newly = distinct[self.counts[distinct] >= self.limit]
            if newly.size:
                exclude(newly)
        return out
