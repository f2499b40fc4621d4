"""Samplers choose transition steps; they deal in integers only and never touch frames.

The store tells its sampler which steps are stored (always a contiguous range ``[oldest, newest]``,
because eviction is first in, first out) and asks it for a batch of steps.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt


class Sampler(Protocol):
    def sample(
        self, batch_size: int, *, stored: range, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """``batch_size`` transition steps drawn from ``stored``."""
        ...


class UniformSampler:
    """Every stored transition equally likely, drawn with replacement; O(batch_size)."""

    def sample(
        self, batch_size: int, *, stored: range, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        return rng.integers(stored.start, stored.stop, size=batch_size, dtype=np.int64)

    def __repr__(self) -> str:
        return "UniformSampler()"
