"""Samplers choose transition steps; they deal in integers and priorities only, never in frames.

A sampler is an object passed to ``ReplayStore.create(..., sampler=...)``. The store tells it which steps
are stored (always a contiguous range ``[oldest, newest]``: eviction is first in, first out), when
transitions are added or evicted, and asks it for steps and importance weights. A sampler that keeps
state on disk does so in files of its own inside the store's directory, committed with the store.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from mmreplay.errors import CorruptStoreError
from mmreplay.files import BlockReservation, create_sparse
from mmreplay.sum_tree import SumTree, tree_size

PRIORITIES_NAME = "priorities.tree"


class Sampler(Protocol):
    """What the store needs from a sampler."""

    def config(self) -> dict[str, object]:
        """The sampler's kind and parameters, saved in the store's header."""
        ...

    def open(self, directory: Path, *, slots: int, stored: range, writable: bool, state: dict[str, object]) -> None:
        """Attach to a store whose transition step ``s`` lives in slot ``s % slots``."""
        ...

    def added(self, steps: range) -> None: ...

    def evicted(self, steps: range) -> None: ...

    def sample(self, batch_size: int, *, stored: range, rng: np.random.Generator) -> npt.NDArray[np.int64]: ...

    def weights(self, steps: npt.NDArray[np.int64], *, beta: float) -> npt.NDArray[np.float32]: ...

    def update_priorities(self, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> None: ...

    def state(self) -> dict[str, object]:
        """What must be committed with the store's data (JSON-serializable)."""
        ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


