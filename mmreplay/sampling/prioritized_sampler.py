"""The proportional prioritized sampler (Schaul et al. 2016): its sum tree of priorities, kept in a file of
its own in the store's directory (``PRIORITIES_NAME``) and committed with the store."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import numpy.typing as npt

from mmreplay.disk.store_directory import StoreDirectory
from mmreplay.sampling.priority_file import Committed, PriorityFile, slot_ranges
from mmreplay.sampling.sample_limits import SampleCounts, exhausted_message, parse_max_times_sampled
from mmreplay.sampling.sum_tree import SumTree
from mmreplay.sampling.uniform_sampler import uniform_steps

PRIORITIES_NAME = "priorities.tree"


class PrioritizedSampler:
    """Proportional prioritized replay (Schaul et al. 2016), P(i) = p_i^alpha / sum_j p_j^alpha.

    New transitions get the largest priority seen so far. Leaves hold ``(priority + epsilon)^alpha`` in a
    sum tree whose committed leaves live in the file ``priorities.tree``: a commit writes them with an
    undo journal and the header holds their checksum, so what a commit counts survives a crash and
    damage is detected. When every stored leaf is 0 (``epsilon=0`` and zero priorities) there is no mass
    to draw by: steps are drawn uniformly, with weights of 1. Its methods are the ``Sampler`` calls the
    store makes.

    With ``max_times_sampled`` (``sample_limits``), a transition drawn that many times gets a leaf of 0
    (committed with the priorities), and ``update_priorities`` leaves it at 0; every leaf 0 then leaves
    nothing to draw (no uniform fallback).

    Args:
        alpha: how much priorities count (0: uniform).
        epsilon: added to each priority, so that a priority of 0 can still be drawn.
        max_times_sampled: draws after which a transition leaves the sampling set (None or 0: no limit).

    Raises:
        ValueError: ``alpha`` or ``epsilon`` is not a finite number >= 0, or ``max_times_sampled`` is
            negative.
        TypeError: ``max_times_sampled`` is not None or an int.
    """

    max_times_sampled: int | None = None  # class defaults, as UniformSampler's
    _counts: SampleCounts | None = None

    def __init__(self, alpha: float = 0.6, epsilon: float = 1e-6, max_times_sampled: int | None = None) -> None:
        if not (isinstance(alpha, (int, float)) and 0 <= alpha and math.isfinite(alpha)):
            raise ValueError(f"alpha must be a finite number >= 0; got {alpha!r}")
        if not (isinstance(epsilon, (int, float)) and 0 <= epsilon and math.isfinite(epsilon)):
            raise ValueError(f"epsilon must be a finite number >= 0; got {epsilon!r}")
        self.alpha = float(alpha)
        self.epsilon = float(epsilon)
        self.max_times_sampled = parse_max_times_sampled(max_times_sampled)
        self._counts: SampleCounts | None = None
        self.max_priority = 1.0
        self._file: PriorityFile | None = None
        self._tree: SumTree | None = None
        self._slots = 0
        self._stored = range(0)

    def config(self) -> dict[str, object]:
        """The sampler's kind and parameters, saved in the store's header.

        Returns:
            ``{"kind": "prioritized", "alpha": ..., "epsilon": ...}``.
        """
        config: dict[str, object] = {"kind": "prioritized", "alpha": self.alpha, "epsilon": self.epsilon}
        if self.max_times_sampled:
            config["max_times_sampled"] = self.max_times_sampled
        return config

    def open(self, directory: StoreDirectory | Path, *, slots: int, stored: range, writable: bool, state: dict[str, object]) -> None:
        """Map the store's ``priorities.tree`` as its last commit left it (again, on a reader's refresh).

        Args:
            directory: the store's directory.
            slots: the store's transition slots (its capacity).
            stored: the steps stored now.
            writable: whether the store is open for appending.
            state: the header's ``max_priority`` and the committed leaves' checksum and sequence.

        Raises:
            CorruptStoreError: the file is damaged or does not match the header's checksum.
        """
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
        if self.max_times_sampled:
            if self._counts is None or self._counts.slots != slots:
                self._counts = SampleCounts(self.max_times_sampled, slots)
            self._counts.reopen(stored)
            exhausted = self._counts.exhausted_slots()
            if exhausted.size:
                self._tree.set(exhausted, np.zeros(len(exhausted)))

    def added(self, steps: range) -> None:
        """Give new transitions the largest priority seen so far.

        Args:
            steps: the added steps.

        Raises:
            RuntimeError: the sampler is not attached to an open store.
        """
        tree = self._require_tree()
        value = (self.max_priority + self.epsilon) ** self.alpha
        for start, stop in slot_ranges(steps, self._slots):
            tree.fill(start, stop, value)
        self._stored = range(self._stored.start, steps.stop)
        if self._counts is not None:
            self._counts.added(steps)

    def evicted(self, steps: range) -> None:
        """Zero evicted transitions' leaves.

        Args:
            steps: the evicted steps.

        Raises:
            RuntimeError: the sampler is not attached to an open store.
        """
        tree = self._require_tree()
        for start, stop in slot_ranges(steps, self._slots):
            tree.fill(start, stop, 0.0)
        self._stored = range(steps.stop, self._stored.stop)
        if self._counts is not None:
            self._counts.evicted(steps)

    def sample(self, batch_size: int, *, stored: range, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """Draw steps in proportion to their leaves, with replacement (uniformly when every leaf is 0).

        Args:
            batch_size: how many steps to draw.
            stored: the steps that may be drawn.
            rng: the generator every draw comes from.

        Returns:
            (batch_size,) int64 steps.

        Raises:
            RuntimeError: the sampler is not attached to an open store.
            ValueError: with ``max_times_sampled``, every stored transition was drawn that many times.
        """
        tree = self._require_tree()
        counts = self._counts
        if counts is None:
            if not tree.total > 0:
                return uniform_steps(batch_size, stored, rng)
            # A slot's step is the one in stored whose slot it is.
            return tree.draw(rng, batch_size, first_step=stored.start, slots=self._slots)

        def draw(count: int) -> npt.NDArray[np.int64]:
            # Under a limit a leaf of 0 may be an exhausted transition's (also one exhausted before the
            # store was reopened, whose count is gone): every leaf 0 leaves nothing to draw.
            if not tree.total > 0:
                raise ValueError(exhausted_message(counts.limit))
            return tree.draw(rng, count, first_step=stored.start, slots=self._slots)

        return counts.draw(batch_size, draw, lambda slots: tree.set(slots, np.zeros(len(slots))))

    def weights(self, steps: npt.NDArray[np.int64], *, beta: float) -> npt.NDArray[np.float32]:
        """The importance weights (N P(i))^-beta, normalised by their maximum over the stored transitions.

        That is (p_i / p_min)^-beta; a leaf of 0 (never drawn) weighs inf, and all weigh 1 when every
        leaf is 0.

        Args:
            steps: drawn steps.
            beta: the exponent of the importance correction.

        Returns:
            (len(steps),) float32 weights.

        Raises:
            RuntimeError: the sampler is not attached to an open store.
        """
        tree = self._require_tree()
        if not tree.total > 0:  # every priority is 0: all are equal, and drawn uniformly
            return np.ones(len(steps), np.float32)
        return tree.weights(steps, slots=self._slots, beta=beta)  # a leaf of 0 (never drawn) weighs inf

    @property
    def mass(self) -> tuple[float, float]:
        """The sum and minimum of the stored transitions' leaves ``(p + epsilon)^alpha``.

        What a client drawing over several stores needs to draw them in proportion and to normalise
        weights globally.

        Returns:
            (sum, minimum).

        Raises:
            RuntimeError: the sampler is not attached to an open store.
        """
        tree = self._require_tree()
        return float(tree.total), float(tree.minimum)

    def update_priorities(self, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> None:
        """Set stored steps' priorities, already checked by the store; the largest seen so far grows.

        Args:
            steps: 1-D int64 steps; those no longer stored are skipped.
            priorities: 1-D float64, finite and >= 0, one per step.

        Raises:
            RuntimeError: the sampler is not attached to an open store.
        """
        largest = self._require_tree().update(
            steps, priorities, stored=self._stored, slots=self._slots, alpha=self.alpha, epsilon=self.epsilon
        )
        if largest is not None:
            self.max_priority = max(self.max_priority, largest)
        self._keep_exhausted_out(steps)

    def _keep_exhausted_out(self, steps: npt.NDArray[np.int64]) -> None:
        """Set the leaves of the exhausted ones among updated ``steps`` back to 0 (``max_times_sampled``)."""
        if self._counts is None:
            return
        steps = np.asarray(steps, np.int64)
        stored = steps[(steps >= self._stored.start) & (steps < self._stored.stop)]
        exhausted = stored[self._counts.exhausted(stored)] % self._slots
        if exhausted.size:
            self._require_tree().set(exhausted, np.zeros(len(exhausted)))

    def update_priorities_checked(
        self, steps: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64], *, added: int
    ) -> bool:
        """``update_priorities`` with the store's checks made in the same compiled call.

        The checks: every step in ``[0, added)``, every priority finite and >= 0. When a check fails or
        the compiled call is not there, nothing changes: the store then checks in Python, names what is
        wrong, and calls ``update_priorities``.

        Args:
            steps: 1-D, C-contiguous int64 steps.
            priorities: 1-D, C-contiguous float64, one per step.
            added: the store's transitions ever added (the first step never added).

        Returns:
            Whether the priorities were checked and applied.

        Raises:
            RuntimeError: the sampler is not attached to an open store.
        """
        applied, largest = self._require_tree().update_checked(
            steps, priorities, added=added, stored=self._stored, slots=self._slots, alpha=self.alpha,
            epsilon=self.epsilon,
        )
        if largest is not None:
            self.max_priority = max(self.max_priority, largest)
        if applied:
            self._keep_exhausted_out(steps)
        return applied

    def state(self) -> dict[str, object]:
        """What the store's header commits: the largest priority, the committed leaves' checksum and sequence.

        Returns:
            A JSON-serializable dict, handed back to ``open`` as ``state``.
        """
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
        """Learn, after ``sync``, whether the store's header took the commit.

        If not, the committed priorities go back to the header's, so that a crash reopens with exactly
        the header's priorities.

        Args:
            committed: whether the header took the commit.
        """
        if self._file is not None and self._file.writable:
            self._file.settle(committed)

    def close(self) -> None:
        """Unmap ``priorities.tree``; the sampler can be opened again."""
        self._tree = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def _require_tree(self) -> SumTree:
        if self._tree is None:
            raise RuntimeError("this PrioritizedSampler is not attached to an open store")
        return self._tree

    def __repr__(self) -> str:
        limit = f", max_times_sampled={self.max_times_sampled}" if self.max_times_sampled else ""
        return f"PrioritizedSampler(alpha={self.alpha}, epsilon={self.epsilon}{limit})"
