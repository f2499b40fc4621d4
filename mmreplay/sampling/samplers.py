"""Samplers choose transition steps; they deal in integers and priorities only, never in frames.

A sampler is an object passed to ``ReplayStore.create(..., sampler=...)``. The store tells it which steps
are stored (always a contiguous range ``[oldest, newest]``: eviction is first in, first out), when
transitions are added or evicted, and asks it for steps and importance weights. A sampler that keeps
state on disk does so in files of its own inside the store's directory, committed with the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.sampling.prioritized_sampler import PRIORITIES_NAME, PrioritizedSampler
from mmreplay.sampling.sample_limits import parse_max_times_sampled
from mmreplay.sampling.uniform_sampler import UniformSampler, uniform_steps

__all__ = ["PRIORITIES_NAME", "PrioritizedSampler", "Sampler", "UniformSampler", "limited_sampler",
           "sampler_from_config", "uniform_steps"]


class Sampler(Protocol):
    """What the store needs from a sampler: the contract of ``UniformSampler`` and ``PrioritizedSampler``.

    Not a public extension point: ``ReplayStore.create`` takes those two only. A store's header names its
    sampler (``config``), and every process that opens the store, a reader or ``mmreplay`` itself,
    rebuilds it from that name without the code of whoever wrote it; a sampler of one's own would need a
    registry of sampler kinds, which the library does not keep.
    """

    def config(self) -> dict[str, object]:
        """The sampler's kind and parameters, saved in the store's header.

        Returns:
            A JSON-serializable dict with the key ``"kind"``.
        """
        ...

    def open(self, directory: StoreDirectory | Path, *, slots: int, stored: range, writable: bool, state: dict[str, object]) -> None:
        """Attach to a store whose transition step ``s`` lives in slot ``s % slots``.

        Args:
            directory: the store's directory, where the sampler keeps files of its own.
            slots: the store's transition slots (its capacity).
            stored: the steps stored now.
            writable: whether the store is open for appending (mode ``"r+"``).
            state: what ``state()`` returned at the store's last commit (empty for a new store).
        """
        ...

    def added(self, steps: range) -> None:
        """Take note of new transitions.

        Args:
            steps: the added steps, right after the newest stored one.
        """
        ...

    def evicted(self, steps: range) -> None:
        """Take note of evicted transitions.

        Args:
            steps: the evicted steps, the oldest stored ones.
        """
        ...

    def sample(self, batch_size: int, *, stored: range, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """Draw steps, with replacement.

        Args:
            batch_size: how many steps to draw.
            stored: the steps that may be drawn.
            rng: the generator every draw comes from.

        Returns:
            (batch_size,) int64 steps, each in ``stored``.
        """
        ...

    def weights(self, steps: npt.NDArray[np.int64], *, beta: float) -> npt.NDArray[np.float32]:
        """The importance weights of drawn steps.

        Args:
            steps: steps that ``sample`` drew.
            beta: the exponent of the importance correction.

        Returns:
            (len(steps),) float32 weights.
        """
        ...

    def update_priorities(self, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> None:
        """Set the priorities of stored steps, already checked by the store.

        Args:
            steps: 1-D int64 stored steps.
            priorities: 1-D float64, finite and >= 0, one per step.
        """
        ...

    def state(self) -> dict[str, object]:
        """What must be committed with the store's data.

        Returns:
            A JSON-serializable dict, handed back to ``open`` as ``state``.
        """
        ...

    def sync(self) -> None:
        """Write what the next commit counts, before the store writes its header."""
        ...

    def settle(self, committed: bool) -> None:
        """Learn, after ``sync``, whether the header took the commit.

        Args:
            committed: True if it did; False: return to the header's state.
        """
        ...

    def close(self) -> None:
        """Release the sampler's files; the store calls it when it closes."""
        ...


def sampler_from_config(config: dict[str, object]) -> Sampler:
    """The sampler a store's header describes."""
    kind = config.get("kind")
    limit = config.get("max_times_sampled")
    if kind == "uniform":
        return UniformSampler(max_times_sampled=limit)  # type: ignore[arg-type]
    if kind == "prioritized":
        return PrioritizedSampler(alpha=float(config["alpha"]), epsilon=float(config["epsilon"]),  # type: ignore[arg-type]
                                  max_times_sampled=limit)  # type: ignore[arg-type]
    raise ValueError(f"unknown sampler kind {kind!r} in the store's header")


def limited_sampler(
    sampler: UniformSampler | PrioritizedSampler | None, max_times_sampled: object
) -> UniformSampler | PrioritizedSampler | None:
    """``create``'s sampler with ``create``'s ``max_times_sampled`` (None: no limit given, as it is).

    Args:
        sampler: the sampler given to ``create`` (None: uniform).
        max_times_sampled: as ``create`` takes it.

    Returns:
        A built-in sampler of the same kind and parameters with that limit; ``sampler`` itself without
        one (or when it is no built-in sampler: ``create`` refuses it).

    Raises:
        TypeError: ``max_times_sampled`` is not None or an int.
        ValueError: ``max_times_sampled`` is negative.
    """
    limit = parse_max_times_sampled(max_times_sampled)
    if limit is None:
        return sampler
    if sampler is None:
        return UniformSampler(max_times_sampled=limit)
    if isinstance(sampler, UniformSampler):
        return UniformSampler(max_times_sampled=limit)
    if isinstance(sampler, PrioritizedSampler):
        return PrioritizedSampler(alpha=sampler.alpha, epsilon=sampler.epsilon, max_times_sampled=limit)
    return sampler  # no built-in sampler: create refuses it