class UniformSampler:
    """Every stored transition equally likely, drawn with replacement; O(batch_size), no files."""

    def config(self) -> dict[str, object]:
        return {"kind": "uniform"}

    def open(self, directory: Path, *, slots: int, stored: range, writable: bool, state: dict[str, object]) -> None:
        pass

    def added(self, steps: range) -> None:
        pass

    def evicted(self, steps: range) -> None:
        pass

    def sample(self, batch_size: int, *, stored: range, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        return rng.integers(stored.start, stored.stop, size=batch_size, dtype=np.int64)

    def weights(self, steps: npt.NDArray[np.int64], *, beta: float) -> npt.NDArray[np.float32]:
        return np.ones(len(steps), np.float32)

    def update_priorities(self, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> None:
        raise TypeError(
            "update_priorities needs a store created with sampler=PrioritizedSampler(...); "
            "this store samples uniformly"
        )

    def state(self) -> dict[str, object]:
        return {}

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return "UniformSampler()"


class PrioritizedSampler:
    """Proportional prioritized replay (Schaul et al. 2016): P(i) = p_i^alpha / sum_j p_j^alpha.

    New transitions get the largest priority seen so far. Leaves hold ``(priority + epsilon)^alpha`` in a
    memory-mapped sum tree (file ``priorities.tree``); the leaves of stored transitions are the persistent
    truth and the internal nodes are rebuilt from them when the store opens.
    """

    def __init__(self, alpha: float = 0.6, epsilon: float = 1e-6) -> None:
        if not (isinstance(alpha, (int, float)) and 0 <= alpha and math.isfinite(alpha)):
            raise ValueError(f"alpha must be a finite number >= 0; got {alpha!r}")
        if not (isinstance(epsilon, (int, float)) and 0 <= epsilon and math.isfinite(epsilon)):
            raise ValueError(f"epsilon must be a finite number >= 0; got {epsilon!r}")
        self.alpha = float(alpha)
        self.epsilon = float(epsilon)
        self.max_priority = 1.0
        self._tree: SumTree | None = None
        self._mapping: np.memmap | None = None
        self._slots = 0
        self._stored = range(0)

    def config(self) -> dict[str, object]:
        return {"kind": "prioritized", "alpha": self.alpha, "epsilon": self.epsilon}

    def open(self, directory: Path, *, slots: int, stored: range, writable: bool, state: dict[str, object]) -> None:
        size = tree_size(slots)
        path = directory / PRIORITIES_NAME
        if writable:
            if not path.exists():
                create_sparse(path, 2 * 2 * size * 8)
            # The tree is rewritten all over (rebuilt at every open): reserve all of it.
            reservation = BlockReservation(path)
            reservation.ensure(2 * 2 * size * 8)
            reservation.close()
            mapping = np.memmap(path, dtype="<f8", mode="r+", shape=(2, 2 * size))
            nodes = mapping.view(np.ndarray)
        else:
            # A reader rebuilds its own tree in memory and never writes the writer's file.
            nodes = np.array(np.memmap(path, dtype="<f8", mode="r", shape=(2, 2 * size)))
            mapping = None
        leaves = nodes[0, size:]
        live = np.zeros(size, np.bool_)
        live[np.arange(stored.start, stored.stop) % slots] = True
        if not np.all(np.isfinite(leaves[live]) & (leaves[live] >= 0)):
            raise CorruptStoreError(f"{path}: priorities of stored transitions are not finite and >= 0")
        # Leaves beyond the last commit (a crash) or of evicted steps are not stored transitions.
        leaves[~live] = 0.0
        self._mapping = mapping
        self._tree = SumTree(nodes[0], nodes[1])
        self._slots = slots
        self._stored = stored
        self.max_priority = float(state.get("max_priority", 1.0))  # type: ignore[arg-type]

    def added(self, steps: range) -> None:
        value = (self.max_priority + self.epsilon) ** self.alpha
        slots = np.arange(steps.start, steps.stop, dtype=np.int64) % self._slots
        self._require_tree().set(slots, np.full(len(slots), value))
        self._stored = range(self._stored.start, steps.stop)

    def evicted(self, steps: range) -> None:
        slots = np.arange(steps.start, steps.stop, dtype=np.int64) % self._slots
        self._require_tree().set(slots, np.zeros(len(slots)))
        self._stored = range(steps.stop, self._stored.stop)

    def sample(self, batch_size: int, *, stored: range, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        tree = self._require_tree()
        targets = rng.random(batch_size) * tree.total
        slots = tree.find(targets)
        return stored.start + (slots - stored.start) % self._slots

    def weights(self, steps: npt.NDArray[np.int64], *, beta: float) -> npt.NDArray[np.float32]:
        """(N P(i))^-beta normalised by its maximum over the stored transitions, i.e. (p_i / p_min)^-beta."""
        tree = self._require_tree()
        leaves = tree.leaves(steps % self._slots)
        return np.power(leaves / tree.minimum, -beta).astype(np.float32)

    def update_priorities(self, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> None:
        stored = (steps >= self._stored.start) & (steps < self._stored.stop)
        steps, priorities = steps[stored], priorities[stored]
        if len(steps):
            self._require_tree().set(steps % self._slots, (priorities + self.epsilon) ** self.alpha)
            self.max_priority = max(self.max_priority, float(priorities.max()))

    def state(self) -> dict[str, object]:
        return {"max_priority": self.max_priority}

    def sync(self) -> None:
        if self._mapping is not None:
            self._mapping.flush()

    def close(self) -> None:
        self.sync()
        self._tree = None
        self._mapping = None

    def _require_tree(self) -> SumTree:
        if self._tree is None:
            raise RuntimeError("this PrioritizedSampler is not attached to an open store")
        return self._tree

    def __repr__(self) -> str:
        return f"PrioritizedSampler(alpha={self.alpha}, epsilon={self.epsilon})"


def sampler_from_config(config: dict[str, object]) -> Sampler:
    """The sampler a store's header describes."""
    kind = config.get("kind")
    if kind == "uniform":
        return UniformSampler()
    if kind == "prioritized":
        return PrioritizedSampler(alpha=float(config["alpha"]), epsilon=float(config["epsilon"]))  # type: ignore[arg-type]
    raise ValueError(f"unknown sampler kind {kind!r} in the store's header")
