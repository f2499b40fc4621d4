"""The uniform sampler, the store's default: every stored transition equally likely (``uniform_steps``
draws the steps, in one compiled call where ``_sumtree`` is built)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from mmreplay import extensions
from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.sampling.priority_file import slot_ranges
from mmreplay.sampling.sample_limits import SampleCounts, exhausted_message, parse_max_times_sampled
from mmreplay.sampling.sum_tree import SumTree, tree_size

_sumtree = extensions.load("_sumtree")


def uniform_steps(batch_size: int, stored: range, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """``batch_size`` steps drawn uniformly from ``stored``, with replacement.

    floor(u * n) for u uniform in [0, 1) with 53 random bits: each step's probability is 1/n within a
    relative n / 2**53 (1e-7 at a billion stored transitions), and u * n stays below n (rounded to
    nearest, n * (1 - 2**-53) is n minus at least half an ulp). ``rng.integers`` is exactly uniform,
    but costs ~25 us a call once a decoded batch has pushed numpy out of the CPU caches, against ~14 us
    for these numpy calls and ~5 us for the compiled loop that makes the same draws (``_sumtree``).
    """
    if _sumtree is not None:  # the same draws in one compiled call
        steps = np.empty(batch_size, np.int64)
        bit_generator = rng.bit_generator
        with bit_generator.lock:
            _sumtree.uniform_steps(bit_generator, len(stored), stored.start, steps)
        return steps
    draws = rng.random(batch_size)
    draws *= len(stored)
    return draws.astype(np.int64) + stored.start


class UniformSampler:
    """Every stored transition equally likely, drawn with replacement; O(batch_size), no files.

    The store's default sampler. Its methods are the ``Sampler`` calls the store makes. With
    ``max_times_sampled`` (``sample_limits``) it draws from a weight tree of 1 for each stored transition
    not yet drawn that many times and 0 for the others, so the draw stays uniform over the remaining set.

    Args:
        max_times_sampled: draws after which a transition leaves the sampling set (None or 0: no limit).

    Raises:
        TypeError: ``max_times_sampled`` is not None or an int.
        ValueError: ``max_times_sampled`` is negative.
    """

    # Class defaults too: a subclass whose __init__ does not call this one's samples without a limit.
    max_times_sampled: int | None = None
    _counts: SampleCounts | None = None
    _alive: SumTree | None = None
    _slots: int = 0

    def __init__(self, max_times_sampled: int | None = None) -> None:
        self.max_times_sampled = parse_max_times_sampled(max_times_sampled)
        self._counts: SampleCounts | None = None
        self._alive: SumTree | None = None
        self._slots = 0

    def config(self) -> dict[str, object]:
        """The sampler's kind (and its ``max_times_sampled``, when set), saved in the store's header.

        Returns:
            ``{"kind": "uniform"}``, with ``"max_times_sampled"`` when set.
        """
        config: dict[str, object] = {"kind": "uniform"}
        if self.max_times_sampled:
            config["max_times_sampled"] = self.max_times_sampled
        return config

    def open(self, directory: StoreDirectory | Path, *, slots: int, stored: range, writable: bool, state: dict[str, object]) -> None:
        """Attach to a store: no files; with ``max_times_sampled``, the weight tree of the stored steps.

        Args:
            directory: the store's directory (unused).
            slots: the store's transition slots.
            stored: the steps stored now.
            writable: whether the store is open for appending (unused).
            state: the committed state (unused).
        """
        if not self.max_times_sampled:
            return
        if self._counts is None or self._slots != slots:
            self._counts = SampleCounts(self.max_times_sampled, slots)
        self._slots = slots
        self._counts.reopen(stored)
        size = tree_size(slots)
        sums = np.zeros(2 * size)
        for start, stop in slot_ranges(stored, slots):
            sums[size + start : size + stop] = 1.0
        sums[size + self._counts.exhausted_slots()] = 0.0
        self._alive = SumTree(sums, np.empty(2 * size))

    def added(self, steps: range) -> None:
        """Take note of new transitions (with ``max_times_sampled``: drawable, none drawn yet).

        Args:
            steps: the added steps.
        """
        if self._alive is not None and self._counts is not None:
            self._counts.added(steps)
            for start, stop in slot_ranges(steps, self._slots):
                self._alive.fill(start, stop, 1.0)

    def evicted(self, steps: range) -> None:
        """Take note of evicted transitions (with ``max_times_sampled``: no longer drawable).

        Args:
            steps: the evicted steps.
        """
        if self._alive is not None and self._counts is not None:
            self._counts.evicted(steps)
            for start, stop in slot_ranges(steps, self._slots):
                self._alive.fill(start, stop, 0.0)

    @property
    def remaining(self) -> float | None:
        """How many stored transitions may still be drawn (None without ``max_times_sampled``).

        Returns:
            The count, or None.
        """
        return None if self._alive is None else self._alive.total

    def sample(self, batch_size: int, *, stored: range, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """Draw steps uniformly from ``stored``, with replacement.

        Each step's probability is 1/n within a relative n / 2**53.

        Args:
            batch_size: how many steps to draw.
            stored: the steps that may be drawn.
            rng: the generator every draw comes from.

        Returns:
            (batch_size,) int64 steps.

        Raises:
            ValueError: with ``max_times_sampled``, every stored transition was drawn that many times.
        """
        alive, counts = self._alive, self._counts
        if alive is None or counts is None:
            return uniform_steps(batch_size, stored, rng)

        def draw(count: int) -> npt.NDArray[np.int64]:
            if not alive.total > 0:
                raise ValueError(exhausted_message(counts.limit))
            return alive.draw(rng, count, first_step=stored.start, slots=self._slots)

        return counts.draw(batch_size, draw, lambda slots: alive.set(slots, np.zeros(len(slots))))

    def weights(self, steps: npt.NDArray[np.int64], *, beta: float) -> npt.NDArray[np.float32]:
        """The importance weights of drawn steps: all 1.

        Args:
            steps: the drawn steps.
            beta: the importance exponent (unused).

        Returns:
            (len(steps),) float32 ones.
        """
        weights = np.empty(len(steps), np.float32)
        weights.fill(1.0)  # np.ones costs 2-3x as much for a batch
        return weights

    def update_priorities(self, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> None:
        """Refuse: a uniform store has no priorities.

        Args:
            steps: the steps (unused).
            priorities: their priorities (unused).

        Raises:
            TypeError: always; priorities need a store created with ``sampler=PrioritizedSampler(...)``.
        """
        raise TypeError(
            "update_priorities needs a store created with sampler=PrioritizedSampler(...); "
            "this store samples uniformly"
        )

    def state(self) -> dict[str, object]:
        """What must be committed with the store's data: nothing.

        Returns:
            An empty dict.
        """
        return {}

    def sync(self) -> None:
        """Write what the next commit counts: nothing."""

    def settle(self, committed: bool) -> None:
        """Learn whether the header took the commit: nothing to undo.

        Args:
            committed: whether it did (unused).
        """

    def close(self) -> None:
        """Release the sampler's files: it has none."""

    def __repr__(self) -> str:
        limit = f"max_times_sampled={self.max_times_sampled}" if self.max_times_sampled else ""
        return f"UniformSampler({limit})"
