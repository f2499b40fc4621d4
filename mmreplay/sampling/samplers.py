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

from mmreplay import extensions
from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.sampling.priority_file import Committed, PriorityFile, slot_ranges
from mmreplay.sampling.sum_tree import SumTree

_sumtree = extensions.load("_sumtree")

PRIORITIES_NAME = "priorities.tree"


class Sampler(Protocol):
    """What the store needs from a sampler: the contract of ``UniformSampler`` and ``PrioritizedSampler``.

    Not a public extension point: ``ReplayStore.create`` takes those two only. A store's header names its
    sampler (``config``), and every process that opens the store, a reader or ``mmreplay`` itself,
    rebuilds it from that name without the code of whoever wrote it; a sampler of one's own would need a
    registry of sampler kinds, which the library does not keep.
    """

    def config(self) -> dict[str, object]:
        """The sampler's kind and parameters, saved in the store's header."""
        ...

    def open(self, directory: StoreDirectory | Path, *, slots: int, stored: range, writable: bool, state: dict[str, object]) -> None:
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

    def settle(self, committed: bool) -> None:
        """After ``sync``: whether the header took the commit (False: return to the header's state)."""
        ...

    def close(self) -> None: ...


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
    """Every stored transition equally likely, drawn with replacement; O(batch_size), no files."""

    def config(self) -> dict[str, object]:
        return {"kind": "uniform"}

    def open(self, directory: StoreDirectory | Path, *, slots: int, stored: range, writable: bool, state: dict[str, object]) -> None:
        pass

    def added(self, steps: range) -> None:
        pass

    def evicted(self, steps: range) -> None:
        pass

    def sample(self, batch_size: int, *, stored: range, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        return uniform_steps(batch_size, stored, rng)

    def weights(self, steps: npt.NDArray[np.int64], *, beta: float) -> npt.NDArray[np.float32]:
        weights = np.empty(len(steps), np.float32)
        weights.fill(1.0)  # np.ones costs 2-3x as much for a batch
        return weights

    def update_priorities(self, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> None:
        raise TypeError(
            "update_priorities needs a store created with sampler=PrioritizedSampler(...); "
            "this store samples uniformly"
        )

    def state(self) -> dict[str, object]:
        return {}

    def sync(self) -> None:
        pass

    def settle(self, committed: bool) -> None:
        pass

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return "UniformSampler()"


class PrioritizedSampler:
    """Proportional prioritized replay (Schaul et al. 2016): P(i) = p_i^alpha / sum_j p_j^alpha.

    New transitions get the largest priority seen so far. Leaves hold ``(priority + epsilon)^alpha`` in a
    sum tree whose committed leaves live in the file ``priorities.tree`` (see ``mmreplay.sampling.priority_file``):
    a commit writes them with an undo journal and the header holds their checksum, so what a commit
    counts survives a crash and damage is detected. When every stored leaf is 0 (``epsilon=0`` and zero
    priorities) there is no mass to draw by: steps are drawn uniformly, with weights of 1.
    """

    def __init__(self, alpha: float = 0.6, epsilon: float = 1e-6) -> None:
        if not (isinstance(alpha, (int, float)) and 0 <= alpha and math.isfinite(alpha)):
            raise ValueError(f"alpha must be a finite number >= 0; got {alpha!r}")
        if not (isinstance(epsilon, (int, float)) and 0 <= epsilon and math.isfinite(epsilon)):
            raise ValueError(f"epsilon must be a finite number >= 0; got {epsilon!r}")
        self.alpha = float(alpha)
        self.epsilon = float(epsilon)
        self.max_priority = 1.0
        self._file: PriorityFile | None = None
        self._tree: SumTree | None = None
        self._slots = 0
        self._stored = range(0)

    def config(self) -> dict[str, object]:
        return {"kind": "prioritized", "alpha": self.alpha, "epsilon": self.epsilon}

    def open(self, directory: StoreDirectory | Path, *, slots: int, stored: range, writable: bool, state: dict[str, object]) -> None:
        self.close()  # a reader's refresh opens again
        checksum = state.get("checksum")
        committed = Committed(
            sequence=int(state.get("sequence", 0)),  # type: ignore[call-overload]
            checksum=None if checksum is None else int(checksum),  # type: ignore[call-overload]
        )
        self._file = PriorityFile(
            directory / PRIORITIES_NAME, slots=slots, stored=stored, writable=writable, committed=committed
        )
        self._tree = self._file.tree
        self._slots = slots
        self._stored = stored
        self.max_priority = float(state.get("max_priority", 1.0))  # type: ignore[arg-type]

    def added(self, steps: range) -> None:
        tree = self._require_tree()
        value = (self.max_priority + self.epsilon) ** self.alpha
        for start, stop in slot_ranges(steps, self._slots):
            tree.fill(start, stop, value)
        self._stored = range(self._stored.start, steps.stop)

    def evicted(self, steps: range) -> None:
        tree = self._require_tree()
        for start, stop in slot_ranges(steps, self._slots):
            tree.fill(start, stop, 0.0)
        self._stored = range(steps.stop, self._stored.stop)

    def sample(self, batch_size: int, *, stored: range, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        tree = self._require_tree()
        if not tree.total > 0:
            return uniform_steps(batch_size, stored, rng)
        # A slot's step is the one in stored whose slot it is.
        return tree.draw(rng, batch_size, first_step=stored.start, slots=self._slots)

    def weights(self, steps: npt.NDArray[np.int64], *, beta: float) -> npt.NDArray[np.float32]:
        """(N P(i))^-beta normalised by its maximum over the stored transitions, i.e. (p_i / p_min)^-beta."""
        tree = self._require_tree()
        if not tree.total > 0:  # every priority is 0: all are equal, and drawn uniformly
            return np.ones(len(steps), np.float32)
        return tree.weights(steps, slots=self._slots, beta=beta)  # a leaf of 0 (never drawn) weighs inf

    @property
    def mass(self) -> tuple[float, float]:
        """(sum, minimum) of the stored transitions' leaves ``(p + epsilon)^alpha``: what a client drawing
        over several stores needs to draw them in proportion and to normalise weights globally."""
        tree = self._require_tree()
        return float(tree.total), float(tree.minimum)

    def update_priorities(self, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> None:
        largest = self._require_tree().update(
            steps, priorities, stored=self._stored, slots=self._slots, alpha=self.alpha, epsilon=self.epsilon
        )
        if largest is not None:
            self.max_priority = max(self.max_priority, largest)

    def update_priorities_checked(
        self, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64], *, added: int
    ) -> bool:
        """``update_priorities`` with the store's checks made in the same compiled call (every step in
        ``[0, added)``, every priority finite and >= 0): whether it applied them. False, with nothing
        changed, when a check fails or the compiled call is not there: the store then checks in Python,
        names what is wrong, and calls ``update_priorities``. ``steps`` int64 and ``priorities`` float64,
        1-D, C-contiguous, of one length."""
        applied, largest = self._require_tree().update_checked(
            steps, priorities, added=added, stored=self._stored, slots=self._slots, alpha=self.alpha,
            epsilon=self.epsilon,
        )
        if largest is not None:
            self.max_priority = max(self.max_priority, largest)
        return applied

    def state(self) -> dict[str, object]:
        state: dict[str, object] = {"max_priority": self.max_priority}
        if self._file is not None and self._file.committed.checksum is not None:
            state["checksum"] = self._file.committed.checksum
            state["sequence"] = self._file.committed.sequence
        return state

    def sync(self) -> None:
        """Commit the stored transitions' priorities; the store then writes ``state()`` into its header."""
        if self._file is not None and self._file.writable:
            self._file.commit(self._stored)

    def settle(self, committed: bool) -> None:
        """After ``sync``: whether the store's header took the commit; if not, the committed priorities
        go back to the header's, so that a crash reopens with exactly the header's priorities."""
        if self._file is not None and self._file.writable:
            self._file.settle(committed)

    def close(self) -> None:
        self._tree = None
        if self._file is not None:
            self._file.close()
            self._file = None

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
